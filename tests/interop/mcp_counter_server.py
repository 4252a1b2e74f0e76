"""A stateful MCP server written with the official SDK's MCPServer (stdio or HTTP).

`python mcp_counter_server.py [--http PORT]`: tools `add`, `total`, `pid`, `fail`,
`sleep`. Each process holds its own counter.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server import MCPServer

server = MCPServer("counter")
state = {"total": 0}


@server.tool()
def add(amount: int) -> int:
    """Add to the counter and return the new total."""
    state["total"] += amount
    return state["total"]


@server.tool()
def total() -> str:
    """The counter's total."""
    return f"total={state['total']}"


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"failed because {reason}")


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "slept"


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
