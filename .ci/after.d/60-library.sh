#!/usr/bin/env bash
# The crate as a library: the core's dependency count, every documented feature combination,
# the README's embedding examples compiled with only the features they name, the docs with
# warnings denied, and the packaged crate building on its own.
#
# Checks (not builds) each combination: `cargo check` of the library, plus the binary where the
# combination turns `cli` on. The combinations are the ones the README's "Cargo features" table
# documents; add a row there and a line here together. Two are built elsewhere in CI and not
# checked again here: the default features (the release build of 10-replay.sh and 20-demo.sh)
# and every feature (clippy --all-targets: the crate's dev-dependency on itself turns every
# feature on, for the library and both binaries).
set -euo pipefail
cd "$(dirname "$0")/../.."

MAX_CORE_CRATES=30

stage() {
  local started=$SECONDS
  printf '\n--> %s\n' "$1"
  shift
  "$@"
  printf '<-- %ss\n' "$((SECONDS - started))"
}

core_crates() {
  # Distinct crates (name and version) the library compiles with no feature on, itself
  # included; `(*)` marks a crate `cargo tree` already printed.
  local count
  count="$(cargo tree -e normal --no-default-features --prefix none | sed 's/ (\*)$//' | sort -u | wc -l)"
  echo "crates compiled by --no-default-features: $count (at most $MAX_CORE_CRATES)"
  if [ "$count" -gt "$MAX_CORE_CRATES" ]; then
    cargo tree -e normal --no-default-features --prefix none | sed 's/ (\*)$//' | sort -u >&2
    echo "the core pulls in more than $MAX_CORE_CRATES crates" >&2
    return 1
  fi
}

features() {
  local combination
  for combination in \
    "--no-default-features" \
    "--no-default-features --features testing" \
    "--no-default-features --features providers" \
    "--no-default-features --features mcp" \
    "--no-default-features --features command-hooks" \
    "--no-default-features --features acp" \
    "--no-default-features --features html" \
    "--no-default-features --features junit" \
    "--no-default-features --features cli" \
    "--no-default-features --features otel"; do
    echo "cargo check $combination"
    # shellcheck disable=SC2086
    cargo check --quiet --lib --bins $combination
  done
}

readme_examples() {
  # Each example a crate of its own, so the features of the crate's own dev-dependencies (which
  # turn on nearly all of them for its examples and tests) cannot hide a missing one.
  python3 - <<'PY'
"""Each embedding example of README.md, and each `examples/` program it points to, checked as
a crate of its own that depends on hookloop by path with exactly the features it names.

An example names its dependencies in a TOML block: for README.md, the fenced `toml` block
right before the `rust` block (prose may stand between them, no other block); for a file
under examples/, a `toml` block in its `//!` header (a file without one is one of this
repository's own servers or tools, and is said to be skipped). The hookloop entry must turn
default features off; its `version` becomes a `path` to this checkout. A `rust,ignore` block
is a fragment and is not checked; any other `rust` block without its TOML block fails.
"""
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib

ROOT = os.getcwd()
OUT = os.path.join(ROOT, "target", "readme-examples")
FENCE = re.compile(r"^(```+)\s*([\w,+-]*)")


def blocks(lines):
    """(info string, first line number, body) of each fenced block, in order."""
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2), i + 1
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        found.append((info, start, "".join(lines[i + 1:j])))
        i = j + 1
    return found


def readme_examples():
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.readlines()
    examples, previous = [], None
    for info, line, body in blocks(lines):
        kinds = info.split(",")
        if kinds[0] == "rust" and "ignore" not in kinds:
            if previous is None or previous[0] != "toml":
                sys.exit(f"README.md:{line}: a rust example with no toml block of its "
                         "dependencies right before it (mark a fragment `rust,ignore`)")
            examples.append((f"README.md:{line}", previous[2], body))
        previous = (info, line, body)
    return examples


def program_examples():
    """The examples/ programs README.md links to that show their dependencies."""
    with open(os.path.join(ROOT, "README.md")) as f:
        named = sorted(set(re.findall(r"examples/(\w+)\.rs", f.read())))
    examples = []
    for name in named:
        path = os.path.join("examples", name + ".rs")
        with open(os.path.join(ROOT, path)) as f:
            source = f.read()
        header = "".join(l[4:] if l.startswith("//! ") else "\n"
                         for l in source.splitlines(keepends=True) if l.startswith("//!"))
        tomls = [body for info, _, body in blocks(header.splitlines(keepends=True))
                 if info == "toml"]
        if not tomls:
            # A server or a CI tool of this repository, built with its dev-dependencies.
            print(f"{path}: no dependencies in its header, so not an embedding example")
            continue
        if len(tomls) != 1:
            sys.exit(f"{path}: its header has more than one toml block")
        examples.append((path, tomls[0], source))
    return examples


def manifest(origin, deps_toml):
    deps = tomllib.loads(deps_toml)
    out = ['[package]\nname = "example"\nversion = "0.0.0"\nedition = "2024"\npublish = false\n',
           "[workspace]\n"]
    for table in ("dependencies", "dev-dependencies"):
        for name, spec in deps.get(table, {}).items():
            if name == "hookloop":
                if not isinstance(spec, dict) or spec.get("default-features", True):
                    sys.exit(f"{origin}: its hookloop dependency must set "
                             "`default-features = false` and name its features")
                spec = dict(spec)
                spec.pop("version", None)
                spec["path"] = ROOT
            out.append(f"[{table}.{name}]\n")
            if isinstance(spec, str):
                spec = {"version": spec}
            for key, value in spec.items():
                if isinstance(value, bool):
                    value = "true" if value else "false"
                elif isinstance(value, list):
                    value = "[" + ", ".join(f'"{v}"' for v in value) + "]"
                else:
                    value = f'"{value}"'
                out.append(f"{key} = {value}\n")
    if "hookloop" not in deps.get("dependencies", {}) | deps.get("dev-dependencies", {}):
        sys.exit(f"{origin}: its toml block does not depend on hookloop")
    return "".join(out)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    examples = readme_examples() + program_examples()
    failed = []
    for n, (origin, deps_toml, source) in enumerate(examples):
        crate = os.path.join(OUT, f"example-{n}")
        os.makedirs(os.path.join(crate, "src"))
        with open(os.path.join(crate, "Cargo.toml"), "w") as f:
            f.write(manifest(origin, deps_toml))
        # The checkout's lock: the same versions as the crate's own build, so its artifacts
        # are reused and nothing new is fetched.
        shutil.copy(os.path.join(ROOT, "Cargo.lock"), crate)
        if re.search(r"^\s*(async\s+)?fn main\(", source, re.M):
            target = os.path.join(crate, "src", "main.rs")
        else:
            # A test file (`#[test]` functions): the crate's own test target.
            os.makedirs(os.path.join(crate, "tests"))
            open(os.path.join(crate, "src", "lib.rs"), "w").close()
            target = os.path.join(crate, "tests", "example.rs")
        with open(target, "w") as f:
            f.write(source)
        features = tomllib.loads(deps_toml)
        features = (features.get("dependencies", {}) | features.get("dev-dependencies", {}))
        features = features["hookloop"].get("features", [])
        started = time.monotonic()
        done = subprocess.run(["cargo", "check", "--quiet", "--all-targets", "--manifest-path",
                               os.path.join(crate, "Cargo.toml")],
                              env=dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target")))
        took = time.monotonic() - started
        verdict = "ok" if done.returncode == 0 else "FAILED"
        print(f"{origin}: hookloop features {features or '(none)'}: {verdict} ({took:.0f}s)")
        if done.returncode != 0:
            failed.append(origin)
    if failed:
        sys.exit("examples that do not compile with the features they name: " + ", ".join(failed))
    print(f"{len(examples)} examples compile with the features they name")


main()
PY
}

docs() {
  RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps --all-features
}

package() {
  # Packs the crate as crates.io would receive it (what `cargo publish --dry-run` packs), then
  # checks that copy alone, with default features: a file the build needs but the package leaves
  # out fails here. `cargo publish --dry-run` builds the copy in full (818 s on a loaded 2-core
  # machine) for no more certainty about the package than the check gives, which reuses the
  # feature stage's work.
  local version
  version="$(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["packages"][0]["version"])')"
  cargo package --no-verify --quiet
  rm -rf "target/package/hookloop-$version"
  tar -xzf "target/package/hookloop-$version.crate" -C target/package
  CARGO_TARGET_DIR="$PWD/target" cargo check --quiet --lib --bins \
    --manifest-path "target/package/hookloop-$version/Cargo.toml"
}

stage "dependencies of the core" core_crates
stage "feature combinations (cargo check)" features
stage "README examples with only their named features" readme_examples
stage "cargo doc -D warnings" docs
stage "the packaged crate, checked alone" package
