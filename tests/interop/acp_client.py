"""Drives `hookloop acp` with the Python ACP SDK (PyPI `agent-client-protocol`).

Usage: python acp_client.py <hookloop binary> <hook server binary>

Runs a session through a `_Stop` objection, a tool call, a tool call the agent asks permission
for (`session/request_permission`, answered "allow once"), a cancel and `session/close`, then
starts a second agent process and loads the recorded session there (the agent's environment, which must
set HOOKLOOP_RECORD_DIR, is this process's). Prints one JSON line with what it saw; tests/
acp_interop.rs checks it.
"""

import asyncio
import json
import os
import sys

import acp
from acp.schema import AllowedOutcome, EnvVariable, McpServerStdio, RequestPermissionResponse


class Recorder:
    """The client side: keeps every session update and permission request; allows each call
    once; refuses everything else."""

    def __init__(self):
        self.updates = []
        self.permissions = []
        self.seen = asyncio.Event()

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update.model_dump(by_alias=True, exclude_none=True))
        self.seen.set()

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append(
            {
                "title": tool_call.title,
                "toolCallId": tool_call.tool_call_id,
                "rawInput": tool_call.raw_input,
                "options": [o.option_id for o in options],
            }
        )
        allow = next(o.option_id for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=allow))

    async def wait_for(self, predicate):
        while not any(predicate(u) for u in self.updates):
            self.seen.clear()
            await asyncio.wait_for(self.seen.wait(), timeout=30)


def text(value):
    return acp.text_block(value)


def spawn(client, exe):
    # The SDK passes a trimmed environment by default, and pipes stderr nobody would read.
    return acp.spawn_agent_process(
        client, exe, "acp", env=dict(os.environ), transport_kwargs={"stderr": None}
    )


async def first_process(exe, gate, cwd):
    client = Recorder()
    async with spawn(client, exe) as (conn, _process):
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=cwd, mcp_servers=[gate])
        sid = session.session_id
        worked = await conn.prompt(session_id=sid, prompt=[text("work")])
        removed = await conn.prompt(session_id=sid, prompt=[text("remove")])

        # A prompt whose tool hangs, cancelled once the call shows.
        hanging = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text("hang")]))
        await client.wait_for(lambda u: u.get("title") == "gate__hang")
        await conn.cancel(session_id=sid)
        cancelled = await hanging

        listed = await conn.list_sessions()
        await conn.close_session(session_id=sid)
        closed_error = None
        try:
            await conn.prompt(session_id=sid, prompt=[text("after close")])
        except acp.RequestError as error:
            closed_error = error.code
    caps = init.agent_capabilities
    return {
        "protocolVersion": init.protocol_version,
        "agentName": init.agent_info.name if init.agent_info else None,
        "loadSession": caps.load_session,
        "sessionId": sid,
        "worked": worked.stop_reason,
        "removed": removed.stop_reason,
        "permissions": client.permissions,
        "cancelled": cancelled.stop_reason,
        "listed": [s.session_id for s in listed.sessions],
        "titles": [s.title for s in listed.sessions],
        "closedError": closed_error,
        "updates": client.updates,
    }


async def second_process(exe, gate, cwd, sid):
    client = Recorder()
    async with spawn(client, exe) as (conn, _process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        await conn.load_session(cwd=cwd, session_id=sid, mcp_servers=[gate])
        history = list(client.updates)
        again = await conn.prompt(session_id=sid, prompt=[text("again")])
    return {"history": history, "again": again.stop_reason, "updates": client.updates[len(history):]}


async def main():
    exe, server = sys.argv[1], sys.argv[2]
    cwd = os.getcwd()
    env = [
        EnvVariable(name="TS_HOOKS", value="_Stop"),
        EnvVariable(name="TS_STOP", value="say:not yet"),
    ]
    gate = McpServerStdio(name="gate", command=server, args=[], env=env)
    first = await first_process(exe, gate, cwd)
    second = await second_process(exe, gate, cwd, first["sessionId"])
    print(json.dumps({"first": first, "second": second}))


asyncio.run(main())
