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
  # Packs the crate as crates.io would receive it and builds that copy alone, with default
  # features, in target/package/: a file the build needs but the package leaves out fails here.
  cargo publish --dry-run --quiet
}

stage "dependencies of the core" core_crates
stage "feature combinations (cargo check)" features
stage "cargo doc -D warnings" docs
stage "cargo publish --dry-run" package
