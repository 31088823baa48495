// Drives `hookloop acp` with the official TypeScript ACP SDK (@agentclientprotocol/sdk).
//
// Usage: node acp_client.mjs <hookloop binary> <hook server binary>
//
// Runs a session with a real MCP hook server through a `_Stop` objection, a tool call the agent
// asks permission for (`session/request_permission`, answered "always reject"), a cancel and
// `session/close`, then starts a second agent process and loads the recorded session there:
// the conversation comes back, the spent objection budget stays spent, and the standing
// rejection still holds. The agent's environment (which must set HOOKLOOP_RECORD_DIR) is this
// process's. Prints one JSON line with what it saw; tests/acp_interop.rs checks it. Must sit
// next to a node_modules holding the SDK (the test copies it into the folder
// .ci/setup.d/40-acp-interop.sh made).

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [exe, server] = process.argv.slice(2);
if (!exe || !server) {
  console.error("usage: node acp_client.mjs <hookloop binary> <hook server binary>");
  process.exit(2);
}

const gate = {
  name: "gate",
  command: server,
  args: [],
  env: [
    { name: "TS_HOOKS", value: "_Stop" },
    { name: "TS_STOP", value: "say:not yet" },
  ],
};
const text = (value) => [{ type: "text", text: value }];

/// One agent process: `work(ctx, client)` runs against it; the client keeps what it is sent.
async function withAgent(work) {
  const agent = spawn(exe, ["acp"], { stdio: ["pipe", "pipe", "inherit"] });
  const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
  const client = { updates: [], permissions: [], waiters: [] };
  const result = await acp
    .client({ name: "hookloop-interop" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      client.updates.push(params.update);
      client.waiters = client.waiters.filter((w) => !w(params.update));
    })
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      client.permissions.push({
        title: params.toolCall.title,
        toolCallId: params.toolCall.toolCallId,
        rawInput: params.toolCall.rawInput,
        options: params.options.map((o) => o.optionId),
      });
      const reject = params.options.find((o) => o.kind === "reject_always");
      return { outcome: { outcome: "selected", optionId: reject.optionId } };
    })
    .connectWith(stream, (ctx) => work(ctx, client));
  agent.stdin.end();
  await new Promise((resolve) => agent.once("exit", resolve));
  return { result, updates: client.updates, permissions: client.permissions };
}

/// Resolves once an update satisfying `predicate` arrives (or has arrived).
function waitFor(client, predicate) {
  if (client.updates.some(predicate)) return Promise.resolve();
  return new Promise((resolve) =>
    client.waiters.push((update) => (predicate(update) ? (resolve(), true) : false)),
  );
}

async function errorCode(promise) {
  try {
    await promise;
    return null;
  } catch (error) {
    return error.code ?? String(error);
  }
}

const first = await withAgent(async (ctx, client) => {
  // This client can show notices: the agent reports the _Stop budget with them.
  const init = await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { session: { notices: {} } },
  });
  const { sessionId } = await ctx.request(acp.methods.agent.session.new, {
    cwd: process.cwd(),
    mcpServers: [gate],
  });
  const prompt = (value) =>
    ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(value) });
  const worked = await prompt("work");
  const removed = await prompt("remove");

  // A prompt whose tool hangs, cancelled once the call shows.
  const hanging = prompt("hang");
  await waitFor(client, (u) => u.title === "gate__hang");
  await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
  const cancelled = await hanging;

  const listed = await ctx.request(acp.methods.agent.session.list, {});
  await ctx.request(acp.methods.agent.session.close, { sessionId });
  const closedError = await errorCode(prompt("after close"));
  return {
    protocolVersion: init.protocolVersion,
    agentName: init.agentInfo?.name ?? null,
    loadSession: init.agentCapabilities?.loadSession ?? false,
    mcpHttp: init.agentCapabilities?.mcpCapabilities?.http ?? false,
    sessionId,
    worked: worked.stopReason,
    removed: removed.stopReason,
    cancelled: cancelled.stopReason,
    listed: listed.sessions.map((s) => s.sessionId),
    closedError,
  };
});

const sessionId = first.result.sessionId;
let historyLength = 0;
const second = await withAgent(async (ctx, client) => {
  await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  await ctx.request(acp.methods.agent.session.load, {
    sessionId,
    cwd: process.cwd(),
    mcpServers: [gate],
  });
  historyLength = client.updates.length;
  const prompt = (value) =>
    ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(value) });
  const again = await prompt("again");
  const removedAgain = await prompt("remove");
  return { again: again.stopReason, removedAgain: removedAgain.stopReason };
});

console.log(
  JSON.stringify({
    first: { ...first.result, updates: first.updates, permissions: first.permissions },
    second: {
      ...second.result,
      history: second.updates.slice(0, historyLength),
      updates: second.updates.slice(historyLength),
      permissions: second.permissions,
    },
  }),
);
process.exit(0);
