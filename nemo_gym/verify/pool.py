"""A pool of persistent worker processes with a hard deadline per call.

CPU-heavy or possibly-hanging work (symbolic math, parsing untrusted text) runs here,
never on the event loop and never in the trainer's own process:

```python
pool = WorkerPool(size=2)
value = await pool.call("operator:add", 1, 2, timeout=5.0)
pool.close()
```

How a call is bounded. The worker arms a wall-clock timer (`setitimer`) when it starts
the function and answers "timed out" itself when it fires, which keeps the worker (and
its warm imports) alive. A function stuck in C code does not see that timer, so the
parent also waits only `timeout + kill_grace` seconds, then SIGKILLs the worker, starts
a replacement in the background and raises `WorkerTimeout`. A worker that dies (a
segfault, the OOM killer) is replaced the same way and the call raises `WorkerCrashed`.

Workers are forked from a small "zygote": a fresh interpreter (started with
`subprocess`, never by forking the trainer, which may be a 50 GB process holding CUDA
state) that imports only this module and the pool's `preload` modules, then forks a
worker on request. A replacement worker is therefore ready in milliseconds with its
imports warm, and the trainer's `__main__` is never re-imported (no `if __name__ ==
"__main__"` guard needed, notebooks work). Waiting for a reply uses the event loop's
`add_reader` on the worker's socket: no thread per call, nothing blocking on the loop.
The pool holds no loop-bound objects between calls, so one pool serves any number of
event loops (one per test, `asyncio.run` per batch) and survives a closed loop.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import importlib
import logging
import math
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from nemo_gym.errors import VerifierError

logger = logging.getLogger(__name__)

__all__ = [
    "PoolClosed",
    "WorkerCrashed",
    "WorkerError",
    "WorkerPool",
    "WorkerTimeout",
    "shared_pool",
]


class WorkerTimeout(VerifierError):
    """A pool call ran past its deadline; the worker was stopped (and replaced if stuck)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="verifier_timeout")


class WorkerCrashed(VerifierError):
    """The worker process died during a call (segfault, killed); it has been replaced."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="worker_crashed")


class WorkerError(VerifierError):
    """The function raised in the worker. `remote_type` and `remote_traceback` say what."""

    def __init__(self, message: str, *, remote_type: str, remote_traceback: str) -> None:
        super().__init__(message, code="worker_error")
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback


class PoolClosed(VerifierError):
    """The pool was closed before or during the call."""

    def __init__(self, message: str = "the worker pool is closed") -> None:
        super().__init__(message, code="pool_closed")


# ---------------------------------------------------------------------------------------
# The worker side. Runs in the child process; must stay importable without side effects.


class _SoftTimeout(BaseException):
    """Raised inside the worker by its own timer. A BaseException so that the many
    `except Exception` blocks in sympy / math_verify do not swallow it."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _SoftTimeout


def _resolve(ref: str, cache: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    fn = cache.get(ref)
    if fn is None:
        module_name, _, qualname = ref.partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        if not callable(obj):
            raise TypeError(f"{ref} is not callable")
        fn = cache[ref] = obj
    return fn


def _serve(conn: Any) -> None:
    """Serve calls from `conn` until it closes: `(ref, args, timeout)` -> a reply tuple."""
    cache: dict[str, Callable[..., Any]] = {}
    while True:
        try:
            ref, args, timeout = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        reply: tuple[Any, ...]
        try:
            if ref not in cache:
                # Imports happen before the clock starts; tell the parent when they
                # are done, so that its deadline starts there too.
                _resolve(ref, cache)
                conn.send(("started",))
            fn = cache[ref]
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                value = fn(*args)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            reply = ("ok", value)
        except _SoftTimeout:
            reply = ("timeout",)
        except BaseException as exc:
            signal.setitimer(signal.ITIMER_REAL, 0)
            reply = ("error", type(exc).__qualname__, _safe_message(exc), traceback.format_exc())
        try:
            conn.send(reply)
        except (BrokenPipeError, ConnectionError):  # the parent is gone
            return
        except Exception as exc:  # an unpicklable result
            conn.send(("error", type(exc).__qualname__, f"cannot send the result back: {exc}", ""))


def _zygote_main(control_fd: int, preload: Sequence[str]) -> None:
    """The zygote: import `preload`, then fork one worker per request on `control_fd`.

    Protocol: the parent writes one byte per worker wanted; the zygote answers with the
    worker's pid (8 bytes) and the parent's end of a fresh socketpair (SCM_RIGHTS).
    It exits when the parent closes the control socket.
    """
    import faulthandler
    import socket
    import struct

    # The parent owns our lifetime; Ctrl-C in its terminal must not kill us first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Let the kernel reap the workers: the parent tracks them through pidfds.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for module in preload:
        importlib.import_module(module)
    control = socket.socket(fileno=control_fd)
    control.sendall(b"R")
    while True:
        try:
            request = control.recv(1)
        except (ConnectionError, OSError, KeyboardInterrupt):
            return
        if not request:
            return
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the worker
            try:
                control.close()
                ours.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGALRM, _on_alarm)
                faulthandler.enable()  # a segfault leaves a traceback on stderr
                from multiprocessing.connection import Connection

                _serve(Connection(theirs.detach()))
            finally:
                os._exit(0)
        theirs.close()
        try:
            socket.send_fds(control, [struct.pack("q", pid)], [ours.fileno()])
        except OSError:
            return
        finally:
            ours.close()


def _safe_message(exc: BaseException) -> str:
    try:
        return str(exc)[:2000]
    except Exception:
        return f"<{type(exc).__name__} with an unprintable message>"


# ---------------------------------------------------------------------------------------
# The parent side.


class _Worker:
    __slots__ = ("conn", "pid", "pidfd", "refs", "waiter")

    def __init__(self, conn: Any, pid: int, pidfd: int | None) -> None:
        self.conn = conn
        self.pid = pid
        self.pidfd = pidfd
        self.refs: set[str] = set()  # functions this worker has already imported
        # The call waiting on this worker's reply, so that close() can fail it at once.
        self.waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def kill(self) -> None:
        """SIGKILL the worker (idempotent). Through its pidfd where the OS has them, so a
        recycled pid can never be hit."""
        with contextlib.suppress(Exception):
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.conn.close()
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None


class _Zygote:
    """The small process workers are forked from (see the module docstring)."""

    def __init__(self, preload: Sequence[str], start_timeout: float) -> None:
        import json
        import socket
        import subprocess
        import sys

        ours, theirs = socket.socketpair()
        bootstrap = (
            "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
            "from nemo_gym.verify.pool import _zygote_main; "
            "_zygote_main(int(sys.argv[2]), json.loads(sys.argv[3]))"
        )
        # The child gets our import path, so it finds what the trainer finds (a
        # notebook's cwd, a source checkout) without re-running the trainer's main.
        path = [entry or os.getcwd() for entry in sys.path]
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                bootstrap,
                json.dumps(path),
                str(theirs.fileno()),
                json.dumps(list(preload)),
            ],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            close_fds=True,
        )
        theirs.close()
        self.control = ours
        self.lock = threading.Lock()
        ours.settimeout(start_timeout)
        try:
            ready = ours.recv(1)
        except OSError as exc:
            self.close()
            raise VerifierError(
                f"the worker zygote did not start within {start_timeout:g}s: {exc}",
                code="worker_start_failed",
            ) from exc
        if ready != b"R":
            code = self.process.wait(timeout=5)
            self.close()
            raise VerifierError(
                f"the worker zygote exited while starting (exit code {code}); "
                f"preload={list(preload)!r} - see its stderr",
                code="worker_start_failed",
            )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, timeout: float) -> _Worker:
        import socket
        import struct
        from multiprocessing.connection import Connection

        with self.lock:
            self.control.settimeout(timeout)
            self.control.sendall(b"F")
            data, fds, _, _ = socket.recv_fds(self.control, 8, 1)
        if len(data) != 8 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError("the worker zygote gave a malformed answer")
        (pid,) = struct.unpack("q", data)
        pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            with contextlib.suppress(OSError):
                pidfd = os.pidfd_open(pid)
        return _Worker(Connection(fds[0]), pid, pidfd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.control.close()
        try:
            self.process.wait(timeout=2.0)
        except Exception:
            self.process.kill()
            with contextlib.suppress(Exception):
                self.process.wait(timeout=2.0)


def _function_ref(fn: str | Callable[..., Any]) -> str:
    if isinstance(fn, str):
        module, sep, qualname = fn.partition(":")
        if not sep or not module or not qualname:
            raise ValueError(
                f"a function reference must look like 'package.module:name', got {fn!r}"
            )
        return fn
    fn_module = getattr(fn, "__module__", None)
    fn_qualname = getattr(fn, "__qualname__", None)
    if not fn_module or not fn_qualname or "<" in fn_qualname:
        raise ValueError(
            f"{fn!r} cannot run in a worker: pass a module-level function "
            "(lambdas and nested functions cannot be imported by the worker)"
        )
    return f"{fn_module}:{fn_qualname}"


def _wake(
    loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None], exc: BaseException | None
) -> bool:
    """Complete `fut` on its own loop, from any thread. False when that loop is gone."""

    def complete() -> None:
        if fut.done():
            return
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)

    try:
        loop.call_soon_threadsafe(complete)
    except RuntimeError:  # the loop is closed
        return False
    return True


class WorkerPool:
    """Persistent worker processes; `await pool.call(fn, *args, timeout=...)` runs `fn` in one.

    `fn` is a module-level function or its reference `"package.module:name"`; it and its
    arguments and result must pickle. Workers start lazily (none until the first call),
    up to `size`. `preload` names modules imported once, in the process workers are
    forked from, so no call pays for them. Otherwise the first call of a function in a
    worker imports it first, within `import_timeout`; its `timeout` starts after.

    Raises from `call`: `WorkerTimeout`, `WorkerCrashed`, `WorkerError` (the function
    raised), `PoolClosed`; all are `nemo_gym.errors.VerifierError`.
    """

    def __init__(
        self,
        size: int | None = None,
        *,
        preload: Sequence[str] = (),
        kill_grace: float = 0.02,
        import_timeout: float = 60.0,
        start_timeout: float = 60.0,
    ) -> None:
        if size is None:
            size = max(1, min(4, os.cpu_count() or 1))
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if kill_grace < 0 or import_timeout < 0 or start_timeout <= 0:
            raise ValueError("kill_grace and import_timeout must be >= 0, start_timeout > 0")
        self.size = size
        self.preload = tuple(preload)
        self.kill_grace = kill_grace
        self.import_timeout = import_timeout
        self.start_timeout = start_timeout
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._workers: set[_Worker] = set()
        self._starting = 0
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = (
            collections.deque()
        )
        self._closed = False
        self._zygote: _Zygote | None = None
        self._zygote_lock = threading.Lock()
        self.stats = collections.Counter[str]()

    # -- public ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def worker_pids(self) -> list[int]:
        """The pids of the live workers (for tests and diagnostics)."""
        with self._lock:
            return sorted(w.pid for w in self._workers)

    async def call(self, fn: str | Callable[..., Any], *args: Any, timeout: float) -> Any:
        """Run `fn(*args)` in a worker and return its result, within `timeout` seconds.

        The deadline covers the function's run in the worker, not the wait for a free
        worker (that wait is bounded by the calls ahead, each bounded by its own).
        """
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        ref = _function_ref(fn)
        loop = asyncio.get_running_loop()
        for attempt in (1, 2):
            worker = await self._acquire()
            try:
                worker.conn.send((ref, args, float(timeout)))
                break
            except (EOFError, OSError) as exc:
                # The idle worker died since its last call (killed from outside, OOM):
                # released as idle, it would fail every later call. Replace it; nothing
                # ran yet, so one other worker may take the call.
                self._discard(worker, replace=True)
                self.stats["crashed"] += 1
                if attempt == 2 or self._closed:
                    raise WorkerCrashed(
                        f"worker {worker.pid} was dead before it could run {ref}: {exc}"
                    ) from None
            except BaseException:
                # Pickling fails before a byte is written: the worker is still clean.
                self._release(worker)
                raise
        started = time.monotonic()
        try:
            if ref not in worker.refs:
                # First use of `ref` here: the import has its own, longer bound.
                reply = await self._reply(loop, worker, self.import_timeout)
                if reply[0] == "started":
                    worker.refs.add(ref)
                    started = time.monotonic()
                    reply = await self._reply(loop, worker, timeout + self.kill_grace)
            else:
                reply = await self._reply(loop, worker, timeout + self.kill_grace)
        except TimeoutError:
            self._discard(worker, replace=True)
            self.stats["killed"] += 1
            raise WorkerTimeout(
                f"{ref} ran past its {timeout:g}s deadline; worker {worker.pid} was killed"
            ) from None
        except (EOFError, OSError):
            if self._closed:
                self._discard(worker, replace=False)
                raise PoolClosed("the worker pool was closed during the call") from None
            self._discard(worker, replace=True)
            self.stats["crashed"] += 1
            raise WorkerCrashed(
                f"worker {worker.pid} died while running {ref} "
                "(a crash such as a segfault, or killed from outside; see its stderr)"
            ) from None
        except BaseException:  # cancelled: the worker is busy with work nobody wants
            self._discard(worker, replace=True)
            raise
        self._release(worker)
        kind = reply[0]
        if kind == "ok":
            self.stats["ok"] += 1
            return reply[1]
        if kind == "timeout":
            self.stats["timeout"] += 1
            raise WorkerTimeout(
                f"{ref} ran past its {timeout:g}s deadline "
                f"(stopped after {time.monotonic() - started:.3f}s)"
            )
        self.stats["error"] += 1
        _, remote_type, message, remote_tb = reply
        raise WorkerError(
            f"{ref} raised {remote_type}: {message}",
            remote_type=remote_type,
            remote_traceback=remote_tb,
        )

    def close(self) -> None:
        """Stop every worker (idempotent). Pending and later calls raise `PoolClosed`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._workers)
            self._workers.clear()
            self._idle.clear()
            waiters = list(self._waiters)
            self._waiters.clear()
        for loop, fut in waiters:
            _wake(loop, fut, PoolClosed())
        for worker in workers:
            if worker.waiter is not None:
                _wake(*worker.waiter, PoolClosed("the worker pool was closed during the call"))
            worker.kill()
        with self._zygote_lock:
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None

    async def aclose(self) -> None:
        """`close()` off the event loop (joining the workers may take a moment)."""
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> WorkerPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (
            f"WorkerPool(size={self.size}, preload={list(self.preload)!r}, "
            f"live={len(self._workers)}, closed={self._closed})"
        )

    # -- workers in and out ---------------------------------------------------------

    async def _acquire(self) -> _Worker:
        loop = asyncio.get_running_loop()
        while True:
            signal_fut: asyncio.Future[None] = loop.create_future()
            with self._lock:
                if self._closed:
                    raise PoolClosed()
                if self._idle:
                    return self._idle.pop()
                start = len(self._workers) + self._starting < self.size
                if start:
                    self._starting += 1
                self._waiters.append((loop, signal_fut))
            if start:
                self._start_in_background(loop, signal_fut)
            try:
                await signal_fut
            except BaseException:
                with self._lock:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove((loop, signal_fut))
                if signal_fut.done() and not signal_fut.cancelled():
                    if signal_fut.exception() is None:
                        self._wake_one()  # pass on the wake-up we were given
                raise

    def _start_in_background(
        self,
        loop: asyncio.AbstractEventLoop | None,
        requester: asyncio.Future[None] | None,
    ) -> None:
        """Start one worker in a thread; it joins the idle list, or the error goes to
        `requester` (the call that asked for it)."""

        def run() -> None:
            try:
                worker = self._spawn()
            except BaseException as exc:
                with self._lock:
                    self._starting -= 1
                    if loop is not None and requester is not None:
                        with contextlib.suppress(ValueError):
                            self._waiters.remove((loop, requester))
                logger.error("could not start a pool worker: %s", exc)
                if loop is not None and requester is not None:
                    _wake(loop, requester, exc)
                self._wake_one()
                return
            with self._lock:
                self._starting -= 1
                if self._closed:
                    closed = True
                else:
                    closed = False
                    self._workers.add(worker)
            if closed:
                worker.kill()
                return
            self._release(worker)

        threading.Thread(target=run, name="nemo-gym-pool-start", daemon=True).start()

    def _spawn(self) -> _Worker:
        with self._zygote_lock:
            if self._closed:
                raise PoolClosed()
            for attempt in (1, 2):
                if self._zygote is None or not self._zygote.alive:
                    if self._zygote is not None:
                        self._zygote.close()
                    self._zygote = None  # a failed start below must not leave a dead one
                    self._zygote = _Zygote(self.preload, self.start_timeout)
                    self.stats["zygote_started"] += 1
                try:
                    worker = self._zygote.fork(self.start_timeout)
                    break
                except OSError as exc:
                    # The zygote died (killed, OOM): start a fresh one once.
                    logger.warning("the worker zygote failed (%s); restarting it", exc)
                    self._zygote.close()
                    self._zygote = None
                    if attempt == 2:
                        raise VerifierError(
                            f"could not start a pool worker: {exc}", code="worker_start_failed"
                        ) from exc
        self.stats["started"] += 1
        logger.debug("pool worker %d started", worker.pid)
        return worker

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            if self._closed or worker not in self._workers:
                return
            self._idle.append(worker)
        self._wake_one()

    def _wake_one(self) -> None:
        with self._lock:
            while self._waiters:
                loop, fut = self._waiters.popleft()
                if _wake(loop, fut, None):
                    return

    def _discard(self, worker: _Worker, *, replace: bool) -> None:
        """Kill a worker now and start its replacement off the loop."""
        worker.kill()
        with self._lock:
            self._workers.discard(worker)
            replace = replace and not self._closed
            if replace:
                self._starting += 1
        if replace:
            self._start_in_background(None, None)

    @staticmethod
    async def _reply(
        loop: asyncio.AbstractEventLoop, worker: _Worker, wait: float
    ) -> tuple[Any, ...]:
        """The worker's reply; `TimeoutError` after `wait` seconds, `EOFError` if it died."""
        readable: asyncio.Future[None] = loop.create_future()

        def on_readable() -> None:
            if not readable.done():
                readable.set_result(None)

        fd = worker.conn.fileno()
        loop.add_reader(fd, on_readable)
        worker.waiter = (loop, readable)
        try:
            async with asyncio.timeout(wait):
                await readable
        finally:
            worker.waiter = None
            loop.remove_reader(fd)
        return worker.conn.recv()


_shared: WorkerPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> WorkerPool:
    """The process-wide default pool (created on first use, starts no worker until a call).

    Closed automatically at interpreter exit. Verifiers use it when given no pool.
    """
    global _shared
    with _shared_lock:
        if _shared is None or _shared.closed:
            _shared = WorkerPool()
            atexit.register(_shared.close)
        return _shared
