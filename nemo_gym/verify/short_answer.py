"""Short answers in words or numbers: a name, a date, "yes", "5 to 6 pounds".

`ShortAnswer` reads the answer out of the reply (`extract`: the text after the last
"Final answer:", the last `\\boxed{}`, the last line, the `answer` of a JSON object, or
the whole reply) and compares it with the gold (a string or a list of acceptable ones):

- `match="equal"`: the same answer after Unicode (NFKC), case, quotes, a trailing full
  stop and LaTeX text wrappers are set aside, then SQuAD's normalisation (articles,
  punctuation), list separators ("a, b and c" is "a b c"), and numbers compared as
  numbers (thousands separators, %, currency signs: "1,000" is "1000.0");
- `match="contains"`: some surface form of the gold (HotpotQA's: without a leading
  article, quotes or a parenthesis, number words as digits, "&" as "and", ...) appears
  in the answer as whole words, near its start when the answer is long;
- `match="verbatim"`: the same text once surrounding whitespace is stripped (case kept).

A task's `metadata["match"]` overrides the verifier's `match` for that task.

Components: `accuracy`, `exact` (SQuAD exact match) and `f1` (SQuAD token F1, best gold).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from typing import Literal

from nemo_gym.errors import ConfigError
from nemo_gym.limits import loads_json
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import GoldFn, get_gold, gold_strings, response_text
from nemo_gym.verify.extract import boxed_answer, boxed_spans, parse_number
from nemo_gym.verify.text import normalize_answer, token_f1

__all__ = ["ShortAnswer", "answer_forms", "contains_answer", "extract_short_answer", "same_answer"]

Extract = Literal["final_answer", "boxed", "last_line", "json", "full"]
EXTRACTS: tuple[str, ...] = ("final_answer", "boxed", "last_line", "json", "full")
Match = Literal["equal", "contains", "verbatim"]
MATCHES: tuple[str, ...] = ("equal", "contains", "verbatim")

_FINAL = re.compile(r"(?:final\s+answer|answer)\s*[:：]\s*(.+)", re.IGNORECASE)
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|mathrm|emph)\{([^{}]*)\}")
_JSON_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)
_CONJUNCTIONS = re.compile(r"\b(?:and|or)\b")
_NUMBER_WORDS = dict(
    zip(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split(),
        map(str, range(21)),
        strict=True,
    )
)
_ORDINALS = {"first": "1st", "second": "2nd", "third": "3rd", "fourth": "4th", "fifth": "5th"}


def _json_answer(reply: str) -> str | None:
    candidates = [m.group(1) for m in _JSON_FENCE.finditer(reply)]
    depth, start = 0, None
    for i, char in enumerate(reply):
        if char == "{":
            start = i if depth == 0 else start
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0 and start is not None:
                candidates.append(reply[start : i + 1])
    for candidate in reversed(candidates):
        try:
            value = loads_json(candidate)
        except ValueError:  # not JSON, or over the document limits
            continue
        if isinstance(value, dict) and "answer" in value:
            return str(value["answer"])
    return None


def _one_box(reply: str) -> str | None:
    """The one boxed answer a reply commits to, or None. Several boxes with different
    answers are none (no words commit to one, or they form a list: one short answer
    never spans several boxes), so boxing every candidate never credits the gold."""
    found = boxed_answer(reply, single=True)
    if found is None or found.answer is None:
        return None
    return _TEXT_WRAP.sub(r"\1", found.answer).strip()


def extract_short_answer(reply: str, extract: Extract = "final_answer") -> str | None:
    """The answer part of `reply` by `extract` (see the module doc), or None."""
    if extract == "boxed" or extract == "final_answer":
        if extract == "final_answer":
            found = _FINAL.findall(reply)
            if found:
                return found[-1].strip().rstrip(".").strip()
        return _one_box(reply)
    if extract == "last_line":
        lines = [line.strip() for line in reply.splitlines() if line.strip()]
        return lines[-1] if lines else None
    if extract == "json":
        answer = _json_answer(reply)
        if answer is not None:
            return answer
        # No JSON: a boxed answer is the answer (several different boxes with no
        # commitment are none; under match="contains" they would credit a hedge).
        if boxed_spans(reply):
            return _one_box(reply)
        return reply.strip() or None
    if extract == "full":
        return reply.strip() or None
    raise ConfigError(f"unknown extract {extract!r}; one of {', '.join(EXTRACTS)}")


def _clean(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).strip()
    text = _TEXT_WRAP.sub(r"\1", text).replace("\\(", "").replace("\\)", "").replace("$", "")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    return text.strip().rstrip(".!?").strip().casefold()


def _number(text: str) -> float | None:
    parsed = parse_number(text)
    return parsed.value if parsed is not None else None


def same_answer(answer: str, gold: str) -> bool:
    """Whether two short answers are the same (the `equal` rule of the module doc)."""
    a, g = _clean(answer), _clean(gold)
    if a == g:
        return True
    na, ng = _number(a), _number(g)
    if na is not None and ng is not None:
        return math.isclose(na, ng, rel_tol=1e-12, abs_tol=1e-12)
    squad_a, squad_g = normalize_answer(a), normalize_answer(g)
    if squad_a == squad_g and squad_a:
        return True
    return " ".join(_CONJUNCTIONS.sub(" ", squad_a).split()) == " ".join(
        _CONJUNCTIONS.sub(" ", squad_g).split()
    )


def answer_forms(gold: str) -> list[str]:
    """Surface forms of a gold answer that also count (HotpotQA's alternatives)."""
    forms = {gold.strip()}
    for form in list(forms):
        forms.add(re.sub(r"^(?:the|a|an)\s+", "", form, flags=re.IGNORECASE))
        forms.add(form.replace('"', "").replace("“", "").replace("”", ""))
        if "(" in form:
            forms.add(" ".join(re.sub(r"\([^)]*\)", " ", form).split()))
            forms.update(inner.strip() for inner in re.findall(r"\(([^)]+)\)", form))
        low = form.lower()
        forms.update(d for w, d in {**_NUMBER_WORDS, **_ORDINALS}.items() if low == w)
        forms.update(w for w, d in {**_NUMBER_WORDS, **_ORDINALS}.items() if low == d)
        forms.add(re.sub(r"(?<=\d),(?=\d{3})", "", form))
        forms.add(form.rstrip(".,;:!?"))
        if "-" in form:
            forms.add(" ".join(form.replace("-", " ").split()))
        forms.add(form.replace(" & ", " and "))
        forms.add(re.sub(r" and ", " & ", form, count=1, flags=re.IGNORECASE))
    short = {f for f in forms if len(f.strip()) >= 3 or f.strip().isdigit() or f == gold.strip()}
    return sorted(f for f in short if f.strip())


def _surface(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"[‐‑‒–—―]", "-", text).replace("’", "'").replace("‘", "'")
    return " ".join(text.replace("“", '"').replace("”", '"').split())


def contains_answer(answer: str, golds: Iterable[str]) -> bool:
    """Whether a gold form appears in `answer` as whole words (the `contains` rule)."""
    text = _surface(answer)
    for gold in golds:
        for form in answer_forms(gold):
            needle = _surface(form)
            match = re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", text) if needle else None
            if match and (len(text) <= 80 or match.start() <= 40):
                return True
    return False


class ShortAnswer:
    """Scores a short answer against the gold (see the module doc)."""

    def __init__(
        self,
        *,
        extract: Extract = "final_answer",
        match: Match = "equal",
        gold: GoldFn | None = None,
    ) -> None:
        if extract not in EXTRACTS:
            raise ConfigError(f"unknown extract {extract!r}; one of {', '.join(EXTRACTS)}")
        if match not in MATCHES:
            raise ConfigError(f"match must be one of {', '.join(MATCHES)}, got {match!r}")
        self.extract, self.match, self.gold = extract, match, gold

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        golds = gold_strings(task, get_gold(task, self.gold))
        extract = task.metadata.get("extract", self.extract)
        answer = extract_short_answer(response_text(trajectory), extract)
        if answer is None:
            return Rewards(
                reward=0.0,
                components={"accuracy": 0.0, "exact": 0.0, "f1": 0.0},
                metadata={"extracted_answer": None, "reason": f"no {extract} answer"},
            )
        match = task.metadata.get("match", self.match)
        if match not in MATCHES:
            raise ConfigError(f"task {task.id}: match must be one of {', '.join(MATCHES)}")
        if match == "contains":
            correct = contains_answer(answer, golds)
        elif match == "verbatim":
            correct = any(answer.strip() == g.strip() for g in golds)
        else:
            correct = any(same_answer(answer, g) for g in golds)
        exact = any(normalize_answer(answer) == normalize_answer(g) for g in golds)
        f1 = max(token_f1(answer, g) for g in golds)
        return Rewards(
            reward=float(correct),
            components={"accuracy": float(correct), "exact": float(exact), "f1": f1},
            metadata={"extracted_answer": answer},
        )
