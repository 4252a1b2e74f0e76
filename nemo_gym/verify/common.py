"""Helpers shared by the rule-based verifiers: the response text, the gold, fenced blocks.

Every verifier in `nemo_gym.verify` reads the gold from `task.answer` unless it is given
a `gold=` callable, and the response from `trajectory.final_text` with any reasoning
block (``<think>...</think>``) removed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nemo_gym.errors import VerifierError
from nemo_gym.records import Task, Trajectory

__all__ = [
    "MAX_BOXED",
    "FencedBlock",
    "GoldFn",
    "fenced_blocks",
    "get_gold",
    "gold_strings",
    "last_boxed",
    "response_text",
    "strip_thinking",
    "tail_matches",
]

GoldFn = Callable[[Task], Any]
"""Reads the gold answer of a task (default: `task.answer`)."""

_THINK_CLOSE = "</think>"


def strip_thinking(text: str) -> str:
    """Drop a leading reasoning block: everything up to the last ``</think>``.

    Reasoning models that put their thinking in the content would otherwise have drafts
    and rejected options scored as their answer.
    """
    cut = text.rfind(_THINK_CLOSE)
    return text[cut + len(_THINK_CLOSE) :] if cut >= 0 else text


def response_text(trajectory: Trajectory) -> str:
    """The final assistant text, without a reasoning block."""
    return strip_thinking(trajectory.final_text)


def get_gold(task: Task, gold: GoldFn | None = None) -> Any:
    """The gold answer of `task`: `gold(task)` when given, else `task.answer`.

    Raises `VerifierError` when there is none, because scoring against a missing gold
    would be a silent 0.
    """
    if gold is not None:
        try:
            value = gold(task)
        except Exception as exc:
            raise VerifierError(f"task {task.id}: the gold= callable failed: {exc!r}") from exc
        where = "the gold= callable"
    else:
        value = task.answer
        where = "task.answer"
    if value is None:
        raise VerifierError(f"task {task.id}: no gold answer ({where} is None)")
    return value


def gold_strings(task: Task, value: Any) -> list[str]:
    """A gold that is one string or a non-empty sequence of strings, as a list."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise VerifierError(
        f"task {task.id}: the gold must be a string or a non-empty list of strings, "
        f"got {type(value).__name__}"
    )


@dataclass(frozen=True, slots=True)
class FencedBlock:
    """A Markdown fenced code block: its info-string language (lowercase) and body."""

    lang: str
    body: str
    start: int


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^\n]*)$", re.MULTILINE)
_MAX_FENCES = 10_000  # fence lines read; past that a text is garbage, not a reply


def fenced_blocks(text: str) -> list[FencedBlock]:
    """Every Markdown code fence (```lang ... ```) in `text`, in order.

    An unclosed final fence counts as a block running to the end: models cut off by
    `max_tokens` often leave one. Only the first 10,000 fence lines are read.
    """
    blocks: list[FencedBlock] = []
    opener: re.Match[str] | None = None
    fence = lang = ""
    for count, m in enumerate(_FENCE.finditer(text)):
        if count >= _MAX_FENCES:
            break
        run, info = m.group(1), m.group(2).strip()
        if opener is None:
            if run[0] == "`" and "`" in info:
                continue  # ```inline``` code, not a fence (CommonMark)
            opener, fence = m, run
            lang = info.split()[0].lower() if info else ""
        elif run[0] == fence[0] and len(run) >= len(fence) and not info:
            blocks.append(FencedBlock(lang, text[opener.end() + 1 : m.start()], opener.start()))
            opener = None
    if opener is not None:
        blocks.append(FencedBlock(lang, text[opener.end() + 1 :], opener.start()))
    return blocks


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*(\{)?")
MAX_BOXED = 10_000  # longer "answers" are not answers; also bounds the brace scan


def tail_matches(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    """The matches in the shortest tail of `text` that holds one (a whole one).

    Scanning windows growing from the end costs at most ~4/3 of one scan when nothing
    matches, and only the tail when something does: a reply with 500k numbers does not
    build 500k match objects to keep the last.
    """
    window = 4096
    while True:
        start = max(0, len(text) - window)
        matches = [m for m in pattern.finditer(text, start) if m.start() > start or start == 0]
        if matches or start == 0:
            return matches
        window *= 4


def _brace_content(text: str, open_index: int) -> str | None:
    """The content of the `{...}` group opening at `open_index`, or None if unbalanced."""
    depth = 0
    end = min(len(text), open_index + MAX_BOXED)
    for i in range(open_index, end):
        ch = text[i]
        if ch == "{" and text[i - 1] != "\\":
            depth += 1
        elif ch == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : i]
    return None


def last_boxed(text: str) -> str | None:
    """The stripped content of the last `\\boxed{...}` (or `\\fbox`, `\\boxed 5`), or None.

    Braces are balanced (escaped ones skipped); an unclosed or empty box is passed over
    for the one before it (a few tries: the last is often cut off by max_tokens).
    """
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    matches = tail_matches(_BOXED, text)
    for match in reversed(matches[-3:]):  # a few tries: the last may be cut off
        if match.group(1):
            content = _brace_content(text, match.start(1))
        else:  # `\boxed 5`
            rest = text[match.end() : match.end() + 100].split()
            content = rest[0].rstrip(".$") if rest else None
        if content is not None and content.strip():
            return content.strip()
    return None
