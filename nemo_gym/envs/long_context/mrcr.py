"""`mrcr`: a long chat of similar requests; reproduce the n-th answer about one topic (MRCR)."""

from __future__ import annotations

import random
import string

from nemo_gym.envs.base import Turns
from nemo_gym.envs.long_context.haystack import filler_sentences, tokens
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.long_context import SequenceRatio

FORMS = ("poem", "short story", "riddle", "news flash", "letter")
TOPICS = ("lighthouses", "tea", "snow", "owls", "trains", "bread", "rivers", "clocks")


class MRCR(ProceduralEnv):
    """OpenAI MRCR's task: the conversation asks for several pieces of the same form and
    topic among others; the last request is to repeat the n-th of them, prefixed with a
    random string. Graded as MRCR grades: 0 without the prefix, else the similarity
    (difflib) of the rest with the original."""

    name = "mrcr"
    version = "1"
    domain = "long_context"
    verification = "prefix required, then difflib similarity with the original (MRCR)"

    def __init__(
        self, *, seed: int = 0, size: int = 1000, length: int = 2000, needles: int = 2
    ) -> None:
        super().__init__(SequenceRatio(), seed=seed, size=size, harness=SingleTurn())
        self.length, self.needles = length, needles

    def draw(self, rng: random.Random) -> Task:
        form, topic = rng.choice(FORMS), rng.choice(TOPICS)
        turns: list[Message] = []
        written: list[str] = []
        needles = self.needles
        while tokens(" ".join(m.content or "" for m in turns)) < self.length or needles:
            same = needles and rng.random() < 0.3
            f, t = (form, topic) if same else (rng.choice(FORMS), rng.choice(TOPICS))
            if (f, t) == (form, topic) and not needles:
                continue
            text = " ".join(filler_sentences(rng, rng.randint(40, 90)))
            turns += [Message.user(f"Write a {f} about {t}."), Message.assistant(text)]
            if (f, t) == (form, topic):
                written.append(text)
                needles -= 1
        which = rng.randint(1, len(written))
        prefix = "".join(rng.choices(string.ascii_letters + string.digits, k=10))
        ordinal = {1: "1st", 2: "2nd", 3: "3rd"}.get(which, f"{which}th")
        ask = Message.user(
            f"Prepend {prefix} to the {ordinal} {form} about {topic}. Reply with that text only."
        )
        return Task(
            messages=(*turns, ask),
            answer=prefix + written[which - 1],
            metadata={"prefix": prefix, "needles": self.needles},
        )

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(task.answer)]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(task.metadata["prefix"] + "I do not remember it.")]
