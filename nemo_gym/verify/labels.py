"""Answers that are one of a few labels written out in words ("both of them", "a red cube").

`LabelMatch` reads the answer (the text after the last "Final answer:", else the last
non-empty line) and resolves it to exactly one of the task's labels: an equal label
(case, punctuation and a leading article ignored) or an alias of one wins; otherwise the
answer must contain exactly one label as whole words. An answer naming two labels
("the red cube or the blue ball") resolves to none and scores 0: echoing the choices is
not an answer.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.errors import VerifierError
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import GoldFn, get_gold, response_text

__all__ = ["LabelMatch", "extract_label_answer", "label_key", "resolve_label"]

_FINAL = re.compile(r"(?:final\s+answer|answer)\s*(?:is)?\s*[:：\-]\s*(.+)", re.IGNORECASE)
_PUNCT = str.maketrans("", "", string.punctuation)


def label_key(text: str) -> str:
    """Lowercase, punctuation removed, whitespace collapsed, a leading article dropped."""
    key = " ".join(text.lower().translate(_PUNCT).split())
    return re.sub(r"^(?:a|an|the)\s+", "", key)


def extract_label_answer(reply: str) -> str:
    """The answer part of a reply: after the last "Final answer:", else its last line."""
    matches = [m.group(1).strip() for m in _FINAL.finditer(reply)]
    if matches:
        return matches[-1].strip(" *_`\"'")
    lines = [line.strip(" *_`\"'-") for line in reply.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def resolve_label(
    answer: str, labels: Sequence[str], aliases: Mapping[str, Sequence[str]] | None = None
) -> str | None:
    """The one label `answer` names, or None (see the module doc)."""
    key = label_key(answer)
    if not key:
        return None
    by_key = {label_key(label): label for label in labels}
    if key in by_key:
        return by_key[key]
    for label, names in (aliases or {}).items():
        if key in {label_key(n) for n in names}:
            return label
    hits = [k for k in by_key if k and re.search(rf"(?<!\w){re.escape(k)}(?!\w)", key)]
    hits = [h for h in hits if not any(h != o and h in o for o in hits)]
    return by_key[hits[0]] if len(hits) == 1 else None


class LabelMatch:
    """1.0 when the reply resolves to the gold label of `metadata["labels"]`."""

    def __init__(self, *, gold: GoldFn | None = None) -> None:
        self.gold = gold

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        labels = task.metadata.get("labels")
        if not isinstance(labels, list) or not labels:
            raise VerifierError(f"task {task.id}: metadata['labels'] must be a non-empty list")
        gold = str(get_gold(task, self.gold))
        aliases: Any = task.metadata.get("aliases") or {}
        answer = extract_label_answer(response_text(trajectory))
        found = resolve_label(answer, labels, aliases)
        correct = found is not None and label_key(found) == label_key(gold)
        return Rewards(
            reward=float(correct),
            components={"accuracy": float(correct)},
            metadata={"extracted_answer": found, "answer_text": answer[:200]},
        )
