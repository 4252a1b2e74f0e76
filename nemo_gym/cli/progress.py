"""Progress of a run on stderr: a rich progress bar on a terminal, plain lines elsewhere.

Both show rollouts done (of the total when known), rollouts/s, the time left, failures
so far and the mean reward of the ok rollouts. Without a terminal (a log file, CI) a
line is printed every tenth of the total, or every `interval` seconds when the total
is unknown, and once at the end.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from nemo_gym.records import Rollout

__all__ = ["Progress"]


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
    ) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.interval = interval
        self.description = description
        self.done = self.failed = self.ok = 0
        self.reward_sum = 0.0
        self.started = time.monotonic()
        self._last_decile = 0
        self._last_line = self.started
        self._bar: Any = None
        self._task: Any = None
        if self.terminal:
            self._start_bar()

    def _start_bar(self) -> None:
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
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
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TimeElapsedColumn(),
            TextColumn("failed [red]{task.fields[failed]}[/]"),
            TextColumn("reward {task.fields[reward]}"),
            console=console,
            transient=False,
        )
        self._bar.start()
        self._task = self._bar.add_task(
            self.description, total=self.total, rate="0.0", failed=0, reward="-"
        )

    @property
    def rate(self) -> float:
        """Rollouts per second since the start."""
        return self.done / max(1e-9, time.monotonic() - self.started)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.ok if self.ok else None

    def eta(self) -> float | None:
        """Seconds left at the current rate, when the total is known."""
        if not self.total or not self.done:
            return None
        return max(0, self.total - self.done) / self.rate

    def update(self, rollout: Rollout) -> None:
        self.done += 1
        if rollout.ok:
            self.ok += 1
            self.reward_sum += rollout.reward or 0.0
        else:
            self.failed += 1
        if self._bar is not None:
            mean = self.mean_reward
            self._bar.update(
                self._task,
                advance=1,
                rate=f"{self.rate:.1f}",
                failed=self.failed,
                reward="-" if mean is None else f"{mean:.3f}",
            )
            return
        now = time.monotonic()
        if self.total:
            decile = 10 * self.done // self.total
            due = decile != self._last_decile
            if due:
                self._last_decile = decile
        else:
            due = now - self._last_line >= self.interval
        if due:
            self._last_line = now
            print(self.line(), file=self.stream, flush=True)

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
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.done and (self.total is None or self._last_decile < 10):
            print(self.line(), file=self.stream, flush=True)
