"""Prompt formatting shared by the built-in environments: the one place it lives.

The instructions here are what the verifiers read back: a prompt that asks for
`\\boxed{}` is scored by a verifier that reads `\\boxed{}` first, and an oracle reply
is written in the same form (`boxed`, `answer_line`).
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "BOXED",
    "FINAL_ANSWER",
    "JSON_ANSWER",
    "LETTERS",
    "LETTER_BOXED",
    "answer_line",
    "boxed",
    "choices",
    "join",
    "json_answer",
    "multiple_choice",
]

LETTERS = string.ascii_uppercase

BOXED = "Put your final answer within \\boxed{}."
LETTER_BOXED = "Think step by step, then give the letter of your answer within \\boxed{}."
FINAL_ANSWER = "End your response with a line of the form 'Final answer: <answer>'."
JSON_ANSWER = 'Reply with a JSON object of the form {"answer": "<your answer>"} and nothing else.'


def join(*parts: str) -> str:
    """Non-empty parts, stripped, separated by blank lines."""
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def choices(options: Sequence[str], letters: str = LETTERS) -> str:
    """Options as lettered lines: "A. first" ..."""
    if len(options) > len(letters):
        raise ValueError(f"{len(options)} options but only {len(letters)} letters")
    return "\n".join(
        f"{letter}. {option}" for letter, option in zip(letters, options, strict=False)
    )


def multiple_choice(question: str, options: Sequence[str], instruction: str = LETTER_BOXED) -> str:
    """A multiple-choice prompt: the question, its lettered options, the instruction."""
    return join(question, choices(options), instruction)


def boxed(answer: Any, reasoning: str = "") -> str:
    """A reply that gives `answer` in \\boxed{} (after `reasoning`, if any)."""
    return join(reasoning, f"The answer is \\boxed{{{answer}}}.")


def answer_line(answer: Any, reasoning: str = "") -> str:
    """A reply ending in 'Final answer: <answer>'."""
    return join(reasoning, f"Final answer: {answer}")


def json_answer(answer: Any, extra: Mapping[str, Any] | None = None) -> str:
    """A reply that is the JSON object {"answer": answer}."""
    return json.dumps({"answer": answer, **(extra or {})}, ensure_ascii=False)
