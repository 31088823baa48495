"""A policy gate in a dozen lines, on the official MCP Python SDK: `_PreToolUse` denies any tool
call whose arguments contain one of the words in GUARD_WORDS (comma-separated; default
"rm -rf,DROP TABLE"). Run it with MCP_HOOK_SERVERS naming it; the model never sees the hook.
"""
import json
import os

from mcp.server.mcpserver import MCPServer

WORDS = [w for w in os.environ.get("GUARD_WORDS", "rm -rf,DROP TABLE").split(",") if w.strip()]
mcp = MCPServer("guard")


@mcp.tool(name="_PreToolUse")
def pre_tool_use(tool: str, arguments: dict) -> str:
    text = json.dumps(arguments)
    hits = [w for w in WORDS if w in text]
    return f"{tool} denied: its arguments contain {', '.join(hits)}" if hits else ""


if __name__ == "__main__":
    mcp.run()
