#!/usr/bin/env bash
# Installs the Python ACP SDK (PyPI `agent-client-protocol`) for tests/acp_interop.rs, which drives
# `hookloop acp` from tests/interop/acp_client.py as a second, independent client. Pinned so a
# release upstream cannot change what CI tests; a second run on the same machine installs nothing.
set -euo pipefail

ACP_PY_VERSION=0.12.1

dir="${HOOKLOOP_ACP_PYTHON_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hookloop/acp-python}"
python="$dir/venv/bin/python"
if ! "$python" -c 'import acp' 2>/dev/null \
  || [ "$("$python" -c 'import importlib.metadata as m; print(m.version("agent-client-protocol"))')" != "$ACP_PY_VERSION" ]; then
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "agent-client-protocol==$ACP_PY_VERSION"
fi
echo "HOOKLOOP_ACP_PYTHON=$python" >>"$CI_ENV"
