"""`spartqa`: spatial reasoning over described scenes; choose X, Y, both or none (SpartQA CO)."""

from __future__ import annotations

import itertools
import random

from nemo_gym.envs.base import Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.envs.prompts import answer_line
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.labels import LabelMatch

SIZES, COLORS = ("small", "medium", "big"), ("red", "blue", "yellow", "black", "green")
SHAPES = ("circle", "square", "triangle")
RELATIONS = {"left of": (0, -1), "right of": (0, 1), "above": (1, -1), "below": (1, 1)}
BOTH, NONE = "both of them", "none of them"
ALIASES = {BOTH: ["both", "both objects"], NONE: ["none", "neither", "neither of them"]}
PROMPT = """Answer the spatial reasoning question below. Choose exactly one of the candidate \
answers and copy it. Answer "both of them" if both listed objects satisfy the question, \
"none of them" if neither does.
End your response with one line: Final answer: <candidate answer>

Story: {story}

Question: {question}

Candidate answers: {candidates}"""


class SpartQA(ProceduralEnv):
    """Objects placed on a grid, described only by chains of relations ("the small red
    circle is left of the big blue square"); the question needs those relations composed
    (transitivity). SpartQA's choose-object form; the answer must name one candidate."""

    name = "spartqa"
    version = "1"
    domain = "reasoning"
    verification = "the one candidate label named (LabelMatch)"

    def __init__(self, *, seed: int = 0, size: int = 1000, objects: int = 5) -> None:
        super().__init__(LabelMatch(), seed=seed, size=size, harness=SingleTurn())
        self.objects = objects

    def draw(self, rng: random.Random) -> Task:
        names: list[str] = []
        while len(names) < self.objects:
            name = f"the {rng.choice(SIZES)} {rng.choice(COLORS)} {rng.choice(SHAPES)}"
            names += [name] if name not in names else []
        place = {
            n: (x, y)
            for n, x, y in zip(
                names,
                rng.sample(range(9), self.objects),
                rng.sample(range(9), self.objects),
                strict=True,
            )
        }
        facts = []
        for axis, word in ((0, "left of"), (1, "above")):
            order = sorted(names, key=lambda n: place[n][axis])
            facts += [f"{a} is {word} {b}" for a, b in itertools.pairwise(order)]
        rng.shuffle(facts)
        relation = rng.choice(sorted(RELATIONS))
        axis, sign = RELATIONS[relation]
        anchor = rng.choice(names)
        x, y = rng.sample([n for n in names if n != anchor], 2)

        def holds(n: str) -> bool:  # left/above: a smaller coordinate; right/below: larger
            return (place[n][axis] - place[anchor][axis]) * sign > 0

        gold = {(True, True): BOTH, (False, False): NONE, (True, False): x, (False, True): y}[
            (holds(x), holds(y))
        ]
        labels = [x, y, BOTH, NONE]
        question = f"Which object is {relation} {anchor}: {x} or {y}?"
        story = ". ".join(f[0].upper() + f[1:] for f in facts) + "."
        prompt = PROMPT.format(story=story, question=question, candidates="; ".join(labels))
        return Task(prompt=prompt, answer=gold, metadata={"labels": labels, "aliases": ALIASES})

    def oracle(self, task: Task) -> Turns:
        return [
            Message.assistant(answer_line(task.answer, "Composing the relations step by step."))
        ]

    def wrong(self, task: Task) -> Turns:
        other = next(label for label in task.metadata["labels"] if label != task.answer)
        return [Message.assistant(answer_line(other))]
