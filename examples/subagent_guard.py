"""Subagents held to their task, on the official MCP Python SDK: `_SubagentStart` tells each
subagent how to report, and `_SubagentStop` objects while its answer does not say the task is
finished. Run hookloop with HOOKLOOP_SUBAGENTS=2 and MCP_HOOK_SERVERS naming this server.

A subagent that ends right after an objection is not asked again, and each has its own budget
(SPROUT_AGENT_STOP_MAX_REJECTIONS), so this cannot trap one: it can only ask it to go on.
"""
from mcp.server.mcpserver import MCPServer

MARK = "TASK COMPLETE"
mcp = MCPServer("subagent-guard")


@mcp.tool(name="_SubagentStart")
def subagent_start(agent: str, description: str, prompt: str) -> str:
    return f"When {description or 'the task'} is done, end your answer with the line {MARK}."


@mcp.tool(name="_SubagentStop")
def subagent_stop(agent: str, result: str) -> str:
    if MARK in result:
        return ""
    return f"{agent}: the task is unfinished; finish it, then end with the line {MARK}."


if __name__ == "__main__":
    mcp.run()
