"""Progress of a run on stderr: a rich progress bar on a terminal, plain lines elsewhere.

Both show rollouts done (of the total when known), rollouts/s, the time left, failures
so far and the mean reward of the ok rollouts. A resumed run counts the rows already in
its directory in all of these (as its summary does), its speed only the new ones. The
time left is the time per new rollout since the start (loading included) times the
rollouts left: a batch of local rollouts lands at once, so the gaps between landings
say nothing of the next batch.

`status` (a model's `activity()`) says what the run waits on between landings, polled
every second: loading the model, generating a batch and its tokens so far. On a
terminal it is a column of the bar; without one (a log file, CI) a line is printed when
it changes phase, a progress line every tenth of the total (or every `interval`
seconds when the total is unknown) but at most one a second, and once at the end.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from nemo_gym.records import Rollout

__all__ = ["Progress", "Tally"]

_COALESCE_S = 1.0


@dataclass(frozen=True, slots=True)
class Tally:
    """Rows already in a run directory when a run resumes."""

    done: int = 0
    ok: int = 0
    reward_sum: float = 0.0


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts rollouts as they land (`update`) and shows where the run is."""

    def __init__(
        self,
        total: int | None,
        *,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        interval: float = 30.0,
        description: str = "rollouts",
        already: Tally | None = None,
        status: Callable[[], str | None] | None = None,
        tick: float = 1.0,
    ) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.interval = interval
        self.description = description
        earlier = already or Tally()
        self.done, self.ok = earlier.done, earlier.ok
        self.failed = earlier.done - earlier.ok
        self.reward_sum = earlier.reward_sum
        self.new = 0
        self.started = time.monotonic()
        self._last_landed: float | None = None
        self._last_decile = 10 * self.done // total if total else 0
        self._last_line = self.started
        self._bar: Any = None
        self._task: Any = None
        self._status = status
        self._phase: str | None = None
        self._pending = False  # a progress line is due but was held back (see _flush)
        self._last_printed = float("-inf")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.terminal:
            self._start_bar()
        if status is not None:
            self._ticker = threading.Thread(
                target=self._poll, args=(tick,), name="nemo_gym-progress", daemon=True
            )
            self._ticker.start()

    def _start_bar(self) -> None:
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as Bar
        except ImportError:  # the `cli` extra is not installed: plain lines
            self.terminal = False
            return
        console = Console(file=self.stream, force_terminal=True)
        self._bar = Bar(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} rollouts/s"),
            TextColumn("ETA {task.fields[eta]}"),
            TimeElapsedColumn(),
            TextColumn("failed [red]{task.fields[failed]}[/]"),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("[dim]{task.fields[status]}[/]"),
            console=console,
            transient=False,
        )
        self._bar.start()
        mean = self.mean_reward
        self._task = self._bar.add_task(
            self.description,
            total=self.total,
            completed=self.done,
            rate="0.0",
            eta="?",
            failed=self.failed,
            reward="-" if mean is None else f"{mean:.3f}",
            status="",
        )

    @property
    def rate(self) -> float:
        """Rollouts of this run per second since the start."""
        return self.new / max(1e-9, time.monotonic() - self.started)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.ok if self.ok else None

    def eta(self) -> float | None:
        """Seconds left, when the total is known and the landings so far give a rate."""
        if not self.total:
            return None
        left = max(0, self.total - self.done)
        if left == 0:
            return 0.0
        last = self._last_landed
        if last is None or not self.new:
            return None
        # From the start, not from the first landing: rollouts batched on a local model
        # land together, and the gaps between them say nothing of the next batch.
        return left * (last - self.started) / self.new

    def update(self, rollout: Rollout) -> None:
        with self._lock:
            now = time.monotonic()
            self.done += 1
            self.new += 1
            self._last_landed = now
            if rollout.ok:
                self.ok += 1
                self.reward_sum += rollout.reward or 0.0
            else:
                self.failed += 1
            if self._bar is not None:
                mean = self.mean_reward
                eta = self.eta()
                self._bar.update(
                    self._task,
                    advance=1,
                    rate=f"{self.rate:.1f}",
                    eta="?" if eta is None else _duration(eta),
                    failed=self.failed,
                    reward="-" if mean is None else f"{mean:.3f}",
                )
                return
            if self.total:
                decile = 10 * self.done // self.total
                due = decile != self._last_decile
                if due:
                    self._last_decile = decile
            else:
                due = now - self._last_line >= self.interval
            if due or self._pending:
                self._flush(now)

    def _flush(self, now: float) -> None:
        # Rollouts batched on a local model land together: one line for the lot, not a
        # line per tenth within the same second (the poller or close() prints the rest).
        if now - self._last_printed >= _COALESCE_S:
            self._pending = False
            self._print(self.line())
        else:
            self._pending = True

    def _print(self, text: str) -> None:
        self._last_line = self._last_printed = time.monotonic()
        print(text, file=self.stream, flush=True)

    def _poll(self, tick: float) -> None:
        """Show what the run waits on: the status column, or a line per new phase."""
        assert self._status is not None
        while not self._stop.wait(tick):
            try:
                status = self._status()
            except Exception:  # a display must never take the run down
                status = None
            with self._lock:
                if self._stop.is_set():
                    return
                if self._bar is not None:
                    self._bar.update(self._task, status=status or "")
                    continue
                if self._pending:
                    self._flush(time.monotonic())
                phase = status.split(":")[0] if status else None
                quiet = time.monotonic() - self._last_line >= self.interval
                if status and (phase != self._phase or quiet):
                    self._print(f"{self.description} {self.done}: {status}")
                self._phase = phase

    def line(self) -> str:
        """The plain progress line."""
        total = f"/{self.total}" if self.total else ""
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        eta = self.eta()
        mean = self.mean_reward
        return (
            f"{self.description} {self.done}{total}{share}  {self.rate:.1f} rollouts/s  "
            f"ETA {'?' if eta is None else _duration(eta)}  "
            f"elapsed {_duration(time.monotonic() - self.started)}  failed {self.failed}  "
            f"reward {'-' if mean is None else f'{mean:.3f}'}"
        )

    def close(self) -> None:
        """Stop the display (idempotent); without a terminal, print the last line."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None
            elif self._pending or (self.new and (self.total is None or self._last_decile < 10)):
                self._print(self.line())
