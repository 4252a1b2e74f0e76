"""`docker`: sandboxes in Docker (or Podman) containers, over the Engine API.

Speaks the Docker Engine HTTP API directly on the engine's socket with the standard
library (asyncio streams), so it needs no docker SDK and works in the core install.
Podman's Docker-compatible socket (`podman system service`) serves it too.

```python
provider = DockerProvider(image="python:3.12-slim")  # host: NEMO_GYM_DOCKER_HOST / DOCKER_HOST
async with provider.start(SandboxSpec(limits=ResourceLimits(memory_bytes=256 << 20))) as box:
    result = await box.exec("python3 -c 'print(6 * 7)'", timeout=10)
```

One container per sandbox, created with no network (`NetworkMode: none`; with
`network="loopback"` the host's `spec.ports` are forwarded in through a bind-mounted
unix socket, `nemo_gym.sandbox.network`, and the image needs python3), memory and
swap capped (`Memory`), a process cap (`PidsLimit`), a CPU share (`NanoCpus`) and the
per-process ulimits (`cpu`, `fsize`, `nofile`) from `ResourceLimits`. Each `exec` is an
Engine exec whose stdin is written on the hijacked connection and then half-closed.
A timed-out or cancelled exec is killed inside the container: its process group first,
then every process still carrying the exec's marker variable (`NEMO_GYM_EXEC`), which
also catches grandchildren that moved to a session of their own. If that sweep cannot
vouch for the kill, the container is killed and the sandbox refuses every later call.

The container's main process (`cat`, under the engine's `--init`) reads a stdin that
only this process holds open. When the sandbox's owner dies, even by SIGKILL, the engine
closes that stdin, the main process exits, every process in the container dies with it
and the container removes itself (`AutoRemove`). So nothing outlives its owner.

Limits: the image needs `/bin/sh` (and `grep` for the marker sweep); an exit status
above 128 is reported as the engine gives it (`128 + signal`), since the engine cannot
tell a signal from `exit 137`, except for execs this provider killed itself (`-9`).
Disk use is unbounded unless `storage_size` is given and the storage driver supports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import posixpath
import secrets
import tarfile
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import ExecResult, ResourceLimits, SandboxSpec
from nemo_gym.sandbox.base import Provider, argv_of, finish_despite_cancellation
from nemo_gym.sandbox.clock import clocked_create, released, timed
from nemo_gym.sandbox.limits import check_timeout, resolve
from nemo_gym.sandbox.network import MOUNT, PortRelay, forward_argv

log = logging.getLogger(__name__)

DEFAULT_HOST = "unix:///var/run/docker.sock"
MARKER_VAR = "NEMO_GYM_EXEC"
LABEL = "nemo_gym.sandbox"

# Prints the shell's pid (the exec's process group and session, since the engine starts
# every exec in a session of its own) as the first stderr line, then becomes the command.
_WRAPPER = 'echo "$$" >&2; exec "$@"'

# Kills an exec's processes: its process group, then anything still carrying its marker.
# Rounds repeat because a fork bomb keeps spawning while it is being killed. `kill -9 -PGID`
# without `--`: dash (Debian's sh) rejects `--` as an illegal number. grep exits 1 when no
# process carries the marker, 2 when it also met an unreadable environ (a zombie, a process
# that exited meanwhile) or the shell could not fork: only 1 ends the rounds early. Exits 1
# when its last round still found marked processes: they could not be killed.
_SWEEP = r"""
[ "$1" -gt 0 ] && kill -9 "-$1" 2>/dev/null
i=0
while [ "$i" -lt 50 ]; do
    found=$(grep -lzxF "$2" /proc/[0-9]*/environ 2>/dev/null)
    [ "$?" -eq 1 ] && break
    for f in $found; do p=${f#/proc/}; kill -9 "${p%/environ}" 2>/dev/null; done
    [ "$1" -gt 0 ] && kill -9 "-$1" 2>/dev/null
    i=$((i + 1))
done
[ -z "$found" ]
"""

# network="loopback": the forwarder writes this once its ports are bound.
_WAIT_FORWARDER = (
    "i=0; while [ ! -e /tmp/.nemo_gym_forward_ready ]; do "
    "i=$((i + 1)); [ $i -gt 600 ] && exit 1; sleep 0.05; done"
)

# Every capability: container root keeps none (no chown of others' files, no setuid, no
# raw sockets, no override of file permissions), as in the `local` provider.
DEFAULT_CAP_DROP = ("ALL",)

_SWEEP_TIMEOUT_S = 15.0
_DRAIN_AFTER_KILL_S = 2.0


def default_host() -> str:
    """The engine address: `NEMO_GYM_DOCKER_HOST`, else `DOCKER_HOST`, else the usual socket."""
    return os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST") or DEFAULT_HOST


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")

    def message(self) -> str:
        """The engine's error message (its JSON `message`), or the raw body."""
        try:
            return str(self.json().get("message", "")) or self.body.decode(errors="replace")
        except (ValueError, AttributeError):
            return self.body.decode(errors="replace").strip()


class EngineClient:
    """A minimal async HTTP/1.1 client for the Docker Engine API (one connection per call).

    `host` is `unix:///path/to/docker.sock`, a bare socket path, or `tcp://host:port`
    (plain HTTP; TLS is not supported).
    """

    def __init__(self, host: str | None = None, *, timeout: float = 120.0) -> None:
        self.host = host or default_host()
        self.timeout = timeout
        self._unix_path: str | None = None
        self._tcp: tuple[str, int] | None = None
        if self.host.startswith("unix://"):
            self._unix_path = self.host[len("unix://") :]
        elif self.host.startswith("/"):
            self._unix_path = self.host
        elif self.host.startswith(("tcp://", "http://")):
            parsed = urllib.parse.urlsplit(self.host)
            if not parsed.hostname or not parsed.port:
                raise ConfigError(f"docker host {self.host!r} needs a host and a port")
            self._tcp = (parsed.hostname, parsed.port)
        else:
            raise ConfigError(
                f"unsupported docker host {self.host!r}: use unix:///path/docker.sock or "
                "tcp://host:port"
            )
        self._prefix: str | None = None

    def available(self) -> bool:
        """Whether the engine's socket exists (unix) — a cheap check before connecting."""
        return self._unix_path is None or os.path.exists(self._unix_path)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            if self._unix_path is not None:
                return await asyncio.open_unix_connection(self._unix_path, limit=1 << 20)
            assert self._tcp is not None
            return await asyncio.open_connection(*self._tcp, limit=1 << 20)
        except OSError as exc:
            raise SandboxError(
                f"cannot reach the docker engine at {self.host}: {exc}", code="sandbox_unavailable"
            ) from exc

    async def _api_prefix(self) -> str:
        # Negotiate like the docker CLI: the server's own API version, taken once.
        if self._prefix is None:
            response = await self._raw("GET", "/version")
            if response.status != 200:
                raise SandboxError(
                    f"docker engine at {self.host}: GET /version: {response.message()}"
                )
            version = response.json().get("ApiVersion")
            self._prefix = f"/v{version}" if version else ""
        return self._prefix

    @staticmethod
    def _head(method: str, path: str, headers: Mapping[str, str], body: bytes | None) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", "Host: docker"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
        status_line = await reader.readline()
        if not status_line:
            raise SandboxError("the docker engine closed the connection without a reply")
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise SandboxError(f"malformed reply from the docker engine: {status_line[:100]!r}")
        headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(parts[1]), headers

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = await reader.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readline()
                    return b"".join(chunks)
                chunks.append(await reader.readexactly(size))
                await reader.readline()
        if "content-length" in headers:
            return await reader.readexactly(int(headers["content-length"]))
        return await reader.read()

    def _path(self, prefix: str, path: str, params: Mapping[str, Any] | None) -> str:
        query = ""
        if params:
            query = "?" + urllib.parse.urlencode(
                {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items()}
            )
        return prefix + path + query

    async def _raw(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> _Response:
        reader, writer = await self._connect()
        try:
            headers = {"Connection": "close"}
            if content_type:
                headers["Content-Type"] = content_type
            async with asyncio.timeout(self.timeout):
                writer.write(self._head(method, path, headers, body))
                if body:
                    writer.write(body)
                await writer.drain()
                status, response_headers = await self._read_head(reader)
                data = await self._read_body(reader, response_headers)
            return _Response(status, response_headers, data)
        except TimeoutError as exc:
            raise SandboxError(
                f"docker engine at {self.host}: {method} {path} took over {self.timeout}s",
                code="sandbox_timeout",
            ) from exc
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise SandboxError(f"docker engine at {self.host}: {method} {path}: {exc}") from exc
        finally:
            writer.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> _Response:
        """One API call; returns the response whatever its status."""
        if json_body is not None:
            body = json.dumps(json_body).encode()
            content_type = "application/json"
        prefix = await self._api_prefix()
        return await self._raw(
            method, self._path(prefix, path, params), body=body, content_type=content_type
        )

    async def hijack(
        self, path: str, *, params: Mapping[str, Any] | None = None, json_body: Any = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """POST and take over the connection (exec start, attach): the raw stream after it."""
        prefix = await self._api_prefix()
        body = json.dumps(json_body).encode() if json_body is not None else b""
        reader, writer = await self._connect()
        try:
            headers = {
                "Connection": "Upgrade",
                "Upgrade": "tcp",
                "Content-Type": "application/json",
            }
            async with asyncio.timeout(self.timeout):
                writer.write(self._head("POST", self._path(prefix, path, params), headers, body))
                writer.write(body)
                await writer.drain()
                status, response_headers = await self._read_head(reader)
                if status not in (101, 200):
                    body_bytes = await self._read_body(reader, response_headers)
                    raise SandboxError(
                        f"docker engine: POST {path}: "
                        f"{_Response(status, response_headers, body_bytes).message()}",
                        code="sandbox_gone" if status in (404, 409) else None,
                    )
        except BaseException:
            writer.close()
            raise
        return reader, writer


class _Capture:
    """Keeps the first `limit` bytes of a stream and remembers whether more came."""

    __slots__ = ("data", "limit", "truncated")

    def __init__(self, limit: int | None) -> None:
        self.data = bytearray()
        self.limit = limit
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        if self.limit is None:
            self.data += chunk
            return
        room = self.limit - len(self.data)
        if len(chunk) > room:
            self.data += chunk[: max(room, 0)]
            self.truncated = True
        else:
            self.data += chunk

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _env_list(env: Mapping[str, str]) -> list[str]:
    out = []
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key or "=" in key:
            raise ConfigError(f"env must map names to strings, got {key!r}: {value!r}")
        if "\0" in key or "\0" in value:
            raise ConfigError(f"env: NUL byte in {key!r}")
        out.append(f"{key}={value}")
    return out


class DockerSandbox:
    """One running container. Use it through `DockerProvider.start`."""

    def __init__(
        self,
        client: EngineClient,
        container_id: str,
        spec: SandboxSpec,
        keepalive: asyncio.StreamWriter,
        relay: PortRelay | None = None,
    ) -> None:
        self.client = client
        self.id = container_id
        self.spec = spec
        self.limits = resolve(spec.limits)
        self._keepalive = keepalive
        self._relay = relay
        self._closed = False
        self._killed: str | None = None  # why `_kill_container` stopped it

    def _abspath(self, path: str) -> str:
        if not isinstance(path, str) or not path:
            raise ConfigError(f"path must be a non-empty string, got {path!r}")
        return posixpath.normpath(posixpath.join(self.spec.workdir, path))

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"docker sandbox {self.id[:12]} is closed", code="sandbox_closed")
        if self._killed is not None:
            raise SandboxError(
                f"docker sandbox {self.id[:12]} was killed: {self._killed}", code="sandbox_gone"
            )

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run a command (a string runs with `/bin/sh -c`); never raises for what it did."""
        with timed("exec_s", execs=1):
            return await self._exec(cmd, stdin=stdin, timeout=timeout, env=env, cwd=cwd)

    async def _exec(
        self,
        cmd: str | Sequence[str],
        *,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run a command (a string runs with `/bin/sh -c`); never raises for what it did.

        `timeout` defaults to `limits.DEFAULT_TIMEOUT_S`. Output past
        `limits.output_bytes` per stream is read and discarded (the flags say so).
        """
        self._check_open()
        argv = argv_of(cmd)
        timeout = check_timeout(timeout)
        if stdin is not None and not isinstance(stdin, str | bytes | bytearray | memoryview):
            raise ConfigError(f"stdin must be str or bytes, got {type(stdin).__name__}")
        marker = f"{MARKER_VAR}={secrets.token_hex(8)}"
        config = {
            "AttachStdin": True,
            "AttachStdout": True,
            "AttachStderr": True,
            "Tty": False,
            "Cmd": ["sh", "-c", _WRAPPER, "sh", *argv],
            "Env": [*_env_list(env or {}), marker],
            "WorkingDir": self._abspath(cwd) if cwd else self.spec.workdir,
        }
        created = await self.client.request("POST", f"/containers/{self.id}/exec", json_body=config)
        if created.status != 201:
            raise SandboxError(
                f"docker sandbox {self.id[:12]}: cannot start a command: {created.message()}",
                code="sandbox_gone" if created.status in (404, 409) else None,
            )
        exec_id = created.json()["Id"]
        data = stdin.encode() if isinstance(stdin, str) else bytes(stdin or b"")
        cap = self.limits.output_bytes
        out, err = _Capture(cap), _Capture(cap)
        started = time.monotonic()
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        pid_line = bytearray()
        pid: list[int] = []
        killed = False

        def sink(kind: int, chunk: bytes) -> None:
            if kind == 2 and not pid:
                pid_line.extend(chunk)
                head, sep, rest = bytes(pid_line).partition(b"\n")
                if not sep:
                    return
                if not head.isdigit():  # not our wrapper's line: keep it as output
                    pid.append(0)
                    chunk = bytes(pid_line)
                else:
                    pid.append(int(head))
                    chunk = rest
            (out if kind == 1 else err).add(chunk)

        async def feed(writer: asyncio.StreamWriter) -> None:
            # Concurrent with reading: a command that ignores its stdin must not block us.
            with contextlib.suppress(OSError, RuntimeError):
                if data:
                    writer.write(data)
                    await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()

        feeder: asyncio.Future[None] | None = None
        drain: asyncio.Future[None] | None = None
        stopping = False

        async def stop() -> None:
            nonlocal drain, stopping
            stopping = True
            if reader is not None:
                # Keep reading while killing: an engine whose stream to us is blocked
                # holds up the kill sweep's own exec.
                drain = asyncio.ensure_future(_read_frames(reader, sink))
            await self._kill(pid[0] if pid else None, marker)
            if drain is not None:
                with contextlib.suppress(TimeoutError, SandboxError):
                    await asyncio.wait_for(drain, _DRAIN_AFTER_KILL_S)

        try:
            reader, writer = await self.client.hijack(
                f"/exec/{exec_id}/start", json_body={"Detach": False, "Tty": False}
            )
            feeder = asyncio.ensure_future(feed(writer))
            try:
                async with asyncio.timeout(timeout):
                    await _read_frames(reader, sink)
                timed_out = False
            except TimeoutError:
                timed_out = killed = True
                await finish_despite_cancellation(stop())
        except BaseException:
            # Cancelled (or broken): the command must not keep running unseen.
            if not stopping:
                await finish_despite_cancellation(stop())
            raise
        finally:
            for future in (feeder, drain):
                if future is not None:
                    future.cancel()
            if writer is not None:
                writer.close()
        exit_code = -9 if killed else await self._exit_code(exec_id)
        return ExecResult(
            exit_code=exit_code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
        )

    async def _exit_code(self, exec_id: str) -> int:
        # The stream can end a moment before the engine records the exit.
        for _ in range(100):
            info = (await self.client.request("GET", f"/exec/{exec_id}/json")).json() or {}
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            await asyncio.sleep(0.02)
        raise SandboxError(f"docker sandbox {self.id[:12]}: exec {exec_id[:12]} never finished")

    async def _kill(self, pgid: int | None, marker: str) -> None:
        """Kill an exec's process group and every process carrying its marker.

        A sweep that cannot start, does not finish or leaves marked processes alive kills
        the container: a sandbox holding what it could not kill is never reused.
        """
        created = await self.client.request(
            "POST",
            f"/containers/{self.id}/exec",
            json_body={
                "AttachStdout": True,
                "AttachStderr": True,
                "Cmd": ["sh", "-c", _SWEEP, "sweep", str(pgid or 0), marker],
            },
        )
        if created.status in (404, 409):
            # The container is gone (or stopping): so is every process in it.
            log.debug("docker sandbox %s: no sweep: %s", self.id[:12], created.message())
            return
        if created.status != 201:
            await self._kill_container(f"the kill sweep cannot start: {created.message()}")
            return
        sweep_id = created.json()["Id"]
        reader, writer = await self.client.hijack(
            f"/exec/{sweep_id}/start", json_body={"Detach": False, "Tty": False}
        )
        try:
            async with asyncio.timeout(_SWEEP_TIMEOUT_S):
                await _read_frames(reader, lambda kind, chunk: None)
        except TimeoutError:
            await self._kill_container("the kill sweep did not finish")
            return
        finally:
            writer.close()
        try:
            status: int | None = await self._exit_code(sweep_id)
        except SandboxError:
            status = None
        if status != 0:
            await self._kill_container(f"the kill sweep left processes alive (status {status})")

    async def _kill_container(self, why: str) -> None:
        """Stop the container for good: every later call on this sandbox is a SandboxError."""
        log.warning("docker sandbox %s: %s; killing the container", self.id[:12], why)
        self._killed = why
        response = await self.client.request(
            "POST", f"/containers/{self.id}/kill", params={"signal": "KILL"}
        )
        if response.status not in (204, 404, 409):
            log.warning(
                "docker sandbox %s: cannot kill the container: %s",
                self.id[:12],
                response.message(),
            )

    async def write_file(self, path: str, data: str | bytes, *, mode: int | None = None) -> None:
        """Write a file (parents created); relative paths are relative to the workdir."""
        with timed("exec_s"):
            await self._write_file(path, data, mode=mode)

    async def _write_file(self, path: str, data: str | bytes, *, mode: int | None) -> None:
        self._check_open()
        target = self._abspath(path)
        if not isinstance(data, str | bytes | bytearray | memoryview):
            raise ConfigError(f"data must be str or bytes, got {type(data).__name__}")
        payload = data.encode() if isinstance(data, str) else bytes(data)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(target.lstrip("/"))
            info.size = len(payload)
            info.mode = 0o644 if mode is None else mode
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(payload))
        response = await self.client.request(
            "PUT",
            f"/containers/{self.id}/archive",
            params={"path": "/"},
            body=buffer.getvalue(),
            content_type="application/x-tar",
        )
        if response.status != 200:
            raise SandboxError(
                f"docker sandbox {self.id[:12]}: cannot write {target}: {response.message()}"
            )

    async def read_file(self, path: str) -> bytes:
        """Read a file; raises `FileNotFoundError` when there is none."""
        with timed("exec_s"):
            return await self._read_file(path)

    async def _read_file(self, path: str) -> bytes:
        self._check_open()
        source = self._abspath(path)
        response = await self.client.request(
            "GET", f"/containers/{self.id}/archive", params={"path": source}
        )
        if response.status == 404:
            raise FileNotFoundError(f"docker sandbox {self.id[:12]}: no such file: {source}")
        if response.status != 200:
            raise SandboxError(
                f"docker sandbox {self.id[:12]}: cannot read {source}: {response.message()}"
            )
        with tarfile.open(fileobj=io.BytesIO(response.body), mode="r:") as tar:
            member = tar.next()
            if member is None or member.isdir():
                raise IsADirectoryError(f"docker sandbox {self.id[:12]}: {source} is a directory")
            if not member.isfile():
                raise SandboxError(f"docker sandbox {self.id[:12]}: {source} is not a file")
            handle = tar.extractfile(member)
            assert handle is not None
            return handle.read()

    async def aclose(self) -> None:
        """Remove the container (force); idempotent."""
        if self._closed:
            return
        self._closed = True
        with released(self):
            await self._remove()

    async def _remove(self) -> None:
        try:
            response = await self.client.request(
                "DELETE", f"/containers/{self.id}", params={"force": True, "v": True}
            )
            # 404: already gone; 409: the engine's auto-remove is already on it.
            if response.status not in (204, 404, 409):
                raise SandboxError(
                    f"docker sandbox {self.id[:12]}: cannot remove: {response.message()}"
                )
        finally:
            self._keepalive.close()
            if self._relay is not None:
                await self._relay.aclose()

    def __repr__(self) -> str:
        return f"DockerSandbox({self.id[:12]}, image={self.spec.image!r})"


async def _read_frames(reader: asyncio.StreamReader, sink: Callable[[int, bytes], object]) -> None:
    """Demultiplex the engine's stdout/stderr stream (8-byte frame headers) into `sink`."""
    while True:
        try:
            header = await reader.readexactly(8)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise SandboxError("the docker engine cut an output frame short") from exc
            return
        except OSError:
            return
        size = int.from_bytes(header[4:8], "big")
        try:
            chunk = await reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            raise SandboxError("the docker engine cut an output frame short") from exc
        sink(header[0], chunk)


def _ulimits(limits: ResourceLimits, nproc: int | None = None) -> list[dict[str, Any]]:
    out = []
    if limits.cpu_seconds is not None:
        # RLIMIT_CPU counts whole seconds; round up so a limit never tightens.
        seconds = max(1, int(-(-limits.cpu_seconds // 1)))
        out.append({"Name": "cpu", "Soft": seconds, "Hard": seconds})
    if limits.file_size_bytes is not None:
        size = limits.file_size_bytes
        out.append({"Name": "fsize", "Soft": size, "Hard": size})
    if limits.open_files is not None:
        out.append({"Name": "nofile", "Soft": limits.open_files, "Hard": limits.open_files})
    if nproc is not None:
        out.append({"Name": "nproc", "Soft": int(nproc), "Hard": int(nproc)})
    return out


def _ro_bind(path: str) -> str:
    """`path` on the engine's host, shown read-only at the same path in the container."""
    if not isinstance(path, str) or not posixpath.isabs(path) or ":" in path or "," in path:
        raise ConfigError(
            f"docker: ro_binds entry {path!r} must be an absolute host path without ':' or ','"
        )
    return f"{posixpath.normpath(path)}:{posixpath.normpath(path)}:ro"


class DockerProvider(Provider):
    """Starts `DockerSandbox`es: one container each, removed on exit.

    `host`: the engine address (default: `NEMO_GYM_DOCKER_HOST`, `DOCKER_HOST`, then
    `/var/run/docker.sock`). `image`: used when the spec names none. `cpus`: the CPU
    share (`NanoCpus`). `pull`: pull a missing image. `user`: the container
    user. `storage_size`: a writable-layer size cap, where the storage driver supports
    one. `init`: run the engine's init as PID 1 (reaps orphans); `cap_drop`: capabilities
    removed. `nproc`: RLIMIT_NPROC in the container (None: the engine's default). Podman
    needs it on hosts whose hard limit is below 1048576: given any ulimit, podman drops
    its configured defaults and sets that value, which the host refuses ("error setting
    rlimit type 6"); pass the engine's `ulimit -Hu`. `python`: the image's interpreter,
    which runs the port forwarder of `network="loopback"` (the image needs one then).
    `ro_binds`: host paths (on the engine's host) shown read-only at the same path in
    the container, as the `local` provider's option of that name (a CLI agent's program
    and its runtime). Spec `options` of the same names override these per sandbox.
    """

    name = "docker"

    def __init__(
        self,
        *,
        host: str | None = None,
        image: str | None = None,
        cpus: float | None = 1.0,
        pull: bool = True,
        user: str | None = None,
        storage_size: str | None = None,
        init: bool = True,
        cap_drop: Sequence[str] = DEFAULT_CAP_DROP,
        nproc: int | None = None,
        start_timeout: float = 120.0,
        python: str = "python3",
    ) -> None:
        self.client = EngineClient(host, timeout=start_timeout)
        self.image = image
        self.options: dict[str, Any] = {
            "cpus": cpus,
            "pull": pull,
            "user": user,
            "storage_size": storage_size,
            "init": init,
            "cap_drop": list(cap_drop),
            "nproc": nproc,
            "python": python,
            "ro_binds": (),
        }

    def _container_config(
        self, spec: SandboxSpec, image: str, options: dict[str, Any], net_dir: str | None = None
    ) -> dict:
        limits = resolve(spec.limits)
        host_config: dict[str, Any] = {
            "AutoRemove": True,
            "Init": bool(options["init"]),
            "Ulimits": _ulimits(limits, options["nproc"]),
            "CapDrop": list(options["cap_drop"]),
            "SecurityOpt": ["no-new-privileges"],
        }
        if spec.network != "host":
            host_config["NetworkMode"] = "none"
        if spec.network == "loopback":
            if not net_dir:
                raise ConfigError("network='loopback' needs the host relay's socket directory")
            host_config["Binds"] = [f"{net_dir}:{MOUNT}:ro"]
        binds = [_ro_bind(path) for path in options["ro_binds"] or ()]
        if binds:
            host_config["Binds"] = [*host_config.get("Binds", ()), *binds]
        if limits.memory_bytes is not None:
            host_config["Memory"] = limits.memory_bytes
            host_config["MemorySwap"] = limits.memory_bytes  # no swap on top
        if limits.processes is not None:
            # Room for the container's own init, its keep-alive and a kill sweep.
            host_config["PidsLimit"] = limits.processes + 8
        if options["cpus"]:
            host_config["NanoCpus"] = int(float(options["cpus"]) * 1e9)
        if options["storage_size"]:
            host_config["StorageOpt"] = {"size": str(options["storage_size"])}
        config: dict[str, Any] = {
            "Image": image,
            # The keep-alive: ends when our attach connection (its stdin) closes. With
            # network="loopback" the forwarder (the image's python) binds the ports first.
            "Entrypoint": (
                forward_argv(str(options["python"]), spec.ports, ["cat"])
                if spec.network == "loopback"
                else ["cat"]
            ),
            "Cmd": None,
            "OpenStdin": True,
            "StdinOnce": True,
            "AttachStdin": True,
            "Tty": False,
            "WorkingDir": spec.workdir,
            "Env": _env_list(spec.env),
            "Labels": {LABEL: "1"},
            "NetworkDisabled": spec.network == "none",
            "HostConfig": host_config,
        }
        if options["user"]:
            config["User"] = str(options["user"])
        return config

    async def _pull(self, image: str) -> None:
        name, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        response = await self.client.request(
            "POST", "/images/create", params={"fromImage": name, "tag": tag or "latest"}
        )
        errors = []
        for line in response.body.splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict) and item.get("error"):
                    errors.append(str(item["error"]))
        if response.status != 200 or errors:
            raise SandboxError(
                f"docker: image {image!r} is not present and pulling it failed: "
                f"{'; '.join(errors) or response.message()}",
                code="sandbox_image",
            )

    @clocked_create
    async def create(self, spec: SandboxSpec | None = None) -> DockerSandbox:
        """Create and start a container; the caller must `aclose()` it (prefer `start`)."""
        spec = spec or SandboxSpec()
        unknown = set(spec.options) - set(self.options)
        if unknown:
            raise ConfigError(
                f"docker: unknown sandbox option(s) {sorted(unknown)}; "
                f"known: {sorted(self.options)}"
            )
        options = {**self.options, **spec.options}
        image = spec.image or self.image
        if not image:
            raise ConfigError(
                "docker: no image; set SandboxSpec(image=...) or DockerProvider(image=...)"
            )
        if not self.client.available():
            raise SandboxError(
                f"docker: no engine socket at {self.client.host} "
                "(set NEMO_GYM_DOCKER_HOST or DOCKER_HOST)",
                code="sandbox_unavailable",
            )
        spec = spec.model_copy(update={"image": image})
        relay = await PortRelay.for_spec(spec)
        try:
            return await self._create(spec, image, options, relay)
        except BaseException:
            if relay is not None:
                await finish_despite_cancellation(relay.aclose())
            raise

    async def _create(
        self, spec: SandboxSpec, image: str, options: dict[str, Any], relay: PortRelay | None
    ) -> DockerSandbox:
        config = self._container_config(spec, image, options, relay.directory if relay else None)
        created = await self.client.request("POST", "/containers/create", json_body=config)
        if created.status == 404 and options["pull"]:
            await self._pull(image)
            created = await self.client.request("POST", "/containers/create", json_body=config)
        if created.status != 201:
            raise SandboxError(
                f"docker: cannot create a container from {image!r}: {created.message()}",
                code="sandbox_image" if created.status == 404 else None,
            )
        container_id = created.json()["Id"]
        keepalive: asyncio.StreamWriter | None = None
        try:
            _, keepalive = await self.client.hijack(
                f"/containers/{container_id}/attach", params={"stream": 1, "stdin": 1}
            )
            started = await self.client.request("POST", f"/containers/{container_id}/start")
            if started.status not in (204, 304):
                raise SandboxError(
                    f"docker: cannot start a container from {image!r}: {started.message()}"
                )
        except BaseException:
            if keepalive is not None:
                keepalive.close()
            await finish_despite_cancellation(
                self.client.request("DELETE", f"/containers/{container_id}", params={"force": True})
            )
            raise
        log.debug("docker sandbox %s started from %s", container_id[:12], image)
        sandbox = DockerSandbox(self.client, container_id, spec, keepalive, relay)
        if relay is not None:
            # The container runs before its forwarder has bound the ports: wait for it.
            ready = await sandbox.exec(["sh", "-c", _WAIT_FORWARDER], timeout=30)
            if not ready.ok:
                await finish_despite_cancellation(sandbox.aclose())
                raise SandboxError(
                    f"docker: the port forwarder of {image!r} did not start (the image "
                    f"needs {options['python']!r}): {ready.stdout}{ready.stderr}"
                )
        return sandbox

    def __repr__(self) -> str:
        return f"DockerProvider(host={self.client.host!r}, image={self.image!r})"
