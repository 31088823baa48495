#!/usr/bin/env bash
# The README's first command, as a user runs it, with its story checked line by line.
set -euo pipefail
out="$(mktemp)"
cargo run --release --quiet -- demo | tee "$out"
for milestone in \
  "The model in this demo is SCRIPTED" \
  "_Stop objection from todo" \
  "todo__complete" \
  "history compacted" \
  "_PostCompact from todo re-injected" \
  "the model stopped for good" \
  "_Stop budget spent" \
  "the engine ended the turn anyway" \
  "denied by _PreToolUse of todo" \
  "the wrong call was denied before it ran" \
  "Run the same story against a real model"; do
  if ! grep -qF -- "$milestone" "$out"; then
    echo "demo output lacks: $milestone" >&2
    exit 1
  fi
done
echo "demo: every milestone present"
