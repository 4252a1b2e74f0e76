"""Sandbox time of one rollout: the runner opens a `SandboxClock` per rollout and
providers charge their start, exec and teardown seconds to the current one.

A context variable, so every task the rollout starts (tool calls, a verifier's execs)
charges the same clock, and concurrent rollouts never mix.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "SandboxClock",
    "charge",
    "clocked_create",
    "current_clock",
    "released",
    "reset_clock",
    "timed",
    "use_clock",
]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


@dataclass
class SandboxClock:
    """Seconds spent on sandboxes in one rollout: `start_s` (create, or taking a warm
    one from a pool), `exec_s` (execs and file transfers), `teardown_s` (close, or the
    reset back into a pool); `execs` and `sandboxes` count them. `held_s` is how long
    the rollout held its sandboxes, from asking for each to the end of giving it back
    (what a service billing by the second bills, pooled idle time aside); `billed` the
    provider's billing units over that time where the service reports the rates (e.g.
    `vcpu_s`, `memory_gib_s`)."""

    start_s: float = 0.0
    exec_s: float = 0.0
    teardown_s: float = 0.0
    held_s: float = 0.0
    execs: int = 0
    sandboxes: int = 0
    billed: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float | int]:
        """Flat numbers, as `rollout.metadata["sandbox"]` carries them: each billing
        unit as `billed_<unit>`, so metrics aggregate every key alike."""
        out: dict[str, float | int] = {
            "start_s": round(self.start_s, 6),
            "exec_s": round(self.exec_s, 6),
            "teardown_s": round(self.teardown_s, 6),
            "held_s": round(self.held_s, 6),
            "execs": self.execs,
            "sandboxes": self.sandboxes,
        }
        for unit, amount in sorted(self.billed.items()):
            out[f"billed_{unit}"] = round(amount, 6)
        return out

    def bill(self, rates: Mapping[str, float], seconds: float) -> None:
        """Add `seconds` of holding a sandbox billed at `rates` (unit per second, e.g.
        `{"vcpu": 2, "memory_gib": 0.5}`), each as `<unit>_s`."""
        self.held_s += seconds
        for unit, rate in rates.items():
            key = f"{unit}_s"
            self.billed[key] = self.billed.get(key, 0.0) + rate * seconds


_CLOCK: contextvars.ContextVar[SandboxClock | None] = contextvars.ContextVar(
    "nemo_gym_sandbox_clock", default=None
)


def current_clock() -> SandboxClock | None:
    """The clock of the rollout running in this task, if any."""
    return _CLOCK.get()


def use_clock(clock: SandboxClock | None) -> contextvars.Token[SandboxClock | None]:
    """Make `clock` the current one (undo with `reset_clock(token)`)."""
    return _CLOCK.set(clock)


def reset_clock(token: contextvars.Token[SandboxClock | None]) -> None:
    _CLOCK.reset(token)


def charge(clock: SandboxClock | None, what: str, seconds: float) -> None:
    """Add `seconds` to the `what` field (`start_s`, `exec_s`, `teardown_s`) of `clock`."""
    if clock is not None:
        setattr(clock, what, getattr(clock, what) + seconds)


@contextmanager
def timed(what: str, *, execs: int = 0) -> Iterator[None]:
    """Charge the block's seconds to `what` of the current clock, and `execs` execs."""
    clock = current_clock()
    started = time.perf_counter()
    try:
        yield
    finally:
        charge(clock, what, time.perf_counter() - started)
        if clock is not None:
            clock.execs += execs


HELD_SINCE = "_nemo_gym_held_since"
"""The attribute `clocked_create` stamps on a sandbox: when its holder asked for it."""


def clocked_create(create: F) -> F:
    """For a provider's `create`: its seconds are `start_s`, one more sandbox is counted,
    and the sandbox is stamped so its `aclose` (through `released`) adds the held time."""

    @functools.wraps(create)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        clock = current_clock()
        started = time.perf_counter()
        try:
            sandbox = await create(*args, **kwargs)
        finally:
            charge(clock, "start_s", time.perf_counter() - started)
        if clock is not None:
            clock.sandboxes += 1
        setattr(sandbox, HELD_SINCE, started)
        return sandbox

    return wrapper  # type: ignore[return-value]


@contextmanager
def released(sandbox: object) -> Iterator[None]:
    """Around a sandbox's `aclose`: its seconds are `teardown_s`, and the time from
    asking for the sandbox to the end of giving it back is `held_s`."""
    clock = current_clock()
    started = time.perf_counter()
    try:
        yield
    finally:
        ended = time.perf_counter()
        charge(clock, "teardown_s", ended - started)
        since = getattr(sandbox, HELD_SINCE, None)
        if clock is not None and since is not None:
            clock.bill({}, ended - since)
