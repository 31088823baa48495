"""The todo hook server of examples/todo_server.rs, on the official MCP Python SDK."""
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("todo")
todos: list[tuple[str, bool]] = []

@mcp.tool()
def add(text: str) -> str:
    todos.append((text, False))
    return f"added #{len(todos)}"

@mcp.tool()
def complete(id: int) -> str:
    text, _ = todos[id - 1]
    todos[id - 1] = (text, True)
    return f"completed #{id}: {text}"

def open_todos() -> list[str]:
    return [text for text, done in todos if not done]

@mcp.tool(name="_Stop")
def stop() -> str:
    open_ = open_todos()
    return f"{len(open_)} open: {'; '.join(open_)}" if open_ else ""

@mcp.tool(name="_PostCompact")
def post_compact() -> str:
    return "Open todos:\n- " + "\n- ".join(open_todos()) if open_todos() else ""

if __name__ == "__main__":
    mcp.run()
