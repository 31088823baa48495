#!/usr/bin/env python3
"""What `hookloop mcp proxy` adds to a host's tool call: the same server, `hookloop todo-server`,
called directly and through the proxy, one `tools/call` of `list` at a time over stdio, as a
host calls it. Prints the median and 90th percentile round trip of each and their difference.

    scripts/proxy_overhead.py [BINARY] [CALLS]     (default target/release/hookloop, 2000)

The two are run alternately in blocks of 100 calls, so a change of the machine's load falls on
both. The floor of the method is printed too: the same loop against `cat` echoing the request,
which measures the pipe and this script alone.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/hookloop"
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 2000


def start(argv, env):
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, bufsize=0)


def send(proc, message):
    proc.stdin.write((json.dumps(message) + "\n").encode())


def answer(proc, want):
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the server closed its output")
        message = json.loads(line)
        if message.get("id") == want:
            return message


def handshake(proc):
    send(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "overhead", "version": "0"}}})
    answer(proc, 0)
    send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})


def timed(proc, n, start_id, echo=False):
    took = []
    for i in range(n):
        rid = start_id + i
        request = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                   "params": {"name": "list", "arguments": {}}}
        t = time.perf_counter()
        send(proc, request)
        answer(proc, rid)
        took.append(time.perf_counter() - t)
    return took


runtime = tempfile.mkdtemp(prefix="hookloop-overhead-")
os.chmod(runtime, 0o700)
env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
env.pop("HOOKLOOP_LOG", None)
direct = start([binary, "todo-server"], env)
proxied = start([binary, "mcp", "proxy", "--name", "todo", "--", binary, "todo-server"], env)
echo = start(["cat"], env)
handshake(direct)
handshake(proxied)
results = {"direct": [], "proxied": [], "floor": []}
next_id = 1
for _ in range(calls // 100):
    results["direct"] += timed(direct, 100, next_id)
    results["proxied"] += timed(proxied, 100, next_id)
    results["floor"] += timed(echo, 100, next_id)
    next_id += 100
for proc in (direct, proxied, echo):
    proc.stdin.close()
    proc.wait(timeout=10)


def us(seconds):
    return f"{seconds * 1e6:8.1f} µs"


for name, took in results.items():
    took.sort()
    print(f"{name:8} median {us(statistics.median(took))}  p90 {us(took[len(took) * 9 // 10])}"
          f"  ({len(took)} calls)")
added = statistics.median(results["proxied"]) - statistics.median(results["direct"])
print(f"the proxy adds {us(added)} to the median call")
