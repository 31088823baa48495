#!/usr/bin/env bash
# Wall time of `hookloop hook claude-code` answering one `Stop` event, median of N runs
# (default 20), in two cases:
#
# - no proxy: MCP_HOOK_SERVERS=todo, but no `hookloop mcp proxy` under this "host" (the
#   command walks its ancestors, says so on stderr and answers "no objection");
# - one proxy: a `hookloop mcp proxy --name todo -- hookloop todo-server`, initialized, one open
#   todo, so every run asks `_Stop` on the live connection and answers a block.
#
# The "host" is the python process below: the parent of both the proxy and each hook command,
# as Claude Code is. Each case is run once untimed first (page cache). The spread of the runs is
# printed beside the median; on a busy machine it is wide.
#
# Usage: scripts/hook_startup.sh [RUNS]
#   HOOKLOOP_BIN  the binary to measure (default: target/release/hookloop under
#                 CARGO_TARGET_DIR, built with `cargo build --release --bin hookloop` if missing)
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$here/target}"
bin="${HOOKLOOP_BIN:-$target/release/hookloop}"
if [[ ! -x "$bin" ]]; then
    (cd "$here" && cargo build --release --bin hookloop)
fi
runs="${1:-20}"

exec python3 - "$bin" "$runs" "$here/tests/bridge_hosts/claude-code/Stop.json" <<'PY'
import json, os, shutil, statistics, subprocess, sys, tempfile, time

binary, runs, event_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
event = open(event_path, "rb").read()
runtime = tempfile.mkdtemp(prefix="hookloop-startup-")
os.chmod(runtime, 0o700)
env = dict(os.environ, XDG_RUNTIME_DIR=runtime, MCP_HOOK_SERVERS="todo")

def once(event):
    started = time.perf_counter()
    out = subprocess.run([binary, "hook", "claude-code"], input=event, env=env,
                         capture_output=True)
    return time.perf_counter() - started, out

def measure(name, make_event, check):
    once(make_event())
    times = []
    for _ in range(runs):
        took, out = once(make_event())
        check(out)
        times.append(took * 1000)
    times.sort()
    print(f"{name:>9}: median {statistics.median(times):6.2f} ms "
          f"(min {times[0]:.2f}, max {times[-1]:.2f}, {runs} runs)")

def quiet(out):
    assert out.returncode == 0 and out.stdout == b"", out
    assert b"no `hookloop mcp proxy` runs" in out.stderr, out.stderr

measure("no proxy", lambda: event, quiet)

proxy = subprocess.Popen([binary, "mcp", "proxy", "--name", "todo", "--", binary, "todo-server"],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def request(id, method, params):
    proxy.stdin.write((json.dumps({"jsonrpc": "2.0", "id": id, "method": method,
                                   "params": params}) + "\n").encode())
    proxy.stdin.flush()
    while True:
        message = json.loads(proxy.stdout.readline())
        if message.get("id") == id:
            return message
request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "startup", "version": "0"}})
proxy.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
request(2, "tools/call", {"name": "add", "arguments": {"text": "measure"}})

def block(out):
    assert out.returncode == 0, out
    assert json.loads(out.stdout)["decision"] == "block", out

# Each block counts against the session's budget: a fresh session id for every run.
sessions = iter(range(10**6))
def fresh_session():
    plain = json.loads(event)
    plain["session_id"] = f"startup-{next(sessions)}"
    return json.dumps(plain).encode()
measure("one proxy", fresh_session, block)

proxy.stdin.close()
proxy.wait()
shutil.rmtree(runtime, ignore_errors=True)
PY
