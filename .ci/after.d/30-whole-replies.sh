#!/usr/bin/env bash
# The provider tests stream by default; this runs them again asking for whole replies
# (HOOKLOOP_STREAM=0), so both modes pass the same request/answer tests. Built already by
# `cargo test`: a few seconds.
set -euo pipefail
HOOKLOOP_STREAM=0 cargo test --test llm_openai --test llm_anthropic
