"""One definition of a run's options.

`rollouts`, `groups`, `collect`, `evaluate` and the Ray backend take the same keyword
options. They are declared once, here: `RunSettings` holds every option with its one
default and its one docstring; the `TypedDict`s below name which of them each entry
point takes, for `**options: Unpack[...]` signatures, so a type checker (and an IDE)
catches `concurency=4`. At run time the same names are checked by `RunSettings.of`,
which raises `TypeError` naming the unknown option and the closest known one.

```python
gym.rollouts(env, model, repeats=4, concurrency=64)             # StreamOptions
await gym.collect(env, model, output="runs/x", retry_failed=True)  # CollectOptions
```
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from nemo_gym.protocols import Harness
from nemo_gym.records import Rollout, Sampling, Task

__all__ = [
    "DEFAULT_CONCURRENCY",
    "CollectOptions",
    "RunOptions",
    "RunSettings",
    "StreamOptions",
]

DEFAULT_CONCURRENCY = 32
"""Rollouts in flight when the caller says nothing (API and CLI alike)."""

Skip = set[tuple[str, int]] | frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """Every option of a run, with its default. Build it with `RunSettings.of(options)`."""

    harness: Harness | None = None
    """The agent loop; default: the environment's own (`env.harness`), else `SingleTurn`."""
    tasks: Iterable[Task] | None = None
    """The tasks to run (pulled lazily); default: `env.tasks(split, limit)`."""
    split: str = "test"
    """The split `env.tasks` is asked for."""
    limit: int | None = None
    """At most this many tasks (of each part, in a mixed run)."""
    repeats: int = 1
    """Rollouts per task; each repeat gets a seed of its own."""
    concurrency: int = DEFAULT_CONCURRENCY
    """Rollouts in flight at once."""
    seed: int | None = 0
    """The run's seed: each (task, repeat) gets `derive_seed(seed, task.id, repeat)`,
    which overrides any seed the harness or `sampling` sets; None sends none."""
    sampling: Sampling | None = None
    """Run-level sampling, over the harness's and the adapter's defaults."""
    timeout: float | None = None
    """Seconds one rollout may take, verification included (a `timeout` failure)."""
    keep_open: bool = False
    """Leave the environment, its verifier and the harness open at the end (a training
    loop that runs a stream every step); the model is always the caller's."""
    run_id: str | None = None
    """The id every rollout of the stream carries; default: a fresh one."""
    skip: Skip | None = None
    """(task id, repeat) pairs already done, left out of the stream."""
    retry_failed: bool = False
    """On resume, run again the (task, repeat)s whose stored row failed."""
    success_threshold: float = 1.0
    """The reward at or above which a rollout counts as a success (pass@k, rates)."""
    on_rollout: Callable[[Rollout], None] | None = None
    """Called with each rollout as it finishes (after its line is written, with output)."""
    shard: tuple[int, int] | None = None
    """`(index, count)`: run every `count`-th task of each part, from `index`."""
    backend: Literal["local", "ray"] = "local"
    """Where rollouts run: this process, or Ray actors (`nemo_gym.integrations.ray`)."""
    workers: int | None = None
    """Ray actors with `backend="ray"` (default 2)."""

    @classmethod
    def of(cls, options: Mapping[str, Any], allowed: frozenset[str], where: str) -> RunSettings:
        """The settings `options` give, after checking each name is one `where` takes."""
        for name in options:
            if name not in allowed:
                close = difflib.get_close_matches(name, sorted(allowed), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"{where}() got an unexpected keyword argument {name!r}{hint}")
        return cls(**options)

    def replace(self, **changes: Any) -> RunSettings:
        """A copy with `changes`."""
        return dataclasses.replace(self, **changes)


class RunOptions(TypedDict, total=False):
    """The options every entry point takes (see `RunSettings` for each one's meaning)."""

    harness: Harness | None
    tasks: Iterable[Task] | None
    split: str
    limit: int | None
    repeats: int
    concurrency: int
    seed: int | None
    sampling: Sampling | None
    timeout: float | None
    keep_open: bool


class StreamOptions(RunOptions, total=False):
    """The options of a stream: `rollouts`, `groups` (which needs `repeats`), Ray's."""

    run_id: str | None
    skip: Skip | None


class CollectOptions(RunOptions, total=False):
    """The options of a run written to (or gathered like) a run directory: `collect`,
    `evaluate`."""

    retry_failed: bool
    success_threshold: float
    on_rollout: Callable[[Rollout], None] | None
    shard: tuple[int, int] | None
    backend: Literal["local", "ray"]
    workers: int | None


STREAM_OPTIONS: frozenset[str] = StreamOptions.__optional_keys__
COLLECT_OPTIONS: frozenset[str] = CollectOptions.__optional_keys__
