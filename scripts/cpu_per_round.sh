#!/usr/bin/env bash
# CPU time per round of the agent process in long `hookloop acp` sessions.
#
# For each round count (default: 1000 and 200) this starts a fresh `hookloop acp`, opens one
# session whose MCP server is the real todo server over stdio (`hookloop todo-server`, its `_Stop`
# hook allowed), and sends one prompt. A scripted Chat Completions server on 127.0.0.1 answers
# each model request with one `todo__list` call until the round count is reached, then ends the
# turn; `_Stop` finds no open todo and lets it end. The agent's CPU time (user + system, all its
# threads, from /proc/<pid>/stat; children excluded) is read just before the prompt is sent and
# just after its answer arrives, and divided by the rounds.
#
# It also prints the agent's thread count and its threads' context switches per round: each is
# a thread put to sleep and woken, the cost of handing work from one thread to another; and the
# agent's peak resident memory (VmHWM of /proc/<pid>/status) at the end of the session.
#
# The model server answers each request with one write of headers and body on a socket with
# TCP_NODELAY: written in two pieces with Nagle's algorithm on, the second waits for the agent's
# delayed ACK (~40 ms), and the agent's CPU per round read about four times too high.
#
# With CPU_PER_ROUND_CALLGRIND=1 the agent runs under valgrind's callgrind, counters zeroed
# just before the prompt and dumped just after its answer, and the script also prints the user-mode
# instructions the agent executed per round: a count no other load on the machine changes (the
# CPU times above spread by a third between runs on a busy machine), to tell two builds apart.
# The times read under valgrind are valgrind's, not the agent's.
#
# The agent is driven from outside, over stdio, with JSON-RPC lines, so the script does not
# depend on how the ACP front end is built.
#
# Usage: scripts/cpu_per_round.sh [ROUNDS...]
#   HOOKLOOP_BIN       the binary to measure (default: target/release/hookloop under
#                      CARGO_TARGET_DIR, built with `cargo build --release` if missing)
#   HOOKLOOP_TODO_BIN  the binary whose `todo-server` command serves the session's MCP server
#                      (default: HOOKLOOP_BIN). To measure the floor, the least a one-thread
#                      agent with blocking I/O can spend on the same rounds (examples/round_floor.rs):
#                        cargo build --release --example round_floor --bin hookloop
#                        HOOKLOOP_BIN=target/release/examples/round_floor \
#                          HOOKLOOP_TODO_BIN=target/release/hookloop scripts/cpu_per_round.sh
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$here/target}"
bin="${HOOKLOOP_BIN:-$target/release/hookloop}"
if [[ -z "${HOOKLOOP_BIN:-}" ]]; then
    (cd "$here" && cargo build --release --quiet --bin hookloop)
fi
[[ -x "$bin" ]] || { echo "cpu_per_round: no binary at $bin" >&2; exit 2; }
rounds=("$@")
[[ ${#rounds[@]} -gt 0 ]] || rounds=(1000 200)

todo_bin="${HOOKLOOP_TODO_BIN:-$bin}"
[[ -x "$todo_bin" ]] || { echo "cpu_per_round: no binary at $todo_bin" >&2; exit 2; }

exec python3 - "$bin" "$todo_bin" "${rounds[@]}" <<'PY'
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

BIN = sys.argv[1]
TODO_BIN = sys.argv[2]
ROUNDS = [int(r) for r in sys.argv[3:]]
TICK = os.sysconf("SC_CLK_TCK")
CALLGRIND = os.environ.get("CPU_PER_ROUND_CALLGRIND") == "1"


class Model(http.server.BaseHTTPRequestHandler):
    """A Chat Completions server: one `todo__list` call per request until `rounds`, then text."""

    protocol_version = "HTTP/1.1"
    # TCP_NODELAY on every accepted socket (socketserver.StreamRequestHandler's switch).
    disable_nagle_algorithm = True
    rounds = 0
    served = 0

    def do_POST(self):
        # The body is read whole (as a provider would) and not parsed: its cost is the model's.
        self.rfile.read(int(self.headers.get("content-length", "0")))
        cls = type(self)
        n = cls.served
        cls.served += 1
        if n < cls.rounds:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{n}", "type": "function",
                "function": {"name": "todo__list", "arguments": "{}"}}]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "Done."}
            finish = "stop"
        body = json.dumps({"choices": [{"index": 0, "message": message,
                                        "finish_reason": finish}]}).encode()
        head = (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()
        self.wfile.write(head + body)
        self.wfile.flush()

    def log_message(self, *args):
        pass


def cpu_ticks(pid):
    """(user, system) clock ticks of the process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        # Fields after the command name, which may hold spaces, start at field 3.
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # utime, stime


def cpu_ns(pid):
    """Sum of the on-CPU time of the live threads, in ns (finer than the tick count)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def switches(pid):
    """Context switches of the live threads: each wake-up of a thread that slept is one."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def peak_rss_kib(pid):
    """The process's peak resident set size so far (VmHWM), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def callgrind(action, pid, dumps=None):
    """Zeroes (`-z`) or dumps (`-d`) the counters of the agent under callgrind; a dump returns
    the instructions counted since the zeroing."""
    done = subprocess.run(["callgrind_control", action, str(pid)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"cpu_per_round: callgrind_control {action} failed: {done.stderr}")
    if dumps is None:
        return None
    # The dump on request is the file's first numbered part: agent.out.1.
    try:
        with open(f"{dumps}/agent.out.1") as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    finally:
        shutil.rmtree(dumps, ignore_errors=True)
    sys.exit("cpu_per_round: the callgrind dump holds no instruction count")


def measure(rounds):
    Model.rounds = rounds
    Model.served = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = dict(os.environ,
               HOOKLOOP_PROVIDER="openai", HOOKLOOP_MODEL="scripted",
               OPENAI_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}/v1",
               OPENAI_API_KEY="none", MCP_HOOK_SERVERS="todo",
               HOOKLOOP_MAX_ROUNDS=str(rounds + 10), HOOKLOOP_LOG="error")
    command = [BIN, "acp"]
    if CALLGRIND:
        dumps = tempfile.mkdtemp(prefix="cpu_per_round.")
        # Only instructions are counted; the counters start at the prompt (see callgrind()).
        command = ["valgrind", "--tool=callgrind", "-q", "--cache-sim=no", "--branch-sim=no",
                   f"--callgrind-out-file={dumps}/agent.out", *command]
    agent = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=env, text=True, bufsize=1)
    ids = iter(range(1, 1 << 30))

    def call(method, params):
        id_ = next(ids)
        agent.stdin.write(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                                      "params": params}) + "\n")
        agent.stdin.flush()
        while True:
            line = agent.stdout.readline()
            if not line:
                sys.exit(f"cpu_per_round: the agent closed its output during {method}")
            frame = json.loads(line)
            if frame.get("id") == id_ and "method" not in frame:
                if "error" in frame:
                    sys.exit(f"cpu_per_round: {method} failed: {frame['error']}")
                return frame["result"]

    call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    todo = {"name": "todo", "command": TODO_BIN, "args": ["todo-server"], "env": []}
    session = call("session/new", {"cwd": os.getcwd(), "mcpServers": [todo]})["sessionId"]
    if CALLGRIND:
        callgrind("-z", agent.pid)
    ticks, ns, sw = cpu_ticks(agent.pid), cpu_ns(agent.pid), switches(agent.pid)
    threads = len(os.listdir(f"/proc/{agent.pid}/task"))
    result = call("session/prompt", {"sessionId": session,
                                     "prompt": [{"type": "text", "text": "work"}]})
    (user, system), ns = cpu_ticks(agent.pid), cpu_ns(agent.pid) - ns
    user, system = user - ticks[0], system - ticks[1]
    sw = switches(agent.pid) - sw
    hwm = peak_rss_kib(agent.pid)
    instructions = callgrind("-d", agent.pid, dumps) if CALLGRIND else None
    agent.stdin.close()
    agent.wait(timeout=30)
    server.shutdown()
    if result.get("stopReason") != "end_turn" or Model.served != rounds + 1:
        sys.exit(f"cpu_per_round: the prompt ended {result} after {Model.served} requests")
    cpu_ms = (user + system) * 1000 / TICK
    user_share = user / max(user + system, 1)
    print(f"{rounds:>6} rounds: agent CPU {cpu_ms:8.1f} ms, {cpu_ms / rounds:.3f} ms per round "
          f"(/proc/pid/stat; {user_share:.0%} user mode, tick-sampled); threads' schedstat {ns / 1e6:8.1f} ms, "
          f"{ns / 1e6 / rounds:.3f} ms per round; {threads} threads, "
          f"{sw / rounds:.1f} context switches per round; peak RSS (VmHWM) {hwm / 1024:.1f} MiB")
    if instructions is not None:
        print(f"{rounds:>6} rounds: agent instructions (callgrind, user mode) {instructions:,}, "
              f"{instructions / rounds:,.0f} per round")


for r in ROUNDS:
    measure(r)
PY
