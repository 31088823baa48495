#!/usr/bin/env bash
# Writes the README's "Exhaustive exploration" table from one run of CI's release exploration
# step (`.ci/after.d/15-explore-release.sh`, which this runs with HOOKLOOP_EXPLORE_ROWS=1 so the
# explorer prints each family's row): the rows in the families' order and a line of totals,
# between the README's markers. Run it on an idle machine; it takes as long as the step.
set -euo pipefail
cd "$(dirname "$0")/.."

begin='<!-- explore table: written by scripts/explore_table.sh -->'
end='<!-- explore table end -->'
grep -qxF "$begin" README.md || { echo "README.md has no line $begin" >&2; exit 1; }
grep -qxF "$end" README.md || { echo "README.md has no line $end" >&2; exit 1; }

log=$(mktemp)
trap 'rm -f "$log" "$log.table"' EXIT
HOOKLOOP_EXPLORE_ROWS=1 bash .ci/after.d/15-explore-release.sh | tee "$log" >&2

{
  echo '| family | setups | depth | what needs the depth | states | transitions | time |'
  echo '| --- | --- | --- | --- | --- | --- | --- |'
  grep '^row ' "$log" | sort -n -k2 | cut -d' ' -f3-
  # "family NAME: K setups to depth D: S states, T transitions, X s"
  awk -v cores="$(nproc)" '
    /^family .* states, .* transitions, .* s$/ {
      for (i = 1; i <= NF; i++) {
        if ($(i + 1) == "states,") states += $i
        if ($(i + 1) == "transitions,") transitions += $i
      }
      summed += $(NF - 1)
    }
    /^<-- [0-9]+s$/ { wall[++n] = substr($2, 1, length($2) - 1) }
    function commas(x,   s) {
      s = sprintf("%d", x)
      while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]([,]|$)/, ",&", s)
      return s
    }
    END {
      printf "\nOne run of the step on %d cores (`scripts/explore_table.sh`): %s states and %s transitions, %.1f s of exploration summed over the families, %d s to build `explore/` and %d s to explore, the families in two processes side by side.\n", cores, commas(states), commas(transitions), summed, wall[1], wall[2]
    }
  ' "$log"
} > "$log.table"

awk -v begin="$begin" -v end="$end" -v table="$log.table" '
  $0 == begin { print; while ((getline line < table) > 0) print line; skip = 1; next }
  $0 == end { skip = 0 }
  !skip { print }
' README.md > README.md.new
mv README.md.new README.md
echo "README.md: exploration table written" >&2
