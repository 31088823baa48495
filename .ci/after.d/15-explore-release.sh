#!/usr/bin/env bash
# The explorer's families at the depths they need, in a release build of explore/ (a crate of
# its own that builds the core and `testing` alone; `cargo test` explores the same families to
# smaller depths in debug). Each family prints its setups, depth, states, transitions and wall
# time; the README's "Exhaustive exploration" table lists them. Budget: 6 minutes of
# exploration on two cores, the build apart.
set -euo pipefail
cd "$(dirname "$0")/../.."

stage() {
  local started=$SECONDS
  printf '\n--> %s\n' "$1"
  shift
  "$@"
  printf '<-- %ss\n' "$((SECONDS - started))"
}

stage "build the explorer in release" cargo build --release --manifest-path explore/Cargo.toml
stage "explore the families" cargo run --release --quiet --manifest-path explore/Cargo.toml
