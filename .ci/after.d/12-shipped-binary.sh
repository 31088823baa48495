#!/usr/bin/env bash
# The end-to-end tests again, against the binary `cargo install hookloop` ships. `cargo test`
# builds `hookloop` with the features of the crate's own dev-dependency unified in (`testing`,
# `planted`, `mcp-servers`, `otel`); a plain `cargo build --release` builds it with the default
# features alone (dev-dependencies are not resolved for it), as `cargo install` does. This step
# checks the release binary was built with exactly those features, then runs every test file
# that starts the binary with `HOOKLOOP_TEST_BIN` naming it (tests/binary/mod.rs). The test
# programs are the ones `cargo test` built; only the binary they start changes. Left out:
# tests/otel.rs, which tests the `otel` feature the shipped binary does not have.
set -euo pipefail
cd "$(dirname "$0")/../.."

stage() {
  local started=$SECONDS
  printf '\n--> %s\n' "$1"
  shift
  "$@"
  printf '<-- %ss\n' "$((SECONDS - started))"
}

shipped_features() {
  # The features cargo compiled the `hookloop` binary with, from its own report.
  local features
  features="$(cargo build --release --bin hookloop --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "hookloop" \
            and "bin" in m["target"]["kind"]:
        print(" ".join(sorted(m["features"])))
')"
  echo "target/release/hookloop built with features: $features"
  local feature
  for feature in testing planted mcp-servers otel; do
    if [[ " $features " == *" $feature "* ]]; then
      echo "the release binary has the dev-only feature $feature: it is not the shipped binary" >&2
      return 1
    fi
  done
  [[ " $features " == *" cli "* ]] || { echo "the release binary lacks cli" >&2; return 1; }
}

end_to_end() {
  local tests=() file
  # Every test file that starts the binary, found by the helper they share (the host tests start
  # it as the proxy the real Claude Code and Codex run, through tests/hosts/mod.rs).
  for file in tests/*.rs; do
    [ "$file" = tests/otel.rs ] && continue
    if grep -qE 'loopback::hookloop\(\)|binary::hookloop\(\)|acp_agent::|AcpAgent::spawn|hosts::proxied_todo_server\(\)' "$file"; then
      tests+=(--test "$(basename "$file" .rs)")
    fi
  done
  echo "$((${#tests[@]} / 2)) test files against $PWD/target/release/hookloop"
  HOOKLOOP_TEST_BIN="$PWD/target/release/hookloop" \
    PROPTEST_CASES="${PROPTEST_CASES:-256}" cargo test --no-fail-fast "${tests[@]}"
}

stage "the release binary's features" shipped_features
stage "end-to-end tests against the shipped binary" end_to_end
