#!/usr/bin/env bash
# The official MCP conformance suite's client scenarios, against examples/conformance_client.rs
# (the real McpHost), for both requirement sets. Prints, per set,
#   conformance <set>: N/M scored scenarios passed
# and exits non-zero if a scored scenario failed that .ci/conformance-known-failures does not
# list (the features still missing), or one it lists now passes (take it off the list). Runs on
# its own from the repository root (it needs cargo and npx; npx fetches node 22 and the suite).
set -euo pipefail
cd "$(dirname "$0")/../.."
suite="@modelcontextprotocol/conformance@0.2.0-alpha.12"
sets="${CONFORMANCE_SETS:-2025-11-25 2026-07-28}"
known=".ci/conformance-known-failures"

# The debug build `cargo test` made already (examples are built with the tests): a release build
# of an example compiles every dependency again with the dev-dependencies' features.
cargo build --quiet --example conformance_client
client="$(realpath "${CARGO_TARGET_DIR:-target}")/debug/examples/conformance_client"

conformance() {
  npx -y -p node@22 -p "$suite" -c "conformance $*"
}

failed=0
for set in $sets; do
  out="$(mktemp -d)"
  # The scored client scenarios: the list under "Client scenarios" of the requirement set.
  scored="$(conformance list --requirements "$set" |
    awk '/^Client scenarios/ {on=1; next} on && /^ *- / {print $2; next} on && !/^ *- / {on=0}')"
  # The suite exits non-zero on any scored failure; checks.json says which, and the known
  # failures decide.
  conformance client --command "'$client'" --requirements "$set" -o "$out" >"$out/log.txt" 2>&1 ||
    true
  passed=0
  total=0
  for scenario in $scored; do
    total=$((total + 1))
    # Results land in <out>/<scenario>-<ISO time>/checks.json (`auth/x` in <out>/auth/).
    dir="$(find "$out" -path "$out/${scenario}-[0-9]*" -name checks.json -printf '%h\n' | head -n 1)"
    listed=0
    grep -qxF "$set $scenario" "$known" && listed=1
    if [ -n "$dir" ] && ! grep -q '"status": "FAILURE"' "$dir/checks.json"; then
      passed=$((passed + 1))
      if [ "$listed" -eq 1 ]; then
        echo "  passes now, take it off $known: $set $scenario"
        failed=1
      fi
    elif [ "$listed" -eq 0 ]; then
      echo "  FAILED: $scenario (${dir:-no result})"
      failed=1
    fi
  done
  echo "conformance $set: $passed/$total scored scenarios passed"
  [ "$failed" -eq 0 ] || tail -n 40 "$out/log.txt"
done
exit "$failed"
