#!/usr/bin/env bash
# The explorer's families at the depths they need, in a release build (tests/explore_families.rs;
# `cargo test` explores the same families to smaller depths in debug). Each family prints its
# setups, depth, states, transitions and wall time; the README's "Exhaustive exploration" table
# lists them. Budget: 6 minutes of exploration on two cores, the build apart.
set -euo pipefail
cd "$(dirname "$0")/../.."

stage() {
  local started=$SECONDS
  printf '\n--> %s\n' "$1"
  shift
  "$@"
  printf '<-- %ss\n' "$((SECONDS - started))"
}

build() {
  cargo test --release --test explore_families --no-run
}

explore() {
  local log
  log="$(mktemp)"
  cargo test --release --test explore_families -- --ignored --test-threads 1 --nocapture 2>&1 |
    tee "$log"
  echo
  echo "summary:"
  grep '^family ' "$log"
  rm -f "$log"
}

stage "build the explorer in release" build
stage "explore the families" explore
