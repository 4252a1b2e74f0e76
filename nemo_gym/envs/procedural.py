"""Procedurally generated tasks with reproducible, content-disjoint splits.

A `ProceduralEnv` draws each task from a generator seeded by (name, seed, split,
index), so the same options always give the same tasks. Splits are disjoint by
content, not only by seed: a drawn problem belongs to the split its content hashes to
(`split_of`), and a draw that belongs elsewhere is redrawn, so no test prompt is ever a
train prompt, however small the problem space.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator

from nemo_gym.envs.base import Env
from nemo_gym.errors import ConfigError
from nemo_gym.protocols import Harness, Verifier, VerifyFunction
from nemo_gym.records import Task

__all__ = ["SPLITS", "ProceduralEnv", "split_of"]

SPLITS = ("train", "validation", "test")
_SHARES = (("train", 60), ("validation", 80), ("test", 100))
_MAX_DRAWS = 200


def split_of(content: str) -> str:
    """The split a problem belongs to: 60% train, 20% validation, 20% test, by hash."""
    bucket = int.from_bytes(hashlib.sha256(content.encode()).digest()[:8], "big") % 100
    return next(name for name, end in _SHARES if bucket < end)


class ProceduralEnv(Env):
    """Tasks from `draw(rng)`; `size` bounds each split. Subclasses implement `draw`.

    `draw` returns a `Task` without an id (one is given: "<name>-<split>-<index>");
    `content(task)` (its prompt, by default) is what decides its split.
    """

    splits: tuple[str, ...] = SPLITS
    source = "procedural"
    license = "Apache-2.0"

    def __init__(
        self,
        verifier: Verifier | VerifyFunction,
        *,
        seed: int = 0,
        size: int = 10_000,
        harness: Harness | None = None,
    ) -> None:
        super().__init__(verifier, harness=harness)
        if size < 1:
            raise ConfigError(f"{self.name}: size must be >= 1, got {size}")
        self.seed, self.size = seed, size

    def draw(self, rng: random.Random) -> Task:
        raise NotImplementedError(f"{type(self).__name__} must implement draw()")

    def content(self, task: Task) -> str:
        """What makes two problems the same problem (the split is decided on it)."""
        return task.prompt if task.prompt is not None else str(task.messages[-1].content)

    def tasks(self, split: str = "test", limit: int | None = None) -> Iterator[Task]:
        given = self.given_tasks(split, limit)
        if given is not None:
            yield from given
            return
        if split not in self.splits:
            raise ConfigError(f"{self.name}: unknown split {split!r}; choose from {self.splits}")
        count = self.size if limit is None else min(limit, self.size)
        for index in range(count):
            yield self._task(split, index)

    def _task(self, split: str, index: int) -> Task:
        for attempt in range(_MAX_DRAWS):
            rng = random.Random(f"{self.name}:{self.seed}:{split}:{index}:{attempt}")
            task = self.draw(rng)
            if split_of(self.content(task)) == split:
                return task.model_copy(update={"id": f"{self.name}-{split}-{index}"})
        raise ConfigError(
            f"{self.name}: no {split!r} problem in {_MAX_DRAWS} draws; the options leave too "
            "few distinct problems"
        )
