"""`e2b`: sandboxes on E2B (Firecracker microVMs) through its official SDK (`pip install
'nemo-gym[e2b]'`), on the shared remote machinery (`nemo_gym.sandbox.remote.common`).

The API key comes from the SDK's own `E2B_API_KEY` (or `api_key=`) and is never
recorded. Each sandbox is created with the provider's `timeout_s` as E2B's sandbox
timeout (E2B kills it then, whoever holds it), the labels as its metadata and the
create call's idempotency key. `spec.image` names the E2B template (default `base`).
The vCPUs and memory E2B reports for a sandbox are its billing rates (`vcpu_s`,
`memory_gib_s` in the rollout's sandbox time). `network="loopback"` runs over a
streamed command (`commands.run(background=True, stdin=True)`, `send_stdin`): see
`nemo_gym.sandbox.remote.tunnel` (the template needs `python3`).
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from typing import Any

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import ExecResult, SandboxSpec
from nemo_gym.sandbox.remote.common import (
    OutputCap,
    RemoteInfo,
    RemoteProvider,
    guarded,
    service_error,
)

__all__ = ["E2BBackend", "E2BProvider"]

logger = logging.getLogger(__name__)

KILL_GRACE_S = 5.0


def _sdk() -> Any:
    try:
        import e2b
    except ImportError as exc:
        raise SandboxError(
            "the e2b sandbox provider needs the E2B SDK: pip install 'nemo-gym[e2b]'",
            code="sandbox_unavailable",
        ) from exc
    return e2b


def _transient(exc: BaseException) -> bool:
    e2b = _sdk()
    if isinstance(exc, e2b.RateLimitException | e2b.SandboxUnreachableException):
        return True
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and (status == 429 or status >= 500):
        return True
    import httpx

    return isinstance(exc, httpx.TransportError)


class E2BBackend:
    """The E2B calls behind `E2BProvider` (one `AsyncSandbox` handle per sandbox)."""

    name = "e2b"
    idempotent_create = True

    def __init__(
        self,
        *,
        template: str = "base",
        api_key: str | None = None,
        domain: str | None = None,
        api_url: str | None = None,
        sandbox_url: str | None = None,
        request_timeout: float | None = None,
    ) -> None:
        self.template = template
        # Connection options only; the key stays in this object, out of every record.
        self._opts: dict[str, Any] = {
            k: v
            for k, v in {
                "api_key": api_key,
                "domain": domain,
                "api_url": api_url,
                "sandbox_url": sandbox_url,
                "request_timeout": request_timeout,
            }.items()
            if v is not None
        }
        self._handles: dict[str, Any] = {}

    async def _guard(self, what: str, call: Any) -> Any:
        return await guarded(self.name, what, call, _transient)

    async def create(
        self, spec: SandboxSpec, *, labels: dict[str, str], timeout_s: float, idempotency_key: str
    ) -> str:
        e2b = _sdk()
        if spec.network == "loopback":
            # `RemoteProvider` makes a loopback sandbox with no network and adds the tunnel.
            raise ConfigError("e2b: the service itself offers no network='loopback'")
        sandbox = await self._guard(
            "create",
            e2b.AsyncSandbox.create(
                template=spec.image or self.template,
                timeout=max(1, int(timeout_s)),
                metadata=labels,
                envs=dict(spec.env),
                allow_internet_access=spec.network == "host",
                idempotency_key=idempotency_key,
                **self._opts,
            ),
        )
        self._handles[sandbox.sandbox_id] = sandbox
        # The SDK's default workdir is the user's home; ours must exist.
        await self._guard("create", sandbox.commands.run(f"mkdir -p {shlex.quote(spec.workdir)}"))
        return str(sandbox.sandbox_id)

    def _handle(self, sandbox_id: str) -> Any:
        handle = self._handles.get(sandbox_id)
        if handle is None:
            raise SandboxError(f"e2b: sandbox {sandbox_id} is not one of this provider's")
        return handle

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
        e2b = _sdk()
        sandbox = self._handle(sandbox_id)
        out, err = OutputCap(output_bytes), OutputCap(output_bytes)
        loop = asyncio.get_running_loop()
        started = loop.time()
        # envd runs `bash -l -c CMD`; `exec` makes the argv the process envd signals.
        handle = await self._guard(
            "exec",
            sandbox.commands.run(
                "exec " + shlex.join(argv),
                background=True,
                envs=env,
                cwd=cwd,
                stdin=True,
                timeout=timeout + KILL_GRACE_S,
                on_stdout=out,
                on_stderr=err,
            ),
        )
        pid = handle.pid
        timed_out = False
        try:
            try:
                if stdin:
                    await self._guard("exec", sandbox.commands.send_stdin(pid, stdin))
                await self._guard("exec", sandbox.commands.close_stdin(pid))
            except SandboxError as exc:
                # envd forgets a command once it ends: one that exits without reading
                # its stdin (`true`) is no error; its end is what `wait` reports.
                if not isinstance(exc.__cause__, e2b.NotFoundException):
                    raise
            async with asyncio.timeout(timeout):
                result = await handle.wait()
            exit_code = result.exit_code
        except e2b.CommandExitException as exc:
            exit_code = exc.exit_code
            if exit_code == -1 and "signal: killed" in (exc.error or ""):
                exit_code = -9
        except TimeoutError:
            timed_out, exit_code = True, -9
        finally:
            if timed_out or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                await asyncio.shield(self._kill(sandbox, pid))
        return ExecResult(
            exit_code=exit_code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            duration_s=loop.time() - started,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
        )

    async def stream(
        self, sandbox_id: str, argv: list[str], *, env: dict[str, str], cwd: str
    ) -> E2BStream:
        """`argv` with stdin sent as it comes (`send_stdin`) and stdout received as envd
        streams it; no deadline (the sandbox's lifetime bounds it)."""
        sandbox = self._handle(sandbox_id)
        out: asyncio.Queue[bytes] = asyncio.Queue()
        handle = await self._guard(
            "exec",
            sandbox.commands.run(
                "exec " + shlex.join(argv),
                background=True,
                envs=env,
                cwd=cwd,
                stdin=True,
                timeout=0,  # the SDK's "no limit"
                on_stdout=lambda text: out.put_nowait(text.encode()),
            ),
        )
        return E2BStream(self, sandbox, handle, out)

    async def _kill(self, sandbox: Any, pid: int) -> None:
        try:
            await sandbox.commands.kill(pid)
        except Exception:  # already gone: nothing to kill
            pass

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        sandbox = self._handle(sandbox_id)
        await self._guard("write_file", sandbox.files.write(path, data, use_octet_stream=True))

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        e2b = _sdk()
        sandbox = self._handle(sandbox_id)
        try:
            return bytes(await sandbox.files.read(path, format="bytes"))
        except e2b.NotFoundException as exc:
            raise FileNotFoundError(2, f"e2b: no such file: {path}", path) from exc
        except Exception as exc:
            raise service_error(self.name, "read_file", exc, _transient) from exc

    async def delete(self, sandbox_id: str) -> None:
        e2b = _sdk()
        self._handles.pop(sandbox_id, None)
        # `kill` answers False for a sandbox already gone: deleting is idempotent.
        await self._guard("delete", e2b.AsyncSandbox.kill(sandbox_id, **self._opts))

    async def rates(self, sandbox_id: str) -> dict[str, float]:
        """E2B bills a running sandbox per second of its vCPUs and memory: what it
        reports the sandbox has."""
        info = await self._guard("rates", self._handle(sandbox_id).get_info())
        return {"vcpu": float(info.cpu_count), "memory_gib": info.memory_mb / 1024}

    async def list(self, selector: dict[str, str]) -> list[RemoteInfo]:
        e2b = _sdk()
        paginator = e2b.AsyncSandbox.list(query=e2b.SandboxQuery(metadata=selector), **self._opts)
        found: list[RemoteInfo] = []
        while paginator.has_next:
            for info in await self._guard("list", paginator.next_items()):
                found.append(RemoteInfo(str(info.sandbox_id), dict(info.metadata or {})))
        return found


class E2BStream:
    """A running E2B command as an `ExecStream` (stdout text as envd decodes it: the
    tunnel's frames are ASCII)."""

    def __init__(self, backend: E2BBackend, sandbox: Any, handle: Any, out: asyncio.Queue[bytes]):
        self.backend = backend
        self.sandbox = sandbox
        self.pid = int(handle.pid)
        self._out = out
        self._ended = False
        self._waiter = asyncio.ensure_future(self._wait(handle))

    async def _wait(self, handle: Any) -> None:
        try:
            await handle.wait()
        except Exception as exc:  # an exit status or a lost connection: the stream ended
            logger.debug("e2b: streamed command %d ended: %r", self.pid, exc)
        finally:
            self._out.put_nowait(b"")

    async def send(self, data: bytes) -> None:
        await self.backend._guard("exec", self.sandbox.commands.send_stdin(self.pid, data))

    async def receive(self) -> bytes:
        if self._ended:
            return b""
        data = await self._out.get()
        self._ended = not data
        return data

    async def aclose(self) -> None:
        self._waiter.cancel()
        await self.backend._kill(self.sandbox, self.pid)


class E2BProvider(RemoteProvider):
    """`nemo_gym.sandbox.get("e2b", template=..., labels=..., timeout_s=...)`.

    Connection options (`template`, `api_key`, `domain`, `api_url`, `sandbox_url`,
    `request_timeout`) go to the SDK; the rest are `RemoteProvider`'s.
    """

    name = "e2b"

    def __init__(
        self,
        *,
        template: str = "base",
        api_key: str | None = None,
        domain: str | None = None,
        api_url: str | None = None,
        sandbox_url: str | None = None,
        request_timeout: float | None = None,
        **options: Any,
    ) -> None:
        backend = E2BBackend(
            template=template,
            api_key=api_key,
            domain=domain,
            api_url=api_url,
            sandbox_url=sandbox_url,
            request_timeout=request_timeout,
        )
        super().__init__(backend, **options)
