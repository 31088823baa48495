#!/usr/bin/env bash
# Installs Arize Phoenix, the OpenTelemetry collector and trace viewer the trace export tests
# (tests/otel.rs) send spans to and read them back from. The version is pinned so a release
# upstream cannot change what CI tests; the venv lives under the interop cache folder, so a
# second run on the same machine installs nothing. A fresh install took 2 min 37 s here.
set -euo pipefail

PHOENIX_VERSION=20.26.1

cache="${HOOKLOOP_INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hookloop-interop}"
venv="$cache/phoenix-venv"
mkdir -p "$cache"

if [ ! -x "$venv/bin/phoenix" ] \
  || [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("arize-phoenix"))' 2>/dev/null)" != "$PHOENIX_VERSION" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "arize-phoenix==$PHOENIX_VERSION"
fi

echo "HOOKLOOP_PHOENIX=$venv/bin/phoenix" >>"${CI_ENV:?CI_ENV is set by .ci/run}"
