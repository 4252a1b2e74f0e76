"""`niah`: find the special number hidden in a long text (needle in a haystack)."""

from __future__ import annotations

import random

from nemo_gym.envs.base import Turns
from nemo_gym.envs.long_context.haystack import filler_sentences, key_name
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.long_context import PenalizeCopying, ReferenceMatch


class NIAH(ProceduralEnv):
    """One needle ("The special magic number for misty-falcon is: 4829103.") at a seeded
    depth in about `length` tokens of filler; the reply must state the number. The reward
    is discounted by how much of the model's reasoning is copied from the text (16-word
    n-grams), so searching beats pasting the haystack back."""

    name = "niah"
    version = "1"
    domain = "long_context"
    verification = "the number stated (RULER match), times 1 - the copied share of the reasoning"

    def __init__(
        self,
        *,
        seed: int = 0,
        size: int = 1000,
        length: int = 2000,
        depth: float | None = None,
        copy_ngram: int = 16,
    ) -> None:
        verifier = PenalizeCopying(ReferenceMatch("all"), n=copy_ngram)
        super().__init__(verifier, seed=seed, size=size, harness=SingleTurn())
        self.length, self.depth, self.copy_ngram = length, depth, copy_ngram

    def draw(self, rng: random.Random) -> Task:
        key, value = key_name(rng), str(rng.randint(1_000_000, 9_999_999))
        sentences = filler_sentences(rng, self.length)
        depth = rng.random() if self.depth is None else self.depth
        sentences.insert(
            int(depth * len(sentences)), f"The special magic number for {key} is: {value}."
        )
        prompt = (
            "A special magic number is hidden in the text below. Memorize it.\n\n"
            f"{' '.join(sentences)}\n\n"
            f"What is the special magic number for {key} mentioned in the text?"
        )
        return Task(prompt=prompt, answer=[value], metadata={"key": key, "depth": depth})

    def oracle(self, task: Task) -> Turns:
        return [
            Message.assistant(
                f"The special magic number for {task.metadata['key']} is {task.answer[0]}."
            )
        ]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("The special magic number is 1234.")]
