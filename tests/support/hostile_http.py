#!/usr/bin/env python3
"""A hostile MCP server over HTTP on 127.0.0.1, for tests/hostile_mcp_http.rs.

Usage: hostile_http.py <http|sse> <behaviour>. Prints the URL to connect to on its first line:
`http://127.0.0.1:<port>/mcp` for streamable HTTP, `http://127.0.0.1:<port>/sse` for the
HTTP+SSE transport of 2024-11-05. It lists two tools: `echo` answers at once, `poke` misbehaves
as `behaviour` says. With HOSTILE_LOG set, it appends what it did to that file, one fact a line:
`call <tool>`, `get`, `sent <bytes>` when a misbehaving stream ends (before the call's answer),
`closed <bytes>` when the client closed it first, `closed` when it closed the endpoint stream.

Behaviours (HOSTILE_MS bounds the ones marked "for a while"; forever when unset):
  keepalive   the answer to `poke` is an event stream of keep-alive comments, no event
  endless     the answer to `poke` is one event whose data lines never end (no blank line)
  giant       the answer to `poke` is one event of HOSTILE_MB MiB (default 24), then the answer
  flood       (http) a GET stream of `notifications/message` for a while; `poke` answers after
              (sse) the endpoint stream floods `notifications/message`, then `poke`'s answer
  pings       as flood, with `ping` requests, at most HOSTILE_COUNT of them; every answer to
              one logs `answer`
  none        behave
"""

import json
import os
import queue
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE, BEHAVIOUR = sys.argv[1], sys.argv[2]
LOG = os.environ.get("HOSTILE_LOG")
MS = os.environ.get("HOSTILE_MS")
DEADLINE_S = int(MS) / 1000 if MS else None
GIANT_MB = int(os.environ.get("HOSTILE_MB", "24"))
COUNT = int(os.environ.get("HOSTILE_COUNT", "1000000000"))
LOCK = threading.Lock()
TOOLS = [
    {"name": "echo", "description": "Answers its arguments.", "inputSchema": {"type": "object"}},
    {"name": "poke", "description": "Misbehaves.", "inputSchema": {"type": "object"}},
]
# Messages for the legacy stream: JSON-RPC messages, or a behaviour's name to act out there.
OUTBOX = queue.Queue()


def log(line):
    if LOG:
        with LOCK, open(LOG, "a") as f:
            f.write(line + "\n")


def until_deadline():
    """Whether a misbehaviour bounded by HOSTILE_MS goes on, from the first call."""
    start = time.monotonic()
    return lambda: DEADLINE_S is None or time.monotonic() - start < DEADLINE_S


def result(id_, value):
    return {"jsonrpc": "2.0", "id": id_, "result": value}


def text(id_, said):
    return result(id_, {"content": [{"type": "text", "text": said}], "isError": False})


def answer(message):
    """The answer to a request that is not a misbehaving call, or None for a notification."""
    method, id_ = message.get("method"), message.get("id")
    if id_ is None:
        return None
    if method is None:
        return None
    if method == "initialize":
        version = message.get("params", {}).get("protocolVersion", "2025-06-18")
        return result(id_, {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile-http", "version": "0"},
        })
    if method == "tools/list":
        return result(id_, {"tools": TOOLS})
    if method == "tools/call":
        return text(id_, json.dumps(message["params"].get("arguments", {}), separators=(",", ":")))
    if method == "ping":
        return result(id_, {})
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "no such method"}}


def event(message):
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


NOTE = {"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "x" * 200}}


def misbehave(write, behaviour, id_):
    """Writes `behaviour`'s stream for the call `id_`, then its answer; logs `sent <bytes>`
    before the answer, or `closed <bytes>` when the client closed the connection first.
    Returns whether the stream is still open."""
    sent = [0]

    def counted(data):
        write(data)
        sent[0] += len(data)

    try:
        act(counted, behaviour)
        log(f"sent {sent[0]}")
        counted(event(text(id_, "poked")))
    except OSError:
        log(f"closed {sent[0]}")
        return False
    return True


def act(write, behaviour):
    going = until_deadline()
    if behaviour == "keepalive":
        while going():
            write(b": keep-alive\n\n")
            time.sleep(0.01)
    elif behaviour == "endless":
        line = b"data: " + b"x" * 65536 + b"\n"
        write(b"event: message\n")
        while going():
            write(line)
        write(b"\n")
    elif behaviour == "giant":
        chunk = b"x" * (1 << 20)
        write(b"event: message\ndata: ")
        for _ in range(GIANT_MB):
            write(chunk)
        write(b"\n\n")
    elif behaviour == "flood":
        note = event(NOTE)
        while going():
            write(note)
    elif behaviour == "pings":
        n = 0
        while going() and n < COUNT:
            n += 1
            write(event({"jsonrpc": "2.0", "id": f"ping-{n}", "method": "ping"}))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def write(self, data):
        self.wfile.write(data)
        self.wfile.flush()
        return len(data)

    def reply(self, status, body=None, headers=()):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def open_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True

    def body(self):
        length = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(length) or b"{}")

    def do_DELETE(self):
        self.reply(200)

    def do_GET(self):
        if MODE == "http":
            if BEHAVIOUR not in ("flood", "pings"):
                self.reply(405)
                return
            log("get")
            self.open_stream()
            misbehave(self.write, BEHAVIOUR, "get")
            return
        if self.path != "/sse":
            self.reply(404)
            return
        log("get")
        self.open_stream()
        try:
            self.write(b"event: endpoint\ndata: /messages\n\n")
            while True:
                try:
                    item = OUTBOX.get(timeout=0.5)
                except queue.Empty:
                    self.write(b": keep-alive\n\n")
                    continue
                if isinstance(item, tuple):
                    if not misbehave(self.write, *item):
                        return
                else:
                    self.write(event(item))
        except OSError:
            log("closed")

    def do_POST(self):
        message = self.body()
        is_call = message.get("method") == "tools/call"
        tool = message.get("params", {}).get("name") if is_call else None
        if is_call:
            log(f"call {tool}")
        if MODE == "sse":
            if self.path != "/messages":
                self.reply(405)
                return
            if "method" not in message:
                log("answer")
            self.reply(202)
            if tool == "poke" and BEHAVIOUR != "none":
                OUTBOX.put((BEHAVIOUR, message["id"]))
            elif answer(message) is not None:
                OUTBOX.put(answer(message))
            return
        if tool == "poke" and BEHAVIOUR in ("keepalive", "endless", "giant"):
            self.open_stream()
            misbehave(self.write, BEHAVIOUR, message["id"])
            return
        if "method" not in message:
            log("answer")
        if tool == "poke" and BEHAVIOUR in ("flood", "pings") and DEADLINE_S is not None:
            time.sleep(DEADLINE_S)
        reply = answer(message)
        if reply is None:
            self.reply(202)
        else:
            self.reply(200, reply, [("Mcp-Session-Id", "hostile")])


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
path = "/mcp" if MODE == "http" else "/sse"
print(f"http://127.0.0.1:{server.server_address[1]}{path}", flush=True)
server.serve_forever()
