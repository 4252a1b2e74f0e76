"""Numbers in replies: one scanner for "the final number", floats and integers.

`parse_number` reads one number as written (``1,234.5``, ``-3e-4``, ``1.5 × 10^{-3}``,
``$1,000``, ``3/4``, ``\\frac{3}{4}``, ``12%``); `extract_number` finds the final one in
a reply (the last ``\\boxed{}``, else after the last "answer is", else the last number);
`final_integer` is the same for integer answers, exactly (no float rounding).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from nemo_gym.verify.extract._math import boxed_answer

PercentPolicy = Literal["strip", "value", "either"]
"""What a written percent means: ``"strip"`` (the sign is a unit: 6% is 6, the MATH and
GSM8K graders' rule), ``"value"`` (6% is 0.06) or ``"either"`` (both)."""
PERCENT_POLICIES: tuple[PercentPolicy, ...] = ("strip", "value", "either")


def check_percent_policy(percent: str) -> PercentPolicy:
    """`percent` if it is a `PercentPolicy`, else a ValueError naming the choices."""
    if percent not in PERCENT_POLICIES:
        raise ValueError(f"percent must be one of {PERCENT_POLICIES}, got {percent!r}")
    return percent


@dataclass(frozen=True, slots=True)
class ParsedNumber:
    """A number read from text; `percent` when written with ``%`` (value as written)."""

    value: float
    text: str
    percent: bool = False

    def candidates(self, percent: PercentPolicy = "strip") -> tuple[float, ...]:
        """The values it stands for under a percent policy: 12% is 12, 0.12 or both."""
        if not self.percent or percent == "strip":
            return (self.value,)
        if percent == "value":
            return (self.value / 100,)
        return (self.value, self.value / 100)


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
_STATED = re.compile(r"(?i)(?<![a-z])answer(?:\s{1,3}is|\s{0,3}[:=])")
_DASHES = str.maketrans({"−": "-", "–": "-", "\u00a0": " ", "\u202f": " ", "\u2009": " "})


def normalize_text(text: str) -> str:
    """NFKC (full-width digits, ``½``), and the Unicode minus and spaces made ASCII."""
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
    text = normalize_text(text).strip().rstrip(".")
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

    The number in the ``\\boxed{}`` the reply commits to (`boxed_answer`: several
    boxes with different answers and no commitment are no answer), else the first number
    after the last ``answer is`` / ``Answer:``, else the last number in the text.
    """
    text = normalize_text(text)
    boxed = boxed_answer(text, single=True)
    if boxed is not None:
        if boxed.answer is None:  # several boxes, no commitment: no answer
            return None
        found = _last_number(boxed.answer)
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


def last_number(text: str) -> str | None:
    """The last number written in `text`, as written (``"1,234"``, ``"-3/4"``), or None."""
    found = _last_number(normalize_text(text))
    return found.text if found is not None else None


@dataclass(frozen=True, slots=True)
class IntegerAnswer:
    """The final integer of a reply: what was read (`text`), its value, where from.

    `text` is None when nothing was read; `value` is None when what was read is not an
    integer (``\\boxed{\\frac12}``); `boxed` says whether it came from ``\\boxed{}``.
    """

    text: str | None
    value: int | None
    boxed: bool


_INTEGER = re.compile(r"[-+]?\d+(?:\.0+)?")
_BOX_WRAPPING = "${} \t\n"


def _integer_value(number: ParsedNumber) -> int | None:
    digits = number.text.lstrip("$€£¥").replace(",", "").strip()
    if _INTEGER.fullmatch(digits):  # exactly, also past 2**53
        return int(digits.split(".")[0])
    value = number.value
    return int(value) if value.is_integer() and not number.percent else None


def final_integer(text: str) -> IntegerAnswer:
    """The answer as an integer: the ``\\boxed{}`` the reply commits to (`boxed_answer`),
    else as `extract_number` reads it.

    A box must hold one number as a whole (``\\boxed{x+1}`` is not the integer 1); a box
    that holds something else is still the answer (no fallback to an earlier number).
    """
    found_box = boxed_answer(text, single=True)
    if found_box is not None:
        boxed = found_box.answer
        if boxed is None:  # several boxes, no commitment: no answer
            return IntegerAnswer(None, None, True)
        number = parse_number(boxed.strip(_BOX_WRAPPING))
        if number is None:
            return IntegerAnswer(boxed, None, True)
        return IntegerAnswer(boxed, _integer_value(number), True)
    found = extract_number(text)
    if found is None:
        return IntegerAnswer(None, None, False)
    return IntegerAnswer(found.text, _integer_value(found), False)
