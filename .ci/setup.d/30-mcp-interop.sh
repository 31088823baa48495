#!/usr/bin/env bash
# Installs the MCP servers the interop tests (tests/mcp_interop.rs, tests/mcp_oauth.rs) talk to:
# the official Python SDK (for a hook server written with it, and for an OAuth-protected server:
# the SDK's `mcp.server.auth` needs nothing beyond the `mcp` package) and three servers of the
# reference npm set. Versions are
# pinned so a release upstream cannot change what CI tests. Everything goes under one cache
# folder, so a second run on the same machine installs nothing.
set -euo pipefail

MCP_PY_VERSION=2.3.0
EVERYTHING_VERSION=2026.8.31
MEMORY_VERSION=2026.8.31
FILESYSTEM_VERSION=2026.8.31

cache="${HOOKLOOP_INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hookloop-interop}"
mkdir -p "$cache"

if ! "$cache/venv/bin/python" -c "import mcp.server.mcpserver" 2>/dev/null \
  || [ "$("$cache/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')" != "$MCP_PY_VERSION" ]; then
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_PY_VERSION"
fi

npm_dir="$cache/npm"
marker="$npm_dir/.installed-$EVERYTHING_VERSION-$MEMORY_VERSION-$FILESYSTEM_VERSION"
if [ ! -e "$marker" ]; then
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
    "@modelcontextprotocol/server-memory@$MEMORY_VERSION" \
    "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION"
  touch "$marker"
fi

{
  echo "HOOKLOOP_INTEROP_PYTHON=$cache/venv/bin/python"
  echo "HOOKLOOP_INTEROP_NODE_MODULES=$npm_dir/node_modules"
} >>"${CI_ENV:?CI_ENV is set by .ci/run}"
