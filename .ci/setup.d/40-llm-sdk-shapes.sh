#!/usr/bin/env bash
# The official OpenAI and Anthropic Python SDKs, whose type definitions tests/llm_sdk_shapes.rs
# checks every pinned request body and test answer against. Pinned, so a new SDK release cannot
# turn CI red on its own; bump deliberately.
set -euo pipefail
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  "openai==3.57.0" "anthropic==2.14.0"
python3 -c "import openai, anthropic; print('sdk shapes: openai', openai.__version__, 'anthropic', anthropic.__version__)"
echo "HOOKLOOP_SDK_PYTHON=python3" >>"$CI_ENV"
