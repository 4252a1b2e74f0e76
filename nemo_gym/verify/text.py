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
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import GoldFn, get_gold, gold_strings, response_text

__all__ = [
    "ExactMatch",
    "NormalizedMatch",
    "NumericMatch",
    "ParsedNumber",
    "RegexMatch",
    "TokenF1",
    "extract_number",
    "normalize_answer",
    "parse_number",
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
        if answer is None:
            return Rewards(
                reward=0.0,
                components={"accuracy": 0.0},
                metadata={"extracted_answer": None, "reason": "extract found no answer"},
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
        if answer is None:
            return Rewards(
                reward=0.0,
                components={"f1": 0.0, "exact_match": 0.0},
                metadata={"extracted_answer": None, "reason": "extract found no answer"},
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


@dataclass(frozen=True, slots=True)
class ParsedNumber:
    """A number read from text; `percent` when written with ``%`` (value as written)."""

    value: float
    text: str
    percent: bool = False

    def candidates(self) -> tuple[float, ...]:
        """The values it may stand for: 12% is 12 or 0.12."""
        return (self.value, self.value / 100) if self.percent else (self.value,)


# Every repetition is bounded or consumed by the match, so scanning is linear.
_NUMBER = re.compile(
    r"""
    (?<![\w.])
    (?P<sign>[-+])?
    [$€£¥]?
    (?:
      \\d?frac\{(?P<fnum>\d{1,30}(?:\.\d{1,30})?)\}\{(?P<fden>\d{1,30}(?:\.\d{1,30})?)\}
    | (?P<num>\d{1,3}(?:,\d{3})+(?![\d])(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)
      (?:[eE](?P<exp>[-+]?\d{1,4})(?![\d]))?
      (?:[ ]?(?:[x×*]|\\times|\\cdot)[ ]?10\^\{?(?P<exp2>[-+]?\d{1,4})\}?)?
      (?:[ ]?/[ ]?(?P<den>\d{1,30}(?:\.\d{1,30})?)(?![\d.]))?
    )
    (?P<pct>[ ]?(?:%|\\%|percent\b))?
    """,
    re.VERBOSE,
)
_WINDOW = 16_384
_BOXED = re.compile(r"\\boxed\s{0,2}\{")
_STATED = re.compile(r"(?i)(?<![a-z])answer(?:\s{1,3}is|\s{0,3}[:=])")
_DASHES = str.maketrans({"−": "-", "–": "-", "\u00a0": " ", "\u202f": " ", "\u2009": " "})


def _prepare(text: str) -> str:
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return text.translate(_DASHES)


def _to_number(m: re.Match[str]) -> ParsedNumber | None:
    try:
        if m.group("fnum") is not None:
            value = float(m.group("fnum")) / float(m.group("fden"))
        else:
            value = float(m.group("num").replace(",", ""))
            exponent = m.group("exp") or m.group("exp2")
            if exponent is not None:
                value *= 10.0 ** int(exponent)
            if m.group("den") is not None:
                value /= float(m.group("den"))
    except (ZeroDivisionError, OverflowError):
        return None
    if m.group("sign") == "-":
        value = -value
    if not math.isfinite(value):
        return None
    return ParsedNumber(value, m.group(0).strip(), percent=m.group("pct") is not None)


def parse_number(text: str) -> ParsedNumber | None:
    """`text` as one number (``"1,234.5"``, ``"-3e-4"``, ``"12%"``, ``"3/4"``), or None."""
    text = _prepare(text).strip().rstrip(".")
    m = _NUMBER.fullmatch(text)
    return _to_number(m) if m is not None else None


def _last_number(text: str, start: int = 0, end: int | None = None) -> ParsedNumber | None:
    end = len(text) if end is None else end
    # Look at the last 16k characters first: a megabyte of "1,1,1,..." would otherwise
    # cost half a million matches. A match near the window's cut may be a truncated
    # number, so then the whole range is scanned.
    cut = max(start, end - _WINDOW)
    for begin in (cut, start) if cut > start else (start,):
        last = None
        for last in _NUMBER.finditer(text, begin, end):  # noqa: B007 - the last one counts
            pass
        if last is not None and (begin == start or last.start() - begin > 64):
            return _to_number(last)
    return None


def extract_number(text: str) -> ParsedNumber | None:
    """The final numeric answer in a reply.

    The number in the last ``\\boxed{}``, else the first number after the last
    ``answer is`` / ``Answer:``, else the last number in the text.
    """
    text = _prepare(text)
    box = text.rfind("\\boxed")
    if box >= 0 and (m := _BOXED.match(text, box)) is not None:
        close = text.find("}", m.end())
        # \boxed{\frac{1}{2}} nests braces: take a bounded window, not the first "}"
        end = min(len(text), m.end() + 200) if close < 0 or "{" in text[m.end() : close] else close
        found = _last_number(text, m.end(), end)
        if found is not None:
            return found
    stated = None
    for stated in _STATED.finditer(text, max(0, len(text) - 4000)):  # noqa: B007
        pass
    if stated is not None:
        m = _NUMBER.search(text, stated.end(), min(len(text), stated.end() + 100))
        if m is not None and (found := _to_number(m)) is not None:
            return found
    return _last_number(text)


class NumericMatch:
    """1.0 when the reply's final number equals the gold within tolerance.

    The gold is a number or a string holding one. Numbers may be written with thousands
    commas, a sign, a currency symbol, scientific notation (``1.5e-3``, ``1.5 × 10^{-3}``),
    as a fraction (``3/4``, ``\\frac{3}{4}``) or a percent: ``12%`` matches a gold of 12
    or 0.12. Equality is `math.isclose(rel_tol, abs_tol)`. Components: ``accuracy`` and
    ``format`` (1.0 when a number was found).
    """

    def __init__(
        self,
        rel_tol: float = 1e-6,
        abs_tol: float = 1e-9,
        *,
        gold: GoldFn | None = None,
        extract: Callable[[str], ParsedNumber | None] | None = None,
    ) -> None:
        if rel_tol < 0 or abs_tol < 0:
            raise ConfigError("NumericMatch: tolerances must be >= 0")
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
        """Whether two parsed numbers are equal within tolerance (percent either way)."""
        return any(
            math.isclose(a, g, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
            for a in answer.candidates()
            for g in gold.candidates()
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
