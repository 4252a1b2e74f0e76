"""`multikey_retrieval`: many key-value pairs in a long text; retrieve the asked keys' values."""

from __future__ import annotations

import random
import uuid

from nemo_gym.envs.base import Turns
from nemo_gym.envs.long_context.haystack import filler_sentences, key_name
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.long_context import ReferenceMatch


class MultiKeyRetrieval(ProceduralEnv):
    """RULER's multi-key needles: `keys` pairs "The value of key misty-falcon is <uuid>."
    in about `length` tokens; `asked` of them are asked for, and the reward is the share
    of their values the reply gives."""

    name = "multikey_retrieval"
    version = "1"
    domain = "long_context"
    verification = "the share of the asked values given (RULER string match, all)"

    def __init__(
        self, *, seed: int = 0, size: int = 1000, length: int = 2000, keys: int = 8, asked: int = 2
    ) -> None:
        super().__init__(ReferenceMatch("all"), seed=seed, size=size, harness=SingleTurn())
        self.length, self.keys, self.asked = length, keys, asked

    def draw(self, rng: random.Random) -> Task:
        names: list[str] = []
        while len(names) < self.keys:
            name = key_name(rng)
            names += [name] if name not in names else []
        values = {n: str(uuid.UUID(int=rng.getrandbits(128))) for n in names}
        sentences = filler_sentences(rng, self.length)
        for name in names:
            sentences.insert(
                rng.randrange(len(sentences) + 1), f"The value of key {name} is {values[name]}."
            )
        asked = rng.sample(names, self.asked)
        prompt = (
            f"Some keys and their values are hidden in the text below.\n\n{' '.join(sentences)}\n\n"
            f"What are the values of the keys {', '.join(asked)}? Give each key with its value."
        )
        return Task(prompt=prompt, answer=[values[k] for k in asked], metadata={"keys": asked})

    def oracle(self, task: Task) -> Turns:
        pairs = ", ".join(
            f"{k}: {v}" for k, v in zip(task.metadata["keys"], task.answer, strict=True)
        )
        return [Message.assistant(pairs)]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(f"{task.metadata['keys'][0]}: {task.answer[0]}")]
