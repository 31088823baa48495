#!/usr/bin/env bash
# Installs the official TypeScript ACP SDK for tests/acp_interop.rs, which drives `hookloop acp`
# from tests/interop/acp_client.mjs. Without it, that test prints one line and skips.
set -euo pipefail
dir="${HOOKLOOP_ACP_SDK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hookloop/acp-interop}"
mkdir -p "$dir"
if [ ! -f "$dir/package.json" ]; then
  printf '{"name": "hookloop-acp-interop", "private": true, "type": "module"}\n' >"$dir/package.json"
fi
npm install --prefix "$dir" --no-audit --no-fund --silent "@agentclientprotocol/sdk@^2.4.0"
echo "HOOKLOOP_ACP_SDK_DIR=$dir" >>"$CI_ENV"
