#!/usr/bin/env bash
# The official MCP conformance suite's client scenarios, against examples/conformance_client.rs
# (the real McpHost), for both requirement sets, judged at least as strictly as the suite judges
# one scenario run alone: a scenario passes only if its checks.json has no FAILURE and no
# WARNING, the client finished within the suite's timeout, and the client exited 0 (or, where
# it exited non-zero, the suite's own verdict on the scenario run alone, which knows the
# scenarios that expect the client to give up, passes it). The suite's exit status is honoured
# too: non-zero with no failing scored scenario to explain it fails the step.
#
# Every client scenario the set lists counts, the scored ones and those "run and reported, but
# never scored" (extensions, added after the release). Prints, per set,
#   conformance <set>: scored P/N passed; extension P/N passed (K known failures)
# and exits non-zero if a listed scenario failed that .ci/conformance-known-failures does not
# list, if one it lists now passes (take it off the list), if the set lists no scored client
# scenario, or if the suite's listing or summary changed shape (a line this script does not
# understand, a scenario without a result). Runs on its own from the repository root (it needs
# cargo and npx; npx fetches node 22 and the suite).
set -euo pipefail
cd "$(dirname "$0")/../.."
suite="@modelcontextprotocol/conformance@0.2.0-alpha.12"
sets="${CONFORMANCE_SETS:-2025-11-25 2026-07-28}"
known=".ci/conformance-known-failures"

# The debug build `cargo test` made already (examples are built with the tests): a release build
# of an example compiles every dependency again with the dev-dependencies' features.
cargo build --quiet --example conformance_client
client="$(realpath "${CARGO_TARGET_DIR:-target}")/debug/examples/conformance_client"

# The verdict of one checks.json, read as JSON (a list of {status, ...}): "failure" if any
# check failed, else "warning" if any warned, else "ok" if one succeeded, else "none"; a file
# that is not such a list exits non-zero.
checks_verdict() {
  node -e '
    const checks = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    if (!Array.isArray(checks) || checks.some((c) => c === null || typeof c.status !== "string")) {
      process.exit(1);
    }
    const has = (s) => checks.some((c) => c.status === s);
    console.log(has("FAILURE") ? "failure" : has("WARNING") ? "warning" : has("SUCCESS") ? "ok" : "none");
  ' "$1"
}

conformance() {
  npx -y -p node@22 -p "$suite" -c "conformance $*"
}

# Entries of the known-failures file, without comments and blank lines.
known_entries() {
  sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$known" | grep -v '^$' || true
}

listed_dir="$(mktemp -d)"
failed=0
fail() {
  echo "  FAILED: $*"
  failed=1
}

# Parses `conformance list --requirements <set>` into "scored <name>" and "extension <name>"
# lines; any line it does not recognise is printed as "shape <line>".
parse_list() {
  awk '
    /^Required for / || /^$/ { next }
    /^Server scenarios/ { section = "server"; next }
    /^Client scenarios/ { section = "client"; next }
    /^Run and reported, but never scored:/ { section = "unscored"; next }
    section == "server" && /^  - [^ ]+$/ { next }
    section == "client" && /^  - [^ ]+$/ { print "scored " $2; next }
    section == "unscored" && /^  [a-z-]+ \([0-9]+\):$/ { next }
    section == "unscored" && /^    - [^ ]+ \[client\]$/ { print "extension " $2; next }
    section == "unscored" && /^    - [^ ]+ \[server\]$/ { next }
    { print "shape " $0 }
  '
}

for set in $sets; do
  out="$(mktemp -d)"
  listing="$(conformance list --requirements "$set" 2>/dev/null)"
  parsed="$(parse_list <<<"$listing")"
  echo "$parsed" >"$listed_dir/$set"
  if grep -q '^shape ' <<<"$parsed"; then
    fail "$set: the suite's listing changed shape:"
    grep '^shape ' <<<"$parsed" | sed 's/^shape /    /'
  fi
  scored="$(awk '$1 == "scored" {print $2}' <<<"$parsed")"
  extension="$(awk '$1 == "extension" {print $2}' <<<"$parsed")"
  if [ -z "$scored" ]; then
    fail "$set: the suite lists no scored client scenario"
  fi

  # The client, wrapped to record each scenario's exit status: a scenario with no record did
  # not finish (the suite killed it at its timeout).
  cat >"$out/client.sh" <<EOF
#!/usr/bin/env bash
"$client" "\$@"
rc=\$?
echo "\$MCP_CONFORMANCE_SCENARIO \$rc" >>"$out/exits"
exit \$rc
EOF
  chmod +x "$out/client.sh"
  : >"$out/exits"
  suite_rc=0
  conformance client --command "$out/client.sh" --requirements "$set" -o "$out/results" \
    >"$out/log.txt" 2>&1 || suite_rc=$?

  # The suite's summary: one "✓|✗ <scenario>: ..." line per scenario run.
  summarised="$(sed -n '/^=== SUITE SUMMARY ===$/,/^Total:/p' "$out/log.txt" |
    sed -n 's/^[✓✗] \([^ :]*\): .*/\1/p' | sort)"
  if [ "$summarised" != "$(printf '%s\n' $scored $extension | sort)" ]; then
    fail "$set: the suite ran other scenarios than it lists (summary: $(echo $summarised))"
  fi

  declare -A passed=([scored]=0 [extension]=0) total=([scored]=0 [extension]=0)
  scored_failures=0
  listed_count=0
  for kind in scored extension; do
    names="$scored"
    [ "$kind" = extension ] && names="$extension"
    for scenario in $names; do
      total[$kind]=$((total[$kind] + 1))
      # Results land in <out>/results/<scenario>-<ISO time>/checks.json (`auth/x` under auth/).
      dir="$(find "$out/results" -path "$out/results/${scenario}-[0-9]*" -name checks.json \
        -printf '%h\n' 2>/dev/null | head -n 1)"
      exit_status="$(awk -v s="$scenario" '$1 == s {print $2}' "$out/exits" | tail -n 1)"
      why=""
      if [ -z "$dir" ]; then
        why="no result"
      elif ! verdict="$(checks_verdict "$dir/checks.json")"; then
        why="its checks.json does not read as a list of checks"
      elif [ "$verdict" = failure ]; then
        why="a check failed"
      elif [ "$verdict" = warning ]; then
        why="a check warned"
      elif [ "$verdict" = none ]; then
        why="no check passed"
      elif [ -z "$exit_status" ]; then
        why="the client did not finish (timed out)"
      elif [ "$exit_status" != 0 ]; then
        # The suite's verdict on the scenario alone: it passes a non-zero exit only where the
        # scenario expects the client to give up.
        if ! conformance client --command "$client" --scenario "$scenario" \
          --spec-version "$set" --force >"$out/alone.txt" 2>&1; then
          why="the client exited $exit_status and the suite fails the scenario alone"
        fi
      fi
      listed=0
      grep -qxF "$set $scenario" <(known_entries) && listed=1
      listed_count=$((listed_count + listed))
      if [ -z "$why" ]; then
        passed[$kind]=$((passed[$kind] + 1))
        if [ "$listed" -eq 1 ]; then
          fail "$set $scenario passes now: take it off $known"
        fi
      else
        [ "$kind" = scored ] && scored_failures=$((scored_failures + 1))
        if [ "$listed" -eq 1 ]; then
          echo "  known failure: $set $scenario ($why)"
        else
          fail "$set $scenario: $why (${dir:-no result})"
        fi
      fi
    done
  done
  if [ "$suite_rc" -ne 0 ] && [ "$scored_failures" -eq 0 ]; then
    fail "$set: the suite exited $suite_rc with every scored scenario passing"
  fi
  echo "conformance $set: scored ${passed[scored]}/${total[scored]} passed; extension" \
    "${passed[extension]}/${total[extension]} passed ($listed_count known failures)"
  [ "$failed" -eq 0 ] || tail -n 40 "$out/log.txt"
  unset passed total
done

# An entry naming a set or scenario the suite no longer lists is stale.
while read -r set scenario; do
  case " $sets " in
    *" $set "*) ;;
    *) continue ;;
  esac
  if ! grep -qxE "(scored|extension) ${scenario}" "$listed_dir/$set"; then
    fail "$known names $set $scenario, which the suite does not list"
  fi
done < <(known_entries)
exit "$failed"
