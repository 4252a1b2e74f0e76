"""Lifecycle: objects that own resources, and who closes them.

An environment, verifier, harness or model that owns resources (a worker pool, warm
sandboxes, an engine, an MCP session, an HTTP client) implements `async aclose()`:

- it creates those resources lazily, inside the running event loop, on first use —
  never in its constructor (a trainer builds objects before its loop runs, or runs
  several loops in turn);
- `aclose()` releases what it holds, is idempotent, and leaves the object usable: the
  next use creates the resources again.

The runner (`rollouts`, `groups`, `collect`, `evaluate`, `reverify`) closes the
environment, its verifier and the harness it ran when the run ends — also on error and
cancellation — unless called with `keep_open=True` (what a training loop that calls
`groups` every step wants). The model is the caller's: whoever built it closes it
(`async with model:` or `await model.aclose()`); the `gym` CLI closes the ones it builds.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["aclose", "close_all", "is_interrupt"]

_INTERRUPTS = (KeyboardInterrupt, SystemExit, GeneratorExit)


def is_interrupt(exc: BaseException) -> bool:
    """A real stop: Ctrl-C, interpreter exit, or a cancellation someone asked for.

    A `CancelledError` that user code raised while nobody cancelled this task is not
    one: it is recorded as the rollout's failure (kind `cancelled`).
    """
    if isinstance(exc, _INTERRUPTS):
        return True
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is None or task.cancelling() > 0
    return False


async def aclose(obj: Any) -> None:
    """Await `obj.aclose()` when it has one (a sync `aclose` is called too)."""
    close = getattr(obj, "aclose", None)
    if close is None or not callable(close):
        return
    result = close()
    if inspect.isawaitable(result):
        await result


async def close_all(*objects: Any) -> None:
    """Close each distinct object once, in order; a failure is logged, the rest still close.

    A failure to release a resource must not lose the results of the run that used
    it, so it is logged (with its traceback) rather than raised.
    """
    seen: set[int] = set()
    for obj in objects:
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        try:
            await aclose(obj)
        except Exception:
            log.warning("closing %r failed", obj, exc_info=True)
