#!/usr/bin/env bash
# The crate as a library: the core's dependency count, every documented feature combination,
# the docs with warnings denied, and the packaged crate building on its own.
#
# Checks (not builds) each combination: `cargo check` of the library, plus the binary where the
# combination turns `cli` on. The combinations are the ones the README's "Cargo features" table
# documents; add a row there and a line here together.
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
    "--no-default-features --features acp" \
    "--no-default-features --features html" \
    "--no-default-features --features junit" \
    "--no-default-features --features cli" \
    "--no-default-features --features otel" \
    "" \
    "--all-features"; do
    echo "cargo check $combination"
    # shellcheck disable=SC2086
    cargo check --quiet --lib --bins $combination
  done
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
stage "cargo doc -D warnings" docs
stage "the packaged crate, checked alone" package
