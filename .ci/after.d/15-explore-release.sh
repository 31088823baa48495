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
# The explorer runs on one thread: the families go in two processes side by side, one per core,
# split so that each takes about half the time (the two largest apart).
explore_in_two() {
  # HOOKLOOP_EXPLORE_ROWS: each family's README row too (`scripts/explore_table.sh` reads them).
  local run=(cargo run --release --quiet --manifest-path explore/Cargo.toml -- ${HOOKLOOP_EXPLORE_ROWS:+--rows})
  "${run[@]}" each_hook_alone every_hook two_servers permission with_child parent_and_child &
  local first=$!
  "${run[@]}" budgets stop_with_each_hook single_server_classes round_cap &
  local second=$!
  local status=0
  wait "$first" || status=$?
  wait "$second" || status=$?
  return "$status"
}
stage "explore the families" explore_in_two
