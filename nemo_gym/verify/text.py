"""String and number verifiers: exact, SQuAD-normalised, regex, numeric and token F1.

Each compares the final reply (or what `extract=` pulls out of it) with the gold in
`task.answer` (or `gold(task)`): one string, or a list of acceptable strings, the best
match counting. A reply with no usable answer scores 0 with the reason in
`metadata["reason"]`; a task without a usable gold raises `VerifierError`.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable
from typing import Any

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import GoldFn, get_gold, gold_strings, response_text
from nemo_gym.verify.extract import (
    ParsedNumber,
    PercentPolicy,
    check_percent_policy,
    extract_number,
    parse_number,
)

__all__ = [
    "ExactMatch",
    "NormalizedMatch",
    "NumericMatch",
    "RegexMatch",
    "TokenF1",
    "normalize_answer",
    "token_f1",
]

ExtractFn = Callable[[str], "str | None"]

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 between two strings, after `normalize_answer`."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _no_answer(answer: str | None) -> str:
    return "extract found no answer" if answer is None else "empty reply"


class _TextVerifier:
    """Reads the answer (the reply, or `extract(reply)`) and the gold strings."""

    def __init__(self, *, gold: GoldFn | None = None, extract: ExtractFn | None = None) -> None:
        self.gold = gold
        self.extract = extract

    def _answer(self, trajectory: Trajectory) -> str | None:
        text = response_text(trajectory)
        if self.extract is None:
            return text
        try:
            return self.extract(text)
        except Exception as exc:
            raise VerifierError(f"the extract= callable failed: {exc!r}") from exc

    def _golds(self, task: Task) -> list[str]:
        return gold_strings(task, get_gold(task, self.gold))

    def _compare(self, answer: str, golds: list[str]) -> float:
        raise NotImplementedError

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Score the reply against every gold; the best match counts."""
        golds = self._golds(task)
        answer = self._answer(trajectory)
        if answer is None or not answer.strip():
            return Rewards(
                reward=0.0,
                components={"accuracy": 0.0},
                metadata={"extracted_answer": None, "reason": _no_answer(answer)},
            )
        score = self._compare(answer, golds)
        return Rewards(
            reward=score, components={"accuracy": score}, metadata={"extracted_answer": answer}
        )


class ExactMatch(_TextVerifier):
    """1.0 when the reply equals a gold string (stripped; `case_sensitive` by default)."""

    def __init__(
        self,
        *,
        strip: bool = True,
        case_sensitive: bool = True,
        gold: GoldFn | None = None,
        extract: ExtractFn | None = None,
    ) -> None:
        super().__init__(gold=gold, extract=extract)
        self.strip = strip
        self.case_sensitive = case_sensitive

    def _key(self, text: str) -> str:
        text = text.strip() if self.strip else text
        return text if self.case_sensitive else text.casefold()

    def _compare(self, answer: str, golds: list[str]) -> float:
        key = self._key(answer)
        return float(any(key == self._key(g) for g in golds))


class NormalizedMatch(_TextVerifier):
    """1.0 when the reply equals a gold after SQuAD normalisation (`normalize_answer`)."""

    def _compare(self, answer: str, golds: list[str]) -> float:
        key = normalize_answer(answer)
        return float(any(key == normalize_answer(g) for g in golds))


class TokenF1(_TextVerifier):
    """SQuAD token F1 against the best gold. Components: ``f1`` and ``exact_match``."""

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        golds = self._golds(task)
        answer = self._answer(trajectory)
        if answer is None or not answer.strip():
            return Rewards(
                reward=0.0,
                components={"f1": 0.0, "exact_match": 0.0},
                metadata={"extracted_answer": None, "reason": _no_answer(answer)},
            )
        f1 = max(token_f1(answer, g) for g in golds)
        key = normalize_answer(answer)
        exact = float(any(key == normalize_answer(g) for g in golds))
        return Rewards(
            reward=f1,
            components={"f1": f1, "exact_match": exact},
            metadata={"extracted_answer": answer},
        )


class RegexMatch(_TextVerifier):
    """The last match of `pattern` in the reply, compared with the gold.

    `group` picks the capture group (default: the first group if the pattern has one,
    else the whole match). The comparison is on `normalize_answer` forms unless
    `normalize=False` (then stripped, exact). Components: ``accuracy`` and ``format``
    (1.0 when the pattern matched at all). The pattern runs on the event loop: keep it
    free of nested unbounded repetition.
    """

    def __init__(
        self,
        pattern: str | re.Pattern[str],
        *,
        group: int | str | None = None,
        flags: int = 0,
        normalize: bool = True,
        gold: GoldFn | None = None,
    ) -> None:
        super().__init__(gold=gold)
        try:
            self.pattern = re.compile(pattern, flags) if isinstance(pattern, str) else pattern
        except re.error as exc:
            raise ConfigError(f"RegexMatch: invalid pattern {pattern!r}: {exc}") from exc
        if group is None:
            group = 1 if self.pattern.groups else 0
        if isinstance(group, int) and not 0 <= group <= self.pattern.groups:
            raise ConfigError(f"RegexMatch: group {group} > {self.pattern.groups} groups")
        if isinstance(group, str) and group not in self.pattern.groupindex:
            raise ConfigError(f"RegexMatch: the pattern has no group named {group!r}")
        self.group = group
        self.normalize = normalize

    def _key(self, text: str) -> str:
        return normalize_answer(text) if self.normalize else text.strip()

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        golds = self._golds(task)
        text = response_text(trajectory)
        last = None
        for last in self.pattern.finditer(text):  # noqa: B007 - the last one is the answer
            pass
        value = last.group(self.group) if last is not None else None
        if value is None:
            return Rewards(
                reward=0.0,
                components={"accuracy": 0.0, "format": 0.0},
                metadata={"extracted_answer": None, "reason": "pattern did not match"},
            )
        key = self._key(value)
        score = float(any(key == self._key(g) for g in golds))
        return Rewards(
            reward=score,
            components={"accuracy": score, "format": 1.0},
            metadata={"extracted_answer": value},
        )


class NumericMatch:
    """1.0 when the reply's final number equals the gold within tolerance.

    The gold is a number or a string holding one. Numbers may be written with thousands
    commas, a sign, a currency symbol, scientific notation (``1.5e-3``, ``1.5 × 10^{-3}``),
    as a fraction (``3/4``, ``\\frac{3}{4}``) or a percent, read by `percent`: ``"strip"``
    (the default, the GSM8K/MATH graders' rule: ``12%`` matches 12), ``"value"`` (0.12)
    or ``"either"``. Equality is `math.isclose(rel_tol, abs_tol)`. Components:
    ``accuracy`` and ``format`` (1.0 when a number was found); ``metadata`` holds
    ``extracted_answer`` (None when the reply has no number) and ``value``.
    """

    def __init__(
        self,
        rel_tol: float = 1e-6,
        abs_tol: float = 1e-9,
        *,
        percent: PercentPolicy = "strip",
        gold: GoldFn | None = None,
        extract: Callable[[str], ParsedNumber | None] | None = None,
    ) -> None:
        if rel_tol < 0 or abs_tol < 0:
            raise ConfigError("NumericMatch: tolerances must be >= 0")
        try:
            self.percent = check_percent_policy(percent)
        except ValueError as exc:
            raise ConfigError(f"NumericMatch: {exc}") from exc
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol
        self.gold = gold
        self.extract = extract or extract_number

    def _gold(self, task: Task) -> list[ParsedNumber]:
        value: Any = get_gold(task, self.gold)
        values = value if isinstance(value, list | tuple) else [value]
        out = []
        for item in values:
            if isinstance(item, int | float) and not isinstance(item, bool):
                out.append(ParsedNumber(float(item), str(item)))
                continue
            parsed = parse_number(item) if isinstance(item, str) else None
            if parsed is None:
                raise VerifierError(f"task {task.id}: gold {item!r} is not a number")
            out.append(parsed)
        if not out:
            raise VerifierError(f"task {task.id}: empty list of gold numbers")
        return out

    def matches(self, answer: ParsedNumber, gold: ParsedNumber) -> bool:
        """Whether two parsed numbers are equal within tolerance (under `percent`)."""
        return any(
            math.isclose(a, g, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
            for a in answer.candidates(self.percent)
            for g in gold.candidates(self.percent)
        )

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Extract the final number and compare it with every gold number."""
        golds = self._gold(task)
        try:
            answer = self.extract(response_text(trajectory))
        except Exception as exc:
            raise VerifierError(f"the extract= callable failed: {exc!r}") from exc
        if answer is None:
            return Rewards(
                reward=0.0,
                components={"accuracy": 0.0, "format": 0.0},
                metadata={"extracted_answer": None, "reason": "no number in the reply"},
            )
        score = float(any(self.matches(answer, g) for g in golds))
        return Rewards(
            reward=score,
            components={"accuracy": score, "format": 1.0},
            metadata={"extracted_answer": answer.text, "value": answer.value},
        )
