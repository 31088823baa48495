"""A hook server on the official MCP Python SDK exposing all eight hook points.

Each hook call is appended, as one JSON line {"hook", "args"}, to the file named by the first
argument, so the test can see what the engine sent.
"""
import json
import sys

from mcp.server.mcpserver import MCPServer

LOG = sys.argv[1]
mcp = MCPServer("hooks")


def seen(hook: str, **args) -> None:
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps({"hook": hook, "args": args}) + "\n")


@mcp.tool()
def echo(text: str) -> str:
    return text


@mcp.tool(name="_SessionStart")
def session_start() -> str:
    seen("_SessionStart")
    return "session context"


@mcp.tool(name="_UserPromptSubmit")
def user_prompt_submit(prompt: str) -> str:
    seen("_UserPromptSubmit", prompt=prompt)
    return f"prompt seen: {prompt}"


@mcp.tool(name="_PreToolUse")
def pre_tool_use(tool: str, arguments: dict) -> str:
    seen("_PreToolUse", tool=tool, arguments=arguments)
    return "forbidden word" if "forbidden" in json.dumps(arguments) else ""


@mcp.tool(name="_PostToolUse")
def post_tool_use(tool: str, arguments: dict, isError: bool, output: str) -> str:
    seen("_PostToolUse", tool=tool, isError=isError, output_bytes=len(output))
    return f"post: {tool} ran"


@mcp.tool(name="_Stop")
def stop() -> str:
    seen("_Stop")
    return ""


@mcp.tool(name="_PreCompact")
def pre_compact() -> str:
    seen("_PreCompact")
    return "keep the word PINEAPPLE"


@mcp.tool(name="_PostCompact")
def post_compact() -> str:
    seen("_PostCompact")
    return "after compaction"


@mcp.tool(name="_SessionEnd")
def session_end() -> str:
    seen("_SessionEnd")
    return "ignored"


if __name__ == "__main__":
    mcp.run()
