"""`reasoning_gym`: any of reasoning-gym's 100+ procedural datasets, by name.

```python
env = gym.make("reasoning_gym", dataset="leg_counting")
env = gym.make("reasoning_gym/knights_knaves", config={"n_people": 3})
```

Scored by the dataset's own `score_answer`, on the answer in `<answer>...</answer>`
(else the last `\\boxed{}`, else the whole reply), except where that scorer is broken:

- `game_of_life_halting`: its scorer compares `bool(answer)` with `bool(gold)` of two
  non-empty strings, so every non-empty answer scores 1.0; we compare the answers read
  as True/False.
- `prime_factorization`: its scorer raises on an answer that is not a product of
  integers; we score such an answer 0.0.

Some datasets accept several answers and their stored one need not be the one scored
(boxnet, graph_color, propositional_logic, rubiks_cube, rush_hour); those have no
oracle. Needs the `reasoning` extra (`reasoning-gym`).
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from nemo_gym.envs.base import Env, Turns
from nemo_gym.envs.procedural import SPLITS, split_of
from nemo_gym.errors import ConfigError, VerifierError, require
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Rewards, Task, Trajectory
from nemo_gym.verify.common import response_text
from nemo_gym.verify.extract import last_boxed

INSTRUCTION = "Give your final answer inside <answer></answer> tags."
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_TRUE = ("true", "yes", "halts", "1")


def read_answer(reply: str) -> str:
    """The answer the scorer is given: the last <answer> tag, else \\boxed{}, else all."""
    tags = _ANSWER.findall(reply)
    if tags:
        return tags[-1].strip()
    boxed = last_boxed(reply)
    return boxed.strip() if boxed is not None else reply.strip()


def _halting(answer: str, entry: Mapping[str, Any]) -> float:
    said = answer.strip().lower().strip(".")
    gold = str(entry["answer"]).strip().lower()
    return float(said in ("true", "false") and (said == "true") == (gold in _TRUE))


FIXED: dict[str, Callable[[Any, str, Mapping[str, Any]], float]] = {
    "game_of_life_halting": lambda data, answer, entry: _halting(answer, entry),
}


@functools.cache
def _module() -> Any:
    return require("reasoning_gym", "reasoning")


def score(dataset: Any, name: str, answer: str, entry: Mapping[str, Any]) -> float:
    """The dataset's score of `answer`, with the fixes of the module doc."""
    if name in FIXED:
        return FIXED[name](dataset, answer, entry)
    try:
        return float(dataset.score_answer(answer=answer, entry=dict(entry)))
    except ValueError:
        if name == "prime_factorization":
            return 0.0
        raise


class ReasoningGym(Env):
    """One reasoning-gym dataset (`dataset=`, with `config=` its options), `size` tasks a
    split; splits are disjoint by question (a question belongs to the split it hashes to)."""

    name = "reasoning_gym"
    version = "1"
    domain = "reasoning"
    verification = "the dataset's own scorer (known-broken scorers fixed)"
    source = "procedural (reasoning-gym 0.1.25)"
    license = "Apache-2.0 (reasoning-gym)"
    requires = ("extra:reasoning",)
    splits = SPLITS

    def __init__(
        self,
        *,
        dataset: str,
        config: Mapping[str, Any] | None = None,
        seed: int = 0,
        size: int = 500,
    ) -> None:
        super().__init__(self._verify, harness=SingleTurn())
        names = _module().factory.DATASETS
        if dataset not in names:
            raise ConfigError(
                f"reasoning_gym: no dataset {dataset!r}; known: {', '.join(sorted(names))}"
            )
        self.dataset, self.config, self.seed, self.size = dataset, dict(config or {}), seed, size
        self.name = f"reasoning_gym/{dataset}"
        self._scorers: dict[str, Any] = {}

    def _generator(self, count: int) -> Any:
        return _module().create_dataset(self.dataset, seed=self.seed, size=count, **self.config)

    def _scorer(self, task: Task) -> tuple[str, Any]:
        """The dataset a task came from (its entry's `source_dataset`, else ours) and its scorer."""
        entry = task.metadata["entry"]
        name = str((entry.get("metadata") or {}).get("source_dataset") or self.dataset)
        if name not in self._scorers:
            config = self.config if name == self.dataset else {}
            self._scorers[name] = _module().create_dataset(name, seed=self.seed, size=1, **config)
        return name, self._scorers[name]

    def tasks(self, split: str = "test", limit: int | None = None) -> Iterator[Task]:
        given = self.given_tasks(split, limit)
        if given is not None:
            yield from given
            return
        if split not in self.splits:
            raise ConfigError(f"{self.name}: unknown split {split!r}; choose from {self.splits}")
        wanted = self.size if limit is None else min(limit, self.size)
        data, produced, index = self._generator(max(64, wanted * 6)), 0, 0
        while produced < wanted:
            if index >= len(data):
                data = self._generator(len(data) * 2)
            entry = data[index]
            index += 1
            if split_of(str(entry["question"])) != split:
                continue
            produced += 1
            yield Task(
                id=f"{self.name}-{split}-{index - 1}",
                prompt=f"{entry['question']}\n\n{INSTRUCTION}",
                answer=None if entry["answer"] is None else str(entry["answer"]),
                metadata={
                    "entry": {
                        "question": entry["question"],
                        "answer": entry["answer"],
                        "metadata": entry.get("metadata", {}),
                    }
                },
            )

    async def _verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        name, scorer = self._scorer(task)
        answer = read_answer(response_text(trajectory))
        try:
            value = await asyncio.to_thread(score, scorer, name, answer, task.metadata["entry"])
        except Exception as exc:
            raise VerifierError(f"{self.name}: the dataset's scorer raised {exc!r}") from exc
        return Rewards(
            reward=value, components={"score": value}, metadata={"extracted_answer": answer}
        )

    def oracle(self, task: Task) -> Turns | None:
        if task.answer is None:
            return None
        name, scorer = self._scorer(task)
        if score(scorer, name, task.answer, task.metadata["entry"]) < 1.0:
            return None  # several answers are right, and the stored one is not scored as one
        return [Message.assistant(f"<answer>{task.answer}</answer>")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("<answer>zebra quartz 42</answer>")]


def for_dataset(dataset: str) -> Callable[..., ReasoningGym]:
    """The factory behind `reasoning_gym/<dataset>` names."""
    return functools.partial(ReasoningGym, dataset=dataset)
