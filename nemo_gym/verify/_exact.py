"""Exact values for the math verifier's fast path: one answer, read exactly, or None.

`exact_number` reads a rational answer (`Number`); `exact_value` reads one beyond the
rationals (radicals, pi, e, logarithms, polynomials: `Scalar`). Both strip LaTeX
decoration first (`_normalise`): math delimiters, `\\text{}` and trailing units,
currency, thousands separators in several locales, degrees, the percent sign (read by
the percent policy), "million"; they read mixed numbers (`2\\frac{1}{2}`), repeating
decimals (`0.\\overline{3}`) and scientific notation (`1.5e-3`). None means "not a form
read here": the caller leaves the pair to math-verify. Nothing here raises on any input
or takes more than a few milliseconds (inputs over 300 characters are refused).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Literal

from nemo_gym.verify.extract import PercentPolicy

LogPolicy = Literal["natural", "base10"]
"""What an unsubscripted `\\log` means: the natural log (competition convention, the
default) or base 10. `\\ln` is always natural, `\\log_b` always base b."""
LOG_POLICIES: tuple[LogPolicy, ...] = ("natural", "base10")


@dataclass(frozen=True, slots=True)
class Conventions:
    """The reading conventions a comparison runs under (see `MathVerifier`)."""

    percent: PercentPolicy = "strip"
    log: LogPolicy = "natural"


DEFAULT = Conventions()

_MAX_FAST_LEN = 300
_MAX_BITS = 1 << 16  # results larger than 65536 bits are left to math-verify
_MAX_FACTORIAL = 5000


class _Undecidable(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Number:
    """An exactly parsed rational answer: its value(s), and what a comparison needs.

    `values` holds the value, or both readings of a percentage under the "either"
    policy (`25%` is 25 or 1/4). `decimals` is the number of places when the answer is
    a plain decimal literal. `variable` is `x` for `x = 5`. `degrees` when written
    with a degree sign.
    """

    values: tuple[Fraction, ...]
    decimals: int | None = None
    variable: str | None = None
    degrees: bool = False

    def __repr__(self) -> str:
        # repr() of a Fraction over 4300 digits raises (int_max_str_digits); 1/2006! is one.
        shown = ", ".join(
            repr(v)
            if max(v.numerator.bit_length(), v.denominator.bit_length()) < 10_000
            else f"<{v.numerator.bit_length()}-bit/{v.denominator.bit_length()}-bit>"
            for v in self.values
        )
        return f"Number(values=({shown},), decimals={self.decimals}, variable={self.variable!r})"


# ---------------------------------------------------------------------------------------
# Normalisation: from how an answer is written to a bare expression.

# Unicode math a model may write instead of LaTeX. Superscript digits become powers
# before NFKC could turn `x²` into `x2`.
_UNICODE = {
    "π": "\\pi ", "√": "\\sqrt", "∞": "\\infty ", "≤": "\\le ", "≥": "\\ge ", "≠": "\\ne ",
    "×": "\\times ", "÷": "\\div ", "·": "\\cdot ", "⋅": "\\cdot ", "−": "-", "–": "-",
    "∪": "\\cup ", "∩": "\\cap ", "∅": "\\emptyset ", "ℝ": "\\mathbb{R}", "°": "^\\circ",
    "±": "\\pm ", "∓": "\\mp ", "∈": "\\in ", "\u2009": " ", "\u202f": " ", "\u00a0": " ",
    "⁄": "/", "½": "\\frac{1}{2}", "¼": "\\frac{1}{4}", "¾": "\\frac{3}{4}",
    "⅓": "\\frac{1}{3}", "⅔": "\\frac{2}{3}",
}  # fmt: skip
_SUPERSCRIPTS = {"⁰": "0", "¹": "1", "²": "2", "³": "3", "⁴": "4", "⁵": "5", "⁶": "6",
                 "⁷": "7", "⁸": "8", "⁹": "9", "⁻": "-"}  # fmt: skip
_SUPERSCRIPT_RUN = re.compile("[" + "".join(_SUPERSCRIPTS) + "]+")


def unicode_to_latex(text: str) -> str:
    """`π`, `√`, `≤`, `x²`, `½`, the Unicode minus... as the LaTeX a grader reads."""
    if text.isascii():
        return text
    text = _SUPERSCRIPT_RUN.sub(
        lambda m: "^{" + "".join(_SUPERSCRIPTS[c] for c in m.group(0)) + "}", text
    )
    return "".join(_UNICODE.get(c, c) for c in text)


_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def strip_delimiters(text: str) -> str:
    """`text` without enclosing math delimiters (`$...$`, `\\(...\\)`, `\\[...\\]`)."""
    s = text.strip()
    for left, right in _DELIMITERS:
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left) : len(s) - len(right)].strip()
    return s


_SPACES = re.compile(
    r"(?<!\\)\\[,;:! ]|\\q?quad|~|\\displaystyle|\\left(?![a-z])|\\right(?![a-z])|\\mathrm\{\s*\}"
)
# Digit grouping: `{,}` before three digits is a thousands separator (else a decimal
# comma); `1\,234`, `1 234`, `1'234` group thousands (SI, Swiss); `1.234.567` and
# `1.234,5` (German); `12,34,567` (Indian).
_BRACE_COMMA = re.compile(r"(?<![\d.])(\d+)((?:\{,\}\d+)+)")
_SPACE_GROUPS = re.compile(r"(?<![\d.,])\d{1,3}(?:(?:\\[,;: !]|~|[ '’])\d{3})+(?![\d])")
_GROUP_SEPARATOR = re.compile(r"\\[,;: !]|~|[ '’]")
_DOT_GROUPS = re.compile(r"(?<![\d.,])\d{1,3}(?:\.\d{3}){2,}(?![\d.])")
_DOT_COMMA = re.compile(r"(?<![\d.,])(\d{1,3}(?:\.\d{3})+),(\d+)(?![\d.,])")
_INDIAN = re.compile(r"(?<![\d.,])\d{1,2}(?:,\d{2})+,\d{3}(?![\d,])")
_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")
_CURRENCY = re.compile(r"\\\$|\$|[€£¥₹]|\\euro(?![a-z])|\\pounds(?![a-z])")
_MULTIPLIER = re.compile(
    r"(?<=[\d}])\s*(?:\\(?:text|textrm|mathrm|mbox)\s*\{\s*)?"
    r"(thousand|million|billion|trillion)(?![a-z])(?:\s*\})?",
    re.IGNORECASE,
)
_MULTIPLIERS = {"thousand": "3", "million": "6", "billion": "9", "trillion": "12"}
# `2\frac{1}{2}` and `2 1/2` are mixed numbers (a proper fraction after an integer).
_MIXED_LATEX = re.compile(
    r"(?<![\d.}^_{/\\a-zA-Z])(\d+)\s*\\frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))"
)
_MIXED_PLAIN = re.compile(r"(?<![\d./^])(\d+)\s+(\d+)\s*/\s*(\d+)(?![\d.])")
_REPEATING = re.compile(
    r"(?<![\d.])(\d*)\.(\d*)\s*\\(?:overline|bar|dot)\s*(?:\{\s*(\d{1,12})\s*\}|(\d))"
)
_ELLIPSIS = re.compile(r"(?<=\d\.\d)(\d*)\s*(?:\\[lc]?dots|\.\.\.|…)")
_SCIENTIFIC = re.compile(r"(?<![\w.])(\d+\.\d+|\d+(?=E))[eE]([+-]?\d{1,4})(?![\w.])")
_TEXT = re.compile(
    r"\\(?:text|textbf|textrm|textnormal|mathrm|mbox)\s*\{([^{}]*)\}"
    r"(\s*\^\s*(?:\{\s*-?\d\s*\}|-?\d))?"
)
_NUMERIC_TEXT = re.compile(r"[\d.,\s]+")
_NUMBER_THEN_WORDS = re.compile(r"\s*([-+]?[\d.,]*\d)\s+[A-Za-z][A-Za-z\s./]*")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\degree(?![a-z])")
_DEGREE_WORDS = re.compile(r"\s*(?:degrees?|deg)\s*$", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"^([A-Za-z])\s*=\s*(.+)$", re.S)
_UNIT_WORDS = re.compile(r"(?<=[\d}%)])\s+([A-Za-z][A-Za-z\s./]*(?:\^\s*\{?-?\d\}?)?)$")
_PERCENT_WORD = re.compile(r"\s*(?:percent|per\s*cent|pct)\s*$", re.IGNORECASE)
_OPERATOR = re.compile(r"(?<!^)[-+*/^]")
_DIGITS_APART = re.compile(r"\d\s+\d")
_SUBSCRIPT = re.compile(r"_\s*(?:\{[^{}]*\}|\d)")  # `\log_2 8`: the base is no digit group
_DECIMAL = re.compile(r"[+-]?(\d*)\.(\d+)")
_HAS_DECIMAL = re.compile(r"\d*\.\d")
# The commands the evaluator knows; any other backslash leaves the fast path.
_COMMANDS = re.compile(r"\\(?:frac|sqrt|pi|binom|ln|log)(?![A-Za-z])")
_LETTER_RUN = re.compile(r"[A-Za-z]{2}")
_TOKEN = re.compile(
    r"\s*(\d+\.\d*|\.\d+|\d+|\\(?:frac|sqrt|pi|binom|ln|log)(?![A-Za-z])|[a-zA-Z]|[-+*/^!(){}\[\]_])"
)


def _brace_comma(m: re.Match[str]) -> str:
    """`1{,}234{,}567` groups thousands; `3{,}5` and `0{,}125` have a decimal comma."""
    head, groups = m.group(1), m.group(2).split("{,}")[1:]
    if 1 <= len(head) <= 3 and head != "0" and all(len(g) == 3 for g in groups):
        return head + "".join(groups)
    if len(groups) == 1:
        return f"{head}.{groups[0]}"
    return m.group(0)  # `1{,}2{,}3`: a list, not one number


def _mixed(m: re.Match[str]) -> str:
    whole, num, den = m.group(1), m.group(2) or m.group(3), m.group(4) or m.group(5)
    if int(num) >= int(den) or int(den) == 0:
        return m.group(0)  # `2\frac{3}{2}`: a product, or a typo; not a mixed number
    return f"({whole}+\\frac{{{num}}}{{{den}}})"


def _mixed_plain(m: re.Match[str]) -> str:
    whole, num, den = m.group(1), m.group(2), m.group(3)
    if int(num) >= int(den) or int(den) == 0:
        return m.group(0)
    return f"({whole}+{num}/{den})"


def _repeating(m: re.Match[str]) -> str:
    whole, fixed, block = m.group(1) or "0", m.group(2), m.group(3) or m.group(4)
    # 0.1(6) = (16 - 1) / 90: the digits through one period, less the fixed ones.
    numerator = int(fixed + block) - int(fixed or "0")
    denominator = (10 ** len(block) - 1) * 10 ** len(fixed)
    return f"({whole}+\\frac{{{numerator}}}{{{denominator}}})"


def _text_group(m: re.Match[str]) -> str:
    content, power = m.group(1), m.group(2) or ""
    stripped = content.strip()
    if _NUMERIC_TEXT.fullmatch(content):
        return content + power
    if stripped in ("e", "i") and not power:
        return stripped  # \mathrm{e}: Euler's number, not a unit
    if stripped.lower() in ("percent", "%", "\\%"):
        return "\\%"
    number = _NUMBER_THEN_WORDS.fullmatch(content)
    if number:  # `\text{2 apples}`
        return number.group(1)
    return " "  # a unit (`\text{ cm}^2`) or a word: dropped with its power


@dataclass(frozen=True, slots=True)
class _Normalised:
    expression: str
    percent: bool
    variable: str | None
    degrees: bool


_PLAIN = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)")


def _normalise(text: str) -> _Normalised | None:
    """Strip LaTeX decoration down to an expression for the evaluator, or None.

    Each rewrite runs only when the characters it needs are there: most answers are a
    plain number or a short LaTeX form, and this runs on the event loop.
    """
    s = text.strip()
    if len(s) > _MAX_FAST_LEN:
        return None
    s = strip_delimiters(unicode_to_latex(s))
    if _PLAIN.fullmatch(s):
        return _Normalised(s, False, None, False)
    if "\\" in s:
        s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
        s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/")
    if "{,}" in s:
        s = _BRACE_COMMA.sub(_brace_comma, s)
    if "." in s:
        s = _DOT_COMMA.sub(lambda m: m.group(1).replace(".", "") + "." + m.group(2), s)
        s = _DOT_GROUPS.sub(lambda m: m.group(0).replace(".", ""), s)
    s = _SPACE_GROUPS.sub(lambda m: _GROUP_SEPARATOR.sub("", m.group(0)), s)
    if "," in s:
        s = _INDIAN.sub(lambda m: m.group(0).replace(",", ""), s)
    s = _SPACES.sub(" ", s)
    if "$" in s or not s.isascii() or "\\euro" in s or "\\pounds" in s:
        s = _CURRENCY.sub("", s)
    if "illion" in s or "housand" in s:
        s = _MULTIPLIER.sub(lambda m: "*10^{" + _MULTIPLIERS[m.group(1).lower()] + "}", s)
    if "\\" in s:
        s = _REPEATING.sub(_repeating, s)
    if ".." in s or "dots" in s or "…" in s:
        s = _ELLIPSIS.sub(lambda m: m.group(1), s)
    if "e" in s or "E" in s:
        s = _SCIENTIFIC.sub(lambda m: f"({m.group(1)}*10^{{{m.group(2)}}})", s)
    if "\\frac" in s:
        s = _MIXED_LATEX.sub(_mixed, s)
    if "/" in s:
        s = _MIXED_PLAIN.sub(_mixed_plain, s)
    percent = False
    s = s.strip()
    for suffix in ("\\%", "%"):
        if s.endswith(suffix):
            percent, s = True, s[: -len(suffix)].strip()
    degrees = False
    if "\\" in s:
        s = _TEXT.sub(_text_group, s)
        if _DEGREES.search(s):
            degrees, s = True, _DEGREES.sub("", s)
        s = s.strip()
        for suffix in ("\\%", "%"):  # `5\%\text{ interest}`
            if s.endswith(suffix):
                percent, s = True, s[: -len(suffix)].strip()
    variable = None
    if "=" in s:
        assignment = _ASSIGNMENT.match(s)
        if assignment:
            variable, s = assignment.group(1), assignment.group(2).strip()
    if " " in s or "/" in s:  # trailing words: `25 percent`, `30 degrees`, `12 apples`
        if _PERCENT_WORD.search(s) and re.search(r"\d\s*(?:percent|per\s*cent|pct)", s, re.I):
            percent, s = True, _PERCENT_WORD.sub("", s)
        if _DEGREE_WORDS.search(s) and re.search(r"\d\s*deg", s, re.I):
            degrees, s = True, _DEGREE_WORDS.sub("", s)
        # Trailing unit words ("12 apples", "5 cm^2", "3 m/s"): a space then letters
        # only. A single letter after an expression ("3 + 2 x") is a variable, not a unit.
        unit = _UNIT_WORDS.search(s)
        if unit:
            rest = s[: unit.start()].strip()
            if len(unit.group(1).strip()) > 1 or not _OPERATOR.search(rest):
                s = rest
        for suffix in ("\\%", "%"):  # `25 \%` after a stripped unit
            if s.endswith(suffix):
                percent, s = True, s[: -len(suffix)].strip()
    if "," in s:
        s = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), s)
    if not s or "," in s or "=" in s:
        return None
    bare = _COMMANDS.sub(" ", s) if "\\" in s else s
    if "\\" in bare or _LETTER_RUN.search(bare):  # other commands, words: not here
        return None
    if _DIGITS_APART.search(_SUBSCRIPT.sub("_", s) if "_" in s else s):  # "1 2": a list
        return None
    return _Normalised(s, percent, variable, degrees)


# ---------------------------------------------------------------------------------------
# Exact values beyond the rationals: a finite sum of terms c * sqrt(r) * pi^k * e^j * m,
# with c rational, r a squarefree integer, and m a monomial in single-letter variables
# (negative powers allowed). This form is canonical: square roots of distinct squarefree
# integers are linearly independent over Q (Besicovitch), and pi (or e) is
# transcendental, so its powers are independent over the algebraic numbers; polynomial
# identity is coefficient identity. Two forms are therefore equal exactly when their
# term dictionaries are equal. (pi and e TOGETHER are not known to be algebraically
# independent: `same_value` then decides numerically, or leaves it to math-verify.)
#
# Logarithms of rationals enter as monomials in atoms `ln:p`, p prime (ln 12 = 2 ln 2 +
# ln 3; log_8 4 = 2/3 exactly). Equal forms are equal values; forms that differ are
# judged different only when they differ numerically beyond any rounding error, since
# the algebraic independence of logarithms (and of pi, e) is not known in general.

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


_MAX_CONJUGATES = 4  # primes under the radicals of a denominator


def _pinv(a: _Poly) -> _Poly:
    """1/a: a single term, or a sum of square roots of rationals, rationalised exactly
    (1/(1+sqrt2) = sqrt2 - 1); 1/(x+1) and 1/(1+pi) are left to math-verify."""
    if len(a) == 1:
        (((r, k, j, m), c),) = a.items()
        return {(r, -k, -j, tuple((name, -n) for name, n in m)): _checked(1 / (c * r))}
    if any(k or j or m or r < 1 for r, k, j, m in a):
        raise _Undecidable
    primes = sorted({p for r, _, _, _ in a if r > 1 for p in _factor(r)})
    if len(primes) > _MAX_CONJUGATES:
        raise _Undecidable
    # Multiplying by the conjugate that flips the sign of sqrt(p) leaves a value free of
    # sqrt(p); after every prime of the radicands the denominator is rational.
    numerator, denominator = _const(Fraction(1)), a
    for p in primes:
        conjugate = {key: -c if key[0] % p == 0 else c for key, c in denominator.items()}
        numerator = _pmul(numerator, conjugate)
        denominator = _pmul(denominator, conjugate)
    rational = _as_rational(denominator)
    if not rational:
        raise _Undecidable
    return {key: _checked(c / rational) for key, c in numerator.items()}


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
_IMPLICIT = frozenset(["\\pi", "\\sqrt", "\\ln", "\\log", *_SYMBOLS, "e"])
_LOG = "ln:"  # the prefix of a logarithm atom in a monomial


class _Evaluator:
    """Recursive descent over the normalised tokens; exact values (see `_Poly`).

    Grammar: sum := product (('+'|'-') product)*; product := unary (('*'|'/') unary)*
    with implicit products `2\\sqrt3`, `3\\pi`, `2x`, `\\pi r^2`, `(x-1)(x+1)`;
    unary := ('-'|'+') unary | power; power := postfix ('^' exponent)?;
    postfix := atom '!'*; atom := number | letter | \\pi | '(' sum ')' | '{' sum '}' |
    \\frac arg arg | \\sqrt ('[' sum ']')? arg | \\binom arg arg |
    (\\ln | \\log ('_' base)?) (power | '(' sum ')').
    Other implicit products ("2(3)", "2\\frac{3}{2}") are refused (mixed numbers were
    rewritten as sums by `_normalise`).
    """

    def __init__(self, text: str, *, latex: bool, log: LogPolicy = "natural") -> None:
        # In LaTeX `2^23` is 2^2 * 3, not 2^23: multi-digit bare exponents are refused.
        self.latex = latex
        self.log = log
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
        if token in ("\\ln", "\\log"):
            base: _Poly | None = None
            if token == "\\log" and self.peek() == "_":
                self.take()
                base = self.subscript()
            elif token == "\\log" and self.log == "base10":
                base = _const(Fraction(10))
            if self.peek() == "(":
                self.take()
                argument = self.sum()
                self.take(")")
            else:
                argument = self.power()
            return _logarithm(argument, base)
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

    def subscript(self) -> _Poly:
        """A log base: `_{10}`, `_2`, and `_10` read as ten (what its writer meant)."""
        if self.peek() == "{":
            return self.atom()
        token = self.take()
        if token == "e":
            return {(1, 0, 1, ()): Fraction(1)}
        if not token.isdigit():
            raise _Undecidable
        if len(token) > 1 and token != "10":  # `\log_28` is log_2 8, as LaTeX sets it
            self.index -= 1
            self.tokens[self.index] = token[1:]
            token = token[0]
        return _const(Fraction(int(token)))

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


_MAX_FACTORED = 10**9  # trial division to ~31,623 (milliseconds) factors anything below it


def _factor(n: int) -> dict[int, int]:
    """The prime factorisation of 0 < n <= 10**9."""
    if n > _MAX_FACTORED:
        raise _Undecidable
    factors: dict[int, int] = {}
    d = 2
    while d * d <= n:
        while n % d == 0:
            factors[d] = factors.get(d, 0) + 1
            n //= d
        d += 1 if d == 2 else 2
    if n > 1:
        factors[n] = factors.get(n, 0) + 1
    return factors


def _log_vector(value: _Poly) -> tuple[dict[int, Fraction], Fraction]:
    """ln(value) as (rational coefficients of ln p, rational part), for value =
    c * sqrt(r) * e^j with c > 0 rational: ln c + (1/2) ln r + j."""
    if len(value) != 1:
        raise _Undecidable
    (((r, k, j, m), c),) = value.items()
    if k or m or c <= 0:
        raise _Undecidable  # ln of pi, of a variable, of a negative: not here
    vector: dict[int, Fraction] = {}
    for p, n in _factor(c.numerator).items():
        vector[p] = vector.get(p, Fraction(0)) + n
    for p, n in _factor(c.denominator).items():
        vector[p] = vector.get(p, Fraction(0)) - n
    for p, n in _factor(r).items():
        vector[p] = vector.get(p, Fraction(0)) + Fraction(n, 2)
    return {p: v for p, v in vector.items() if v}, Fraction(j)


def _log_poly(vector: dict[int, Fraction], rational: Fraction) -> _Poly:
    poly = _const(rational)
    for p, coefficient in vector.items():
        poly[(1, 0, 0, ((f"{_LOG}{p}", 1),))] = coefficient
    return poly


def _logarithm(argument: _Poly, base: _Poly | None) -> _Poly:
    """ln(argument), or log_base(argument) = ln(argument) / ln(base), exactly."""
    vector, rational = _log_vector(argument)
    if base is None:
        return _log_poly(vector, rational)
    base_vector, base_rational = _log_vector(base)
    if not base_vector and not base_rational:
        raise _Undecidable  # log base 1
    if not base_vector:  # log base e^j
        return _pmul(_log_poly(vector, rational), _const(1 / base_rational))
    # log_8 4 = 2/3: the argument's logarithm is a rational multiple of the base's.
    ratio = None
    for p in set(vector) | set(base_vector):
        if p not in base_vector or p not in vector:
            ratio = None
            break
        q = vector[p] / base_vector[p]
        if ratio is not None and q != ratio:
            ratio = None
            break
        ratio = q
    if not vector and not rational:
        return {}
    if ratio is not None and rational == ratio * base_rational:
        return _const(ratio)
    if len(base_vector) == 1 and not base_rational:
        ((p, coefficient),) = base_vector.items()
        inverse: _Poly = {(1, 0, 0, ((f"{_LOG}{p}", -1),)): 1 / coefficient}
    else:
        # 1 / ln 10 = 1 / (ln 2 + ln 5) is no single term: an atom of its own, ln(10)^-1.
        # Equal forms stay equal values; forms that differ are told apart numerically.
        b = _as_rational(base)
        if b is None or b.denominator != 1 or not 1 < b <= _MAX_FACTORED:
            raise _Undecidable
        inverse = {(1, 0, 0, ((f"{_LOG}{b.numerator}", -1),)): Fraction(1)}
    return _pmul(_log_poly(vector, rational), inverse)


_FAILURES = (_Undecidable, ValueError, ZeroDivisionError, OverflowError, RecursionError)


def _evaluate(expression: str, text: str, log: LogPolicy = "natural") -> _Poly | None:
    try:
        return _Evaluator(expression, latex="\\" in text or "{" in text, log=log).parse()
    except _FAILURES:
        return None


def _readings(value: Fraction, percent: bool, policy: PercentPolicy) -> tuple[Fraction, ...]:
    if not percent or policy == "strip":
        return (value,)
    if policy == "value":
        return (value / 100,)
    return (value, value / 100)


@lru_cache(maxsize=8192)
def _parsed(text: str, log: LogPolicy) -> tuple[_Normalised, _Poly] | None:
    """The normalised text and its exact value (shared by `exact_number` and
    `exact_value`, which the forms call one after the other on the same text)."""
    normalised = _normalise(text)
    if normalised is None:
        return None
    poly = _evaluate(normalised.expression, text, log)
    return None if poly is None else (normalised, poly)


@lru_cache(maxsize=8192)
def exact_number(text: str, conventions: Conventions = DEFAULT) -> Number | None:
    """Parse a simple numeric answer exactly, or return None when it is not one.

    Never raises on any string, and costs at most a few milliseconds (inputs over
    300 characters and results over 65536 bits are refused). Only rational values
    are Numbers (`\\sqrt{16}` is 4); `\\sqrt{2}` or `x+1` give None. A percentage
    is read by `conventions.percent`.
    """
    parsed = _parsed(text, conventions.log)
    if parsed is None:
        return None
    normalised, poly = parsed
    value = _as_rational(poly)
    if value is None:
        return None
    decimal = _DECIMAL.fullmatch(normalised.expression)
    decimals = len(decimal.group(2)) if decimal else None
    values = _readings(value, normalised.percent, conventions.percent)
    return Number(values, decimals, normalised.variable, normalised.degrees)


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

    Equal values match (under "either", a percentage matches both readings). A decimal
    with at least 3 places also matches a non-terminating fraction it rounds or
    truncates (`0.333` for 1/3, either way round); two decimals must be the same number.
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
# Scalars beyond the rationals, and their comparison.


@dataclass(frozen=True, slots=True)
class Scalar:
    """One exact value: its canonical terms (see `_Poly`) and how it was written."""

    terms: frozenset[tuple[_Key, Fraction]]
    decimal: bool  # a decimal literal was written: exact equality only, never "differ"
    variable: str | None
    degrees: bool = False

    @property
    def poly(self) -> _Poly:
        return dict(self.terms)

    @property
    def constant(self) -> bool:
        """No variables (logarithm atoms are constants)."""
        return all(name.startswith(_LOG) for key, _ in self.terms for name, _ in key[3])

    def rational(self) -> Fraction | None:
        return _as_rational(self.poly)

    def approx(self) -> float | None:
        """The value as a float, or None for a form with variables or out of range."""
        return _approximate(self.poly)[0]


def scalar(poly: _Poly, *, decimal: bool = False, variable: str | None = None) -> Scalar:
    return Scalar(frozenset(poly.items()), decimal, variable)


@lru_cache(maxsize=8192)
def exact_value(text: str, conventions: Conventions = DEFAULT) -> Scalar | None:
    """One value beyond the rationals (`2\\sqrt2`, `\\frac{\\pi}{3}`, `\\ln 8`, `x^2-1`),
    or None. Percentages are `exact_number`'s business and give None here."""
    parsed = _parsed(text, conventions.log)
    if parsed is None or parsed[0].percent:
        return None
    normalised, poly = parsed
    decimal = bool(_HAS_DECIMAL.search(normalised.expression))
    return Scalar(frozenset(poly.items()), decimal, normalised.variable, normalised.degrees)


_PI_OVER_180: _Poly = {(1, 1, 0, ()): Fraction(1, 180)}


def _approximate(poly: _Poly) -> tuple[float | None, float]:
    """(value, sum of |terms|) as floats; (None, 0) with variables or out of range."""
    total = scale = 0.0
    try:
        for (r, k, j, m), c in poly.items():
            term = float(c) * math.sqrt(r) * math.pi**k * math.e**j
            for name, n in m:
                if not name.startswith(_LOG):
                    return None, 0.0
                term *= math.log(int(name[len(_LOG) :])) ** n
            total += term
            scale += abs(term)
    except (OverflowError, ValueError, ZeroDivisionError):
        return None, 0.0
    if not math.isfinite(total) or not math.isfinite(scale):
        return None, 0.0
    return total, scale


def _provably_independent(keys: list[_Key]) -> bool:
    """Whether distinct terms over these keys are linearly independent, so that forms
    with different terms differ: radicals with pi or with e (not both), polynomials."""
    has_pi = any(key[1] for key in keys)
    has_e = any(key[2] for key in keys)
    has_log = any(name.startswith(_LOG) for key in keys for name, _ in key[3])
    return not (has_pi and has_e) and not has_log


def same_value(a: Scalar, b: Scalar) -> bool | None:
    """True (equal), False (provably differ) or None (cannot tell here).

    A value written with a degree sign against one without also compares in radians
    (`30^\\circ` is `\\frac{\\pi}{6}`); degrees against a bare number compare as numbers.
    """
    if a.degrees != b.degrees:
        degrees, other = (a, b) if a.degrees else (b, a)
        converted = Scalar(
            frozenset(_pmul(degrees.poly, _PI_OVER_180).items()), degrees.decimal, None
        )
        plain = Scalar(degrees.terms, degrees.decimal, None)
        verdicts = [_same_terms(plain, other), _same_terms(converted, other)]
        if True in verdicts:
            return True
        return None if None in verdicts else False
    return _same_terms(a, b)


def _same_terms(a: Scalar, b: Scalar) -> bool | None:
    if a.terms == b.terms:
        return True
    if a.decimal or b.decimal:
        return None  # 1.414 vs sqrt(2): math-verify's rounding rule decides
    keys = [key for key, _ in a.terms | b.terms]
    if _provably_independent(keys):
        return False
    # pi and e together, logarithms: different forms may still be one value
    # (ln 2 / ln 3 and log_3 2 are canonical alike; e^pi and pi^e are not known to
    # differ by algebra). A numeric difference far beyond rounding proves they differ.
    difference = _padd(a.poly, b.poly, -1)
    value, scale = _approximate(difference)
    if value is not None and abs(value) > 1e-9 * max(scale, 1e-300):
        return False
    return None
