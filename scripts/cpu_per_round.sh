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
# The times read under valgrind are valgrind's, not the agent's. With CPU_PER_ROUND_CALLGRIND_OUT=DIR
# the dumps are kept in a folder under DIR (part 1 start-up, 2 `session/new`, 3 the prompt), for
# `callgrind_annotate --inclusive=yes DIR/*/agent.out.3`.
#
# With CPU_PER_ROUND_RECORD=1 each session is recorded (HOOKLOOP_RECORD_DIR in a temporary
# directory), with the write policy the README states; with CPU_PER_ROUND_RECORD=both each round
# count is measured twice in the same run, unrecorded then recorded, so the two lines show what
# recording costs per round. A recorded run checks its record holds a line for each fact and
# order of every round (at least four a round), so a run that recorded nothing cannot pass.
#
# The agent is driven from outside, over stdio, with JSON-RPC lines, so the script does not
# depend on how the ACP front end is built.
#
# Start-up is measured too: the wall time from spawning the agent to its `initialize` answer and
# to its `session/new` answer (the todo server started and listed), and under callgrind the
# instructions of each (callgrind dumps at each answer; a dump holds what ran since the last).
#
# With --floor each round count is measured twice in the same run, the engine then the floor
# (examples/round_floor.rs, built with `cargo build --release --example round_floor` unless
# HOOKLOOP_FLOOR_BIN names it), and a line per round count puts the two side by side with their
# ratio. With --readme (implies --floor) the table between the `cpu_per_round.sh --readme`
# markers in README.md is rewritten from the run; run it with CPU_PER_ROUND_CALLGRIND=1 for the
# instruction columns (without, they read "—").
#
# Usage: scripts/cpu_per_round.sh [--floor] [--readme] [ROUNDS...]
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
floor=""
readme=""
rounds=()
for arg in "$@"; do
    case "$arg" in
        --floor) floor=1 ;;
        --readme) floor=1; readme="$here/README.md" ;;
        --*) echo "cpu_per_round: unknown option $arg" >&2; exit 2 ;;
        *) rounds+=("$arg") ;;
    esac
done
[[ ${#rounds[@]} -gt 0 ]] || rounds=(1000 200)
if [[ -z "${HOOKLOOP_BIN:-}" ]]; then
    (cd "$here" && cargo build --release --quiet --bin hookloop)
fi
[[ -x "$bin" ]] || { echo "cpu_per_round: no binary at $bin" >&2; exit 2; }
floor_bin=""
if [[ -n "$floor" ]]; then
    floor_bin="${HOOKLOOP_FLOOR_BIN:-$target/release/examples/round_floor}"
    if [[ -z "${HOOKLOOP_FLOOR_BIN:-}" ]]; then
        (cd "$here" && cargo build --release --quiet --example round_floor)
    fi
    [[ -x "$floor_bin" ]] || { echo "cpu_per_round: no floor binary at $floor_bin" >&2; exit 2; }
fi

todo_bin="${HOOKLOOP_TODO_BIN:-$bin}"
[[ -x "$todo_bin" ]] || { echo "cpu_per_round: no binary at $todo_bin" >&2; exit 2; }

CPU_PER_ROUND_FLOOR="$floor_bin" CPU_PER_ROUND_README="$readme" \
    exec python3 - "$bin" "$todo_bin" "${rounds[@]}" <<'PY'
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

BIN = sys.argv[1]
TODO_BIN = sys.argv[2]
ROUNDS = [int(r) for r in sys.argv[3:]]
FLOOR = os.environ.get("CPU_PER_ROUND_FLOOR") or None
README = os.environ.get("CPU_PER_ROUND_README") or None
TICK = os.sysconf("SC_CLK_TCK")
CALLGRIND = os.environ.get("CPU_PER_ROUND_CALLGRIND") == "1"
RECORD = {"": [False], "0": [False], "1": [True], "both": [False, True]}.get(
    os.environ.get("CPU_PER_ROUND_RECORD", ""))
if RECORD is None:
    sys.exit("cpu_per_round: CPU_PER_ROUND_RECORD is 0, 1 or both")


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


def callgrind(action, pid, dumps=None, part=1):
    """Zeroes (`-z`) or dumps (`-d`) the counters of the agent under callgrind; a dump returns
    the instructions counted since the last zeroing or dump (callgrind zeroes after a dump)."""
    done = subprocess.run(["callgrind_control", action, str(pid)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"cpu_per_round: callgrind_control {action} failed: {done.stderr}")
    if dumps is None:
        return None
    # The dumps on request are the file's numbered parts: agent.out.1, agent.out.2, ...
    with open(f"{dumps}/agent.out.{part}") as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    sys.exit("cpu_per_round: the callgrind dump holds no instruction count")


def measure(rounds, record, bin_=BIN):
    Model.rounds = rounds
    Model.served = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = dict(os.environ,
               HOOKLOOP_PROVIDER="openai", HOOKLOOP_MODEL="scripted",
               OPENAI_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}/v1",
               OPENAI_API_KEY="none", MCP_HOOK_SERVERS="todo",
               HOOKLOOP_MAX_ROUNDS=str(rounds + 10), HOOKLOOP_LOG="error")
    records = tempfile.mkdtemp(prefix="cpu_per_round.records.") if record else None
    if records:
        env["HOOKLOOP_RECORD_DIR"] = records
    command = [bin_, "acp"]
    if CALLGRIND:
        keep = os.environ.get("CPU_PER_ROUND_CALLGRIND_OUT")
        dumps = (tempfile.mkdtemp(prefix=f"{os.path.basename(bin_)}.{rounds}.", dir=keep)
                 if keep else tempfile.mkdtemp(prefix="cpu_per_round."))
        # Only instructions are counted; the counters start at the prompt (see callgrind()).
        command = ["valgrind", "--tool=callgrind", "-q", "--cache-sim=no", "--branch-sim=no",
                   f"--callgrind-out-file={dumps}/agent.out", *command]
    started = time.monotonic()
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
    initialized = time.monotonic() - started
    startup = callgrind("-d", agent.pid, dumps, 1) if CALLGRIND else None
    todo = {"name": "todo", "command": TODO_BIN, "args": ["todo-server"], "env": []}
    session = call("session/new", {"cwd": os.getcwd(), "mcpServers": [todo]})["sessionId"]
    opened = time.monotonic() - started
    new_session = callgrind("-d", agent.pid, dumps, 2) if CALLGRIND else None
    ticks, ns, sw = cpu_ticks(agent.pid), cpu_ns(agent.pid), switches(agent.pid)
    threads = len(os.listdir(f"/proc/{agent.pid}/task"))
    result = call("session/prompt", {"sessionId": session,
                                     "prompt": [{"type": "text", "text": "work"}]})
    (user, system), ns = cpu_ticks(agent.pid), cpu_ns(agent.pid) - ns
    user, system = user - ticks[0], system - ticks[1]
    sw = switches(agent.pid) - sw
    hwm = peak_rss_kib(agent.pid)
    instructions = callgrind("-d", agent.pid, dumps, 3) if CALLGRIND else None
    agent.stdin.close()
    agent.wait(timeout=30)
    if CALLGRIND and not keep:
        # After the agent's exit: callgrind writes its last part then.
        shutil.rmtree(dumps, ignore_errors=True)
    server.shutdown()
    if result.get("stopReason") != "end_turn" or Model.served != rounds + 1:
        sys.exit(f"cpu_per_round: the prompt ended {result} after {Model.served} requests")
    label = "unrecorded"
    if records:
        lines = sum(1 for name in os.listdir(records) if name.endswith(".jsonl")
                    for _ in open(os.path.join(records, name)))
        shutil.rmtree(records, ignore_errors=True)
        if lines < 4 * rounds:
            sys.exit(f"cpu_per_round: the record holds {lines} lines for {rounds} rounds")
        label = f"recorded, {lines} lines"
    name = "floor" if bin_ != BIN else "engine"
    print(f"{rounds:>6} rounds ({name}, {label}):")
    print(f"{rounds:>6} rounds: start-up {initialized * 1000:.1f} ms to `initialize` answered, "
          f"{opened * 1000:.1f} ms to `session/new` answered (wall time"
          f"{', under valgrind' if CALLGRIND else ''})")
    if startup is not None:
        print(f"{rounds:>6} rounds: start-up instructions (callgrind) {startup:,} to `initialize`, "
              f"{new_session:,} more to `session/new`")
    cpu_ms = (user + system) * 1000 / TICK
    user_share = user / max(user + system, 1)
    print(f"{rounds:>6} rounds: agent CPU {cpu_ms:8.1f} ms, {cpu_ms / rounds:.3f} ms per round "
          f"(/proc/pid/stat; {user_share:.0%} user mode, tick-sampled); threads' schedstat {ns / 1e6:8.1f} ms, "
          f"{ns / 1e6 / rounds:.3f} ms per round; {threads} threads, "
          f"{sw / rounds:.1f} context switches per round; peak RSS (VmHWM) {hwm / 1024:.1f} MiB")
    if instructions is not None:
        print(f"{rounds:>6} rounds: agent instructions (callgrind, user mode) {instructions:,}, "
              f"{instructions / rounds:,.0f} per round")
    return {"rounds": rounds, "label": label, "cpu_ms": cpu_ms / rounds,
            "sched_ms": ns / 1e6 / rounds, "rss_mib": hwm / 1024,
            "instructions": None if instructions is None else instructions / rounds,
            "startup": startup, "new_session": new_session,
            "initialized_ms": initialized * 1000}


def count(value, suffix=""):
    return "—" if value is None else f"{value:,.0f}{suffix}"


def times(engine, floor):
    """engine / floor, or "—" when the floor read no time (fewer than one clock tick)."""
    return f"{engine / floor:.1f}×" if floor > 0 else "—"


rows = []
for r in ROUNDS:
    for record in RECORD:
        engine = measure(r, record)
        if not FLOOR:
            continue
        floor = measure(r, False, FLOOR)
        ratio = (f"{engine['instructions'] / floor['instructions']:.1f}×"
                 if engine["instructions"] and floor["instructions"] else "—")
        print(f"{r:>6} rounds: engine vs floor: instructions per round {count(engine['instructions'])}"
              f" vs {count(floor['instructions'])} ({ratio}); CPU per round "
              f"{engine['cpu_ms']:.3f} vs {floor['cpu_ms']:.3f} ms "
              f"({times(engine['cpu_ms'], floor['cpu_ms'])}, tick-sampled); schedstat "
              f"{engine['sched_ms']:.3f} vs {floor['sched_ms']:.3f} ms "
              f"({times(engine['sched_ms'], floor['sched_ms'])})")
        rows.append((engine, floor, ratio))

if README and rows:
    table = ["| rounds | engine instructions per round | floor | engine / floor | "
             "engine CPU per round (schedstat) | floor CPU per round (schedstat) | "
             "engine start-up instructions to `initialize` | floor | engine peak RSS |",
             "|---|---|---|---|---|---|---|---|---|"]
    for engine, floor, ratio in rows:
        table.append(
            f"| {engine['rounds']:,} ({engine['label']}) | {count(engine['instructions'])} | "
            f"{count(floor['instructions'])} | {ratio} | {engine['cpu_ms']:.3f} ms "
            f"({engine['sched_ms']:.3f} ms) | {floor['cpu_ms']:.3f} ms ({floor['sched_ms']:.3f} ms) | "
            f"{count(engine['startup'])} | {count(floor['startup'])} | {engine['rss_mib']:.1f} MiB |")
    begin, end = "<!-- cpu_per_round.sh --readme: begin -->", "<!-- cpu_per_round.sh --readme: end -->"
    with open(README) as f:
        text = f.read()
    if begin not in text or end not in text:
        sys.exit(f"cpu_per_round: {README} has no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(README, "w") as f:
        f.write(head + begin + "\n" + "\n".join(table) + "\n" + end + tail)
    print(f"cpu_per_round: the table in {README} is rewritten")
PY
