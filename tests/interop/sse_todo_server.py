"""examples/todo_server.py over the HTTP+SSE transport of MCP 2024-11-05: `sse_todo_server.py PORT`
serves its stream at http://127.0.0.1:PORT/sse."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import todo_server  # noqa: E402

todo_server.mcp.run(transport="sse", host="127.0.0.1", port=int(sys.argv[1]))
