#!/usr/bin/env bash
# Fuzzing: builds every cargo-fuzz target in fuzz/ and runs each for FUZZ_SECONDS (30 by
# default). One input may take at most FUZZ_TIMEOUT seconds (10 by default, libFuzzer's
# `-timeout`): an input slow to handle (a decoder gone quadratic) fails like a crash. A crash
# fails CI; its input is left in fuzz/artifacts/<target>/ and must become a
# regression test. cargo-fuzz needs nightly flags: RUSTC_BOOTSTRAP=1 allows them on stable.
# The targets run FUZZ_JOBS (2) at a time, one fuzzer per core.
set -euo pipefail
cd "$(dirname "$0")/../.."
export RUSTC_BOOTSTRAP=1
seconds="${FUZZ_SECONDS:-30}"
timeout="${FUZZ_TIMEOUT:-10}"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

cd fuzz
# -a: debug assertions and overflow checks, as in `cargo test`.
cargo fuzz build -a
mapfile -t targets < <(cargo fuzz list)
[ "${#targets[@]}" -gt 0 ] || { echo "no fuzz targets found" >&2; exit 1; }

# One fuzzer is one thread: the targets run two at a time, one per core.
fuzz_one() {
  local target="$1" corpus="corpus/$1" log="target/fuzz-$1.log" seeds=()
  mkdir -p "$corpus"
  case "$target" in
    # The golden transcripts are valid inputs deep in the format: start from them.
    transcript_parse) seeds=(../tests/transcripts) ;;
  esac
  [ -d "seeds/$target" ] && seeds+=("seeds/$target")
  echo "fuzzing $target for ${seconds}s"
  if ! cargo fuzz run -a "$target" "$corpus" "${seeds[@]}" -- -timeout="$timeout" \
      -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 2>"$log"; then
    tail -n 60 "$log" >&2
    echo "fuzz target $target crashed or timed out; the input is in fuzz/artifacts/$target/" >&2
    return 1
  fi
  echo "$target: $(grep -E "^stat::number_of_executed_units" "$log" || echo "no stats")"
}

jobs="${FUZZ_JOBS:-2}"
status=0
running=0
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit "$status"
