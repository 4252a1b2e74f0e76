"""The math verifier: extract the final answer, compare it with the gold answer.

Two paths. The FAST path runs in-process: integers, decimals, fractions and simple
LaTeX (`\\frac`, `\\dfrac`, powers, factorials, thousands separators, `$...$`,
`\\text{}` units, percent, degrees) are evaluated exactly with `fractions.Fraction`,
so most pairs never leave the event loop and cost microseconds. Only what the fast
path cannot decide (radicals, pi, sets, intervals, expressions with variables) goes
to `math-verify` in a worker process (`nemo_gym.verify.pool`) under a hard deadline,
with guards against its known false positives (see `_math_worker`).

Which answer is extracted (the anchor policy):

1. the last `\\boxed{...}` (or `\\fbox{...}`);
2. else the text after the last "answer is" / "answer:" / "final answer is";
3. else, with `no_anchor="last_number"` (the default), the last number or `$...$`
   math span in the text; `no_anchor="math_verify"` lets math-verify's own unanchored
   extraction pick; `no_anchor="reject"` scores the reply wrong.

A prediction with no extractable or unparsable answer is wrong (0.0). A failure of the
verifier itself (deadline, worker crash, a gold answer that cannot be parsed) raises
`nemo_gym.errors.VerifierError`: the runner records a verifier failure, never a 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Literal

from nemo_gym.errors import MissingDependency, VerifierError
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.pool import WorkerError, WorkerPool

__all__ = [
    "Extraction",
    "MathResult",
    "MathVerifier",
    "NoAnchorPolicy",
    "extract_answer",
    "fast_compare",
    "parse_number",
    "verify_math",
]

NoAnchorPolicy = Literal["last_number", "math_verify", "reject"]
Anchor = Literal["boxed", "answer", "last_number", "none"]
_POLICIES = ("last_number", "math_verify", "reject")
_WORKER_MODULE = "nemo_gym.verify._math_worker"
_WORKER_CHECK = f"{_WORKER_MODULE}:check"

# ---------------------------------------------------------------------------------------
# Extraction. Every scan here is linear in the text (no nested quantifiers), so a 1 MB
# reply costs milliseconds on the event loop.

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*(\{)?")
_MAX_BOXED = 10_000  # longer "answers" are not answers; also bounds the brace scan
_ANSWER = re.compile(r"(?i)(?:final\s+answer|answer)(?:\s+is|\s*[:=])\s*(?:\*\*|__)?\s*(?::\s*)?")
_MATH_SPAN = re.compile(
    r"\$\$(.{1,2000}?)\$\$|\$([^$\n]{1,2000}?)\$|\\\((.{1,2000}?)\\\)|\\\[(.{1,2000}?)\\\]", re.S
)
# A number not glued to a word or a dot ("x2", ".5" are not numbers here). It opens with
# a character class, not a lookbehind, so that re can skip ahead fast (4x on 1 MB).
_NUMBER = re.compile(
    r"[-\d](?<![\w.][-\d])(?:(?<=-)\d+|(?<=\d)\d*)"
    r"(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?(?:\s*\\?%)?"
)
_THINK_END = "</think>"


@dataclass(frozen=True, slots=True)
class Extraction:
    """The answer found in a reply (`None` when there is none) and how it was found."""

    answer: str | None
    anchor: Anchor


def _tail_matches(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
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


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    matches = _tail_matches(pattern, text)
    return matches[-1] if matches else None


def _brace_content(text: str, open_index: int) -> str | None:
    """The content of the `{...}` group opening at `open_index`, or None if unbalanced."""
    depth = 0
    end = min(len(text), open_index + _MAX_BOXED)
    for i in range(open_index, end):
        ch = text[i]
        if ch == "{" and text[i - 1] != "\\":
            depth += 1
        elif ch == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : i]
    return None


def _last_boxed(text: str) -> str | None:
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    matches = _tail_matches(_BOXED, text)
    for match in reversed(matches[-3:]):  # a few tries: the last may be cut off
        if match.group(1):
            content = _brace_content(text, match.start(1))
        else:  # `\boxed 5`
            rest = text[match.end() : match.end() + 100].split()
            content = rest[0].rstrip(".$") if rest else None
        if content is not None and content.strip():
            return content.strip()
    return None


def _answer_span(tail: str) -> str | None:
    """The answer at the start of `tail` (the text after an "answer is" anchor)."""
    tail = tail.lstrip()
    span = _MATH_SPAN.match(tail)
    if span:
        return next(g for g in span.groups() if g is not None).strip() or None
    line = tail.split("\n", 1)[0]
    line = re.split(r"\*\*|__|(?<=[^\d\s])\.|\.(?=\s|$)|;|\s+(?:because|since|as|which)\s", line)[0]
    line = line.strip().rstrip(".,:;").strip()
    if not line:
        return None
    number = _NUMBER.match(line)
    # "12 apples" -> "12": a number followed by words only.
    if number and re.fullmatch(r"[\sA-Za-z]*", line[number.end() :]):
        unit_free = line[: number.end()].strip()
        if parse_number(unit_free) is not None:
            return unit_free
    return line[:_MAX_BOXED]


def _last_number(text: str) -> str | None:
    """The last number, or the last math span if it ends later."""
    best: tuple[int, str] | None = None
    last_dollar = text.rfind("$")
    last_paren = text.rfind("\\)")
    last_bracket = text.rfind("\\]")
    region = max(last_dollar, last_paren, last_bracket)
    if region >= 0:
        # Only the tail can hold the last span; scanning it alone keeps this cheap.
        start = max(0, region - 4100)
        for span in _MATH_SPAN.finditer(text, start):
            content = next(g for g in span.groups() if g is not None).strip()
            if content and any(c.isdigit() for c in content):
                best = (span.end(), content)
    number = _last_match(_NUMBER, text)
    if number is not None and (best is None or number.end() > best[0]):
        before = text[max(0, number.start() - 1) : number.start()]
        after = text[number.end() : number.end() + 1]
        if before in ("{", "}", "^", "_", "\\") or after in ("{", "}", "^", "_", "\\"):
            return ""  # part of undelimited LaTeX (`\frac{\sqrt3}{2}`): math-verify's call
        best = (number.end(), number.group(0))
    return best[1] if best else None


def extract_answer(text: str, no_anchor: NoAnchorPolicy = "last_number") -> Extraction:
    """Find the final answer in a model's reply (see the module docstring for the policy).

    Reasoning before a closing `</think>` is ignored. The answer is None with anchor
    "none" when there is no answer; it is None with anchor "last_number" when the last
    number sits in undelimited LaTeX (`\\frac{\\sqrt3}{2}`), and with no_anchor
    "math_verify": in both, math-verify's own extraction reads the whole reply.
    """
    if not isinstance(text, str):
        raise TypeError(f"the prediction must be a str, got {type(text).__name__}")
    if no_anchor not in _POLICIES:
        raise ValueError(f"no_anchor must be one of {_POLICIES}, got {no_anchor!r}")
    think = text.rfind(_THINK_END)
    if think >= 0:
        text = text[think + len(_THINK_END) :]
    boxed = _last_boxed(text)
    if boxed is not None:
        return Extraction(boxed, "boxed")
    anchor = _last_match(_ANSWER, text)
    if anchor is not None:
        answer = _answer_span(text[anchor.end() : anchor.end() + 4 * _MAX_BOXED])
        if answer is not None:
            return Extraction(answer, "answer")
    if no_anchor == "last_number":
        number = _last_number(text)
        if number:
            return Extraction(number, "last_number")
        if number == "":
            return Extraction(None, "last_number")
    return Extraction(None, "none")


# ---------------------------------------------------------------------------------------
# The fast path: exact arithmetic on simple forms, or None ("cannot decide here").

_MAX_FAST_LEN = 300
_MAX_BITS = 1 << 16  # results larger than 65536 bits are left to math-verify
_MAX_FACTORIAL = 5000


class _Undecidable(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Number:
    """An exactly parsed answer: its value(s), and what a comparison needs to know.

    `values` holds one value, or two for a percentage (`25%` is 25 or 1/4).
    `decimals` is the number of places when the answer is a plain decimal literal.
    `variable` is `x` for `x = 5`.
    """

    values: tuple[Fraction, ...]
    decimals: int | None = None
    variable: str | None = None

    def __repr__(self) -> str:
        # repr() of a Fraction over 4300 digits raises (int_max_str_digits); 1/2006! is one.
        shown = ", ".join(
            repr(v)
            if max(v.numerator.bit_length(), v.denominator.bit_length()) < 10_000
            else f"<{v.numerator.bit_length()}-bit/{v.denominator.bit_length()}-bit>"
            for v in self.values
        )
        return f"Number(values=({shown},), decimals={self.decimals}, variable={self.variable!r})"


_SPACES = re.compile(r"\\[,;:! ]|\\q?quad|~|\\displaystyle|\\left|\\right|\\mathrm\{\s*\}")
_TEXT = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")
_ASSIGNMENT = re.compile(r"^([A-Za-z])\s*=\s*(.+)$", re.S)
_DECIMAL = re.compile(r"[+-]?(\d*)\.(\d+)")
_TOKEN = re.compile(r"\s*(\d+\.\d*|\.\d+|\d+|\\frac|\\sqrt|[-+*/^!(){}])")


def _normalise(text: str) -> tuple[str, bool, str | None] | None:
    """Strip LaTeX decoration: (expression, is_percent, assigned variable) or None."""
    s = text.strip()
    if len(s) > _MAX_FAST_LEN:
        return None
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left) : len(s) - len(right)].strip()
    s = s.replace("{,}", ",").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/")
    s = _SPACES.sub(" ", s)
    s = s.replace("\\$", "").replace("$", "")
    # \text{...}: a number inside is kept, anything else is a unit and goes.
    s = _TEXT.sub(lambda m: m.group(1) if re.fullmatch(r"[\d.,\s]+", m.group(1)) else " ", s)
    s = _DEGREES.sub("", s).strip()
    variable = None
    assignment = _ASSIGNMENT.match(s)
    if assignment:
        variable, s = assignment.group(1), assignment.group(2).strip()
    # Trailing unit words ("12 apples", "5 cm"): a space then letters only.
    s = re.sub(r"(?<=[\d}%)])\s+[A-Za-z][A-Za-z\s.]*$", "", s).strip()
    percent = False
    if s.endswith("\\%") or s.endswith("%"):
        percent = True
        s = s.removesuffix("%").removesuffix("\\").strip()
    s = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), s)
    if not s or "," in s or "=" in s or "\\" in s.replace("\\frac", "").replace("\\sqrt", ""):
        return None
    if re.search(r"\d\s+\d", s):  # "1 2": a list or a digit grouping we do not guess
        return None
    return s, percent, variable


class _Evaluator:
    """Recursive descent over the normalised tokens; exact `Fraction` values.

    Grammar: sum := product (('+'|'-') product)*; product := unary (('*'|'/') unary)*;
    unary := ('-'|'+') unary | power; power := postfix ('^' unary)?;
    postfix := atom '!'*; atom := number | '(' sum ')' | '{' sum '}' | \\frac atom atom.
    Implicit multiplication ("2(3)", "2\\frac12") is refused: it is ambiguous.
    """

    def __init__(self, text: str, *, latex: bool) -> None:
        # In LaTeX `2^23` is 2^2 * 3, not 2^23: multi-digit bare exponents are refused.
        self.latex = latex
        tokens: list[str] = []
        position = 0
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None:
                if text[position:].strip() == "":
                    break
                raise _Undecidable
            tokens.append(match.group(1))
            position = match.end()
        self.tokens = tokens
        self.index = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise _Undecidable
        self.index += 1
        return token

    def parse(self) -> Fraction:
        value = self.sum()
        if self.peek() is not None:
            raise _Undecidable
        return value

    def sum(self) -> Fraction:
        self.depth += 1
        if self.depth > 50:  # deeply nested input: not a "simple" form
            raise _Undecidable
        value = self.product()
        while self.peek() in ("+", "-"):
            if self.take() == "+":
                value = _checked(value + self.product())
            else:
                value = _checked(value - self.product())
        self.depth -= 1
        return value

    def product(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                value = _checked(value * self.unary())
            else:
                divisor = self.unary()
                if divisor == 0:
                    raise _Undecidable
                value = _checked(value / divisor)
        return value

    def unary(self) -> Fraction:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        if self.peek() == "+":
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> Fraction:
        base = self.postfix()
        if self.peek() != "^":
            return base
        self.take()
        exponent = self.unary_exponent()
        if exponent.denominator != 1:
            raise _Undecidable  # roots: math-verify
        n = exponent.numerator
        bits = max(base.numerator.bit_length(), base.denominator.bit_length())
        if abs(n) * bits > _MAX_BITS:
            raise _Undecidable
        if base == 0 and n < 0:
            raise _Undecidable
        return base**n

    def unary_exponent(self) -> Fraction:
        # `2^{-3}`, `2^-3`, `2^3`.
        if self.peek() == "{":
            return self.atom()
        sign = 1
        if self.peek() == "-":
            self.take()
            sign = -1
        token = self.take()
        if not token.isdigit() or (len(token) > 1 and self.latex):
            raise _Undecidable
        return Fraction(sign * int(token))

    def postfix(self) -> Fraction:
        value = self.atom()
        while self.peek() == "!":
            self.take()
            if value.denominator != 1 or value < 0 or value > _MAX_FACTORIAL:
                raise _Undecidable
            value = Fraction(math.factorial(int(value)))
        return value

    def atom(self) -> Fraction:
        token = self.take()
        if token == "(":
            value = self.sum()
            self.take(")")
            return value
        if token == "{":
            value = self.sum()
            self.take("}")
            return value
        if token == "\\frac":
            numerator = self.frac_argument()
            denominator = self.frac_argument()
            if denominator == 0:
                raise _Undecidable
            return _checked(numerator / denominator)
        if token[0].isdigit() or token[0] == ".":
            return Fraction(token)
        raise _Undecidable

    def frac_argument(self) -> Fraction:
        if self.peek() == "{":
            return self.atom()
        token = self.take()  # \frac12: one digit each
        if token.isdigit():
            if len(token) > 1:  # give back the digits after the first
                self.index -= 1
                self.tokens[self.index] = token[1:]
            return Fraction(int(token[0]))
        raise _Undecidable  # `\frac123` (= \frac{1}{2}3) and the like: math-verify


def _checked(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > _MAX_BITS:
        raise _Undecidable
    return value


@lru_cache(maxsize=8192)
def parse_number(text: str) -> Number | None:
    """Parse a simple numeric answer exactly, or return None when it is not one.

    Never raises on any string, and costs at most a few milliseconds (inputs over
    300 characters and results over 65536 bits are refused).
    """
    normalised = _normalise(text)
    if normalised is None:
        return None
    expression, percent, variable = normalised
    try:
        value = _Evaluator(expression, latex="\\" in text or "{" in text).parse()
    except (_Undecidable, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    decimal = _DECIMAL.fullmatch(expression)
    decimals = len(decimal.group(2)) if decimal else None
    values = (value, value / 100) if percent else (value,)
    return Number(values=values, decimals=decimals, variable=variable)


def _rounds_to(decimal: Fraction, places: int, exact: Fraction) -> bool:
    """Whether `decimal` (with `places` places) is `exact` rounded or truncated."""
    scale = 10**places
    scaled = exact * scale
    truncated = Fraction(math.trunc(scaled), scale)
    rounded = Fraction(math.floor(scaled + Fraction(1, 2)), scale)
    return decimal in (truncated, rounded)


def _terminates(value: Fraction) -> bool:
    d = value.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


_MIN_APPROX_PLACES = 3


def fast_compare(gold: Number, prediction: Number) -> bool:
    """Exact comparison of two parsed numbers.

    Equal values match (a percentage matches both readings). A decimal with at least
    3 places also matches a non-terminating fraction it rounds or truncates
    (`0.333` for 1/3, either way round); two decimals must be the same number.
    """
    if gold.variable and prediction.variable and gold.variable != prediction.variable:
        return False
    if any(g == p for g in gold.values for p in prediction.values):
        return True
    for decimal, other in ((prediction, gold), (gold, prediction)):
        places = decimal.decimals
        if places is None or places < _MIN_APPROX_PLACES:
            continue
        for exact in other.values:
            if not _terminates(exact) and any(
                _rounds_to(value, places, exact) for value in decimal.values
            ):
                return True
    return False


# ---------------------------------------------------------------------------------------
# The verifier.


@dataclass(frozen=True, slots=True)
class MathResult:
    """The verdict on one prediction."""

    correct: bool
    extracted_answer: str | None
    path: Literal["fast", "math_verify"]
    anchor: Anchor

    def to_rewards(self) -> Rewards:
        score = 1.0 if self.correct else 0.0
        return Rewards(
            reward=score,
            components={"accuracy": score},
            metadata={
                "extracted_answer": self.extracted_answer,
                "path": self.path,
                "anchor": self.anchor,
            },
        )


def _gold_text(gold: Any) -> str:
    if isinstance(gold, bool) or gold is None:
        raise VerifierError(f"the gold answer must be a string or a number, got {gold!r}")
    if isinstance(gold, int | Fraction):
        return str(gold)
    if isinstance(gold, float):
        if not math.isfinite(gold):
            raise VerifierError(f"the gold answer is not a finite number: {gold!r}")
        return repr(gold)
    if not isinstance(gold, str):
        raise VerifierError(
            f"the gold answer must be a string or a number, got {type(gold).__name__}"
        )
    text = gold.strip()
    boxed = _last_boxed(text)
    if boxed is not None:
        text = boxed
    elif len(text) >= 2 and text[0] == "$" and text[-1] == "$":
        text = text.strip("$").strip()
    if not text:
        raise VerifierError("the gold answer is empty")
    return text


def _require_math_verify() -> None:
    try:
        import math_verify  # noqa: F401
    except ImportError as exc:
        raise MissingDependency("math-verify", "math") from exc


_math_pool_instance: WorkerPool | None = None


async def verify_math(
    prediction: str,
    gold: Any,
    *,
    timeout: float = 5.0,
    no_anchor: NoAnchorPolicy = "last_number",
    pool: WorkerPool | None = None,
) -> MathResult:
    """Judge a model's reply against a gold answer (a bare answer: `"\\frac{1}{2}"`, `42`).

    Raises `VerifierError` when the verdict cannot be reached: the deadline passed,
    the worker crashed, or the gold answer cannot be parsed.
    """
    gold_text = _gold_text(gold)
    extraction = extract_answer(prediction, no_anchor)
    if extraction.answer is None and extraction.anchor == "none" and no_anchor != "math_verify":
        return MathResult(False, None, "fast", "none")
    gold_number = parse_number(gold_text)
    if extraction.answer is not None and gold_number is not None:
        predicted = parse_number(extraction.answer)
        if predicted is not None:
            correct = fast_compare(gold_number, predicted)
            return MathResult(correct, extraction.answer, "fast", extraction.anchor)
    _require_math_verify()
    wrap = extraction.answer is not None
    status, correct, matched = await _call_worker(
        pool, gold_text, extraction.answer if wrap else prediction, wrap, timeout
    )
    if status == "gold_unparsable":
        raise VerifierError(
            f"math-verify cannot parse the gold answer {gold_text[:200]!r}",
            code="gold_unparsable",
        )
    answer = extraction.answer if wrap else matched
    return MathResult(bool(correct), answer, "math_verify", extraction.anchor)


async def _call_worker(
    pool: WorkerPool | None, gold: str, prediction: str, wrap: bool, timeout: float
) -> tuple[str, bool, str | None]:
    if pool is None:
        pool = _math_pool()
    try:
        return await pool.call(_WORKER_CHECK, gold, prediction, wrap, timeout=timeout)
    except WorkerError as exc:
        if exc.remote_type in ("ModuleNotFoundError", "ImportError"):
            raise MissingDependency("math-verify", "math") from exc
        raise


def _math_pool() -> WorkerPool:
    """The shared math pool: like `shared_pool()`, but its workers preload math-verify
    (a 1.5 s import) so that neither the first call nor a replacement pays for it."""
    global _math_pool_instance
    pool = _math_pool_instance
    if pool is None or pool.closed:
        import atexit

        pool = _math_pool_instance = WorkerPool(preload=(_WORKER_MODULE,))
        atexit.register(pool.close)
    return pool


class MathVerifier:
    """A `Verifier` for math answers: reward 1.0 if the final answer equals `task.answer`.

    `timeout` bounds the math-verify call (the fast path needs no deadline);
    `no_anchor` is the policy for a reply without `\\boxed{}` or "answer is" (see
    `extract_answer`); `pool` defaults to a process-wide pool that preloads math-verify.
    Rewards: `reward` and `components["accuracy"]` are 1.0 or 0.0; `metadata` holds
    `extracted_answer`, `path` ("fast" or "math_verify") and `anchor`.
    """

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        no_anchor: NoAnchorPolicy = "last_number",
        pool: WorkerPool | None = None,
    ) -> None:
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if no_anchor not in _POLICIES:
            raise ValueError(f"no_anchor must be one of {_POLICIES}, got {no_anchor!r}")
        self.timeout = float(timeout)
        self.no_anchor: NoAnchorPolicy = no_anchor
        self.pool = pool

    async def check(self, prediction: str, gold: Any) -> MathResult:
        """Judge one reply against one gold answer (see `verify_math`)."""
        return await verify_math(
            prediction, gold, timeout=self.timeout, no_anchor=self.no_anchor, pool=self.pool
        )

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Score the last assistant message against `task.answer`."""
        if task.answer is None:
            raise VerifierError(f"task {task.id} has no answer to verify against")
        result = await self.check(trajectory.final_text, task.answer)
        return result.to_rewards()

    def __repr__(self) -> str:
        return f"MathVerifier(timeout={self.timeout:g}, no_anchor={self.no_anchor!r})"
