#!/usr/bin/env bash
# Every golden transcript replayed as a suite, with a JUnit report CI systems can show
# (target/replay-junit.xml). The release build is shared with the demo step after it.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p target
cargo run --release --quiet -- replay tests/transcripts --junit target/replay-junit.xml
