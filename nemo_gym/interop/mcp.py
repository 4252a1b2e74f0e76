"""MCP (the official `mcp` SDK) both ways: serve an environment's tools, use a server's.

Serve any environment's tools, with no handler code:

```python
server = ToolServer(gym.make("bank"))          # the episode of the env's first task
async with server.http() as url:               # streamable HTTP on 127.0.0.1, any port
    ...                                        # url = "http://127.0.0.1:PORT/mcp"
await server.run_stdio()                       # or over stdin/stdout
```
or from a shell (what an MCP client launches): `python -m nemo_gym.interop.mcp bank
[--task ID] [--option seed=3] [--http [--port N]]`. One server serves one episode: its
tools are the episode's tools (names, descriptions, JSON Schemas as the model sees
them), each call runs the tool, an exception comes back as an error result
(`is_error`), and the episode is opened on the first request and closed when the
server stops. A stdio client gets a world of its own per process it starts.

Use an MCP server's tools inside an environment:

```python
env = MCPEnv(Stdio("python", ["my_server.py"]), tasks=tasks, verifier=check)
env = MCPEnv(StreamableHTTP("http://127.0.0.1:8931/mcp"), tasks=tasks, verifier=check)
```
Each episode opens its own session in the rollout's event loop (for `Stdio`: its own
server process), lists the tools, and closes the session on exit, also on error and
cancellation (the process is stopped). A tool result flagged `is_error` goes back to
the model as the tool's error; a session that breaks mid-episode ends the rollout as a
`tool` failure. `mcp_tools(server)` gives the same session-backed tools to an
environment of your own (`BasicEpisode(tools, ...)` plus `on_close`).

Needs the `mcp` extra (`pip install 'nemo-gym[mcp]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Env
from nemo_gym.errors import EpisodeError, MissingDependency, ToolError
from nemo_gym.harnesses import ToolLoop
from nemo_gym.protocols import Environment, Episode, Harness, Verifier, VerifyFunction
from nemo_gym.records import Task, ToolSpec
from nemo_gym.tools import Tool, tool_table

try:
    import mcp_types
    from mcp import Client, StdioServerParameters
    from mcp.server.lowlevel import Server
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependency("mcp", "mcp") from exc

__all__ = [
    "InProcess",
    "MCPEnv",
    "MCPSession",
    "Stdio",
    "StreamableHTTP",
    "ToolFailed",
    "ToolServer",
    "mcp_tools",
]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


# -- serving an environment's tools ---------------------------------------------------


def _result(value: Any) -> mcp_types.CallToolResult:
    if isinstance(value, str):
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=value)])
    text = json.dumps(value, default=str, ensure_ascii=False)
    structured = value if isinstance(value, dict) else None
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=text)], structured_content=structured
    )


def _error(message: str) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=message)], is_error=True)


class ToolServer:
    """One episode of `env` with its tools served over MCP.

    The episode is that of `task` (default: the environment's first task of `split`),
    opened lazily on the first request, in the serving loop, and closed by `aclose()`
    (which `run_stdio` and `http` call when they stop). The task's prompt is the
    server's `instructions`. `final_state()` is the episode's, for checking a world a
    client acted on.
    """

    def __init__(
        self,
        env: Environment,
        task: Task | str | None = None,
        *,
        split: str = "test",
        name: str | None = None,
    ) -> None:
        self.env = env
        self._task = task
        self.split = split
        self.name = name or f"nemo-gym-{env.name}"
        self._episode: Episode | None = None
        self._tools: dict[str, Tool] | None = None
        self._lock: asyncio.Lock | None = None
        self._server: Server[Any] | None = None

    @property
    def task(self) -> Task:
        """The task whose episode is served."""
        if isinstance(self._task, Task):
            return self._task
        wanted = self._task
        for task in self.env.tasks(self.split):
            if wanted is None or task.id == wanted:
                self._task = task
                return task
        if wanted is None:
            raise EpisodeError(f"environment {self.env.name!r} has no {self.split!r} tasks")
        raise EpisodeError(
            f"environment {self.env.name!r} has no task {wanted!r} in {self.split!r}"
        )

    async def tools(self) -> dict[str, Tool]:
        """The episode's tools by name (opening the episode on first use)."""
        if self._tools is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._tools is None:
                    episode = await self.env.open(self.task)
                    await episode.__aenter__()
                    self._episode = episode
                    self._tools = tool_table(episode.tools)
        return self._tools

    def final_state(self) -> Any:
        """The served episode's `final_state()` (None before it was opened)."""
        return None if self._episode is None else self._episode.final_state()

    async def aclose(self) -> None:
        """Close the episode (the next request opens a new one)."""
        episode, self._episode, self._tools = self._episode, None, None
        if episode is not None:
            await episode.__aexit__(None, None, None)

    def server(self) -> Server[Any]:
        """The SDK's low-level `Server` with list-tools and call-tool handlers."""
        if self._server is None:
            self._server = Server(
                self.name,
                instructions=self.task.prompt or _text_of(self.task),
                on_list_tools=self._list_tools,
                on_call_tool=self._call_tool,
            )
        return self._server

    async def _list_tools(self, ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        tools = await self.tools()
        return mcp_types.ListToolsResult(
            tools=[
                mcp_types.Tool(
                    name=t.spec.name,
                    description=t.spec.description,
                    input_schema=_object_schema(t.spec.parameters),
                )
                for t in tools.values()
            ]
        )

    async def _call_tool(self, ctx: Any, params: Any) -> mcp_types.CallToolResult:
        tools = await self.tools()
        tool = tools.get(params.name)
        if tool is None:
            return _error(f"unknown tool {params.name!r}; available: {', '.join(sorted(tools))}")
        try:
            value = await tool(**(params.arguments or {}))
        except Exception as exc:
            return _error(f"{type(exc).__name__}: {exc}")
        return _result(value)

    async def run_stdio(self) -> None:
        """Serve over this process's stdin/stdout until the client closes them."""
        from mcp.server.stdio import stdio_server

        server = self.server()
        try:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            await self.aclose()

    @contextlib.asynccontextmanager
    async def http(
        self, host: str = LOOPBACK, port: int = 0, *, path: str = "/mcp"
    ) -> AsyncIterator[str]:
        """Serve streamable HTTP on `host:port` (0: any free port) while in the block.

        Yields the endpoint URL. Stopping the block stops the server and closes the
        episode.
        """
        import uvicorn

        app = self.server().streamable_http_app(streamable_http_path=path, host=host)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        bound = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="on")

        class _Quiet(uvicorn.Server):
            def capture_signals(self) -> Any:  # Ctrl-C stays the caller's
                return contextlib.nullcontext()

        server = _Quiet(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                if task.done():
                    task.result()
                    raise EpisodeError(f"the MCP HTTP server on {host}:{bound} did not start")
                await asyncio.sleep(0.01)
            yield f"http://{host}:{bound}{path}"
        finally:
            server.should_exit = True
            try:
                await task
            finally:
                sock.close()
                await self.aclose()


def _object_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    schema = dict(parameters)
    schema.setdefault("type", "object")
    return schema


def _text_of(task: Task) -> str:
    return "\n\n".join(m.content or "" for m in task.messages if m.role in ("system", "user"))


# -- using a server's tools -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stdio:
    """An MCP server started as a subprocess (one per session) and spoken to over stdio."""

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None

    def target(self) -> StdioServerParameters:
        return StdioServerParameters(
            command=self.command,
            args=list(self.args),
            env=dict(self.env) if self.env is not None else None,
            cwd=self.cwd,
        )

    def __str__(self) -> str:
        return " ".join([self.command, *self.args])


@dataclass(frozen=True, slots=True)
class StreamableHTTP:
    """An MCP server reached over streamable HTTP at `url`."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    def target(self) -> Any:
        if not self.headers:
            return self.url
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        url, headers = self.url, dict(self.headers)

        @contextlib.asynccontextmanager
        async def transport() -> AsyncIterator[Any]:
            async with httpx2.AsyncClient(headers=headers) as client:
                async with streamable_http_client(url, http_client=client) as streams:
                    yield streams

        return transport()

    def __str__(self) -> str:
        return self.url


@dataclass(frozen=True, slots=True)
class InProcess:
    """An SDK server object (`mcp.server.MCPServer` or a low-level `Server`) in this
    process, connected through the SDK's in-memory transport."""

    server: Any
    label: str = "in-process server"

    def target(self) -> Any:
        return self.server

    def __str__(self) -> str:
        return self.label


MCPTransport = Stdio | StreamableHTTP | InProcess


class ToolFailed(Exception):
    """An MCP tool answered with an error result (shown to the model as the tool's error)."""


def _content_text(result: Any) -> str:
    parts: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')}]".replace(" ]", "]"))
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{kind}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


class MCPSession:
    """One session with an MCP server, owned by a task of its own.

    `start()` (in the running loop) connects, initializes and lists the tools; the
    session then lives in its own task, so it may be closed from any task; `aclose()`
    ends it (a stdio server's process is stopped) and is idempotent. `tools` are
    `gym.Tool`s calling the server (named `prefix` + the server's name); `call_timeout`
    bounds each call; `include` / `exclude` filter by the server's names.
    """

    def __init__(
        self,
        transport: MCPTransport,
        *,
        call_timeout: float | None = 60.0,
        start_timeout: float = 30.0,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        prefix: str = "",
    ) -> None:
        self.transport = transport
        self.prefix = prefix
        self.call_timeout = call_timeout
        self.start_timeout = start_timeout
        self.include = frozenset(include) if include is not None else None
        self.exclude = frozenset(exclude)
        self.tools: list[Tool] = []
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None

    async def start(self) -> MCPSession:
        if self._task is not None:
            return self
        ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._main(ready), name=f"mcp session {self.transport}")
        waiter = asyncio.create_task(ready.wait())
        try:
            await asyncio.wait(
                {self._task, waiter},
                timeout=self.start_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except BaseException:
            waiter.cancel()
            await self.aclose()
            raise
        waiter.cancel()
        if not ready.is_set():
            error = self._task.exception() if self._task.done() else None
            await self.aclose()
            why = (
                f"{type(error).__name__}: {error}"
                if error
                else f"no answer in {self.start_timeout}s"
            )
            raise EpisodeError(f"MCP server {self.transport} could not start: {why}") from error
        return self

    async def _main(self, ready: asyncio.Event) -> None:
        assert self._stop is not None
        async with Client(self.transport.target()) as client:
            self._client = client
            self.tools = [self._tool(t) for t in await self._list(client) if self._wanted(t.name)]
            ready.set()
            await self._stop.wait()

    @staticmethod
    async def _list(client: Client) -> list[Any]:
        found: list[Any] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return found

    def _wanted(self, name: str) -> bool:
        return (self.include is None or name in self.include) and name not in self.exclude

    def _tool(self, described: Any) -> Tool:
        name = described.name
        spec = ToolSpec(
            name=f"{self.prefix}{name}",
            description=described.description or "",
            parameters=dict(described.input_schema or {"type": "object", "properties": {}}),
        )

        async def call(**arguments: Any) -> str:
            return await self.call(name, arguments)

        call.__qualname__ = f"MCPSession[{self.transport}].{name}"
        return Tool(spec=spec, fn=call)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Call tool `name`; an error result raises `ToolFailed`, a broken session `ToolError`."""
        client = self._client
        if client is None or self._task is None or self._task.done():
            raise ToolError(f"the MCP session with {self.transport} is not open")
        try:
            result = await client.call_tool(
                name, dict(arguments), read_timeout_seconds=self.call_timeout
            )
        except Exception as exc:
            if self._task.done():
                raise ToolError(f"the MCP session with {self.transport} ended: {exc}") from exc
            if type(exc).__name__ == "MCPError" or isinstance(exc, TimeoutError):
                raise ToolFailed(str(exc)) from exc
            raise ToolError(f"MCP call {name!r} to {self.transport} failed: {exc}") from exc
        text = _content_text(result)
        if result.is_error:
            raise ToolFailed(text)
        return text

    async def aclose(self) -> None:
        task, self._task = self._task, None
        self._client = None
        if task is None:
            return
        assert self._stop is not None
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 10.0)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except asyncio.CancelledError:
            # We are being cancelled while closing: still stop the session, then go on.
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise
        except Exception:
            log.warning(
                "the MCP session with %s ended with an error", self.transport, exc_info=True
            )


@contextlib.asynccontextmanager
async def mcp_tools(transport: MCPTransport, **options: Any) -> AsyncIterator[list[Tool]]:
    """The tools of a fresh session with an MCP server, for the length of the block."""
    session = await MCPSession(transport, **options).start()
    try:
        yield session.tools
    finally:
        await session.aclose()


class MCPEnv(Env):
    """An environment whose tools come from an MCP server, a session per episode.

    `server` is a `Stdio` or `StreamableHTTP`; `tasks` and `verifier` are the
    environment's own (a stateful server's world is best verified through its tools or
    its side effects: `final_state` is the episode's `state`, by default None).
    `state(task, session)` may build that state after the session opens. `include` /
    `exclude` filter the server's tools by name; `call_timeout` bounds each call.
    """

    def __init__(
        self,
        server: MCPTransport,
        *,
        verifier: Verifier | VerifyFunction,
        tasks: Iterable[Task] | None = None,
        name: str = "mcp",
        harness: Harness | None = None,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        call_timeout: float | None = 60.0,
        start_timeout: float = 30.0,
        state: Callable[[Task, MCPSession], Any] | None = None,
    ) -> None:
        super().__init__(verifier, name=name, tasks=tasks, harness=harness or ToolLoop())
        self.server = server
        # one session per episode, each opened with these options
        self._include = list(include) if include is not None else None
        self._exclude = list(exclude)
        self._call_timeout = call_timeout
        self._start_timeout = start_timeout
        self._state = state

    async def open(self, task: Task) -> BasicEpisode:
        session = await MCPSession(
            self.server,
            include=self._include,
            exclude=self._exclude,
            call_timeout=self._call_timeout,
            start_timeout=self._start_timeout,
        ).start()
        try:
            state = self._state(task, session) if self._state is not None else None
        except BaseException:
            await session.aclose()
            raise
        episode = BasicEpisode(session.tools, state=state)
        episode.on_close(session.aclose)
        return episode


# -- python -m nemo_gym.interop.mcp ---------------------------------------------------


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--option {text!r}: expected key=value")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m nemo_gym.interop.mcp ENV`: serve one episode's tools over MCP."""
    parser = argparse.ArgumentParser(
        prog="python -m nemo_gym.interop.mcp",
        description="Serve one episode of a nemo_gym environment's tools over MCP.",
    )
    parser.add_argument("env", help="environment name (gym list) or module:attribute")
    parser.add_argument("--task", help="task id (default: the first task)")
    parser.add_argument("--split", default="test")
    parser.add_argument(
        "--option", action="append", type=_option, default=[], help="env option key=value (JSON)"
    )
    parser.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    from nemo_gym.catalog import make

    options = dict(args.option)
    if ":" in args.env:
        from pkgutil import resolve_name

        env = resolve_name(args.env)(**options)
    else:
        env = make(args.env, **options)
    server = ToolServer(env, args.task, split=args.split)

    async def serve() -> None:
        if not args.http:
            await server.run_stdio()
            return
        async with server.http(args.host, args.port) as url:
            print(url, file=sys.stderr, flush=True)
            await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
