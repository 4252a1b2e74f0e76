"""A stand-in sandbox service for the shared remote machinery: each "remote" sandbox is
a `local` (bubblewrap) sandbox, so execs really run isolated (own pid namespace, own
/tmp) and the warm pool's reset is checked on real processes and files.

It keeps what a service keeps (labels, the lifetime it was given, idempotency keys)
and can be told to fail the next calls of one kind with a throttling error. Like a real
service it runs apart from its clients: on an event loop of its own, in a thread, so
clients on any loop (each `asyncio.run`, the CLI's) reach the same sandboxes.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from nemo_gym.records import ExecResult, SandboxSpec
from nemo_gym.sandbox.base import WorkerSandbox
from nemo_gym.sandbox.local import LocalProvider
from nemo_gym.sandbox.remote.common import RemoteInfo, TransientError


@dataclass
class Held:
    sandbox: WorkerSandbox
    labels: dict[str, str]
    timeout_s: float


@dataclass
class LocalService:
    """The service's state; `LocalServiceBackend` is its client."""

    sandboxes: dict[str, Held] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_next: dict[str, int] = field(default_factory=dict)
    creates: int = 0
    ids: Any = field(default_factory=lambda: itertools.count(1))

    _loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run `coro` on the service's own loop; cancelling the caller cancels it there."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True).start()
            self._loop = loop
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def _maybe_fail(self, op: str) -> None:
        self.calls.append(op)
        if self.fail_next.get(op, 0) > 0:
            self.fail_next[op] -= 1
            raise TransientError(f"{op}: 429 Too Many Requests")


class LocalServiceBackend:
    name = "local-service"

    def __init__(self, service: LocalService, *, idempotent_create: bool = True) -> None:
        self.service = service
        self.idempotent_create = idempotent_create
        self._local = LocalProvider()

    async def create(
        self, spec: SandboxSpec, *, labels: dict[str, str], timeout_s: float, idempotency_key: str
    ) -> str:
        return await self.service.serve(self._create(spec, labels, timeout_s, idempotency_key))

    async def _create(
        self, spec: SandboxSpec, labels: dict[str, str], timeout_s: float, idempotency_key: str
    ) -> str:
        service = self.service
        if self.idempotent_create and idempotency_key in service.keys:
            sandbox_id = service.keys[idempotency_key]
        else:
            sandbox = await self._local.create(spec)
            service.creates += 1
            sandbox_id = f"sb-{next(service.ids)}"
            service.sandboxes[sandbox_id] = Held(sandbox, dict(labels), timeout_s)
            service.keys[idempotency_key] = sandbox_id
        # The reply is lost after the service acted: only an idempotency key saves a twin.
        service._maybe_fail("create")
        return sandbox_id

    def _get(self, sandbox_id: str) -> WorkerSandbox:
        from nemo_gym.errors import SandboxError

        held = self.service.sandboxes.get(sandbox_id)
        if held is None:
            raise SandboxError(f"404: no sandbox {sandbox_id}")
        return held.sandbox

    async def exec(
        self,
        sandbox_id: str,
        argv: list[str],
        *,
        stdin: bytes,
        timeout: float,
        env: dict[str, str],
        cwd: str,
        output_bytes: int,
    ) -> ExecResult:
        self.service._maybe_fail("exec")
        return await self.service.serve(
            self._get(sandbox_id).exec(argv, stdin=stdin, timeout=timeout, env=env, cwd=cwd)
        )

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        self.service._maybe_fail("write_file")
        await self.service.serve(self._get(sandbox_id).write_file(path, data))

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        self.service._maybe_fail("read_file")
        return await self.service.serve(self._get(sandbox_id).read_file(path))

    async def delete(self, sandbox_id: str) -> None:
        self.service._maybe_fail("delete")
        held = self.service.sandboxes.pop(sandbox_id, None)
        if held is not None:
            await self.service.serve(held.sandbox.aclose())

    async def list(self, selector: dict[str, str]) -> list[RemoteInfo]:
        self.service._maybe_fail("list")
        return [
            RemoteInfo(sandbox_id, dict(held.labels))
            for sandbox_id, held in self.service.sandboxes.items()
            if all(held.labels.get(k) == v for k, v in selector.items())
        ]

    async def close_all(self) -> None:
        for held in self.service.sandboxes.values():
            await self.service.serve(held.sandbox.aclose())
        self.service.sandboxes.clear()


class LoopbackServer:
    """An ASGI app (a fake service) served by uvicorn on 127.0.0.1, on an event loop in a
    thread of its own, so clients on any loop reach it; `on_stop` runs on that loop
    once serving has ended (to close what the fake holds)."""

    def __init__(
        self,
        app: Any,
        *,
        name: str,
        ws: str = "none",
        on_stop: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.app = app
        self.name = name
        self.ws = ws
        self.on_stop = on_stop
        self.url = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Serve; the base URL (`http://127.0.0.1:PORT`)."""
        import uvicorn

        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", ws=self.ws
        )
        server = self._server = uvicorn.Server(config)
        started = threading.Event()

        def serve() -> None:
            async def main() -> None:
                self.loop = asyncio.get_running_loop()
                task = asyncio.create_task(server.serve())
                # uvicorn offers no event for "listening"; its flag is polled.
                while not server.started:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
                started.set()
                await task
                if self.on_stop is not None:
                    await self.on_stop()

            asyncio.run(main())

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError(f"the {self.name} fake did not start")
        port = server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run `coro` on the server's loop from another thread (for test set-up)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)
