"""`LoopThread`: one long-lived event loop in a daemon thread, for trainers that call us
synchronously (TRL's `rollout_func`, reward functions and environment tools; NeMo RL's
`step`).

Each call blocks its caller until the coroutine finishes on that loop. Every call of one
integration runs on the *same* loop, so what an environment, verifier or episode binds
to its loop (worker pools, semaphores, an open episode between TRL's `reset()` and its
tool calls) stays valid from one training step to the next, and nothing is ever forked.
The loop is started on first use and stopped at interpreter exit (or by `close()`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from nemo_gym.errors import NemoGymError

log = logging.getLogger(__name__)

_POLL_S = 0.5

T = TypeVar("T")

__all__ = ["LoopThread", "shared_loop"]


class LoopThread:
    """A private event loop running in a daemon thread; `run(coro)` from any other thread."""

    def __init__(self, name: str = "nemo_gym-loop") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Why the loop's thread died (a SystemExit raised by a coroutine, a loop stopped
        # from inside): every waiting and later call fails with it until close().
        self._died: BaseException | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started on first access)."""
        with self._lock:
            if self._died is not None:
                raise self._dead_error()
            if self._loop is None or self._loop.is_closed():
                self._start()
            assert self._loop is not None
            return self._loop

    def _dead_error(self) -> NemoGymError:
        return NemoGymError(
            f"{self.name}: its event loop thread died ({self._died!r}); close() it to start anew",
            code="loop_died",
        )

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            except BaseException as exc:
                log.error("%s: the event loop thread died: %r", self.name, exc)
                with self._lock:
                    self._died = exc
            else:
                with self._lock:
                    if self._loop is loop:  # stopped from inside, not by close()
                        self._died = RuntimeError("the loop was stopped")

        thread = threading.Thread(target=serve, name=self.name, daemon=True)
        thread.start()
        ready.wait()
        self._loop, self._thread = loop, thread

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def run(self, awaitable: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """Run `awaitable` on the loop and return its result (or raise its exception).

        Raises `RuntimeError` when called from the loop's own thread (it would deadlock);
        `TimeoutError` after `timeout` seconds, with the coroutine cancelled.
        """
        if self.in_loop_thread():
            awaitable.close()
            raise RuntimeError(f"{self.name}: run() called from inside its own loop; await it")
        try:
            loop = self.loop
        except NemoGymError:
            awaitable.close()
            raise
        future = asyncio.run_coroutine_threadsafe(awaitable, loop)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            # In slices, so a caller whose loop thread dies under it is told so at once
            # instead of waiting forever on a future nothing will complete.
            while not future.done():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    future.cancel()
                    raise TimeoutError(f"{self.name}: call did not finish within {timeout}s")
                step = _POLL_S if remaining is None else min(remaining, _POLL_S)
                if concurrent.futures.wait([future], timeout=step).done:
                    break
                thread = self._thread
                if thread is not None and thread.is_alive():
                    continue
                future.cancel()
                with self._lock:
                    if self._died is None and self._loop is loop:
                        self._died = RuntimeError("the loop thread ended")
                    died = self._died or RuntimeError("the loop was closed")
                raise NemoGymError(
                    f"{self.name}: its event loop thread died ({died!r}) during the call",
                    code="loop_died",
                ) from died
            return future.result()
        except BaseException:
            # KeyboardInterrupt in the caller: stop the work it asked for, too.
            if not future.done():
                future.cancel()
            raise

    def close(self) -> None:
        """Cancel what still runs on the loop, stop it and join the thread. Idempotent."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            self._died = None
        if loop is None or loop.is_closed():
            return

        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if thread is not None and not thread.is_alive():
            # The loop's thread died: drive the loop here to cancel what it left behind.
            with contextlib.suppress(RuntimeError):  # called from a running loop
                loop.run_until_complete(drain())
            loop.close()
            return
        try:
            asyncio.run_coroutine_threadsafe(drain(), loop).result(10)
        except Exception as exc:  # the process is going down; say so and carry on
            log.debug("%s: draining the loop failed: %s", self.name, exc)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(10)
        if not loop.is_running():
            loop.close()


_shared: LoopThread | None = None
_shared_lock = threading.Lock()


def shared_loop() -> LoopThread:
    """The process-wide loop the trainer integrations share (closed at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LoopThread("nemo_gym-trainer-loop")
            atexit.register(_shared.close)
        return _shared
