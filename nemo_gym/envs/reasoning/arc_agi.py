"""`arc_agi`: infer a grid transformation from examples and apply it (ARC-AGI layout)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import SingleTurn
from nemo_gym.limits import loads_json
from nemo_gym.records import Message, Rewards, Task, Trajectory
from nemo_gym.verify.common import response_text
from nemo_gym.verify.extract import last_boxed

Grid = list[list[int]]
_GRID = re.compile(r"\[\s*\[[\d\s,\[\]]*\]\s*\]")
RULES = {
    "flip_horizontal": lambda g: [row[::-1] for row in g],
    "flip_vertical": lambda g: g[::-1],
    "transpose": lambda g: [list(r) for r in zip(*g, strict=True)],
    "rotate": lambda g: [list(r) for r in zip(*g[::-1], strict=True)],
    "tile": lambda g: [row * 2 for row in g] * 2,
    "recolor": lambda g: [[(c % 9) + 1 if c else 0 for c in row] for row in g],
}


def show(grid: Grid) -> str:
    return "\n".join(" ".join(map(str, row)) for row in grid)


def parse_grid(text: str) -> Grid | None:
    """The last `\\boxed{[[...]]}` grid of a reply, else its last `[[...]]` grid."""
    boxed = last_boxed(text)
    for candidate in ([boxed] if boxed else []) + list(reversed(_GRID.findall(text))):
        try:
            grid = loads_json(re.sub(r"\s+", "", candidate))
        except ValueError:  # not JSON, or over the document limits
            continue
        if (
            isinstance(grid, list)
            and grid
            and all(isinstance(r, list) and r and all(isinstance(c, int) for c in r) for r in grid)
        ):
            return grid
    return None


async def verify_grid(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the reply's grid equals the expected output exactly."""
    grid = parse_grid(response_text(trajectory))
    return Rewards(reward=float(grid == task.answer), metadata={"extracted_answer": grid})


def arc_task(task_id: str, train: list[dict[str, Any]], test_input: Grid, output: Grid) -> Task:
    shown = "\n\n".join(
        f"Example {i + 1}:\nInput:\n{show(p['input'])}\n\nOutput:\n{show(p['output'])}"
        for i, p in enumerate(train)
    )
    prompt = (
        f"Find the rule that turns each input grid into its output grid.\n\n{shown}\n\n"
        f"Test input:\n{show(test_input)}\n\nGive the test output grid as \\boxed{{[[...], ...]}}."
    )
    return Task(
        id=task_id,
        prompt=prompt,
        answer=output,
        metadata={"train": train, "test_input": test_input},
    )


class ARCAGI(ProceduralEnv):
    """Procedural ARC-style puzzles (flips, rotations, tiling, recolouring of random grids,
    three examples each), or real ARC tasks from `path=`: a folder of ARC JSON files
    ({"train": [...], "test": [...]}, one task per file). Exact grid match."""

    name = "arc_agi"
    version = "1"
    domain = "reasoning"
    verification = "exact match of the output grid"
    source = "procedural; ARC-AGI JSON files (fchollet/ARC layout) via path="

    def __init__(
        self, *, seed: int = 0, size: int = 1000, path: str | None = None, max_side: int = 5
    ) -> None:
        super().__init__(verify_grid, seed=seed, size=size, harness=SingleTurn())
        self.path, self.max_side = path, max_side

    def draw(self, rng: random.Random) -> Task:
        rule = rng.choice(sorted(RULES))
        rows, cols = rng.randint(2, self.max_side), rng.randint(2, self.max_side)
        if rule in ("transpose", "rotate"):
            cols = rows
        grids = [
            [[rng.choice((0, 0, rng.randint(1, 9))) for _ in range(cols)] for _ in range(rows)]
            for _ in range(4)
        ]
        pairs = [{"input": g, "output": RULES[rule](g)} for g in grids]
        return arc_task("", pairs[:3], pairs[3]["input"], pairs[3]["output"])

    def tasks(self, split: str = "test", limit: int | None = None) -> Iterator[Task]:
        if self.path is None:
            yield from super().tasks(split, limit)
            return
        if split != "test":
            raise ConfigError(f"arc_agi: a folder of ARC files is one 'test' split, not {split!r}")
        files = sorted(Path(self.path).expanduser().glob("*.json"))
        if not files:
            raise ConfigError(f"arc_agi: no ARC .json files in {self.path}")
        for file in files[:limit]:
            try:
                data = json.loads(file.read_text("utf-8"))
                test = data["test"][0]
                yield arc_task(f"arc_agi-{file.stem}", data["train"], test["input"], test["output"])
            except (KeyError, IndexError, json.JSONDecodeError) as exc:
                raise ConfigError(f"{file}: not an ARC task ({type(exc).__name__}: {exc})") from exc

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(f"\\boxed{{{json.dumps(task.answer)}}}")]

    def wrong(self, task: Task) -> Turns:
        return (
            [Message.assistant(f"\\boxed{{{json.dumps(task.metadata['test_input'])}}}")]
            if task.metadata["test_input"] != task.answer
            else [Message.assistant("\\boxed{[[0]]}")]
        )
