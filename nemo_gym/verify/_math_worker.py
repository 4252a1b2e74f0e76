"""The worker side of the math verifier: math-verify, plus guards against its false positives.

Runs only inside a `WorkerPool` worker (it imports sympy and math_verify at import time,
which is why the pool preloads it). Returns plain tuples of `str`/`bool`: the parent
never touches a sympy object, whose `str()` can hang.
"""

from __future__ import annotations

import logging
from itertools import product
from typing import Any

from latex2sympy2_extended.logic import And
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.grader import (
    is_assignment_relation,
    is_relation,
    take_first_relation,
    take_last_relation,
)
from sympy import Abs, Basic, Float, I, MatrixBase, Max, Symbol, UnevaluatedExpr, nsimplify
from sympy.core.function import AppliedUndef
from sympy.logic.boolalg import BooleanAtom

# math_verify warns once when its signal-based timeouts are off; the pool's own
# deadline replaces them (signal.alarm would clobber the worker's timer).
logging.getLogger("math_verify").setLevel(logging.ERROR)

_CONFIG = (LatexExtractionConfig(), ExprExtractionConfig())

# Two exact numbers closer than this (relative) are taken as equal: evalf at 40 digits
# of two symbolically equal forms (sqrt(2)/2 vs 1/sqrt(2)) differ by ~1e-40.
_RELATIVE_TOLERANCE = Float("1e-30")


def check(
    gold: str, prediction: str, wrap_prediction: bool, imaginary: bool = False
) -> tuple[str, bool, str | None]:
    """Compare `prediction` with `gold` (a bare answer, wrapped in `\\boxed{}` here).

    With `imaginary`, the symbol `i` of both is the imaginary unit (math-verify alone
    reads it as a variable).

    Returns `(status, correct, extracted)`: status "ok", "gold_unparsable" or
    "prediction_unparsable"; `extracted` is the text math-verify matched in the
    prediction (a plain string) when the prediction was given unwrapped.
    """
    gold_parsed = parse(f"\\boxed{{{gold}}}", _CONFIG, parsing_timeout=None)
    parsed_any = any(isinstance(g, Basic | MatrixBase) for g in gold_parsed)
    if not gold_parsed or (not parsed_any and not _balanced(gold)):
        # Only a raw-string fallback of broken LaTeX: comparing against it would score
        # every prediction 0 for a reason that is the dataset's fault.
        return ("gold_unparsable", False, None)
    text = f"\\boxed{{{prediction}}}" if wrap_prediction else prediction
    pred_parsed = parse(text, _CONFIG, parsing_timeout=None)
    extracted = next((p for p in reversed(pred_parsed) if isinstance(p, str)), None)
    if not pred_parsed:
        return ("prediction_unparsable", False, None)
    if imaginary:
        gold_parsed = [_with_unit(g) for g in gold_parsed]
        pred_parsed = [_with_unit(p) for p in pred_parsed]
    for g, p in product(gold_parsed, pred_parsed):
        decided = _by_value(g, p)
        if decided is not None:
            if decided:
                return ("ok", True, extracted)
            continue
        if verify(g, p, timeout_seconds=None) and _trustworthy(g, p):
            return ("ok", True, extracted)
    return ("ok", False, extracted)


# Two exact constants are equal when they agree to 60 digits at a working precision
# of 80 (symbolically equal forms differ by ~1e-80 there) and different when they
# differ beyond 1e-20: deciding by value skips sympy's simplification, which on a big
# sum of powers of surds runs for seconds. Between the two, math-verify decides.
_EQUAL_BELOW = Float("1e-60")
_DIFFERENT_ABOVE = Float("1e-20")


def _by_value(gold: Any, pred: Any) -> bool | None:
    """The verdict on two exact numbers (real or complex, no symbol, no written
    decimal) by their value at high precision, or None when it is not that case."""
    if not (isinstance(gold, Basic) and isinstance(pred, Basic)):
        return None
    if isinstance(gold, MatrixBase) or isinstance(pred, MatrixBase):
        return None
    if is_relation(gold) or is_relation(pred) or isinstance(gold, BooleanAtom | And):
        return None
    if not (gold.is_number and pred.is_number) or gold.free_symbols or pred.free_symbols:
        return None
    if gold.has(Float) or pred.has(Float) or _is_percent(gold) or _is_percent(pred):
        return None  # decimals and percentages keep math-verify's own rules
    try:
        a, b = gold.evalf(80), pred.evalf(80)
        scale = Max(Abs(a), Abs(b), 1)
        difference = Abs(a - b)
        if not (difference.is_number and scale.is_number):
            return None
        if difference <= _EQUAL_BELOW * scale:
            return True
        if difference > _DIFFERENT_ABOVE * scale:
            return False
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return None
    return None


def _with_unit(value: Any) -> Any:
    """`value` with its symbol `i` (whatever assumptions the parser gave it) replaced by
    the imaginary unit."""
    if not isinstance(value, Basic) or isinstance(value, And):
        return value
    units = [s for s in value.free_symbols if getattr(s, "name", None) == "i"]
    if not units:
        return value
    try:
        return value.subs({unit: I for unit in units})
    except (TypeError, ValueError, AttributeError):
        return value


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return False
    return depth == 0


def _trustworthy(gold: Any, pred: Any) -> bool:
    """False where math-verify said "equal" for a reason we know to be wrong."""
    if not (isinstance(gold, Basic | MatrixBase) and isinstance(pred, Basic | MatrixBase)):
        return True  # string vs string: exact comparison, nothing to second-guess
    if isinstance(gold, BooleanAtom) or isinstance(pred, BooleanAtom):
        return False
    # math-verify compares two equations by `lhs - rhs`, so any two true numeric
    # statements (`1+1=2` and `2+2=4`: both 0) "match". Without variables, compare the
    # statements side by side instead.
    if is_relation(gold) and is_relation(pred):
        if gold.free_symbols or pred.free_symbols:
            return True
        gold_sides, pred_sides = _sides(gold), _sides(pred)
        return len(gold_sides) == len(pred_sides) and (
            all(map(_same_number, gold_sides, pred_sides))
            or all(map(_same_number, gold_sides, reversed(pred_sides)))
        )
    # math-verify compares an equation with a number through the equation's last
    # right-hand side, so `x^2-5x+6=0` "equals" 0. Accept that only for an assignment
    # (`x = 5`, `f(2) = 5`) or an arithmetic chain (`2+3 = 5`).
    if is_relation(pred) and not is_relation(gold):
        if not is_assignment_relation(pred):
            first_lhs = take_first_relation(pred).lhs
            last_lhs = take_last_relation(pred).lhs
            named = isinstance(first_lhs, Symbol | AppliedUndef)
            if not named and last_lhs.free_symbols:
                return False
        pred = take_last_relation(pred).rhs
    return _numerically_consistent(gold, pred)


def _numerically_consistent(gold: Any, pred: Any) -> bool:
    """Catch the numeric false positives: math-verify compares exact values at 15
    significant digits with `chop=True`, so `1/2004!` "equals" `1/2006!`, and rounds
    floats to 6 places, so `0.1234567` "equals" `0.1234568`."""
    if isinstance(gold, MatrixBase) or isinstance(pred, MatrixBase):
        return True
    if not (isinstance(gold, Basic) and isinstance(pred, Basic)):
        return True
    if is_relation(gold) or is_relation(pred) or gold.free_symbols or pred.free_symbols:
        return True
    if _is_percent(gold) or _is_percent(pred):
        return True  # 25% vs 25 vs 0.25: math-verify's own rule stands
    if not (gold.is_number and pred.is_number):
        return True  # sets, tuples, intervals: compared element-wise by math-verify
    gold_float, pred_float = gold.has(Float), pred.has(Float)
    if gold_float and pred_float:
        if isinstance(gold, Float) and isinstance(pred, Float):
            # Two written decimals: equal only if they are the same number.
            return nsimplify(gold, rational=True) == nsimplify(pred, rational=True)
        return True
    if gold_float or pred_float:
        return True  # 1/3 vs 0.333333: math-verify's rounding rule stands
    # In sympy Floats, not Python floats: 1/2006! is far below the smallest double.
    try:
        scale = Max(Abs(gold.evalf(40)), Abs(pred.evalf(40)))
        difference = Abs((gold - pred).evalf(40))
        if scale == 0:
            return True
        return bool(difference <= _RELATIVE_TOLERANCE * scale)
    except (TypeError, ValueError, ArithmeticError):
        return True  # undecidable here (nan, zoo, complex ordering): keep the verdict


def _sides(relation: Any) -> list[Any]:
    """`a = b = c` -> [a, b, c] (an `And` of relations, or one relation)."""
    relations = list(relation._unsorted_args) if isinstance(relation, And) else [relation]
    return [relations[0].lhs, *(r.rhs for r in relations)]


def _same_number(a: Any, b: Any) -> bool:
    try:
        return bool(a == b or nsimplify(a - b) == 0)
    except (TypeError, ValueError, ArithmeticError):
        return False


def _is_percent(expr: Basic) -> bool:
    """math-verify writes `25%` as `25*UnevaluatedExpr(1/100)`."""
    return expr.has(UnevaluatedExpr)


# Forms that make sympy and math-verify import submodules or build tables on first use
# (intervals, trigonometry, relations, complex numbers, matrices, percentages). Checking
# them once here, at import, does that once in the pool's zygote: every forked worker
# inherits it, instead of each paying 50-250 ms on its first interval or equation.
_WARM_UP = (
    ("\\frac{\\sqrt{3}}{2}", "\\sqrt{2}\\pi"),
    ("1", "y = 2x + 1"),
    ("5", "a+b=5"),
    ("1+1=2", "2+2=4"),
    ("\\frac{1}{2}", "\\cos 60^\\circ"),
    ("(1,2]", "[1, 2)"),
    ("\\{1,2\\}", "1, 2"),
    ("(0,1)\\cup(1,2)", "(0,1) \\cup (1,3)"),
    ("[0,1]", "t \\in [0, 1]"),
    ("\\text{(A)}", "\\text{A}"),
    ("1+2i", "1-2i"),
    ("x^2", "\\frac{x^3}{x}"),
    ("25\\%", "0.25"),
    ("1.5", "\\frac{3}{2}"),
    ("e^{-3}", "e^{-2}"),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "(1,2)"),
    ("x \\le 3", "x < 3"),
)


def _warm_up() -> None:
    for gold, prediction in _WARM_UP:
        try:
            check(gold, prediction, True)
        except Exception:  # a warm-up must never stop the worker module from loading
            logging.getLogger(__name__).debug("warm-up of %r failed", gold, exc_info=True)
    check("1", "so the answer is $x = 2$.", False)


_warm_up()
