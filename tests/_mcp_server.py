"""A small MCP server for the tests and examples: ``python _mcp_server.py [http PORT]``.

Over stdio by default; ``http PORT`` serves streamable HTTP on 127.0.0.1:PORT/mcp.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import EmbeddedResource, TextResourceContents

server = MCPServer("test-tools", log_level="ERROR")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


@server.tool()
def pid() -> int:
    """The server's process id (a restart gives a new one)."""
    return os.getpid()


@server.tool()
def picture() -> Image:
    """A tiny PNG."""
    return Image(data=b"\x89PNG\r\n\x1a\nfake", format="png")


@server.tool()
def readme() -> EmbeddedResource:
    """An embedded text resource."""
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(
            uri="file:///README.md", mime_type="text/markdown", text="# hi"
        ),
    )


@server.tool()
def refuse(reason: str) -> str:
    """Always fails, with the reason."""
    raise ValueError(reason)


@server.tool()
def env_value(name: str) -> str:
    """The value of an environment variable of the server."""
    return os.environ.get(name, "")


@server.tool()
def refuse_with_env(name: str) -> str:
    """Always fails, quoting an environment variable of the server in its error and on
    its stderr."""
    value = os.environ.get(name, "")
    print(f"refusing with {value}", file=sys.stderr, flush=True)
    raise ToolError(f"refused with {value}")


@server.tool()
def die() -> str:
    """The process exits in the middle of the call."""
    sys.stdout.flush()
    os._exit(7)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
