// Drives `hookloop acp` through a short session with the official TypeScript ACP SDK.
//
// Usage: node acp_client.mjs <hookloop binary>
// The binary's environment (provider, hooks) is this process's. Prints one JSON line with what
// the session showed; tests/acp_interop.rs checks it. Must sit next to a node_modules holding
// @agentclientprotocol/sdk (the test copies it into the folder .ci/setup.d/40-acp-interop.sh made).

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const exe = process.argv[2];
if (!exe) {
  console.error("usage: node acp_client.mjs <hookloop binary>");
  process.exit(2);
}

const agent = spawn(exe, ["acp"], { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
const updates = [];

const outcome = await acp
  .client({ name: "hookloop-interop" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
  })
  .connectWith(stream, async (ctx) => {
    const init = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {},
    });
    const { sessionId } = await ctx.request(acp.methods.agent.session.new, {
      cwd: process.cwd(),
      mcpServers: [{ name: "todo", command: exe, args: ["todo-server"], env: [] }],
    });
    const first = await ctx.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "Finish the release." }],
    });
    let refused = null;
    try {
      await ctx.request(acp.methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "image", data: "AA==", mimeType: "image/png" }],
      });
    } catch (error) {
      refused = { code: error.code, message: error.message };
    }
    return { init, sessionId, first, refused };
  });

agent.stdin.end();
const text = updates
  .filter((u) => u.sessionUpdate === "agent_message_chunk" && u.content.type === "text")
  .map((u) => u.content.text)
  .join("");
console.log(
  JSON.stringify({
    protocolVersion: outcome.init.protocolVersion,
    agentName: outcome.init.agentInfo?.name ?? null,
    mcpHttp: outcome.init.agentCapabilities?.mcpCapabilities?.http ?? false,
    stopReason: outcome.first.stopReason,
    text,
    updateKinds: updates.map((u) => u.sessionUpdate),
    toolTitles: updates.filter((u) => u.sessionUpdate === "tool_call").map((u) => u.title),
    refused: outcome.refused,
  }),
);
process.exit(0);
