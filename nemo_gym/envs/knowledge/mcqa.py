"""`mcqa`: multiple choice in any simple layout: question, options, answer."""

from __future__ import annotations

from typing import Any

from nemo_gym.envs.knowledge.base import MultipleChoiceEnv, gold_letter
from nemo_gym.envs.prompts import LETTERS
from nemo_gym.envs.rows import Row


def _options(row: Row) -> list[str]:
    value = row.first("options", "choices")
    if isinstance(value, dict):
        return [str(value[k]) for k in sorted(value)]
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [str(next(iter(v.values()))) for v in value]  # NeMo Gym: [{"A": text}, ...]
    if isinstance(value, list):
        return [str(v) for v in value]
    raise row.bad("options", "must be a list, a {letter: text} mapping or [{letter: text}]")


class MCQA(MultipleChoiceEnv):
    """Any multiple-choice rows: `question`, `options` (a list, {letter: text}, or NeMo
    Gym's [{letter: text}]) and `answer` (a letter, an index or the option's text).

    Ships 8 science questions written by us; `path=` reads your own file.
    """

    name = "mcqa"
    version = "1"
    source = "8 science questions written by us; any question/options/answer file via path="
    license = "Apache-2.0"
    sample = "knowledge/data/mcqa.jsonl"

    def parse(self, row: Row) -> tuple[str, list[str], str, dict[str, Any]]:
        options = _options(row)
        if len(options) > len(LETTERS):
            raise row.bad("options", f"has {len(options)} options; at most 26")
        key = "answer" if row.get("answer") is not None else "expected_answer"
        return str(row.first("question", "prompt")), options, gold_letter(row, key, options), {}
