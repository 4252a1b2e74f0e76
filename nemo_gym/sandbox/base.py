"""Shared machinery of the `local` and `process` providers: the host side of the worker.

A `WorkerSandbox` owns one worker process (`worker.py`), started once, and sends it
requests over a channel; the worker forks one child per exec. Requests may overlap:
each carries an id and its reply is matched to the waiting call.

The channel is a unix socket pair, never a pipe: a pipe held by any process can be
reopened for writing through `/proc/PID/fd/N` by code running as the same user, and
sandboxed code could then write reply frames the host would believe (an exit code and
output the command never produced). A socket cannot be opened through `/proc` at all;
the worker is also non-dumpable (see `worker.py`), so its descriptors cannot be taken
with `pidfd_getfd` or ptrace either. Each reply frame is also capped at what its
request may legitimately produce (the exec output cap per stream and run), so even a
misbehaving worker cannot make the host buffer more.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import secrets
import signal
import socket
import struct
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.protocols import Sandbox
from nemo_gym.records import ExecResult, SandboxSpec
from nemo_gym.sandbox import limits as _limits
from nemo_gym.sandbox.clock import released, timed
from nemo_gym.sandbox.worker import FRAME, encode_frame, split_blobs

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 20.0
REPLY_SLACK_S = 10.0  # how late past its own deadline a reply may be before the worker is stuck
_EXEC_OPS = frozenset({"exec", "python", "batch"})
"""Requests that run code (counted as execs of the rollout; file transfers are not)."""
CLOSE_WAIT_S = 2.0
HEADER_MAX_BYTES = 64 << 10
"""The largest reply header the host reads (a batch's grows by `RUN_HEADER_BYTES` a run)."""
RUN_HEADER_BYTES = 512


@cache
def worker_source() -> str:
    """The worker program's source (passed to `python -c`, so it needs no file inside)."""
    return (Path(__file__).parent / "worker.py").read_text()


@dataclass(frozen=True)
class BatchResult:
    """The outcome of `run_batch`: a compile error, or one `ExecResult` per input run.

    `completed[i]` (Python runs only) is True when run i's code, and its test with
    `tests_as_code`, ran to the end: no exception, no `SystemExit` (even `exit(0)`), no
    `os._exit`, no death by signal. The worker alone can say so (see `worker.py`).
    """

    results: list[ExecResult] = field(default_factory=list)
    compile_error: str | None = None
    completed: list[bool] = field(default_factory=list)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _exec_result(head: dict[str, Any], out: bytes, err: bytes) -> ExecResult:
    return ExecResult(
        exit_code=int(head["exit_code"]),
        stdout=_decode(out),
        stderr=_decode(err),
        timed_out=bool(head.get("timed_out")),
        duration_s=float(head.get("duration_s", 0.0)),
        stdout_truncated=bool(head.get("stdout_truncated")),
        stderr_truncated=bool(head.get("stderr_truncated")),
    )


def _as_bytes(data: str | bytes | None, what: str) -> bytes:
    if data is None:
        return b""
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise ConfigError(f"{what} must be str or bytes, got {type(data).__name__}")


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    out = {}
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key or "=" in key:
            raise ConfigError(f"env must map names to strings, got {key!r}: {value!r}")
        out[key] = value
    return out


def argv_of(cmd: str | Sequence[str]) -> list[str]:
    """A command as argv: a string runs with `/bin/sh -c`, a sequence is the argv itself."""
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError(f"cmd must be a string or a non-empty sequence of strings, got {cmd!r}")
    return argv


class WorkerSandbox:
    """A sandbox served by one long-lived worker process (see `worker.py`).

    Besides the `Sandbox` protocol it offers the fast paths: `run_python` (Python code
    run in a forked child of the worker, no new interpreter) and `run_batch` (one
    program, compiled once, run once per stdin input).
    """

    def __init__(
        self,
        *,
        provider: str,
        argv: list[str],
        spec: SandboxSpec,
        workdir: str,
        env: dict[str, str],
        process_env: dict[str, str],
        process_cwd: str | None = None,
        cleanup: Callable[[], Awaitable[None]] | None = None,
        remove_workdir: bool = False,
        channel_on_stdio: bool = False,
    ) -> None:
        self.provider = provider
        self.spec = spec
        self.workdir = workdir
        self.limits = _limits.resolve(spec.limits)
        self._worker_limits = _limits.worker_limits(self.limits)
        self._config: dict[str, Any] = {
            "workdir": workdir,
            "env": {**env, **spec.env},
            "remove_workdir": remove_workdir,
        }
        self._argv = argv
        # Off stdio by default: bwrap's init (the sandbox's pid 1, which user code could
        # reach) keeps fds 0-2 but closes every other descriptor before it waits.
        self._channel_on_stdio = channel_on_stdio
        self._process_env = process_env
        self._process_cwd = process_cwd
        self._cleanup = cleanup
        self._proc: asyncio.subprocess.Process | None = None
        self._channel: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr_tail: collections.deque[bytes] = collections.deque(maxlen=64)
        self._pending: dict[int, asyncio.Future[tuple[dict[str, Any], list[bytes]]]] = {}
        self._caps: dict[int, tuple[int, int]] = {}  # request id: (header, body) byte caps
        self._last_id = secrets.randbelow(1 << 32)
        self._error: str | None = None
        self._closed = False
        self._ready: asyncio.Future[None] | None = None

    # -- lifecycle

    async def start(self) -> None:
        """Start the worker and wait until it says it is ready; `SandboxError` if it cannot."""
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        ours, theirs = socket.socketpair()
        stdio: dict[str, Any] = {"stdin": theirs, "stdout": theirs}
        config = dict(self._config)
        if not self._channel_on_stdio:
            stdio = {"stdin": asyncio.subprocess.DEVNULL, "stdout": asyncio.subprocess.DEVNULL}
            stdio["pass_fds"] = (theirs.fileno(),)
            config["channel_fd"] = theirs.fileno()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self._argv,
                json.dumps(config),
                **stdio,
                stderr=asyncio.subprocess.PIPE,
                env=self._process_env,
                cwd=self._process_cwd,
                start_new_session=True,
                limit=1 << 20,
            )
            self._channel = await asyncio.open_connection(sock=ours, limit=1 << 20)
        except OSError as exc:
            ours.close()
            await self._run_cleanup()
            raise SandboxError(f"{self.provider} sandbox could not start: {exc}") from exc
        finally:
            theirs.close()
        self._reader = asyncio.create_task(self._read_replies())
        self._stderr_task = asyncio.create_task(self._read_stderr())
        timeout = float(self.spec.options.get("start_timeout", START_TIMEOUT_S))
        try:
            async with asyncio.timeout(timeout):
                await self._ready
        except BaseException as exc:
            if isinstance(exc, TimeoutError):
                self._error = f"the worker did not start within {timeout:g}s"
            await asyncio.shield(self.aclose())
            if not isinstance(exc, SandboxError | TimeoutError):
                raise  # cancellation and the like pass through, the sandbox released
            raise SandboxError(
                f"{self.provider} sandbox could not start: {self._error}{self._stderr_text()}"
            ) from (None if isinstance(exc, SandboxError) else exc)

    async def aclose(self) -> None:
        """Stop the worker and everything it started, and release the sandbox. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with released(self):
            await self._close()

    async def _close(self) -> None:
        self._fail("the sandbox is closed")
        proc = self._proc
        if proc is not None and proc.returncode is None and self._channel is not None:
            try:
                writer = self._channel[1]
                writer.write(encode_frame({"op": "shutdown", "id": self._new_id()}))
                writer.write_eof()
            except (OSError, RuntimeError):
                pass
            try:
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await proc.wait()
            except TimeoutError:
                self._kill_worker()
                await proc.wait()
        for task in (self._reader, self._stderr_task):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        if self._channel is not None:
            self._channel[1].close()
        await self._run_cleanup()

    async def _run_cleanup(self) -> None:
        cleanup, self._cleanup = self._cleanup, None
        if cleanup is not None:
            await cleanup()

    async def __aenter__(self) -> WorkerSandbox:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def alive(self) -> bool:
        """True while the worker runs and the sandbox is usable."""
        return self._error is None and not self._closed

    def _kill_worker(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()

    def _fail(self, reason: str) -> None:
        if self._error is None:
            self._error = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(SandboxError(self._error))
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(SandboxError(self._error))

    def _stderr_text(self) -> str:
        text = b"".join(self._stderr_tail).decode(errors="replace").strip()
        return f"\n{text[-2000:]}" if text else ""

    def _header_cap(self) -> int:
        return max((head for head, _ in self._caps.values()), default=HEADER_MAX_BYTES)

    async def _read_replies(self) -> None:
        proc = self._proc
        assert proc is not None and self._channel is not None
        reader = self._channel[0]
        try:
            while True:
                head_len, body_len = FRAME.unpack(await reader.readexactly(FRAME.size))
                if head_len > self._header_cap():
                    raise _Oversized(f"a reply header of {head_len} bytes")
                header = json.loads(await reader.readexactly(head_len))
                if not isinstance(header, dict):
                    raise ValueError("a reply header that is not an object")
                rid = header.get("id")
                rid = rid if isinstance(rid, int) else -1
                cap = self._caps.get(rid, (0, 0))[1]
                if body_len > cap:
                    raise _Oversized(f"a reply of {body_len} bytes (at most {cap} allowed)")
                body = await reader.readexactly(body_len) if body_len else b""
                if header.get("ready") and self._ready is not None and not self._ready.done():
                    self._ready.set_result(None)
                    continue
                future = self._pending.get(rid)
                if future is not None and not future.done():
                    future.set_result((header, split_blobs(header, body)))
                else:
                    self._caps.pop(rid, None)  # the late reply of a cancelled request
        except _Oversized as exc:
            # Only a broken or subverted worker sends these: nothing it says is trusted now.
            self._fail(f"the {self.provider} sandbox worker sent {exc}; the sandbox is unusable")
            self._kill_worker()
            await proc.wait()
        except (asyncio.IncompleteReadError, ConnectionError, struct.error, ValueError) as exc:
            code = await proc.wait()
            if not self._closed:
                logger.warning("%s sandbox worker ended (exit code %s)", self.provider, code)
            self._fail(
                f"the {self.provider} sandbox worker died (exit code {code}); its files and "
                f"processes are lost, start a new sandbox ({type(exc).__name__})"
                + self._stderr_text()
            )

    async def _read_stderr(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        while chunk := await proc.stderr.read(4096):
            self._stderr_tail.append(chunk)
            logger.debug("%s worker stderr: %s", self.provider, chunk[:500])

    async def _call(
        self,
        header: dict[str, Any],
        blobs: Sequence[bytes],
        wait_s: float,
        *,
        reply_bytes: int = 0,
        runs: int = 1,
    ) -> tuple[dict[str, Any], list[bytes]]:
        """Send one request and wait for its reply, whose body may hold `reply_bytes`
        (its seconds charged to the rollout's sandbox time as exec time)."""
        with timed("exec_s", execs=1 if header.get("op") in _EXEC_OPS else 0):
            return await self._call_timed(header, blobs, wait_s, reply_bytes=reply_bytes, runs=runs)

    async def _call_timed(
        self,
        header: dict[str, Any],
        blobs: Sequence[bytes],
        wait_s: float,
        *,
        reply_bytes: int,
        runs: int,
    ) -> tuple[dict[str, Any], list[bytes]]:
        if self._error is not None:
            raise SandboxError(self._error)
        if self._proc is None or self._channel is None:
            raise SandboxError(f"the {self.provider} sandbox is not started")
        writer = self._channel[1]
        rid = self._new_id()
        future: asyncio.Future[tuple[dict[str, Any], list[bytes]]] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending[rid] = future
        self._caps[rid] = (HEADER_MAX_BYTES + RUN_HEADER_BYTES * runs, reply_bytes)
        abandoned = False
        try:
            writer.write(encode_frame({**header, "id": rid}, blobs))
            await writer.drain()
            async with asyncio.timeout(wait_s):
                reply, reply_blobs = await future
        except (ConnectionError, RuntimeError) as exc:
            self._fail(f"the {self.provider} sandbox worker is gone: {exc}")
            raise SandboxError(self._error or str(exc)) from exc
        except TimeoutError:
            # The worker enforces every deadline itself; silence past it means it is stuck.
            self._fail(f"the {self.provider} sandbox worker stopped answering")
            self._kill_worker()
            raise SandboxError(self._error or "stuck") from None
        except asyncio.CancelledError:
            self._send_nowait({"op": "kill", "target": rid, "id": self._new_id()})
            # The worker still answers the killed request: its reply may carry what the
            # request allowed, and is read and dropped (the reader removes the cap then).
            abandoned = True
            raise
        finally:
            self._pending.pop(rid, None)
            if not abandoned:
                self._caps.pop(rid, None)
        if not reply.get("ok"):
            if reply.get("errno"):
                raise OSError(reply["errno"], reply.get("error", ""), reply.get("path"))
            raise SandboxError(f"the sandbox worker refused a request: {reply.get('error')}")
        return reply, reply_blobs

    def _new_id(self) -> int:
        """A request id above every earlier one, by a step nobody can predict.

        The worker drops a request whose id is not above the last it served. Where
        sandboxed code can take the host's end of the channel (the `process` provider
        as a user whom the kernel lets ptrace the trainer), it can inject requests, but
        never one whose reply the host would take: it cannot know the next id.
        """
        self._last_id += secrets.randbelow(1 << 32) + 1
        return self._last_id

    def _send_nowait(self, header: dict[str, Any]) -> None:
        proc = self._proc
        if proc is not None and self._channel is not None and proc.returncode is None:
            try:
                self._channel[1].write(encode_frame(header))
            except (OSError, RuntimeError):
                pass

    def _run_bytes(self, runs: int = 1) -> int:
        """The most reply body `runs` execs may produce: stdout and stderr, each capped."""
        return 2 * self._worker_limits["output"] * runs

    # -- paths

    def host_path(self, path: str) -> str:
        """`path` as the worker sees it. Relative paths are relative to the workdir."""
        if not isinstance(path, str) or not path:
            raise ConfigError(f"path must be a non-empty string, got {path!r}")
        return path

    def _request(
        self,
        op: str,
        *,
        timeout: float | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
        **extra: Any,
    ) -> dict[str, Any]:
        return {
            "op": op,
            "timeout": _limits.check_timeout(timeout),
            "env": _check_env(env),
            "cwd": self.host_path(cwd) if cwd is not None else None,
            "limits": self._worker_limits,
            **extra,
        }

    # -- the Sandbox protocol

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
        request = self._request("exec", timeout=timeout, env=env, cwd=cwd, argv=argv_of(cmd))
        reply, blobs = await self._call(
            request,
            [_as_bytes(stdin, "stdin")],
            request["timeout"] + REPLY_SLACK_S,
            reply_bytes=self._run_bytes(),
        )
        return _exec_result(reply, *blobs)

    async def run_python(
        self,
        code: str,
        *,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        args: Sequence[str] = (),
    ) -> ExecResult:
        """Run Python source in a forked child of the worker, like `python3 -c code`.

        The child is a fork of the worker's interpreter (the sandbox's Python), so there
        is no interpreter start-up. Differences from a fresh `python3 -c`: `atexit`
        handlers do not run and non-daemon threads are not joined at exit. A syntax error
        comes back as exit code 1 with the error on stderr.
        """
        if not isinstance(code, str):
            raise ConfigError(f"code must be a str, got {type(code).__name__}")
        request = self._request(
            "python", timeout=timeout, env=env, cwd=cwd, args=[str(a) for a in args]
        )
        reply, blobs = await self._call(
            request,
            [code.encode(), _as_bytes(stdin, "stdin")],
            request["timeout"] + REPLY_SLACK_S,
            reply_bytes=self._run_bytes(),
        )
        if "compile_error" in reply:
            return ExecResult(exit_code=1, stderr=reply["compile_error"])
        return _exec_result(reply, *blobs)

    async def run_batch(
        self,
        program: str | Sequence[str],
        inputs: Sequence[str | bytes],
        *,
        python: bool = False,
        harness: str | None = None,
        module_name: str = "__main__",
        timeout_per_run: float | None = None,
        timeout_total: float | None = None,
        stop_on_error: bool = False,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        tests_as_code: bool = False,
    ) -> BatchResult:
        """Run one program once per input (its stdin), one after the other.

        With `python=True`, `program` is Python source, compiled once in the worker and
        run in a forked child per input (a syntax error returns `compile_error` and runs
        nothing); `harness`, if given, is more Python run after it in the same namespace
        (with the program run as `module_name`). Otherwise `program` is a command, as in
        `exec`. Each run gets `timeout_per_run`; runs not started by `timeout_total` are
        left out of `results`, as are those after a failure when `stop_on_error`.

        With `tests_as_code` (Python only), each input is not stdin but test code, run
        after the program (and harness) in its namespace, from a clean interpreter state;
        the runs' stdin is empty. `BatchResult.completed` says which runs got to the end.
        """
        per_run = _limits.check_timeout(timeout_per_run)
        total = _limits.check_timeout(timeout_total) if timeout_total is not None else None
        blobs: list[bytes] = []
        extra: dict[str, Any] = {"stop_on_error": stop_on_error, "total_timeout": total}
        if python:
            if not isinstance(program, str):
                raise ConfigError("with python=True, program must be Python source (a str)")
            blobs.append(program.encode())
            if harness is not None:
                blobs.append(harness.encode())
            extra.update(
                mode="python", n_code=len(blobs), name=module_name, tests_as_code=tests_as_code
            )
        else:
            if tests_as_code:
                raise ConfigError("tests_as_code needs python=True")
            extra.update(mode="argv", argv=argv_of(program))
        blobs += [_as_bytes(item, "input") for item in inputs]
        request = self._request("batch", timeout=per_run, env=env, cwd=cwd, **extra)
        wait = (total if total is not None else per_run * max(len(inputs), 1)) + REPLY_SLACK_S
        runs = max(len(inputs), 1)
        reply, out = await self._call(
            request, blobs, wait, reply_bytes=self._run_bytes(runs), runs=runs
        )
        if "compile_error" in reply:
            return BatchResult(compile_error=reply["compile_error"])
        results = [
            _exec_result(head, out[2 * i], out[2 * i + 1])
            for i, head in enumerate(reply["results"])
        ]
        completed = [head.get("completed") is True for head in reply["results"]]
        return BatchResult(results=results, completed=completed)

    async def write_file(self, path: str, data: str | bytes, *, mode: int | None = None) -> None:
        """Write a file (parents created); relative paths are relative to the workdir."""
        await self._call(
            {"op": "write", "path": self.host_path(path), "mode": mode},
            [_as_bytes(data, "data")],
            START_TIMEOUT_S,
        )

    async def read_file(self, path: str) -> bytes:
        """Read a file's bytes; `FileNotFoundError` (an `OSError`) when it is missing.

        A file larger than the sandbox's `file_size_bytes` limit (what an exec may write)
        raises `OSError(EFBIG)`: the host never buffers more than that.
        """
        cap = int(self.limits.file_size_bytes or 0)
        _, blobs = await self._call(
            {"op": "read", "path": self.host_path(path), "max_bytes": cap},
            [],
            60.0,
            reply_bytes=cap,
        )
        return blobs[0] if blobs else b""

    async def reset(self, *, wipe: bool = True) -> None:
        """Kill every process the sandbox's execs left behind and (`wipe`) empty the workdir."""
        await self._call({"op": "reset", "wipe": wipe}, [], 30.0)


class _Oversized(Exception):
    """A reply frame larger than its request allows."""


def image_exec_env(workdir: str) -> dict[str, str]:
    """The base environment of execs in a container image running the worker (apptainer,
    enroot): the image's usual PATH, the workdir as home."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": workdir,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def runtime_env(names: tuple[str, ...], prefixes: tuple[str, ...]) -> dict[str, str]:
    """What a container runtime's own process gets of ours: the variables in `names` or
    starting with one of `prefixes` (its caches and config), nothing else."""
    return {k: v for k, v in os.environ.items() if k in names or k.startswith(prefixes)}


def new_name() -> str:
    return f"nemo_gym-{uuid.uuid4().hex[:12]}"


def python_for_sandbox() -> str:
    """The interpreter that runs the worker: the real binary behind `sys.executable`."""
    return os.path.realpath(sys.executable)


class PidsCgroup:
    """A pids cgroup holding one sandbox, so its process count holds also for root.

    RLIMIT_NPROC does not bind uid 0, and we often run as root; a cgroup's `pids.max`
    binds everyone. Uses cgroup v2 where our cgroup delegates the pids controller, else
    the cgroup v1 pids hierarchy; `create` returns None where neither is writable.
    """

    _warned = False

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    @classmethod
    def create(cls, max_pids: int) -> PidsCgroup | None:
        """A new cgroup with `pids.max = max_pids`, or None (logged once) when impossible."""
        for parent in _pids_cgroup_parents():
            _remove_stale(parent)
            path = parent / new_name()
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / "pids.max").write_text(str(max_pids))
                return cls(path)
            except OSError:
                _rmdir(path)
        if not cls._warned:
            cls._warned = True
            logger.warning(
                "no writable pids cgroup: the sandbox process limit is RLIMIT_NPROC only, "
                "which does not bind uid 0"
            )
        return None

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started from inside the cgroup (a shell joins it, then execs argv)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', self.procs_file, *argv]

    def destroy(self) -> None:
        """Kill whatever is still in the cgroup and remove it (blocking: run in a thread)."""
        import time

        for _ in range(100):
            try:
                pids = [int(p) for p in Path(self.procs_file).read_text().split()]
            except OSError:
                return
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        _rmdir(self.path)


async def in_pids_cgroup(
    argv: list[str], max_pids: int, *, enabled: bool = True
) -> tuple[list[str], Callable[[], Awaitable[None]]]:
    """`argv` started inside a new pids cgroup of `max_pids` (where one can be made and
    `enabled`), and the coroutine function that kills what is left in it and removes it.
    The cgroup file work runs in a thread, off the event loop."""
    cgroup = await asyncio.to_thread(PidsCgroup.create, max_pids) if enabled else None
    if cgroup is None:

        async def nothing() -> None:
            return None

        return argv, nothing

    async def destroy() -> None:
        await asyncio.to_thread(cgroup.destroy)

    return cgroup.wrap(argv), destroy


STALE_CGROUP_S = 120.0


def _remove_stale(parent: Path) -> None:
    """Remove our empty cgroups left by owners that died without closing their sandbox.

    Only empty ones older than `STALE_CGROUP_S`: a fresh empty one may be a sandbox
    that is still starting (created, not joined yet).
    """
    import time

    try:
        entries = list(parent.glob("nemo_gym-*"))
    except OSError:
        return
    for path in entries:
        try:
            if time.time() - path.stat().st_mtime < STALE_CGROUP_S:
                continue
            if (path / "cgroup.procs").read_text().strip():
                continue
            path.rmdir()
        except OSError:
            continue


def _rmdir(path: Path) -> None:
    import time

    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)  # the last processes are still exiting
    logger.warning("could not remove cgroup %s", path)


@cache
def _pids_cgroup_parents() -> tuple[Path, ...]:
    """Where this process may create pids cgroups: v2 first, then v1."""
    found: list[Path] = []
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ()
    paths = {}
    for line in own:
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        paths[controllers] = path
    for line in mounts:
        fields = line.split()
        try:
            sep = fields.index("-")
        except ValueError:
            continue
        fstype, mount_point, super_opts = fields[sep + 1], fields[4], fields[-1]
        if fstype == "cgroup2" and "" in paths:
            parent = Path(mount_point) / paths[""].lstrip("/")
            try:
                if "pids" in (parent / "cgroup.subtree_control").read_text().split():
                    found.insert(0, parent)
            except OSError:
                pass
        elif fstype == "cgroup" and "pids" in super_opts.split(","):
            for controllers, path in paths.items():
                if "pids" in controllers.split(","):
                    found.append(Path(mount_point) / path.lstrip("/"))
    return tuple(p for p in found if os.access(p, os.W_OK))


async def finish_despite_cancellation(awaitable: Awaitable[Any]) -> None:
    """Run cleanup to its end even while the caller is being cancelled, then re-raise
    the cancellation. A cleanup failure is logged: the caller's own outcome wins."""
    task = asyncio.ensure_future(awaitable)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = cancelled or not task.done()
    if not task.cancelled() and task.exception() is not None:
        logger.warning("sandbox cleanup failed: %r", task.exception())
    if cancelled:
        raise asyncio.CancelledError


class Provider:
    """Base of the built-in providers: `start` is `create` plus a guaranteed `close`.

    A subclass implements `async create(spec) -> Sandbox` (a sandbox the caller must
    close). `async with provider.start(spec) as sandbox:` closes it on exit, also on
    error, and finishes closing even when the caller is cancelled meanwhile.
    """

    name: str

    async def create(self, spec: SandboxSpec | None = None) -> Sandbox:
        raise NotImplementedError

    @asynccontextmanager
    async def start(self, spec: SandboxSpec | None = None) -> AsyncIterator[Any]:
        """`async with provider.start(spec) as sandbox:`; closed on exit, also on error."""
        sandbox = await self.create(spec)
        try:
            yield sandbox
        finally:
            await finish_despite_cancellation(sandbox.aclose())
