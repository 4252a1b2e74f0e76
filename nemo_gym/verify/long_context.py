"""Long-context scoring: retrieved references, node sets, reproduced text, copying.

- `ReferenceMatch`: RULER's string match. `mode="all"` is the fraction of references the
  reply contains, `mode="any"` whether it contains one (case-insensitive; a task's
  `metadata["match"]` overrides the mode). RULER v2's two more: `"part"` is `"any"` on the
  reply without its `Document N:` blocks (a document quoted back is not its index),
  `"2steps"` is `"all"` on the reply's last paragraph (the answer after the copied
  question). `soft=True`
  also credits a near miss with 1 - word error rate (RULER v2), never below 0. Unlike
  RULER, a reference is not found in text the reply copied from the prompt (runs of
  `copy_span` words or more: echoing the context names every value in it); where the
  references are passages of the prompt to copy (`metadata["copy"] = "passages"`), a
  reply copying such a run from outside them scores 0 instead; and a reply
  that names more numbers or ids shaped like the references than there are references
  scores 0 (hedging: listing candidates until one is right).
- `NodeSetF1`: GraphWalks' F1 between the node list on the reply's last line
  (`Final Answer: [a, b]`, quoted or not) and the gold set.
- `SequenceRatio`: MRCR's grade: 0 unless the reply starts with the task's required
  prefix, else difflib's similarity of the rest with the gold text.
- `PenalizeCopying`: wraps a verifier and discounts its reward by how much of the
  model's reasoning is copied from the prompt (the share of its word n-grams found
  there), so long-context training rewards reading, not pasting.
"""

from __future__ import annotations

import json
import re
from difflib import SequenceMatcher
from typing import Any, Literal

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.protocols import Verifier, VerifyFunction, as_verifier
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import GoldFn, get_gold, response_text

__all__ = [
    "MATCH_MODES",
    "MatchMode",
    "NodeSetF1",
    "PenalizeCopying",
    "ReferenceMatch",
    "SequenceRatio",
    "copied_share",
    "parse_final_list",
    "without_copies",
    "word_error_rate",
]

_FINAL_LIST = re.compile(r"Final Answer:\s*\[(.*)\]", re.IGNORECASE)
# RULER v2's (NeMo Skills' `string_match_part`): a header line and its text up to a blank line.
_DOCUMENT_BLOCK = re.compile(r"Document \d+:(?:.*\n)+?\n")
MatchMode = Literal["all", "any", "part", "2steps"]
MATCH_MODES: tuple[str, ...] = ("all", "any", "part", "2steps")


def _references(task: Task, gold: GoldFn | None) -> list[str]:
    value = get_gold(task, gold)
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            decoded = value
        value = decoded
    refs = [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
    if not refs:
        raise VerifierError(f"task {task.id}: no reference answers")
    return refs


def word_error_rate(hypothesis: str, reference: str) -> float:
    """Word-level Levenshtein distance over the reference's length (inf for an empty one)."""
    hyp, ref = hypothesis.split(), reference.split()
    if not ref:
        return float("inf")
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1] / len(ref)


class ReferenceMatch:
    """RULER's match of the reply against the reference strings (see the module doc)."""

    def __init__(
        self,
        mode: MatchMode = "all",
        *,
        soft: bool = False,
        gold: GoldFn | None = None,
        copy_span: int | None = 16,
    ) -> None:
        if mode not in MATCH_MODES:
            raise ConfigError(f"ReferenceMatch mode must be one of {MATCH_MODES}, got {mode!r}")
        self.mode, self.soft, self.gold = mode, soft, gold
        self.copy_span = copy_span

    def _one(self, reply: str, reference: str) -> float:
        hit = float(reference.lower() in reply)
        if not self.soft or hit:
            return hit
        return max(0.0, 1.0 - word_error_rate(reply, reference.lower()))

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        refs = _references(task, self.gold)
        reply = response_text(trajectory)
        mode = task.metadata.get("match", self.mode)
        if mode not in MATCH_MODES:
            raise VerifierError(f"task {task.id}: match must be one of {MATCH_MODES}, not {mode!r}")
        if mode == "part":
            reply = _DOCUMENT_BLOCK.sub("", reply)
        elif mode == "2steps":
            reply = reply.split("\n\n")[-1]
        source = "\n".join(m.content or "" for m in task.messages)
        hedged = None
        if task.metadata.get("copy") == "passages":
            # The references are passages of the prompt to copy: copying them is the task,
            # copying the rest of the context with them is listing candidates.
            if self.copy_span and _copies_besides(reply, source, refs, self.copy_span):
                hedged = f"copies {self.copy_span}+ words of the prompt besides the passages asked"
        elif self.copy_span:
            reply = without_copies(reply, source, self.copy_span)
        reply = reply.lower()
        single = mode in ("any", "part")
        hedged = hedged or _hedged(reply, refs, 1 if single else len(refs))
        if hedged is not None:
            return Rewards(
                reward=0.0,
                components={"recall": 0.0},
                metadata={"found": [], "reason": hedged},
            )
        scores = [self._one(reply, r) for r in refs]
        score = max(scores) if single else sum(scores) / len(scores)
        found = [r for r, s in zip(refs, scores, strict=True) if s == 1.0]
        return Rewards(
            reward=score,
            components={"recall": sum(s == 1.0 for s in scores) / len(scores)},
            metadata={"found": found},
        )


_SHAPES = (
    (re.compile(r"^\d{3,}$"), lambda ref: r"(?<![\w.])\d{" + str(len(ref)) + r"}(?![\w]|\.\d)"),
    (
        re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
        lambda ref: r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    ),
)


def _hedged(reply: str, refs: list[str], allowed: int) -> str | None:
    """Why `reply` hedges (it names more numbers or ids shaped like the references than
    `allowed`), or None. Only numbers of 3+ digits and UUIDs have a shape: a reply
    may well mention other words while it reasons."""
    patterns: set[str] = set()
    for ref in refs:
        for shape, pattern_of in _SHAPES:
            if shape.match(ref.lower()):
                patterns.add(pattern_of(ref))
    for pattern in patterns:
        named = set(re.findall(pattern, reply))
        if len(named) > allowed:
            return f"names {len(named)} candidates shaped like the answer, {allowed} asked"
    return None


def _copies_besides(reply: str, source: str, passages: list[str], n: int) -> bool:
    """Whether `reply` has a run of `n` words copied from `source` outside `passages`
    (compared word by word, lowercased, so a passage's line breaks do not matter)."""
    words = source.lower().split()
    inside = [False] * len(words)
    for passage in passages:
        seq = passage.lower().split()
        for i in range(len(words) - len(seq) + 1):
            if words[i : i + len(seq)] == seq:
                inside[i : i + len(seq)] = [True] * len(seq)
    outside: set[tuple[str, ...]] = set()
    for i in range(len(words) - n + 1):
        if not any(inside[i : i + n]):
            outside.add(tuple(words[i : i + n]))
    return bool(_ngrams(reply, n) & outside)


def without_copies(reply: str, source: str, n: int) -> str:
    """`reply` without its runs of `n` or more words copied from `source`."""
    words = reply.split()
    if len(words) < n:
        return reply
    grams = _ngrams(source, n)
    lowered = [w.lower() for w in words]
    copied = [False] * len(words)
    for i in range(len(words) - n + 1):
        if tuple(lowered[i : i + n]) in grams:
            copied[i : i + n] = [True] * n
    return " ".join(w for w, c in zip(words, copied, strict=True) if not c)


def parse_final_list(text: str) -> list[str] | None:
    """The items of `Final Answer: [...]` on the last non-empty line, or None."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    match = _FINAL_LIST.search(lines[-1]) if lines else None
    if match is None:
        return None
    items = (item.strip().strip("\"'`").strip() for item in match.group(1).split(","))
    return [item for item in items if item]


class NodeSetF1:
    """F1 between the reply's final node list and the gold node set."""

    def __init__(self, *, gold: GoldFn | None = None) -> None:
        self.gold = gold

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        value = get_gold(task, self.gold)
        expected = set(json.loads(value) if isinstance(value, str) else value)
        predicted = parse_final_list(response_text(trajectory))
        if predicted is None:
            return Rewards(
                reward=0.0,
                components={"f1": 0.0},
                metadata={"extracted_answer": None, "reason": "no 'Final Answer: [...]'"},
            )
        got = set(predicted)
        if not got and not expected:
            f1 = 1.0
        else:
            hits = len(got & {str(e) for e in expected})
            f1 = 2 * hits / (len(got) + len(expected)) if hits else 0.0
        return Rewards(reward=f1, components={"f1": f1}, metadata={"extracted_answer": predicted})


class SequenceRatio:
    """MRCR: the reply must start with `metadata["prefix"]`; then similarity with the gold."""

    def __init__(self, *, gold: GoldFn | None = None) -> None:
        self.gold = gold

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        prefix = str(task.metadata.get("prefix", ""))
        gold = str(get_gold(task, self.gold))
        reply = response_text(trajectory).strip()
        if not reply.startswith(prefix):
            return Rewards(
                reward=0.0,
                components={"prefix": 0.0},
                metadata={"reason": f"the reply does not start with {prefix!r}"},
            )
        ratio = SequenceMatcher(None, reply.removeprefix(prefix), gold.removeprefix(prefix)).ratio()
        return Rewards(reward=ratio, components={"prefix": 1.0, "similarity": ratio})


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = text.lower().split()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def copied_share(reasoning: str, source: str, n: int = 16) -> float:
    """The share of `reasoning`'s word n-grams that appear in `source` (0 when it has none)."""
    grams = _ngrams(reasoning, n)
    return len(grams & _ngrams(source, n)) / len(grams) if grams else 0.0


class PenalizeCopying:
    """`inner`'s reward times (1 - copied share) of the reasoning, or minus it (`rule`)."""

    def __init__(
        self,
        inner: Verifier | VerifyFunction,
        *,
        n: int = 16,
        rule: Literal["multiply", "minus"] = "multiply",
    ) -> None:
        if rule not in ("multiply", "minus"):
            raise ConfigError(f"PenalizeCopying rule must be 'multiply' or 'minus', got {rule!r}")
        self.inner, self.n, self.rule = as_verifier(inner), n, rule

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        base = Rewards.of(await self.inner.verify(task, trajectory))
        source = "\n".join(m.content or "" for m in task.messages)
        reasoning = "".join(m.reasoning or "" for m in trajectory.messages if m.role == "assistant")
        share = copied_share(reasoning, source, self.n)
        reward = base.reward * (1 - share) if self.rule == "multiply" else base.reward - share
        components: dict[str, Any] = {**base.components, "answer": base.reward, "copied": share}
        return Rewards(reward=reward, components=components, metadata=base.metadata)
