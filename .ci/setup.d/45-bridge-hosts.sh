#!/usr/bin/env bash
# Installs the Claude Code and Codex CLIs, pinned, for tests/host_claude_code.rs and
# tests/host_codex.rs, which run each host headless against a fake model on 127.0.0.1 with
# `hookloop mcp proxy` as its MCP server. Both packages ship native binaries, so nothing is
# downloaded when they run. Without them, those tests print one line and skip.
# Timed on the 2-core CI machine: cold (empty folder and empty npm cache, ~800 MB fetched)
# 17.0 s, 13.1 s with npm's cache as this machine had it; warm (a second run) 0.2-0.3 s, installing
# nothing.
set -euo pipefail

CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0

dir="${HOOKLOOP_BRIDGE_HOSTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hookloop/bridge-hosts}"
mkdir -p "$dir"
if [ ! -f "$dir/package.json" ]; then
  printf '{"name": "hookloop-bridge-hosts", "private": true}\n' >"$dir/package.json"
fi
installed() { # package version
  node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
    "$dir/node_modules/$1/package.json" "$2" 2>/dev/null
}
if ! installed @anthropic-ai/claude-code "$CLAUDE_CODE_VERSION" \
  || ! installed @openai/codex "$CODEX_VERSION"; then
  # claude-code declares node >= 22; it runs its native binary, so npm's warning is harmless.
  npm install --prefix "$dir" --no-audit --no-fund --silent \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION"
fi
echo "HOOKLOOP_CLAUDE_BIN=$dir/node_modules/.bin/claude" >>"$CI_ENV"
echo "HOOKLOOP_CODEX_BIN=$dir/node_modules/.bin/codex" >>"$CI_ENV"
