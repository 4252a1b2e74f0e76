"""A loopback fake of E2B: its control-plane REST API and each sandbox's envd, written
from the shapes the official SDK's generated clients send and parse (`e2b.api.client`,
generated from E2B's OpenAPI description, and `e2b.envd.process`, generated from envd's
`process.proto` by protoc-gen-connectrpc-py), so the real SDK runs unchanged against it.

- `POST /v2/sandboxes` (`NewSandboxV2`; the `Idempotency-Key` header replays the first
  answer), `GET /v2/sandboxes?metadata=k%3Dv&...` (`ListedSandbox`, running only),
  `DELETE /sandboxes/{id}` (404 when gone).
- envd, routed by the `E2b-Sandbox-Id` header as E2B's sandbox proxy does: the Connect
  service `process.Process` (Start, SendInput, CloseStdin, SendSignal) served by the
  SDK's own generated `ProcessASGIApplication`, and `GET`/`POST /files` (octet-stream
  uploads, parents created; 404 for a missing file).

Each sandbox is a `local` (bubblewrap) sandbox, so commands really run, isolated.
A command started with stdin has it streamed and its stdout sent as it comes (each
through the fake's agent, `remote_service.Attacher`), its stderr at the end. Like envd,
a command killed by a signal ends with `exit_code=-1` and `status="signal: killed"`.
Not served: templates, pause/resume, snapshots, metrics, watch, PTY.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import signal
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from e2b.envd.process import process_pb
from e2b.envd.process.process_connect import Process, ProcessASGIApplication
from protobuf import Oneof

from nemo_gym.records import ExecResult, ResourceLimits, SandboxSpec
from nemo_gym.sandbox.base import WorkerSandbox
from tests.sandbox.remote_service import Attacher, FakeService, send_json

ENVD_VERSION = "0.6.7"


@dataclass
class FakeProcess:
    writer: asyncio.StreamWriter | None = None
    """The command's stdin (and stdout's socket), for one started with stdin."""
    task: asyncio.Future[Any] | None = None


@dataclass
class FakeSandbox:
    id: str
    box: WorkerSandbox
    metadata: dict[str, str]
    timeout_s: int
    started_at: datetime.datetime
    processes: dict[int, FakeProcess] = field(default_factory=dict)


class E2BFake(FakeService):
    """The fake service (`fail_next` keys: `"METHOD first-path-segment"`); `start()` serves it."""

    name = "E2B"

    def __init__(self) -> None:
        super().__init__()
        self.idempotent: dict[str, dict[str, Any]] = {}
        self._pids = itertools.count(100)
        self._process_app = ProcessASGIApplication(_ProcessService(self))
        self.attacher = Attacher()

    # -- ASGI

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        self.requests.append((method, path))
        key = f"{method} {path.split('/')[1] if path.count('/') > 1 else path}"
        if self.fail_next.get(key, 0) > 0:
            self.fail_next[key] -= 1
            await send_json(send, 429, {"code": 429, "message": "rate limit exceeded"})
            return
        if path.startswith("/process.Process/"):
            await self._process_app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = urllib.parse.parse_qs(scope["query_string"].decode())
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if path == "/v2/sandboxes" and method == "POST":
            await self._create(send, headers, json.loads(body))
        elif path == "/v2/sandboxes" and method == "GET":
            await self._list(send, query)
        elif path.startswith("/sandboxes/") and method == "GET":
            await self._detail(send, path.removeprefix("/sandboxes/"))
        elif path.startswith("/sandboxes/") and method == "DELETE":
            await self._kill(send, path.removeprefix("/sandboxes/"))
        elif path == "/files":
            await self._files(send, method, headers, query, body)
        else:
            await send_json(send, 404, {"code": 404, "message": f"no route {method} {path}"})

    async def _create(self, send: Any, headers: dict[str, str], body: dict[str, Any]) -> None:
        key = headers.get("idempotency-key")
        if key and key in self.idempotent:
            await send_json(send, 201, self.idempotent[key])
            return
        sandbox_id = f"i{next(self._ids):06d}fake"
        spec = SandboxSpec(
            env=body.get("envVars") or {},
            limits=ResourceLimits(processes=256),
            network="host" if body.get("allowInternetAccess") else "none",
        )
        await self.attacher.start()
        box = await self._local.create(self.attacher.local_spec(spec))
        self.created += 1
        self.sandboxes[sandbox_id] = FakeSandbox(
            sandbox_id,
            box,
            dict(body.get("metadata") or {}),
            int(body.get("timeout", 300)),
            datetime.datetime.now(datetime.UTC),
        )
        reply = {
            "templateID": body["templateID"],
            "sandboxID": sandbox_id,
            "clientID": "fake",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": f"token-{sandbox_id}",
            "domain": None,
        }
        if key:
            self.idempotent[key] = reply
        if self.lose_create_replies > 0:
            self.lose_create_replies -= 1
            await send_json(send, 502, {"code": 502, "message": "bad gateway"})
            return
        await send_json(send, 201, reply)

    async def _list(self, send: Any, query: dict[str, list[str]]) -> None:
        wanted: dict[str, str] = {}
        for text in query.get("metadata", []):
            for k, v in urllib.parse.parse_qsl(text):
                wanted[urllib.parse.unquote(k)] = urllib.parse.unquote(v)
        items = [
            _listed(sandbox)
            for sandbox in self.sandboxes.values()
            if all(sandbox.metadata.get(k) == v for k, v in wanted.items())
        ]
        await send_json(send, 200, items)

    async def _detail(self, send: Any, sandbox_id: str) -> None:
        """`GET /sandboxes/{sandboxID}`: a `SandboxDetail` (the listed fields and more)."""
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is None:
            await send_json(send, 404, {"code": 404, "message": f"sandbox {sandbox_id} not found"})
            return
        await send_json(send, 200, {**_listed(sandbox), "domain": None})

    async def _kill(self, send: Any, sandbox_id: str) -> None:
        sandbox = self.sandboxes.pop(sandbox_id, None)
        if sandbox is None:
            await send_json(send, 404, {"code": 404, "message": f"sandbox {sandbox_id} not found"})
            return
        await sandbox.box.aclose()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def sandbox_of(self, headers: dict[str, str]) -> FakeSandbox | None:
        return self.sandboxes.get(headers.get("e2b-sandbox-id", ""))

    async def _files(
        self,
        send: Any,
        method: str,
        headers: dict[str, str],
        query: dict[str, list[str]],
        body: bytes,
    ) -> None:
        sandbox = self.sandbox_of(headers)
        if sandbox is None:
            await send_json(send, 502, {"code": 502, "message": "sandbox not found"})
            return
        path = (query.get("path") or [""])[0]
        if method == "GET":
            try:
                data = await sandbox.box.read_file(path)
            except FileNotFoundError:
                await send_json(
                    send, 404, {"code": 404, "message": f"path '{path}' does not exist"}
                )
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream")],
                }
            )
            await send({"type": "http.response.body", "body": data})
            return
        if headers.get("content-type") != "application/octet-stream":
            await send_json(send, 415, {"code": 415, "message": "only octet-stream uploads here"})
            return
        await sandbox.box.write_file(path, body)
        name = path.rsplit("/", 1)[-1]
        await send_json(send, 200, [{"name": name, "type": "file", "path": path}])


CPU_COUNT = 2
MEMORY_MB = 512


def _listed(sandbox: FakeSandbox) -> dict[str, Any]:
    end = sandbox.started_at + datetime.timedelta(seconds=sandbox.timeout_s)
    return {
        "templateID": "base",
        "sandboxID": sandbox.id,
        "clientID": "fake",
        "startedAt": sandbox.started_at.isoformat(),
        "endAt": end.isoformat(),
        "cpuCount": CPU_COUNT,
        "memoryMB": MEMORY_MB,
        "diskSizeMB": 1024,
        "state": "running",
        "envdVersion": ENVD_VERSION,
        "metadata": sandbox.metadata,
    }


class _ProcessService(Process):
    """envd's `process.Process` Connect service: the parts the SDK's commands use (the
    generated protocol answers UNIMPLEMENTED for the rest)."""

    def __init__(self, fake: E2BFake) -> None:
        self.fake = fake

    def _sandbox(self, ctx: Any) -> FakeSandbox:
        from connectrpc.code import Code
        from connectrpc.errors import ConnectError

        headers = {k.lower(): v for k, v in ctx.request_headers.items()}
        sandbox = self.fake.sandbox_of(headers)
        if sandbox is None:
            raise ConnectError(Code.NOT_FOUND, "sandbox not found")
        return sandbox

    async def start(
        self, request: process_pb.StartRequest, ctx: Any
    ) -> AsyncIterator[process_pb.StartResponse]:
        sandbox = self._sandbox(ctx)
        pid = next(self.fake._pids)
        proc = FakeProcess()
        sandbox.processes[pid] = proc
        config = request.process
        argv = [config.cmd, *config.args]
        env, cwd = dict(config.envs), config.cwd or None
        try:
            reader = None
            if request.stdin:
                # Attached before the start event: the SDK sends stdin once it has a pid.
                reader, proc.writer, proc.task = await self.fake.attacher.attach(
                    sandbox.box, argv, env=env, cwd=cwd, timeout=3600
                )
            yield _event("start", process_pb.ProcessEvent.StartEvent(pid=pid))
            if reader is not None:
                while data := await reader.read(1 << 16):
                    yield _event(
                        "data", process_pb.ProcessEvent.DataEvent(output=Oneof("stdout", data))
                    )
            if proc.task is None:
                proc.task = asyncio.ensure_future(
                    sandbox.box.exec(argv, env=env, cwd=cwd, timeout=3600)
                )
            try:
                result = await proc.task
            except asyncio.CancelledError:
                if not proc.task.cancelled() or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    raise
                result = ExecResult(exit_code=-9)  # SendSignal killed it
        finally:
            sandbox.processes.pop(pid, None)
            if proc.writer is not None:
                proc.writer.close()
        for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            if text:
                yield _event(
                    "data", process_pb.ProcessEvent.DataEvent(output=Oneof(name, text.encode()))
                )
        if result.exit_code < 0:
            sig = signal.Signals(-result.exit_code).name.removeprefix("SIG").lower()
            status = f"signal: {'killed' if sig == 'kill' else sig}"
            end = process_pb.ProcessEvent.EndEvent(
                exit_code=-1, exited=False, status=status, error=status
            )
        else:
            end = process_pb.ProcessEvent.EndEvent(
                exit_code=result.exit_code, exited=True, status=f"exit status {result.exit_code}"
            )
        yield _event("end", end)

    async def send_input(
        self, request: process_pb.SendInputRequest, ctx: Any
    ) -> process_pb.SendInputResponse:
        proc = self._process(request.process, ctx)
        chunk = request.input.input
        if proc.writer is not None and chunk is not None and not proc.writer.is_closing():
            proc.writer.write(chunk.value)
            await proc.writer.drain()
        return process_pb.SendInputResponse()

    async def close_stdin(
        self, request: process_pb.CloseStdinRequest, ctx: Any
    ) -> process_pb.CloseStdinResponse:
        proc = self._process(request.process, ctx)
        if proc.writer is not None and proc.writer.can_write_eof():
            proc.writer.write_eof()
        return process_pb.CloseStdinResponse()

    async def send_signal(
        self, request: process_pb.SendSignalRequest, ctx: Any
    ) -> process_pb.SendSignalResponse:
        proc = self._process(request.process, ctx)
        if proc.task is not None:
            proc.task.cancel()  # the local sandbox kills the command on cancellation
        return process_pb.SendSignalResponse()

    def _process(self, selector: Any, ctx: Any) -> FakeProcess:
        from connectrpc.code import Code
        from connectrpc.errors import ConnectError

        sandbox = self._sandbox(ctx)
        pid = selector.selector.value if selector and selector.selector else None
        proc = sandbox.processes.get(pid)  # type: ignore[arg-type]
        if proc is None:
            raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
        return proc


def _event(name: str, value: Any) -> process_pb.StartResponse:
    return process_pb.StartResponse(event=process_pb.ProcessEvent(event=Oneof(name, value)))
