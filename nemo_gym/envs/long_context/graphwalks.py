"""`graphwalks`: parents of a node, or the nodes at a BFS depth, in a long list of edges."""

from __future__ import annotations

import random
from collections import deque

from nemo_gym.envs.base import Turns
from nemo_gym.envs.long_context.haystack import CHARS_PER_TOKEN
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.long_context import NodeSetF1, PenalizeCopying

INTRO = (
    "You will be given a graph as a list of directed edges. All nodes are at least degree 1. "
    "You will also get a description of an operation to perform on the graph."
)
ENDING = (
    "You should reason through the operation step by step, and then return the set of nodes "
    "that the operation results in. End with a final line of the form: "
    "Final Answer: [node1, node2, ...]"
)


class GraphWalks(ProceduralEnv):
    """OpenAI GraphWalks' task: edges "a -> b" between hex node ids, about `length` tokens
    of them; "parents of X" or "nodes at exactly depth d of a BFS from X". F1 of the final
    node list against the true set (an empty set answered empty is 1)."""

    name = "graphwalks"
    version = "1"
    domain = "long_context"
    verification = "F1 of the 'Final Answer: [...]' node set (optionally less copied reasoning)"

    def __init__(
        self,
        *,
        seed: int = 0,
        size: int = 1000,
        length: int = 1500,
        depth: int = 2,
        copy_ngram: int | None = None,
    ) -> None:
        verifier = NodeSetF1() if copy_ngram is None else PenalizeCopying(NodeSetF1(), n=copy_ngram)
        super().__init__(verifier, seed=seed, size=size, harness=SingleTurn())
        self.length, self.depth, self.copy_ngram = length, depth, copy_ngram

    def draw(self, rng: random.Random) -> Task:
        edges_wanted = max(8, self.length * CHARS_PER_TOKEN // 26)
        nodes = [f"{rng.getrandbits(40):010x}" for _ in range(max(6, edges_wanted // 3))]
        edges = sorted({(a, b) for a, b in (rng.sample(nodes, 2) for _ in range(edges_wanted))})
        rng.shuffle(edges)
        start = rng.choice([a for a, _ in edges])
        if rng.random() < 0.5:
            answer = sorted({a for a, b in edges if b == start})
            operation = f"Find the parents of node {start}."
        else:
            level, seen, queue = {start: 0}, {start}, deque([start])
            while queue:
                node = queue.popleft()
                for a, b in edges:
                    if a == node and b not in seen:
                        seen.add(b)
                        level[b] = level[node] + 1
                        queue.append(b)
            answer = sorted(n for n, d in level.items() if d == self.depth)
            operation = (
                f"Perform a BFS from node {start} and return only the nodes at exactly "
                f"depth {self.depth}."
            )
        listing = "\n".join(f"{a} -> {b}" for a, b in edges)
        prompt = (
            f"{INTRO}\n\nThe graph has the following edges:\n{listing}\n\n"
            f"Operation:\n{operation}\n\n{ENDING}"
        )
        return Task(prompt=prompt, answer=answer, metadata={"operation": operation})

    def oracle(self, task: Task) -> Turns:
        return [
            Message.assistant(
                f"Working through the edges.\nFinal Answer: [{', '.join(task.answer)}]"
            )
        ]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("Final Answer: [0000000000]")]
