"""Structured answers for the math verifier's fast path, and their exact comparison.

`parse_form` reads an answer as one of: a `Scalar` (`_exact`), a sequence (tuple,
interval, set `\\{...\\}`, bare list, vector `\\langle...\\rangle`), a matrix
(`pmatrix`, `bmatrix`), a `RealSet` (a subset of the real line: inequalities and their
chains, unions, "or"/"and", `x \\in ...`, several solutions `x = 2 or x = 3`, `\\pm`,
`\\mathbb{R}`, `\\emptyset`, "all real numbers", "no solution") or a word. `compare_forms`
answers True, False or None ("math-verify decides"): True only when the two are
provably equal, False only when they provably differ under every reading math-verify
could take (a bracket pair is a tuple or an interval; a finite set is a set).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from nemo_gym.verify._exact import (
    _MAX_FAST_LEN,
    _SPACES,
    DEFAULT,
    Conventions,
    Scalar,
    exact_number,
    exact_value,
    same_value,
    scalar,
    strip_delimiters,
    unicode_to_latex,
)

_LIST_MAX = 32
_WORD = re.compile(r"\\(?:text|textbf|textrm|mbox)\{\s*([A-Za-z(][A-Za-z ()'.-]*?)\s*\}")
_BARE_WORDS = re.compile(r"[A-Za-z][A-Za-z '-]*[A-Za-z]")
_AMBIGUOUS_COMMA = re.compile(r"\d,\d{3}(?!\d)")  # 1,234: a number or a pair?
_INFINITY = re.compile(r"([+-]?)\s*\\infty")
_RELATION = re.compile(
    r"\\(?:le|ge)(?:q(?:slant)?|slant)?(?![A-Za-z])|\\(?:lt|gt|neq?)(?![A-Za-z])"
    r"|<=|>=|!=|<|>|\\approx|\\sim|\\equiv|\\in(?![A-Za-z])|\\notin"
)
_SET_HINT = re.compile(
    r"\\(?:mathbb\s*\{?\s*R|emptyset|varnothing|setminus|cup|cap|pm|mp|lor|land|vee|wedge)"
    r"(?![A-Za-z])|\\text\s*\{\s*(?:or|and)\s*\}|(?<![A-Za-z])(?:or|and)(?![A-Za-z])"
    r"|^\\\{\s*\\\}$",
)


# ---------------------------------------------------------------------------------------
# The forms.


@dataclass(frozen=True, slots=True)
class Sequence:
    """A tuple, interval, set or list: `opener` is "(", "[", "{" (a set), "<" (an ordered
    tuple that is no interval: a vector `\\langle...\\rangle`, a system's solution
    `x = 1, y = 2`) or "" (a bare list); `+inf`/`-inf` stand for infinite ends."""

    opener: str
    closer: str
    items: tuple[Scalar | str, ...]


@dataclass(frozen=True, slots=True)
class Matrix:
    rows: tuple[tuple[Scalar, ...], ...]


@dataclass(frozen=True, slots=True)
class Word:
    text: str


@dataclass(frozen=True, slots=True)
class Interval:
    """One piece of a `RealSet`: ends as exact constants, None for an infinite end."""

    low: Scalar | None
    low_closed: bool
    high: Scalar | None
    high_closed: bool


@dataclass(frozen=True, slots=True)
class RealSet:
    """A subset of the real line, canonical: sorted, disjoint, non-touching intervals
    (a point is `[a, a]`). Two sets are equal exactly when their intervals are."""

    intervals: tuple[Interval, ...]
    variable: str | None = None


Form = Scalar | Sequence | Matrix | Word | RealSet

REALS = RealSet((Interval(None, False, None, False),))
EMPTY = RealSet(())


# ---------------------------------------------------------------------------------------
# Ordering exact constants (for interval ends).


class _Unordered(Exception):
    """Two ends that cannot be ordered here (variables, or too close to call)."""


def _compare(a: Scalar, b: Scalar) -> int:
    if a.terms == b.terms:
        return 0
    if not (a.constant and b.constant):
        raise _Unordered
    x, y = a.approx(), b.approx()
    if x is None or y is None:
        raise _Unordered
    if abs(x - y) <= 1e-9 * max(abs(x), abs(y), 1e-12):
        raise _Unordered  # distinct forms this close: leave it to math-verify
    return -1 if x < y else 1


def _cmp_low(a: Interval, b: Interval) -> int:
    """Order of two lower ends (-inf first; at one value a closed end first)."""
    if a.low is None or b.low is None:
        return (a.low is not None) - (b.low is not None)
    order = _compare(a.low, b.low)
    if order:
        return order
    return (not a.low_closed) - (not b.low_closed)


def _end_order(high: Scalar | None, low: Scalar | None) -> int:
    """Compare a high end with a low end (None: +inf for high, -inf for low)."""
    if high is None or low is None:
        return 1
    return _compare(high, low)


def _nonempty(iv: Interval) -> bool:
    if iv.low is None or iv.high is None:
        return True
    order = _compare(iv.low, iv.high)
    return order < 0 or (order == 0 and iv.low_closed and iv.high_closed)


def _union(intervals: list[Interval], variable: str | None) -> RealSet:
    pieces = [iv for iv in intervals if _nonempty(iv)]
    # Sort by lower end (insertion sort: a handful of pieces, and a comparison may raise).
    ordered: list[Interval] = []
    for iv in pieces:
        at = len(ordered)
        while at > 0 and _cmp_low(ordered[at - 1], iv) > 0:
            at -= 1
        ordered.insert(at, iv)
    merged: list[Interval] = []
    for iv in ordered:
        if merged:
            last = merged[-1]
            order = _end_order(last.high, iv.low)
            touching = order == 0 and (last.high_closed or iv.low_closed)
            if order > 0 or touching:
                if last.high is None or iv.high is None:
                    high, closed = None, False
                else:
                    top = _compare(last.high, iv.high)
                    if top > 0:
                        high, closed = last.high, last.high_closed
                    elif top < 0:
                        high, closed = iv.high, iv.high_closed
                    else:
                        high, closed = last.high, last.high_closed or iv.high_closed
                merged[-1] = Interval(last.low, last.low_closed, high, closed)
                continue
        merged.append(iv)
    return RealSet(tuple(merged), variable)


def _intersect_pair(a: Interval, b: Interval) -> Interval:
    if a.low is None:
        low, low_closed = b.low, b.low_closed
    elif b.low is None:
        low, low_closed = a.low, a.low_closed
    else:
        order = _compare(a.low, b.low)
        low = a.low if order >= 0 else b.low
        low_closed = (
            (a.low_closed and b.low_closed) if order == 0 else (a if order > 0 else b).low_closed
        )
    if a.high is None:
        high, high_closed = b.high, b.high_closed
    elif b.high is None:
        high, high_closed = a.high, a.high_closed
    else:
        order = _compare(a.high, b.high)
        high = a.high if order <= 0 else b.high
        high_closed = (
            (a.high_closed and b.high_closed) if order == 0 else (a if order < 0 else b).high_closed
        )
    return Interval(low, low_closed, high, high_closed)


def _intersection(a: RealSet, b: RealSet) -> RealSet:
    pieces = [_intersect_pair(x, y) for x in a.intervals for y in b.intervals]
    return _union(pieces, a.variable or b.variable)


def _constraint(relation: str, value: Scalar, variable: str) -> RealSet:
    """{x : x <relation> value}."""
    if relation == "<":
        pieces = [Interval(None, False, value, False)]
    elif relation == "<=":
        pieces = [Interval(None, False, value, True)]
    elif relation == ">":
        pieces = [Interval(value, False, None, False)]
    elif relation == ">=":
        pieces = [Interval(value, True, None, False)]
    elif relation == "=":
        pieces = [Interval(value, True, value, True)]
    else:  # "!="
        pieces = [Interval(None, False, value, False), Interval(value, False, None, False)]
    return _union(pieces, variable)


def _same_realset(a: RealSet, b: RealSet) -> bool | None:
    if a.variable and b.variable and a.variable != b.variable:
        return False
    if len(a.intervals) != len(b.intervals):
        # Canonical forms: a different number of pieces is a different set, unless a
        # decimal end might be an irrational one rounded (then the merge could differ).
        return None if _has_decimal(a) or _has_decimal(b) else False
    for x, y in zip(a.intervals, b.intervals, strict=True):
        if (x.low_closed, x.high_closed) != (y.low_closed, y.high_closed):
            return False
        for p, q in ((x.low, y.low), (x.high, y.high)):
            if (p is None) != (q is None):
                return False
            if p is not None and q is not None and p.terms != q.terms:
                return None if p.decimal or q.decimal else False
    return True


def _has_decimal(s: RealSet) -> bool:
    return any(e is not None and e.decimal for iv in s.intervals for e in (iv.low, iv.high))


# ---------------------------------------------------------------------------------------
# Parsing.


def _strip_math(text: str) -> str:
    s = strip_delimiters(unicode_to_latex(text.strip()))
    return _SPACES.sub(" ", s).strip()


def _scalar(text: str, conventions: Conventions) -> Scalar | None:
    """One exact value, rational or not (a percentage only as a rational)."""
    number = exact_number(text, conventions)
    if number is not None:
        if len(number.values) != 1:
            return None  # both readings of a percentage: not one value
        (value,) = number.values
        decimal = number.decimals is not None
        terms = frozenset({((1, 0, 0, ()), value)} if value else ())
        return Scalar(terms, decimal, number.variable, number.degrees)
    return exact_value(text, conventions)


def _statement(text: str, conventions: Conventions) -> Scalar | None:
    """`2+3 = 5`, `x = 2+3 = 5`: a true chain of numbers is its value; else None."""
    sides = text.split("=")
    variable = None
    if re.fullmatch(r"\s*[a-df-hj-z]\s*", sides[0]):
        variable, sides = sides[0].strip(), sides[1:]
    read = [_scalar(side, conventions) for side in sides]
    values = [v for v in read if v is not None and not v.variable and v.constant]
    if not values or len(values) != len(read):
        return None
    first = values[0]
    if any(v.terms != first.terms for v in values):
        return None  # a false statement (`1+1=3`): math-verify's call
    decimal = any(v.decimal for v in values)
    return Scalar(first.terms, decimal, variable)


def _split_top(text: str, separator: str = ",") -> list[str] | None:
    """Split at `separator` outside brackets; None when the brackets do not balance."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
        elif ch == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        return None
    parts.append(text[start:])
    return parts


def _sequence(text: str, conventions: Conventions) -> Sequence | None:
    s = text.strip()
    opener = closer = ""
    if s.startswith("\\{") and s.endswith("\\}"):
        opener, closer, s = "{", "}", s[2:-2]
    elif s.startswith("\\langle") and s.endswith("\\rangle"):
        opener, closer, s = "<", ">", s[len("\\langle") : -len("\\rangle")]
    elif s[:1] in "([" and s[-1:] in ")]" and len(s) >= 2:
        inner = s[1:-1]
        if _split_top(inner) is not None:  # `(1,2)+(3,4)` is not one tuple
            opener, closer, s = s[0], s[-1], inner
    parts = _split_top(s)
    if parts is None or len(parts) > _LIST_MAX or (len(parts) < 2 and opener in "(["):
        return None
    if len(parts) == 1 and not parts[0].strip():
        return Sequence(opener, closer, ()) if opener == "{" else None
    items: list[Scalar | str] = []
    for part in parts:
        infinity = _INFINITY.fullmatch(part.strip())
        if infinity:
            if opener not in "([" or not opener:
                return None
            items.append("-inf" if infinity.group(1) == "-" else "+inf")
            continue
        value = _scalar(part, conventions)
        if value is None or value.variable:
            return None
        items.append(value)
    return Sequence(opener, closer, tuple(items))


_MATRIX = re.compile(r"\\begin\{([pbB]?matrix|smallmatrix)\}(.*)\\end\{\1\}", re.S)


def _matrix(text: str, conventions: Conventions) -> Matrix | None:
    m = _MATRIX.fullmatch(text.strip())
    if m is None:
        return None
    body = m.group(2).strip().removesuffix("\\\\").strip()
    rows: list[tuple[Scalar, ...]] = []
    for row in body.split("\\\\"):
        read = [_scalar(entry, conventions) for entry in row.split("&")]
        entries = [e for e in read if e is not None and not e.variable]
        if len(entries) != len(read):
            return None
        rows.append(tuple(entries))
    if not rows or len({len(r) for r in rows}) != 1 or len(rows) * len(rows[0]) > 256:
        return None
    return Matrix(tuple(rows))


# Solution sets. The separators are read after `_prepare_set` has spelled them out.
_SET_WORDS_EMPTY = re.compile(
    r"(?:there\s+(?:is|are)\s+)?(?:no\s+(?:real\s+)?(?:solutions?|roots?|values?|such\s+\w+)"
    r"|none|\\emptyset|\\varnothing|\\\{\s*\\\}|\{\s*\})",
    re.IGNORECASE,
)
_SET_WORDS_REALS = re.compile(
    r"(?:all\s+real(?:\s+numbers)?|all\s+reals|every\s+real\s+number|any\s+real\s+number"
    r"|\\mathbb\s*\{?\s*R\s*\}?|\(\s*-\s*\\infty\s*,\s*\+?\s*\\infty\s*\))",
    re.IGNORECASE,
)
_OR = re.compile(r"\s+or\s+|\\cup(?![A-Za-z])|\\lor(?![A-Za-z])|\\vee(?![A-Za-z])")
_AND = re.compile(r"\s+and\s+|\\cap(?![A-Za-z])|\\land(?![A-Za-z])|\\wedge(?![A-Za-z])")
_TEXT_CONNECTIVE = re.compile(
    r"\\(?:text|textrm|mbox|mathrm)\s*\{\s*(or|and|,)\s*\}|\\(?:q?quad)", re.IGNORECASE
)
_VARIABLE = re.compile(r"\s*([A-Za-z])(?:_\{?\d{1,2}\}?)?\s*")
_SETMINUS = re.compile(r"\\setminus|\\backslash")
_BUILDER = re.compile(r"\\\{\s*([A-Za-z])\s*(?::|\\mid|\||\\vert)\s*(.+)\\\}", re.S)
_RELATIONS = re.compile(
    r"\\(?:le|ge)(?:q(?:slant)?|slant)?(?![A-Za-z])|\\(?:lt|gt|neq?)(?![A-Za-z])"
    r"|<=|>=|!=|<|>|="
)
_REVERSED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}


def _relation_name(token: str) -> str:
    if token.startswith("\\l"):
        return "<" if token == "\\lt" else "<="
    if token.startswith("\\g"):
        return ">" if token == "\\gt" else ">="
    if token.startswith("\\n") or token == "!=":
        return "!="
    return token


def _prepare_set(text: str) -> str:
    s = _TEXT_CONNECTIVE.sub(lambda m: f" {(m.group(1) or ' ').lower()} ", text)
    return " ".join(s.split())


class _NotASet(Exception):
    pass


def _set_expression(text: str, conventions: Conventions) -> RealSet:
    """A set written as a set: intervals, `\\{...\\}`, R, the empty set, unions of those,
    `A \\setminus B`, set-builder `\\{x : ...\\}`."""
    s = text.strip()
    pieces = _OR.split(s)
    if len(pieces) > 1:
        found = [_set_expression(piece, conventions) for piece in pieces]
        return _union([iv for part in found for iv in part.intervals], None)
    minus = _SETMINUS.split(s)
    if len(minus) == 2:
        left = _set_expression(minus[0], conventions)
        right = _set_expression(minus[1], conventions)
        return _intersection(left, _complement(right))
    if _SET_WORDS_EMPTY.fullmatch(s):
        return EMPTY
    if _SET_WORDS_REALS.fullmatch(s):
        return REALS
    builder = _BUILDER.fullmatch(s)
    if builder:
        return _condition(builder.group(2), conventions, builder.group(1))
    seq = _sequence(s, conventions)
    if seq is None:
        raise _NotASet
    converted = _as_realset(seq)
    if converted is None:
        raise _NotASet
    return converted


def _complement(s: RealSet) -> RealSet:
    pieces: list[Interval] = []
    low: Scalar | None = None
    low_closed = False
    for iv in s.intervals:
        if iv.low is not None:
            pieces.append(Interval(low, low_closed, iv.low, not iv.low_closed))
        elif iv.high is None:
            return EMPTY
        low, low_closed = iv.high, not iv.high_closed
        if iv.high is None:
            return _union(pieces, s.variable)
    pieces.append(Interval(low, low_closed, None, False))
    return _union(pieces, s.variable)


def _chain(text: str, conventions: Conventions, variable: str | None) -> RealSet:
    """`a < x <= b`, `x > 3`, `5 >= x`, `x = 2`, `x \\ne 1`, `x \\in S`."""
    membership = re.split(r"\\in(?![A-Za-z])", text, maxsplit=1)
    if len(membership) == 2:
        member = _VARIABLE.fullmatch(membership[0])
        if member is None or (variable and member.group(1) != variable):
            raise _NotASet
        found = _set_expression(membership[1], conventions)
        return RealSet(found.intervals, member.group(1))
    parts = _RELATIONS.split(text)
    relations = [_relation_name(r) for r in _RELATIONS.findall(text)]
    if not relations:
        raise _NotASet
    at = [i for i, part in enumerate(parts) if _VARIABLE.fullmatch(part) or _ABS.fullmatch(part)]
    if len(at) != 1:
        raise _NotASet
    absolute = _ABS.fullmatch(parts[at[0]])
    named = absolute or _VARIABLE.fullmatch(parts[at[0]])
    if named is None:  # `at` holds only a part one of the two matched
        raise _NotASet
    name = named.group(1)
    if variable and name != variable:
        raise _NotASet
    if absolute:
        return _absolute(absolute, parts, relations, at[0], conventions, name)
    if len(parts) > 3 or ("=" in relations and len(relations) > 1):
        raise _NotASet  # `a < b < x`-like or mixed chains: not a solution set here
    result = REALS
    index = at[0]
    # the relation on each side of the variable, read with the variable on the left
    sides = []
    if index > 0:
        sides.append((_REVERSED[relations[index - 1]], parts[index - 1]))
    if index < len(relations):
        sides.append((relations[index], parts[index + 1]))
    if len(sides) == 2 and {sides[0][0][0], sides[1][0][0]} != {"<", ">"}:
        raise _NotASet  # `1 < x > 3`: not an interval
    for relation, side in sides:
        if relation == "=":
            values = _values(side, conventions)
            result = _union([Interval(v, True, v, True) for v in values], name)
            continue
        value = _scalar(side, conventions)
        if value is None or not value.constant or value.variable:
            raise _NotASet
        result = _intersection(result, _constraint(relation, value, name))
    return RealSet(result.intervals, name)


_ABS = re.compile(
    r"\s*(?:\\left\s*)?(?:\||\\lvert|\\vert)\s*([A-Za-z])\s*(?:([+-])\s*([^|]+?))?\s*"
    r"(?:\\right\s*)?(?:\||\\rvert|\\vert)\s*"
)


def _absolute(
    m: re.Match[str],
    parts: list[str],
    relations: list[str],
    index: int,
    conventions: Conventions,
    name: str,
) -> RealSet:
    """`|x - c| < a`, `1 \\le |x| \\le 3`: {y : |y| R a} shifted by c."""
    shift: Scalar | None = None
    if m.group(2):
        shift = _scalar(m.group(3), conventions)
        if shift is None or not shift.constant or shift.variable:
            raise _NotASet
        if m.group(2) == "+":  # |x + c| = |x - (-c)|
            shift = scalar(_negated(shift.poly))
    sides = []
    if index > 0:
        sides.append((_REVERSED[relations[index - 1]], parts[index - 1]))
    if index < len(relations):
        sides.append((relations[index], parts[index + 1]))
    result = REALS
    for relation, side in sides:
        bound = _scalar(side, conventions)
        if bound is None or not bound.constant or bound.variable:
            raise _NotASet
        low = scalar(_negated(bound.poly))
        strict = relation in ("<", ">=")  # |y| < a inside; |y| >= a is its complement
        inside = _intersection(
            _constraint("<" if strict else "<=", bound, name),
            _constraint(">" if strict else ">=", low, name),
        )
        if relation in ("<", "<="):
            piece = inside
        elif relation in (">", ">="):
            piece = _complement(inside)
        elif relation == "=":
            points = [Interval(b, True, b, True) for b in (bound, low)]
            piece = _union(points, name) if _compare(bound, low) >= 0 else EMPTY
        else:
            raise _NotASet
        result = _intersection(result, piece)
    if shift is not None:
        result = RealSet(tuple(_shifted(iv, shift) for iv in result.intervals), name)
    return RealSet(result.intervals, name)


def _negated(poly: dict) -> dict:
    return {key: -value for key, value in poly.items()}


def _shifted(iv: Interval, by: Scalar) -> Interval:
    def move(end: Scalar | None) -> Scalar | None:
        if end is None:
            return None
        total = dict(end.poly)
        for key, value in by.poly.items():
            total[key] = total.get(key, Fraction(0)) + value
            if not total[key]:
                del total[key]
        return scalar(total)

    return Interval(move(iv.low), iv.low_closed, move(iv.high), iv.high_closed)


def _values(text: str, conventions: Conventions) -> list[Scalar]:
    """The values of `2`, `\\pm 2`, `1 \\pm \\sqrt{3}`."""
    options = _plus_minus(text)
    read = [_scalar(option, conventions) for option in options]
    values = [v for v in read if v is not None and not v.variable and v.constant]
    if len(values) != len(read):
        raise _NotASet
    return values


def _plus_minus(text: str) -> list[str]:
    count = len(re.findall(r"\\[pm]m(?![A-Za-z])", text))
    if count == 0:
        return [text]
    if count > 1:
        raise _NotASet
    return [re.sub(r"\\[pm]m(?![A-Za-z])", sign, text) for sign in ("+", "-")]


def _condition(text: str, conventions: Conventions, variable: str | None = None) -> RealSet:
    """A union ("or") of intersections ("and") of chains; a list of solutions."""
    result = EMPTY
    name = variable
    for disjunct in _OR.split(text):
        piece = REALS
        conjuncts = _AND.split(disjunct)
        if len(conjuncts) > 1 and all(_is_assignment(c) or _is_value(c) for c in conjuncts):
            # `x = 2 and x = 3`, `2 and 3`: solutions listed, not a conjunction
            piece = _condition(" or ".join(conjuncts), conventions, name)
        else:
            for conjunct in conjuncts:
                found = _atom(conjunct, conventions, name)
                name = name or found.variable
                piece = _intersection(piece, found)
        name = name or piece.variable
        result = _union([*result.intervals, *piece.intervals], name)
    return RealSet(result.intervals, name)


def _is_value(text: str) -> bool:
    return not _RELATIONS.search(text) and not _SET_HINT.search(text) and "\\in" not in text


def _is_assignment(text: str) -> bool:
    return bool(re.fullmatch(r"\s*[A-Za-z](?:_\{?\d{1,2}\}?)?\s*=[^=<>]+", text))


def _atom(text: str, conventions: Conventions, variable: str | None) -> RealSet:
    s = text.strip()
    if _BUILDER.fullmatch(s):  # `\{x : x > 2\}`
        return _set_expression(s, conventions)
    if _RELATIONS.search(s) or re.search(r"\\in(?![A-Za-z])", s):
        # `x = 2, 3` and `x = 2, x = 3`: a list of solutions
        parts = _split_top(s)
        if parts is not None and len(parts) > 1:
            result = EMPTY
            name = variable
            for part in parts:
                if not _RELATIONS.search(part):
                    if name is None:
                        raise _NotASet
                    part = f"{name} = {part}"
                elif not _is_assignment(part):
                    raise _NotASet  # `x > 0, x < 5`: "and" or "or"? not guessed
                found = _chain(part, conventions, name)
                name = name or found.variable
                result = _union([*result.intervals, *found.intervals], name)
            return result
        return _chain(s, conventions, variable)
    try:
        return _set_expression(s, conventions)
    except _NotASet:
        values = _values(s, conventions)  # a bare value: `2 or 3`
        return _union([Interval(v, True, v, True) for v in values], variable)


def _as_realset(seq: Sequence) -> RealSet | None:
    """A sequence read as a set of reals: an interval (a bracket pair), a finite set."""
    if seq.opener in "([" and seq.opener and len(seq.items) == 2:
        low, high = seq.items
        if low == "+inf" or high == "-inf":
            return None
        # the only words a sequence holds are `+inf`/`-inf`: an open end of the interval
        lo = low if isinstance(low, Scalar) else None
        hi = high if isinstance(high, Scalar) else None
        if lo is not None and hi is not None:
            try:
                if _compare(lo, hi) >= 0:
                    return None  # `(2, 1)`: a pair, not an interval
            except _Unordered:
                return None
        return _union(
            [
                Interval(
                    lo,
                    seq.opener == "[" and lo is not None,
                    hi,
                    seq.closer == "]" and hi is not None,
                )
            ],
            None,
        )
    if seq.opener in ("{", ""):
        values = [item for item in seq.items if isinstance(item, Scalar) and item.constant]
        if len(values) != len(seq.items):
            return None
        return _union([Interval(v, True, v, True) for v in values], None)
    return None


def _realset(text: str, conventions: Conventions) -> RealSet | None:
    try:
        return _condition(_prepare_set(text), conventions)
    except (_NotASet, _Unordered):
        return None


def _assignments(text: str, conventions: Conventions) -> Sequence | None:
    """`x = 2, y = 3` (distinct variables): the tuple (2, 3), in the variables' order."""
    parts = _split_top(text)
    if parts is None or len(parts) < 2:
        parts = re.split(r"\s+and\s+", text)
    if len(parts) < 2 or not all(_is_assignment(p) for p in parts):
        return None
    pairs = []
    for part in parts:
        name, value = part.split("=", 1)
        found = _scalar(value, conventions)
        if found is None or found.variable:
            return None
        pairs.append((name.strip(), found))
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names) or any(len(n) != 1 for n in names):
        return None
    # "<": an ordered tuple that is no interval (the solution of a system)
    return Sequence("<", ">", tuple(v for _, v in sorted(pairs, key=lambda p: p[0])))


@lru_cache(maxsize=8192)
def parse_form(text: str, conventions: Conventions = DEFAULT) -> Form | None:
    """The structured form of an answer, or None when it is none of those forms."""
    if len(text) > _MAX_FAST_LEN:
        return None
    s = _strip_math(text)
    word = _WORD.fullmatch(s) or (_BARE_WORDS.fullmatch(s) if re.search("[A-Za-z]{3}", s) else None)
    if word:
        words = " ".join(word.group(word.lastindex or 0).split())
        found = _realset(words, conventions) if _is_set_word(words) else None
        return found if found is not None else Word(words)
    if "\\begin" in s:
        return _matrix(s, conventions)
    listed = "=" in s and "," in s
    if _RELATION.search(s) or _SET_HINT.search(s) or listed:
        if _AMBIGUOUS_COMMA.search(s):
            return None
        assigned = _assignments(_prepare_set(s), conventions)
        if assigned is not None:
            return assigned
        found = _realset(s, conventions)
        if found is not None or _RELATION.search(s):
            return found
        # `\pm 2`, `1 \pm \sqrt3` alone: a set of two values
        try:
            values = _values(s, conventions)
        except _NotASet:
            return None
        return Sequence("{", "}", tuple(values)) if len(values) > 1 else values[0]
    if "," in s or "\\infty" in s or "\\{" in s or "\\langle" in s:
        if _AMBIGUOUS_COMMA.search(s) or "=" in s:
            return None
        return _sequence(s, conventions)
    if s.count("=") > 1 or (s.count("=") == 1 and not re.match(r"^[A-Za-z]\s*=", s)):
        return _statement(s, conventions)
    return _scalar(s, conventions)


def _is_set_word(text: str) -> bool:
    return bool(_SET_WORDS_EMPTY.fullmatch(text) or _SET_WORDS_REALS.fullmatch(text))


# ---------------------------------------------------------------------------------------
# Comparison.


def _order(item: Scalar | str) -> Fraction | float | None:
    if isinstance(item, str):
        return float("inf") if item == "+inf" else float("-inf")
    return item.rational() if not item.decimal else None


def _proper_interval(seq: Sequence) -> bool:
    """A two-item bracket whose ends are known and ordered: no empty or point reading."""
    if len(seq.items) != 2 or seq.opener not in "([" or not seq.opener:
        return False
    low, high = (_order(item) for item in seq.items)
    return low is not None and high is not None and low < high


def _same_item(a: Scalar | str, b: Scalar | str) -> bool | None:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return same_value(a, b)


def _same_items(a: tuple[Scalar | str, ...], b: tuple[Scalar | str, ...]) -> bool | None:
    if len(a) != len(b):
        return False
    verdicts = [_same_item(x, y) for x, y in zip(a, b, strict=True)]
    if all(verdicts):
        return True
    return None if None in verdicts else False


def _as_set(seq: Sequence) -> frozenset[frozenset] | None:
    scalars = [item for item in seq.items if isinstance(item, Scalar) and not item.decimal]
    if len(scalars) != len(seq.items):
        return None
    members = frozenset(item.terms for item in scalars)
    return members if len(members) == len(seq.items) else None  # duplicates: math-verify


def _same_sequence(a: Sequence, b: Sequence) -> bool | None:
    if a.opener in ("{", "") and b.opener in ("{", ""):
        set_a, set_b = _as_set(a), _as_set(b)  # read as sets, like math-verify
        if set_a is None or set_b is None:
            return True if _same_items(a.items, b.items) else None
        return set_a == set_b
    if "<" in (a.opener, b.opener):  # a vector against a vector or a tuple
        if {a.opener, b.opener} <= {"<", "("}:
            return _same_items(a.items, b.items)
        return None
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
    return None  # a set against a tuple: math-verify


def _same_matrix(a: Matrix, b: Matrix | Sequence) -> bool | None:
    if isinstance(b, Sequence):
        # a column or row vector against a tuple or a vector
        if b.opener not in ("(", "<") or any(isinstance(i, str) for i in b.items):
            return None
        flat = [entry for row in a.rows for entry in row]
        if len(a.rows) != 1 and len(a.rows[0]) != 1:
            return False  # a matrix is no tuple
        return _same_items(tuple(flat), b.items)
    if len(a.rows) != len(b.rows) or len(a.rows[0]) != len(b.rows[0]):
        return False
    flat_a = tuple(e for row in a.rows for e in row)
    flat_b = tuple(e for row in b.rows for e in row)
    return _same_items(flat_a, flat_b)


def compare_forms(gold: Form, prediction: Form) -> bool | None:
    """True (equal), False (differ) or None (leave it to math-verify)."""
    try:
        return _compare_forms(gold, prediction)
    except _Unordered:
        return None


def _compare_forms(gold: Form, prediction: Form) -> bool | None:
    if isinstance(gold, Scalar) and isinstance(prediction, Scalar):
        if gold.variable and prediction.variable and gold.variable != prediction.variable:
            return False
        return same_value(gold, prediction)
    if isinstance(gold, Sequence) and isinstance(prediction, Sequence):
        return _same_sequence(gold, prediction)
    if isinstance(gold, Matrix) and isinstance(prediction, Matrix | Sequence):
        return _same_matrix(gold, prediction)
    if isinstance(prediction, Matrix) and isinstance(gold, Sequence):
        return _same_matrix(prediction, gold)
    if isinstance(gold, RealSet) or isinstance(prediction, RealSet):
        return _compare_with_set(gold, prediction)
    for seq, value in ((gold, prediction), (prediction, gold)):
        # `x = 1` against `\{0, 1\}`: one value, a set of two
        if isinstance(seq, Sequence) and isinstance(value, Scalar) and seq.opener in ("{", ""):
            return _compare_with_set(gold, prediction)
    if isinstance(gold, Word) and isinstance(prediction, Word):
        if gold.text == prediction.text:
            return True
        if re.sub(r"\W", "", gold.text).lower() != re.sub(r"\W", "", prediction.text).lower():
            return False
        return None
    return None


def _compare_with_set(gold: Form, prediction: Form) -> bool | None:
    sets = []
    for form in (gold, prediction):
        if isinstance(form, RealSet):
            sets.append(form)
        elif isinstance(form, Sequence):
            converted = _as_realset(form)
            if converted is None:
                return None
            sets.append(converted)
        elif isinstance(form, Scalar):
            if form.variable and not form.constant:
                return None
            if not form.constant:
                return None
            sets.append(RealSet((Interval(form, True, form, True),), form.variable))
        else:
            return None  # a word or a matrix against a set: math-verify
    return _same_realset(sets[0], sets[1])
