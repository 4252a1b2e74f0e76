"""`variable_tracking`: follow chains of variable assignments through a long text (RULER vt)."""

from __future__ import annotations

import random
import string

from nemo_gym.envs.base import Turns
from nemo_gym.envs.long_context.haystack import filler_sentences
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.long_context import ReferenceMatch


class VariableTracking(ProceduralEnv):
    """RULER's variable tracking: `VAR ABCDE = 12345` then `VAR FGHIJ = VAR ABCDE` ...
    (`hops` assignments per chain, `chains` chains) scattered through about `length`
    tokens; the reply must name every variable of the asked chain (RULER's all-match:
    the share of the chain named)."""

    name = "variable_tracking"
    version = "1"
    domain = "long_context"
    verification = "the share of the chain's variables named (RULER string match, all)"

    def __init__(
        self, *, seed: int = 0, size: int = 1000, length: int = 2000, hops: int = 4, chains: int = 2
    ) -> None:
        super().__init__(ReferenceMatch("all"), seed=seed, size=size, harness=SingleTurn())
        self.length, self.hops, self.chains = length, hops, chains

    def draw(self, rng: random.Random) -> Task:
        names: list[str] = []
        while len(names) < self.hops * self.chains:
            name = "".join(rng.choices(string.ascii_uppercase, k=5))
            names += [name] if name not in names else []
        values = rng.sample(range(10_000, 99_999), self.chains)
        sentences = filler_sentences(rng, self.length)
        chains = [names[i * self.hops : (i + 1) * self.hops] for i in range(self.chains)]
        slots = sorted(rng.sample(range(len(sentences)), self.hops * self.chains))
        statements = []
        for hop in range(self.hops):
            for chain, value in zip(chains, values, strict=True):
                rhs = str(value) if hop == 0 else f"VAR {chain[hop - 1]}"
                statements.append(f"VAR {chain[hop]} = {rhs}.")
        for slot, statement in zip(reversed(slots), reversed(statements), strict=True):
            sentences.insert(slot, statement)
        prompt = (
            "Memorize and track the chains of variable assignments in the text below.\n\n"
            f"{' '.join(sentences)}\n\n"
            f"Question: find every variable that is assigned the value {values[0]}, directly or "
            "through "
            "other variables. Answer with their names."
        )
        return Task(prompt=prompt, answer=chains[0], metadata={"value": values[0]})

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant("The variables are: " + ", ".join(task.answer) + ".")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("The variables are: " + task.answer[0] + ".")]
