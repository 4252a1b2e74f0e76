"""The math verifier: extract the final answer, compare it with the gold answer.

Two paths. The FAST path runs in-process: integers, decimals, fractions and simple
LaTeX (`\\frac`, `\\dfrac`, powers, factorials, thousands separators, `$...$`,
`\\text{}` units, percent, degrees) are evaluated exactly with `fractions.Fraction`,
so most pairs never leave the event loop and cost microseconds. An extended exact
form (radicals, pi, e, polynomials, tuples, intervals, sets, words; see `_parse_exact`)
decides most of the rest. Only what neither can decide (trigonometry, complex numbers,
decimals against irrationals, unclear readings) goes to `math-verify` in a worker
process (`nemo_gym.verify.pool`) under a hard deadline,
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
from nemo_gym.verify.extract import (
    NO_ANCHOR_POLICIES,
    Anchor,
    NoAnchorPolicy,
    extract_answer,
    last_boxed,
)
from nemo_gym.verify.pool import WorkerError, WorkerPool

__all__ = [
    "MathResult",
    "MathVerifier",
    "exact_number",
    "fast_compare",
    "verify_math",
]

_POLICIES = NO_ANCHOR_POLICIES
_WORKER_MODULE = "nemo_gym.verify._math_worker"
_WORKER_CHECK = f"{_WORKER_MODULE}:check"

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
_NUMERIC_TEXT = re.compile(r"[\d.,\s]+")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")
_ASSIGNMENT = re.compile(r"^([A-Za-z])\s*=\s*(.+)$", re.S)
_UNIT_WORDS = re.compile(r"(?<=[\d}%)])\s+([A-Za-z][A-Za-z\s.]*)$")
_OPERATOR = re.compile(r"(?<!^)[-+*/^]")
_DIGITS_APART = re.compile(r"\d\s+\d")
_DECIMAL = re.compile(r"[+-]?(\d*)\.(\d+)")
_HAS_DECIMAL = re.compile(r"\d*\.\d")
# The commands the evaluator knows; any other backslash leaves the fast path.
_COMMANDS = re.compile(r"\\(?:frac|sqrt|pi|binom)(?![A-Za-z])")
_LETTER_RUN = re.compile(r"[A-Za-z]{2}")
_TOKEN = re.compile(
    r"\s*(\d+\.\d*|\.\d+|\d+|\\(?:frac|sqrt|pi|binom)(?![A-Za-z])|[a-zA-Z]|[-+*/^!(){}\[\]])"
)


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
    s = _TEXT.sub(lambda m: m.group(1) if _NUMERIC_TEXT.fullmatch(m.group(1)) else " ", s)
    s = _DEGREES.sub("", s).strip()
    variable = None
    assignment = _ASSIGNMENT.match(s)
    if assignment:
        variable, s = assignment.group(1), assignment.group(2).strip()
    # Trailing unit words ("12 apples", "5 cm"): a space then letters only. A single
    # letter after an expression ("3 + 2 x") is a variable, not a unit.
    unit = _UNIT_WORDS.search(s)
    if unit:
        rest = s[: unit.start()].strip()
        if len(unit.group(1).strip()) > 1 or not _OPERATOR.search(rest):
            s = rest
    percent = False
    if s.endswith("\\%") or s.endswith("%"):
        percent = True
        s = s.removesuffix("%").removesuffix("\\").strip()
    s = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), s)
    if not s or "," in s or "=" in s:
        return None
    bare = _COMMANDS.sub(" ", s)
    if "\\" in bare or _LETTER_RUN.search(bare):  # other commands, words: not here
        return None
    if _DIGITS_APART.search(s):  # "1 2": a list or a digit grouping we do not guess
        return None
    return s, percent, variable


# ---------------------------------------------------------------------------------------
# Exact values beyond the rationals: a finite sum of terms c * sqrt(r) * pi^k * e^j * m,
# with c rational, r a squarefree integer, and m a monomial in single-letter variables
# (negative powers allowed). This form is canonical: square roots of distinct squarefree
# integers are linearly independent over Q (Besicovitch), and pi (or e) is
# transcendental, so its powers are independent over the algebraic numbers; polynomial
# identity is coefficient identity. Two forms are therefore equal exactly when their
# term dictionaries are equal. (pi and e TOGETHER are not known to be algebraically
# independent: such a comparison is left to math-verify.)

_Key = tuple[int, int, int, tuple[tuple[str, int], ...]]
_Poly = dict[_Key, Fraction]
_ONE: _Key = (1, 0, 0, ())
_MAX_TERMS = 256
_MAX_RADICAND = 10**12
_MAX_POWER = 64  # of a non-rational base


def _const(value: Fraction) -> _Poly:
    return {_ONE: value} if value else {}


def _as_rational(poly: _Poly) -> Fraction | None:
    if not poly:
        return Fraction(0)
    if len(poly) == 1 and _ONE in poly:
        return poly[_ONE]
    return None


def _padd(a: _Poly, b: _Poly, sign: int = 1) -> _Poly:
    out = dict(a)
    for key, coeff in b.items():
        value = _checked(out.get(key, Fraction(0)) + sign * coeff)
        if value:
            out[key] = value
        else:
            out.pop(key, None)
    if len(out) > _MAX_TERMS:
        raise _Undecidable
    return out


def _merge_monomials(
    m1: tuple[tuple[str, int], ...], m2: tuple[tuple[str, int], ...]
) -> tuple[tuple[str, int], ...]:
    if not m2:
        return m1
    if not m1:
        return m2
    powers = dict(m1)
    for name, n in m2:
        powers[name] = powers.get(name, 0) + n
    return tuple(sorted((name, n) for name, n in powers.items() if n))


def _pmul(a: _Poly, b: _Poly) -> _Poly:
    if len(a) * len(b) > 4 * _MAX_TERMS:
        raise _Undecidable
    out: _Poly = {}
    for (r1, k1, j1, m1), c1 in a.items():
        for (r2, k2, j2, m2), c2 in b.items():
            g = math.gcd(r1, r2)  # sqrt(r1 r2) = g sqrt(r1 r2 / g^2): both squarefree
            key = ((r1 // g) * (r2 // g), k1 + k2, j1 + j2, _merge_monomials(m1, m2))
            value = _checked(out.get(key, Fraction(0)) + c1 * c2 * g)
            if value:
                out[key] = value
            else:
                out.pop(key, None)
    if len(out) > _MAX_TERMS:
        raise _Undecidable
    return out


def _pinv(a: _Poly) -> _Poly:
    """1/a, for a single term only (1/(1+sqrt2) and 1/(x+1) are left to math-verify)."""
    if len(a) != 1:
        raise _Undecidable
    (((r, k, j, m), c),) = a.items()
    return {(r, -k, -j, tuple((name, -n) for name, n in m)): _checked(1 / (c * r))}


def _ppow(base: _Poly, n: int) -> _Poly:
    rational = _as_rational(base)
    if rational is not None:
        bits = max(rational.numerator.bit_length(), rational.denominator.bit_length())
        if abs(n) * bits > _MAX_BITS or (rational == 0 and n < 0):
            raise _Undecidable
        return _const(rational**n)
    if n == 0:
        return _const(Fraction(1))
    if len(base) == 1:  # one term: (c sqrt(r) pi^k e^j m)^n directly, e^{-100} too
        (((r, k, j, m), c),) = base.items()
        if abs(n) > _MAX_BITS or (r > 1 and abs(n) * r.bit_length() > _MAX_BITS):
            raise _Undecidable
        if n < 0:
            return _ppow(_pinv(base), -n)
        coeff = _ppow(_const(c), n)[_ONE] * r ** (n // 2)
        key = (r if n % 2 else 1, k * n, j * n, tuple((name, e * n) for name, e in m))
        return {key: _checked(coeff)}
    if abs(n) > _MAX_POWER:
        raise _Undecidable
    if n < 0:
        base, n = _pinv(base), -n
    result, square = _const(Fraction(1)), base
    while n:
        if n & 1:
            result = _pmul(result, square)
        n >>= 1
        if n:
            square = _pmul(square, square)
    return result


def _squarefree(n: int) -> tuple[int, int]:
    """n = outside^2 * inside with inside squarefree, for 0 < n <= 10**12."""
    outside, inside = 1, 1
    d = 2
    while d * d * d <= n:
        if n % d == 0:
            count = 0
            while n % d == 0:
                n //= d
                count += 1
            outside *= d ** (count // 2)
            if count % 2:
                inside *= d
        d += 1 if d == 2 else 2
    # What is left has no factor <= its cube root: 1, a prime, p*q or p^2.
    root = math.isqrt(n)
    if root * root == n:
        outside *= root
    else:
        inside *= n
    return outside, inside


def _integer_root(n: int, degree: int) -> int | None:
    if n < 2:
        return n
    guess = round(n ** (1 / degree)) if n.bit_length() < 1000 else None
    if guess is None:
        return None
    for candidate in (guess - 1, guess, guess + 1):
        if candidate >= 0 and candidate**degree == n:
            return candidate
    return None


def _root(radicand: _Poly, degree: int) -> _Poly:
    value = _as_rational(radicand)
    if value is None or value < 0 or degree < 2:
        raise _Undecidable  # nested radicals, sqrt(x), sqrt(-1): math-verify
    num = _integer_root(value.numerator, degree)
    den = _integer_root(value.denominator, degree)
    if num is not None and den is not None:
        return _const(Fraction(num, den))
    if degree != 2:
        raise _Undecidable
    # sqrt(p/q) = sqrt(p q) / q
    product = value.numerator * value.denominator
    if product > _MAX_RADICAND:
        raise _Undecidable
    outside, inside = _squarefree(product)
    return {(inside, 0, 0, ()): Fraction(outside, value.denominator)}


_SYMBOLS = frozenset("abcdfghjklmnopqrstuvwxyz")  # not e (Euler), not i (imaginary unit)
_IMPLICIT = frozenset(["\\pi", "\\sqrt", *_SYMBOLS, "e"])


class _Evaluator:
    """Recursive descent over the normalised tokens; exact values (see `_Poly`).

    Grammar: sum := product (('+'|'-') product)*; product := unary (('*'|'/') unary)*
    with implicit products `2\\sqrt3`, `3\\pi`, `2x`, `\\pi r^2`, `(x-1)(x+1)`;
    unary := ('-'|'+') unary | power; power := postfix ('^' exponent)?;
    postfix := atom '!'*; atom := number | letter | \\pi | '(' sum ')' | '{' sum '}' |
    \\frac arg arg | \\sqrt ('[' sum ']')? arg | \\binom arg arg.
    Other implicit products ("2(3)", "2\\frac12" which may be a mixed number) are refused.
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

    def parse(self) -> _Poly:
        value = self.sum()
        if self.peek() is not None:
            raise _Undecidable
        return value

    def sum(self) -> _Poly:
        self.depth += 1
        if self.depth > 50:  # deeply nested input: not a "simple" form
            raise _Undecidable
        value = self.product()
        while self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            value = _padd(value, self.product(), sign)
        self.depth -= 1
        return value

    def product(self) -> _Poly:
        value = self.unary()
        while True:
            token = self.peek()
            if token == "*":
                self.take()
                value = _pmul(value, self.unary())
            elif token == "/":
                self.take()
                value = _pmul(value, _pinv(self.unary()))
            elif token in _IMPLICIT or (token == "(" and self.tokens[self.index - 1] == ")"):
                value = _pmul(value, self.power())
            else:
                return value

    def unary(self) -> _Poly:
        if self.peek() == "-":
            self.take()
            return _pmul(_const(Fraction(-1)), self.unary())
        if self.peek() == "+":
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> _Poly:
        base = self.postfix()
        if self.peek() != "^":
            return base
        self.take()
        return _ppow(base, self.exponent())

    def exponent(self) -> int:
        # `2^{-3}`, `2^-3`, `2^3`; integers only (roots are written \sqrt here).
        if self.peek() == "{":
            value = _as_rational(self.atom())
            if value is None or value.denominator != 1:
                raise _Undecidable
            return value.numerator
        sign = 1
        if self.peek() == "-":
            self.take()
            sign = -1
        token = self.take()
        if not token.isdigit() or (len(token) > 1 and self.latex):
            raise _Undecidable
        return sign * int(token)

    def postfix(self) -> _Poly:
        value = self.atom()
        while self.peek() == "!":
            self.take()
            n = _as_rational(value)
            if n is None or n.denominator != 1 or n < 0 or n > _MAX_FACTORIAL:
                raise _Undecidable
            value = _const(Fraction(math.factorial(int(n))))
        return value

    def atom(self) -> _Poly:
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
            numerator = self.argument()
            return _pmul(numerator, _pinv(self.argument()))
        if token == "\\sqrt":
            degree = 2
            if self.peek() == "[":
                self.take()
                index = _as_rational(self.sum())
                self.take("]")
                if index is None or index.denominator != 1 or not 2 <= index <= 64:
                    raise _Undecidable
                degree = int(index)
            return _root(self.argument(), degree)
        if token == "\\binom":
            n, k = _as_rational(self.argument()), _as_rational(self.argument())
            if n is None or k is None or n.denominator != 1 or k.denominator != 1:
                raise _Undecidable
            if not 0 <= n <= _MAX_FACTORIAL or k < 0:
                raise _Undecidable
            return _const(Fraction(math.comb(int(n), int(k))))
        if token == "\\pi":
            return {(1, 1, 0, ()): Fraction(1)}
        if token == "e":
            return {(1, 0, 1, ()): Fraction(1)}
        if token in _SYMBOLS:
            if self.peek() == "(":  # f(x): a function, not a product
                raise _Undecidable
            return {(1, 0, 0, ((token, 1),)): Fraction(1)}
        if token[0].isdigit() or token[0] == ".":
            return _const(Fraction(token))
        raise _Undecidable

    def argument(self) -> _Poly:
        if self.peek() == "{":
            return self.atom()
        token = self.take()  # \frac12, \sqrt2: one digit each
        if token.isdigit():
            if len(token) > 1:  # give back the digits after the first
                self.index -= 1
                self.tokens[self.index] = token[1:]
            return _const(Fraction(int(token[0])))
        if token in _SYMBOLS or token == "\\pi":  # \sqrt x, \frac\pi2
            self.index -= 1
            return self.atom()
        raise _Undecidable  # `\frac123` (= \frac{1}{2}3) and the like: math-verify


def _checked(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > _MAX_BITS:
        raise _Undecidable
    return value


_FAILURES = (_Undecidable, ValueError, ZeroDivisionError, OverflowError, RecursionError)


def _evaluate(expression: str, text: str) -> _Poly | None:
    try:
        return _Evaluator(expression, latex="\\" in text or "{" in text).parse()
    except _FAILURES:
        return None


@lru_cache(maxsize=8192)
def exact_number(text: str) -> Number | None:
    """Parse a simple numeric answer exactly, or return None when it is not one.

    Never raises on any string, and costs at most a few milliseconds (inputs over
    300 characters and results over 65536 bits are refused). Only rational values
    are Numbers (`\\sqrt{16}` is 4); `\\sqrt{2}` or `x+1` give None.
    """
    normalised = _normalise(text)
    if normalised is None:
        return None
    expression, percent, variable = normalised
    poly = _evaluate(expression, text)
    value = None if poly is None else _as_rational(poly)
    if value is None:
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
# The extended fast path: exact forms beyond rationals (radicals, pi, e, polynomials,
# numeric statements, tuples, intervals, sets, \text{} words). `_exact_compare` answers
# True, False or None ("math-verify decides"); it says True only when the two forms are
# provably equal, and False only when they provably differ under every reading that
# math-verify could take (a tuple, an interval or a set).

_LIST_MAX = 32
_RELATION = re.compile(r"<|>|\\[lgn]eq?(?![A-Za-z])|\\approx|\\sim|\\equiv|\\in(?![A-Za-z])")
_WORD = re.compile(r"\\text\{\s*([A-Za-z(][A-Za-z ()]*?)\s*\}")
_AMBIGUOUS_COMMA = re.compile(r"\d,\d{3}(?!\d)")  # 1,234: a number or a pair?
_INFINITY = re.compile(r"([+-]?)\s*\\infty")
_CUP = re.compile(r"\\cup(?![A-Za-z])")
_OPENERS = {"(": ")", "[": "]", "{": "}"}


@dataclass(frozen=True, slots=True)
class _Scalar:
    terms: frozenset[tuple[_Key, Fraction]]
    decimal: bool  # a decimal literal was written: exact equality only, never "differ"
    variable: str | None


@dataclass(frozen=True, slots=True)
class _Sequence:
    opener: str  # "(", "[", "{" (a set), "" (a bare list)
    closer: str
    items: tuple[_Scalar | str, ...]  # "+inf" / "-inf" for infinite interval ends


@dataclass(frozen=True, slots=True)
class _Union:
    parts: tuple[_Sequence, ...]


@dataclass(frozen=True, slots=True)
class _Word:
    text: str


_Exact = _Scalar | _Sequence | _Union | _Word


def _strip_math(text: str) -> str:
    s = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left) : len(s) - len(right)].strip()
    return _SPACES.sub(" ", s).strip()


def _scalar(text: str) -> _Scalar | None:
    normalised = _normalise(text)
    if normalised is None or normalised[1]:  # percentages: parse_number's business
        return None
    expression, _, variable = normalised
    poly = _evaluate(expression, text)
    if poly is None:
        return None
    return _Scalar(frozenset(poly.items()), bool(_HAS_DECIMAL.search(expression)), variable)


def _statement(text: str) -> _Scalar | None:
    """`2+3 = 5`, `x = 2+3 = 5`: a true chain of numbers is its value; else None."""
    sides = text.split("=")
    variable = None
    if re.fullmatch(r"\s*[a-df-hj-z]\s*", sides[0]):
        variable, sides = sides[0].strip(), sides[1:]
    values = [_scalar(side) for side in sides]
    if not values or any(v is None or v.variable or not _constant(v) for v in values):
        return None
    first = values[0]
    if any(v.terms != first.terms for v in values):  # type: ignore[union-attr]
        return None  # a false statement (`1+1=3`): math-verify's call
    decimal = any(v.decimal for v in values)  # type: ignore[union-attr]
    return _Scalar(first.terms, decimal, variable)  # type: ignore[union-attr]


def _constant(value: _Scalar) -> bool:
    return all(not key[3] for key, _ in value.terms)


def _split_top(text: str) -> list[str] | None:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        return None
    parts.append(text[start:])
    return parts


def _sequence(text: str) -> _Sequence | None:
    s = text.strip()
    opener = closer = ""
    if s.startswith("\\{") and s.endswith("\\}"):
        opener, closer, s = "{", "}", s[2:-2]
    elif s[:1] in "([" and s[-1:] in ")]" and len(s) >= 2:
        inner = s[1:-1]
        if _split_top(inner) is not None:  # `(1,2)+(3,4)` is not one tuple
            opener, closer, s = s[0], s[-1], inner
    parts = _split_top(s)
    if parts is None or len(parts) < 2 or len(parts) > _LIST_MAX:
        return None
    items: list[_Scalar | str] = []
    for part in parts:
        infinity = _INFINITY.fullmatch(part.strip())
        if infinity:
            if opener not in "([" or not opener:
                return None
            items.append("-inf" if infinity.group(1) == "-" else "+inf")
            continue
        value = _scalar(part)
        if value is None or value.variable:
            return None
        items.append(value)
    return _Sequence(opener, closer, tuple(items))


@lru_cache(maxsize=8192)
def _parse_exact(text: str) -> _Exact | None:
    """The extended exact form of an answer, or None when it is none of those forms."""
    if len(text) > _MAX_FAST_LEN:
        return None
    s = _strip_math(text)
    word = _WORD.fullmatch(s)
    if word:
        return _Word(" ".join(word.group(1).split()))
    if _RELATION.search(s):
        return None
    if "," in s or "\\infty" in s or "\\{" in s:
        if _AMBIGUOUS_COMMA.search(s) or "=" in s:
            return None
        pieces = _CUP.split(s)
        if len(pieces) > 1:
            parts = [_sequence(piece) for piece in pieces]
            if any(p is None or p.opener not in "([" or len(p.items) != 2 for p in parts):
                return None
            return _Union(tuple(parts))  # type: ignore[arg-type]
        return _sequence(s)
    if s.count("=") > 1 or (s.count("=") == 1 and not _ASSIGNMENT.match(s)):
        return _statement(s)
    return _scalar(s)


def _same_scalar(a: _Scalar, b: _Scalar) -> bool | None:
    if a.terms == b.terms:
        return True
    if a.decimal or b.decimal:
        return None  # 1.414 vs sqrt(2): math-verify's rounding rule decides
    keys = [key for key, _ in a.terms | b.terms]
    if any(key[1] for key in keys) and any(key[2] for key in keys):
        return None  # pi and e together: no known exact answer
    return False


def _order(item: _Scalar | str) -> Fraction | float | None:
    if isinstance(item, str):
        return math.inf if item == "+inf" else -math.inf
    terms = dict(item.terms)
    return _as_rational(terms) if not item.decimal else None


def _proper_interval(seq: _Sequence) -> bool:
    """A two-item bracket whose ends are known and ordered: no empty or point reading."""
    if len(seq.items) != 2 or seq.opener not in "([":
        return False
    low, high = (_order(item) for item in seq.items)
    return low is not None and high is not None and low < high


def _same_item(a: _Scalar | str, b: _Scalar | str) -> bool | None:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return _same_scalar(a, b)


def _same_items(a: tuple[_Scalar | str, ...], b: tuple[_Scalar | str, ...]) -> bool | None:
    if len(a) != len(b):
        return False
    verdicts = [_same_item(x, y) for x, y in zip(a, b, strict=True)]
    if all(verdicts):
        return True
    return None if None in verdicts else False


def _as_set(seq: _Sequence) -> frozenset[frozenset[tuple[_Key, Fraction]]] | None:
    if any(isinstance(item, str) or item.decimal for item in seq.items):
        return None
    members = frozenset(item.terms for item in seq.items)  # type: ignore[union-attr]
    return members if len(members) == len(seq.items) else None  # duplicates: math-verify


def _same_sequence(a: _Sequence, b: _Sequence) -> bool | None:
    if (a.opener == "{" and b.opener == "{") or (a.opener == "" and b.opener == ""):
        set_a, set_b = _as_set(a), _as_set(b)  # read as sets, like math-verify
        if set_a is None or set_b is None:
            return True if _same_items(a.items, b.items) else None
        return set_a == set_b
    if a.opener in "([" and b.opener in "([" and a.opener and b.opener:
        same = _same_items(a.items, b.items)
        if same and (a.opener, a.closer) == (b.opener, b.closer):
            return True
        if len(a.items) == 2 and len(b.items) == 2:
            # Different ends or brackets differ as intervals and as pairs, unless an
            # empty or one-point interval makes two spellings one set.
            if _proper_interval(a) and _proper_interval(b) and same is not None:
                return False
            return None
        if len(a.items) != len(b.items):
            return False
        if (a.opener, a.closer) == (b.opener, b.closer) and same is False:
            set_a, set_b = _as_set(a), _as_set(b)
            if set_a is not None and set_b is not None and set_a != set_b:
                return False  # not even a reordering: differ as tuples and as sets
        return None
    return None  # a set against a tuple, a bare list against brackets: math-verify


def _exact_compare(gold: _Exact, prediction: _Exact) -> bool | None:
    """True (equal), False (differ) or None (leave it to math-verify)."""
    if isinstance(gold, _Scalar) and isinstance(prediction, _Scalar):
        if gold.variable and prediction.variable and gold.variable != prediction.variable:
            return False
        return _same_scalar(gold, prediction)
    if isinstance(gold, _Sequence) and isinstance(prediction, _Sequence):
        return _same_sequence(gold, prediction)
    if isinstance(gold, _Union) and isinstance(prediction, _Union):
        if len(gold.parts) == len(prediction.parts) and all(
            _same_sequence(a, b) for a, b in zip(gold.parts, prediction.parts, strict=True)
        ):
            return True
        return None
    if isinstance(gold, _Word) and isinstance(prediction, _Word):
        if gold.text == prediction.text:
            return True
        if re.sub(r"\W", "", gold.text).lower() != re.sub(r"\W", "", prediction.text).lower():
            return False
        return None
    return None


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
    boxed = last_boxed(text)
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
    gold_number = exact_number(gold_text)
    if extraction.answer is not None and gold_number is not None:
        predicted = exact_number(extraction.answer)
        if predicted is not None:
            correct = fast_compare(gold_number, predicted)
            return MathResult(correct, extraction.answer, "fast", extraction.anchor)
    if extraction.answer is not None:
        gold_exact = _parse_exact(gold_text)
        predicted_exact = _parse_exact(extraction.answer) if gold_exact is not None else None
        if predicted_exact is not None:
            verdict = _exact_compare(gold_exact, predicted_exact)  # type: ignore[arg-type]
            if verdict is not None:
                return MathResult(verdict, extraction.answer, "fast", extraction.anchor)
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
