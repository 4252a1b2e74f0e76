# ruff: noqa: E501  (a data builder: its templates read best on one line)
"""Build `math_adversarial.jsonl`: labelled (reply, gold) pairs where graders go wrong.

Run `python tests/verify/data/build_math_adversarial.py` to regenerate (deterministic).
Each row: `prediction` (a model-style reply), `gold`, `expected` (is the reply's final
answer equal to the gold?), `category`. The labels come from how each pair is built
(the same value written two ways, or a value and a plausible mistake), under the
conventions `MathVerifier` documents: a percent sign is a unit (`6\\%` is 6, not 0.06,
as the MATH/PRM800K graders read it), `\\log` is the natural log, a degree sign may be
converted (`30^\\circ` is `\\pi/6`), an interval's ends and brackets are exact, several
solutions form a set, and a hedge between different boxed answers is wrong.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

OUT = Path(__file__).with_name("math_adversarial.jsonl")
rng = random.Random(20261210)

PREAMBLES = [
    "",
    "Let me work through this step by step.\n",
    "We start from the given conditions.\n",
    "Okay, so I need to find the value asked for. Let me set things up carefully.\n",
    "First, note that the expression simplifies once we collect terms.\n",
    "Let's solve it.\n\nStep 1: rewrite the equation.\nStep 2: simplify.\n",
]
DISTRACTIONS = [
    "",
    "Note that $x = 7$ is not allowed here, and 13 is too large.\n",
    "Checking: $2 + 3 = 5$ and $10 - 4 = 6$, so the arithmetic is consistent.\n",
    "An earlier attempt gave 99, which was wrong.\n",
    "We must have $n \\geq 1$, since $n = 0$ fails.\n",
]


def carriers(answer: str, *, dollars_ok: bool = True) -> list[str]:
    """Ways a model ends its reply with `answer` (a LaTeX fragment)."""
    out = [
        f"Therefore, the final answer is $\\boxed{{{answer}}}$.",
        f"\\[\n\\boxed{{{answer}}}\n\\]",
        f"So the answer is \\boxed{{{answer}}}",
        f"**Final Answer**\n\n$$\\boxed{{{answer}}}$$",
    ]
    if dollars_ok:
        out += [f"The answer is ${answer}$.", f"**Final answer:** ${answer}$"]
    return out


def reply(answer: str, *, dollars_ok: bool = True, carrier: str | None = None) -> str:
    end = carrier if carrier is not None else rng.choice(carriers(answer, dollars_ok=dollars_ok))
    return rng.choice(PREAMBLES) + rng.choice(DISTRACTIONS) + end


Row = dict[str, object]


def row(prediction: str, gold: str, expected: bool, category: str) -> Row:
    return {"prediction": prediction, "gold": gold, "expected": expected, "category": category}


def frac_tex(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def small_value() -> Fraction:
    if rng.random() < 0.7:
        return Fraction(rng.randint(-20, 20))
    return Fraction(rng.randint(-20, 20), rng.choice([2, 3, 4, 5, 7]))


# ---------------------------------------------------------------------------------------


def currency() -> Iterator[Row]:
    for _ in range(70):
        cents = rng.randint(100, 99_999)
        value = Fraction(cents, 100)
        shown = f"{cents // 100}.{cents % 100:02d}"
        gold = rng.choice([shown, str(float(value)).rstrip("0").rstrip("."), f"\\${shown}"])
        right = rng.random() < 0.55
        said = shown if right else f"{cents // 100}.{(cents % 100 + rng.randint(1, 9)) % 100:02d}"
        if not right and said == shown:
            continue
        pre = rng.choice(PREAMBLES) + "Each item costs $\\$3$ and tax is $\\$0.25$.\n"
        form = rng.choice(
            [
                f"The answer is $\\${said}$.",
                f"So the total is $\\${said}$, and the answer is $\\${said}$.",
                f"Final answer: $\\${said}$",
                f"The answer is $\\${said}$ dollars.",
                f"Thus the answer is \\(\\${said}\\).",
            ]
        )
        yield row(pre + form, gold, right, "currency_in_math")


def blank_fallback() -> Iterator[Row]:
    blanks = ["\\boxed{}", "\\boxed{ }", "\\boxed{.}", "\\boxed{\\$}", "\\boxed{\\,}", "$\\$$"]
    for _ in range(45):
        value = rng.randint(2, 500)
        right = rng.random() < 0.6
        said = value if right else value + rng.randint(1, 9)
        blank = rng.choice(blanks)
        text = rng.choice(
            [
                f"The answer is {said}. I will write it as {blank}",
                f"I put {blank} by mistake above; the final answer is {said}.",
                f"{blank}\n\nThe answer is $${said}$$",
                f"So we get {said}.\n\n{blank}",
            ]
        )
        yield row(rng.choice(PREAMBLES) + text, str(value), right, "blank_fallback")


def _bound_tex(q: Fraction) -> str:
    return frac_tex(q)


LE = ["\\le", "\\leq", "\\leqslant", "≤"]
GE = ["\\ge", "\\geq", "\\geqslant", "≥"]


def inequalities() -> Iterator[Row]:
    for _ in range(240):
        a = small_value()
        b = a + rng.randint(1, 12)
        kind = rng.choice(["below", "above", "between", "outside", "member"])
        if kind == "below":
            strict = rng.random() < 0.5
            gold = f"(-\\infty, {_bound_tex(b)}{')' if strict else ']'}"
            op = "<" if strict else rng.choice(LE)
            forms = [
                f"x {op} {_bound_tex(b)}",
                f"{_bound_tex(b)} {'>' if strict else rng.choice(GE)} x",
            ]
            wrongs = [
                f"x {rng.choice(LE) if strict else '<'} {_bound_tex(b)}",
                f"x {'>' if strict else rng.choice(GE)} {_bound_tex(b)}",
                f"x {op} {_bound_tex(b + 1)}",
            ]
        elif kind == "above":
            strict = rng.random() < 0.5
            gold = f"{'(' if strict else '['}{_bound_tex(a)}, \\infty)"
            op = ">" if strict else rng.choice(GE)
            forms = [
                f"x {op} {_bound_tex(a)}",
                f"{_bound_tex(a)} {'<' if strict else rng.choice(LE)} x",
            ]
            wrongs = [
                f"x {rng.choice(GE) if strict else '>'} {_bound_tex(a)}",
                f"x {'<' if strict else rng.choice(LE)} {_bound_tex(a)}",
                f"x {op} {_bound_tex(a - 1)}",
            ]
        elif kind == "between":
            lo_strict, hi_strict = rng.random() < 0.5, rng.random() < 0.5
            gold = (
                f"{'(' if lo_strict else '['}{_bound_tex(a)}, {_bound_tex(b)}"
                f"{')' if hi_strict else ']'}"
            )
            lo_op = "<" if lo_strict else rng.choice(LE)
            hi_op = "<" if hi_strict else rng.choice(LE)
            rev_lo = ">" if lo_strict else rng.choice(GE)
            rev_hi = ">" if hi_strict else rng.choice(GE)
            forms = [
                f"{_bound_tex(a)} {lo_op} x {hi_op} {_bound_tex(b)}",
                f"{_bound_tex(b)} {rev_hi} x {rev_lo} {_bound_tex(a)}",
                f"x {rev_lo} {_bound_tex(a)} \\text{{ and }} x {hi_op} {_bound_tex(b)}",
                f"x \\in {gold}",
            ]
            flipped = "<" if not lo_strict else rng.choice(LE)
            wrongs = [
                f"{_bound_tex(a)} {flipped} x {hi_op} {_bound_tex(b)}",
                f"{_bound_tex(a)} {lo_op} x {hi_op} {_bound_tex(b + 2)}",
                f"x {lo_op} {_bound_tex(a)} \\text{{ or }} x {rev_hi} {_bound_tex(b)}",
            ]
        elif kind == "outside":
            lo_strict, hi_strict = rng.random() < 0.5, rng.random() < 0.5
            gold = (
                f"(-\\infty, {_bound_tex(a)}{')' if lo_strict else ']'} \\cup "
                f"{'(' if hi_strict else '['}{_bound_tex(b)}, \\infty)"
            )
            lo_op = "<" if lo_strict else rng.choice(LE)
            hi_op = ">" if hi_strict else rng.choice(GE)
            joiner = rng.choice(["\\text{ or }", " \\text{or} ", " or ", " \\lor "])
            forms = [
                f"x {lo_op} {_bound_tex(a)}{joiner}x {hi_op} {_bound_tex(b)}",
                f"x {hi_op} {_bound_tex(b)}{joiner}x {lo_op} {_bound_tex(a)}",
                f"x \\in {gold}",
            ]
            wrongs = [
                f"{_bound_tex(a)} {'<' if lo_strict else rng.choice(LE)} x "
                f"{'<' if hi_strict else rng.choice(LE)} {_bound_tex(b)}",
                f"x {lo_op} {_bound_tex(a)}{joiner}x {'<' if hi_strict else rng.choice(LE)} {_bound_tex(b)}",
                f"x {'<' if not lo_strict else rng.choice(LE)} {_bound_tex(a)}{joiner}x {hi_op} {_bound_tex(b)}",
            ]
        else:  # member: gold as an inequality, reply as an interval
            gold = f"{_bound_tex(a)} < x \\le {_bound_tex(b)}"
            forms = [
                f"({_bound_tex(a)}, {_bound_tex(b)}]",
                f"x \\in ({_bound_tex(a)}, {_bound_tex(b)}]",
            ]
            wrongs = [f"[{_bound_tex(a)}, {_bound_tex(b)}]", f"({_bound_tex(a)}, {_bound_tex(b)})"]
        right = rng.random() < 0.5
        said = rng.choice(forms if right else wrongs)
        anchor = rng.choice(
            [
                None,
                f"The solution set is ${said}$.",
                f"Hence the inequality holds exactly when ${said}$.",
            ]
        )
        text = reply(said) if anchor is None else rng.choice(PREAMBLES) + anchor
        yield row(text, gold, right, "inequality_interval")


UNITS = ["cm", "m", "km", "apples", "dollars", "inches", "feet", "meters", "square units",
         "hours", "minutes", "cookies", "students", "miles per hour", "degrees Celsius"]  # fmt: skip


def units() -> Iterator[Row]:
    for _ in range(110):
        value = rng.choice([rng.randint(1, 999), Fraction(rng.randint(1, 99), 4)])
        value = Fraction(value)
        shown = str(float(value)).rstrip("0").rstrip(".") if value.denominator != 1 else str(value)
        unit = rng.choice(UNITS)
        right = rng.random() < 0.55
        said_value = value if right else value + rng.choice([1, 2, 10, Fraction(1, 2)])
        said = (
            str(float(said_value)).rstrip("0").rstrip(".")
            if said_value.denominator != 1
            else str(said_value)
        )
        form = rng.choice(
            [
                f"\\text{{{said} {unit}}}",
                f"{said}\\text{{ {unit}}}",
                f"{said} \\text{{ {unit}}}",
                f"{said}\\,\\text{{{unit}}}",
                f"{said}\\ \\mathrm{{{unit.split()[0]}}}",
                f"{said} \\text{{ {unit.split()[0]}}}^2"
                if unit in ("cm", "m")
                else f"{said}\\text{{ {unit}}}",
            ]
        )
        gold = shown if rng.random() < 0.8 else f"{shown}\\text{{ {unit}}}"
        yield row(reply(form), gold, right, "units_text")
    for _ in range(20):  # the number as words around it
        value = rng.randint(2, 300)
        right = rng.random() < 0.5
        said = value if right else value * 2
        text = rng.choice(PREAMBLES) + f"The answer is {said} {rng.choice(UNITS)}."
        yield row(text, str(value), right, "units_text")


def percent() -> Iterator[Row]:
    for _ in range(70):
        p = rng.choice([rng.randint(1, 99), Fraction(rng.randint(1, 199), 2)])
        p = Fraction(p)
        shown = str(float(p)).rstrip("0").rstrip(".") if p.denominator != 1 else str(p)
        as_decimal = str(float(p / 100))
        case = rng.randrange(6)
        if case == 0:
            said, gold, right = f"{shown}\\%", shown, True
        elif case == 1:
            said, gold, right = shown, f"{shown}\\%", True
        elif case == 2:
            said, gold, right = f"{shown}\\%", f"{shown}\\%", True
        elif case == 3:
            said, gold, right = as_decimal, f"{shown}\\%", False  # 0.06 is not 6\%
        elif case == 4:
            said, gold, right = f"{shown}\\%", as_decimal, False
        else:
            said, gold, right = f"{shown} \\text{{ percent}}", shown, True
        yield row(reply(said), gold, right, "percent")


def logarithms() -> Iterator[Row]:
    for _ in range(70):
        base = rng.choice([2, 3, 5, 10])
        k = rng.randint(2, 5)
        case = rng.randrange(7)
        if case == 0:
            said, gold, right = f"\\log_{{{base}}} {base**k}", str(k), True
        elif case == 1:
            said, gold, right = f"\\log_{{{base}}} {base**k}", str(k + 1), False
        elif case == 2:
            n = rng.choice([2, 3, 5, 7])
            said, gold, right = f"\\log {n}", f"\\ln {n}", True  # \log is natural
        elif case == 3:
            said, gold, right = f"\\log {10**k}", str(k), False  # ...so not log10
        elif case == 4:
            n = rng.choice([2, 3, 5])
            said, gold, right = f"{k}\\ln {n}", f"\\ln {n**k}", True
        elif case == 5:
            n, m = rng.sample([2, 3, 5, 7], 2)
            said, gold, right = f"\\frac{{\\ln {n}}}{{\\ln {m}}}", f"\\log_{{{m}}} {n}", True
        else:
            n = rng.choice([2, 3, 5])
            said, gold, right = f"\\ln {n**k}", f"{k + 1}\\ln {n}", False
        yield row(reply(said), gold, right, "logarithm")


def mixed_numbers() -> Iterator[Row]:
    for _ in range(55):
        whole = rng.randint(1, 12)
        den = rng.randint(2, 9)
        num = rng.randint(1, den - 1)
        value = whole + Fraction(num, den)
        gold = (
            frac_tex(value)
            if rng.random() < 0.7
            else str(float(value))
            if value.denominator in (2, 4, 5)
            else frac_tex(value)
        )
        right = rng.random() < 0.6
        w = whole if right else whole + 1
        said = rng.choice(
            [
                f"{w}\\frac{{{num}}}{{{den}}}",
                f"{w} \\frac{{{num}}}{{{den}}}",
                f"{w}\\tfrac{{{num}}}{{{den}}}",
            ]
        )
        text = (
            reply(said)
            if rng.random() < 0.8
            else rng.choice(PREAMBLES) + f"The answer is {w} {num}/{den} cups."
        )
        yield row(text, gold, right, "mixed_number")


def repeating() -> Iterator[Row]:
    for _ in range(55):
        fixed = rng.choice(["", str(rng.randint(0, 9)), str(rng.randint(10, 99))])
        block = str(rng.randint(1, 9)) if rng.random() < 0.6 else f"{rng.randint(1, 99):02d}"
        if set(block) == {"9"}:
            block = "3"
        whole = rng.choice([0, 0, 1, 2])
        value = whole + (
            Fraction(
                int(fixed + block) - int(fixed or "0"), (10 ** len(block) - 1) * 10 ** len(fixed)
            )
        )
        right = rng.random() < 0.6
        gold = frac_tex(value if right else value + Fraction(1, 10 ** (len(fixed) + 1)))
        said = rng.choice(
            [f"{whole}.{fixed}\\overline{{{block}}}", f"{whole}.{fixed}\\bar{{{block}}}"]
        )
        yield row(reply(said), gold, right, "repeating_decimal")


def scientific() -> Iterator[Row]:
    for _ in range(60):
        mantissa = Fraction(rng.randint(11, 99), 10)
        exponent = rng.randint(-6, 8)
        value = mantissa * Fraction(10) ** exponent
        gold = (
            frac_tex(value)
            if value.denominator == 1
            else str(value.numerator / value.denominator)
            if exponent > -5
            else frac_tex(value)
        )
        right = rng.random() < 0.6
        e = exponent if right else exponent + rng.choice([-1, 1])
        m = str(float(mantissa))  # always with a point: `3e-4` could be 3e - 4
        said = rng.choice(
            [
                f"{m} \\times 10^{{{e}}}",
                f"{m}\\cdot 10^{{{e}}}",
                f"{m}e{e}" if e < 0 else f"{m}e+{e}",
                f"{m}E{e}",
            ]
        )
        yield row(reply(said), gold, right, "scientific")


def degrees() -> Iterator[Row]:
    table = [(30, "\\frac{\\pi}{6}"), (45, "\\frac{\\pi}{4}"), (60, "\\frac{\\pi}{3}"),
             (90, "\\frac{\\pi}{2}"), (120, "\\frac{2\\pi}{3}"), (135, "\\frac{3\\pi}{4}"),
             (150, "\\frac{5\\pi}{6}"), (180, "\\pi"), (270, "\\frac{3\\pi}{2}")]  # fmt: skip
    for _ in range(55):
        deg, rad = rng.choice(table)
        other_deg, other_rad = rng.choice([t for t in table if t[0] != deg])
        case = rng.randrange(6)
        if case == 0:
            said, gold, right = f"{deg}^\\circ", str(deg), True
        elif case == 1:
            said, gold, right = f"{deg}^{{\\circ}}", rad, True
        elif case == 2:
            said, gold, right = rad, f"{deg}^\\circ", True
        elif case == 3:
            said, gold, right = f"{other_deg}^\\circ", rad, False
        elif case == 4:
            said, gold, right = f"{deg}°", f"{deg}^\\circ", True
        else:
            said, gold, right = other_rad, f"{deg}^\\circ", False
        yield row(reply(said), gold, right, "degrees_radians")


def _matrix_tex(rows: list[list[Fraction]], env: str) -> str:
    body = " \\\\ ".join(" & ".join(frac_tex(v) for v in r) for r in rows)
    return f"\\begin{{{env}}} {body} \\end{{{env}}}"


def matrices() -> Iterator[Row]:
    for _ in range(55):
        n, m = rng.choice([(2, 2), (2, 3), (3, 3), (3, 2)])
        rows = [[Fraction(rng.randint(-9, 9)) for _ in range(m)] for _ in range(n)]
        gold = _matrix_tex(rows, "pmatrix")
        case = rng.randrange(4)
        if case == 0:
            said, right = _matrix_tex(rows, rng.choice(["bmatrix", "pmatrix"])), True
        elif case == 1:
            changed = [r[:] for r in rows]
            i, j = rng.randrange(n), rng.randrange(m)
            changed[i][j] += rng.choice([-1, 1])
            said, right = _matrix_tex(changed, "pmatrix"), False
        elif case == 2:
            halves = [[v / 2 for v in r] for r in rows]
            gold = _matrix_tex(halves, "pmatrix")
            body = " \\\\ ".join(" & ".join(f"{float(v):g}" for v in r) for r in halves)
            said, right = f"\\begin{{bmatrix}} {body} \\end{{bmatrix}}", True
        else:
            transposed = [list(c) for c in zip(*rows, strict=True)]
            if transposed == rows:
                continue
            said, right = _matrix_tex(transposed, "pmatrix"), False
        yield row(reply(said, dollars_ok=False), gold, right, "matrix")


def vectors() -> Iterator[Row]:
    for _ in range(55):
        values = [Fraction(rng.randint(-9, 9)) for _ in range(rng.choice([2, 3]))]
        column = (
            "\\begin{pmatrix} " + " \\\\ ".join(frac_tex(v) for v in values) + " \\end{pmatrix}"
        )
        tup = "(" + ", ".join(frac_tex(v) for v in values) + ")"
        angle = "\\langle " + ", ".join(frac_tex(v) for v in values) + " \\rangle"
        right = rng.random() < 0.55
        said_values = values[:] if right else [*values[:-1], values[-1] + 1]
        said = rng.choice(
            [
                "(" + ", ".join(frac_tex(v) for v in said_values) + ")",
                "\\langle " + ", ".join(frac_tex(v) for v in said_values) + " \\rangle",
                "\\begin{pmatrix} "
                + " \\\\ ".join(frac_tex(v) for v in said_values)
                + " \\end{pmatrix}",
            ]
        )
        gold = rng.choice([column, tup, angle])
        yield row(reply(said, dollars_ok=False), gold, right, "vector")


def special_sets() -> Iterator[Row]:
    empty = ["\\emptyset", "\\varnothing", "\\text{no solution}", "\\text{No solution}",
             "\\text{no real solutions}", "\\{\\}"]  # fmt: skip
    reals = ["\\mathbb{R}", "(-\\infty, \\infty)", "\\text{all real numbers}",
             "(-\\infty,+\\infty)", "x \\in \\mathbb{R}", "\\text{All real numbers}"]  # fmt: skip
    for _ in range(60):
        case = rng.randrange(5)
        if case == 0:
            said, gold, right = rng.choice(empty), rng.choice(empty), True
        elif case == 1:
            said, gold, right = rng.choice(reals), rng.choice(reals), True
        elif case == 2:
            said, gold, right = rng.choice(reals), rng.choice(empty), False
        elif case == 3:
            said, gold, right = f"x = {rng.randint(-5, 5)}", rng.choice(empty), False
        else:
            said, gold, right = rng.choice(empty), rng.choice(reals), False
        text = (
            reply(said)
            if rng.random() < 0.7
            else rng.choice(PREAMBLES)
            + (
                "There are no real solutions, so the answer is no solution."
                if said in empty[2:5]
                else f"The answer is ${said}$."
            )
        )
        if "no real solutions, so" in text and said not in empty:
            continue
        yield row(text, gold, right, "no_solution_all_reals")


def multiple_answers() -> Iterator[Row]:
    for _ in range(110):
        k = rng.choice([2, 2, 2, 3])
        values = sorted(set(int(small_value()) for _ in range(k)))
        if len(values) < 2:
            continue
        gold = rng.choice(
            [
                "\\{" + ", ".join(map(str, values)) + "\\}",
                ", ".join(map(str, values)),
                ", ".join(map(str, reversed(values))),
            ]
        )
        right = rng.random() < 0.55
        said_values = values if right else rng.choice([values[:-1], [*values[:-1], values[-1] + 1]])
        shuffled = said_values[:]
        rng.shuffle(shuffled)
        joiner = rng.choice([" \\text{ or } ", " \\text{or} ", ", ", " \\text{ and } "])
        forms = [
            joiner.join(f"x = {v}" for v in shuffled),
            "x = " + ", ".join(map(str, shuffled)),
            ", ".join(map(str, shuffled)),
        ]
        if len(shuffled) == 2 and shuffled[0] == -shuffled[1] and shuffled[0]:
            forms.append(f"x = \\pm {abs(shuffled[0])}")
        said = rng.choice(forms)
        if rng.random() < 0.25 and len(said_values) >= 2:
            boxes = " or ".join(f"$x = \\boxed{{{v}}}$" for v in shuffled)
            text = rng.choice(PREAMBLES) + f"The solutions are {boxes}."
        else:
            text = reply(said)
        yield row(text, gold, right, "multiple_answers")
    for _ in range(30):  # plus-minus
        n = rng.randint(1, 15)
        root = rng.random() < 0.5
        val = f"\\sqrt{{{rng.choice([2, 3, 5, 7])}}}" if root else str(n)
        gold = rng.choice([f"\\pm {val}", f"-{val}, {val}", f"\\{{-{val}, {val}\\}}"])
        right = rng.random() < 0.6
        said = rng.choice([f"x = \\pm {val}", f"\\pm {val}", f"{val}, -{val}"]) if right else val
        yield row(reply(said), gold, right, "multiple_answers")


def locales() -> Iterator[Row]:
    for _ in range(75):
        value = rng.randint(1_000, 99_999_999)
        digits = f"{value:,}"
        groups = digits.split(",")
        case = rng.randrange(6)
        if case == 0:
            said = ".".join(groups) if len(groups) > 2 else "\\,".join(groups)
        elif case == 1:
            said = "\\,".join(groups)
        elif case == 2:
            said = " ".join(groups)
        elif case == 3:
            said = "'".join(groups)
        elif case == 4:
            said = "{,}".join(groups)
        else:  # Indian grouping: last three, then pairs
            s = str(value)
            head, tail = s[:-3], s[-3:]
            pairs = []
            while len(head) > 2:
                pairs.insert(0, head[-2:])
                head = head[:-2]
            said = ",".join([p for p in [head, *pairs] if p] + [tail])
        right = rng.random() < 0.6
        gold = str(value) if right else str(value + rng.choice([1, 10, 1000]))
        if rng.random() < 0.3:
            gold = f"{int(gold):,}"
        yield row(reply(said), gold, right, "thousands_locale")
    for _ in range(15):  # a German decimal: 1.234,5
        whole = rng.randint(1_000, 999_999)
        tenth = rng.randint(1, 9)
        said = f"{whole:,}".replace(",", ".") + f",{tenth}"
        right = rng.random() < 0.6
        gold = f"{whole}.{tenth}" if right else f"{whole}.{tenth + 0 if tenth == 9 else tenth + 1}"
        if not right and gold == f"{whole}.{tenth}":
            continue
        yield row(reply(said), gold, right, "thousands_locale")


def after_think() -> Iterator[Row]:
    for _ in range(65):
        value = rng.randint(2, 999)
        draft = value + rng.choice([-3, -1, 1, 2, 7])
        right = rng.random() < 0.55
        final = value if right else draft
        think = (
            f"<think>\nLet me try: maybe the answer is \\boxed{{{draft if right else value}}}. "
            f"Hmm, let me recheck the computation.\nThe answer is {draft if right else value}."
            "\n</think>\n\n"
        )
        end = rng.choice(
            [
                f"The answer is {final}.",
                f"\\boxed{{{final}}}",
                f"**Answer:** {final}",
                f"So we get {final}.",
            ]
        )
        yield row(think + end, str(value), right, "after_think")


def unicode_math() -> Iterator[Row]:
    cases = [
        ("√2", "\\sqrt{2}", True), ("2√3", "2\\sqrt{3}", True), ("√3", "\\sqrt{2}", False),
        ("π/2", "\\frac{\\pi}{2}", True), ("2π", "2\\pi", True), ("π/3", "\\frac{\\pi}{2}", False),
        ("−5", "-5", True), ("−5", "5", False), ("½", "\\frac{1}{2}", True), ("¾", "0.75", True),
        ("x²+1", "x^2+1", True), ("x³", "x^2", False), ("3·4", "12", True), ("12÷4", "3", True),
        ("(−∞, 2)", "(-\\infty, 2)", True), ("x ≤ 3", "(-\\infty, 3]", True),
        ("x ≥ 3", "(-\\infty, 3]", False), ("5 × 10³", "5000", True), ("−½", "-0.5", True),
    ]  # fmt: skip
    for _ in range(55):
        said, gold, right = rng.choice(cases)
        yield row(reply(said), gold, right, "unicode")


def large_words() -> Iterator[Row]:
    for _ in range(25):
        whole = rng.randint(1, 99)
        tenth = rng.choice([0, 5])
        word, power = rng.choice([("million", 6), ("billion", 9), ("thousand", 3)])
        value = (whole * 10 + tenth) * 10 ** (power - 1)
        said = f"{whole}.{tenth}" if tenth else str(whole)
        right = rng.random() < 0.6
        gold = str(value if right else value * 10)
        text = rng.choice(PREAMBLES) + rng.choice(
            [
                f"The answer is {said} {word}.",
                f"The answer is ${said}$ {word}.",
                f"\\boxed{{{said}\\text{{ {word}}}}}",
            ]
        )
        yield row(text, gold, right, "large_number_words")


def hedges() -> Iterator[Row]:
    for _ in range(25):
        value = rng.randint(2, 99)
        other = value + rng.randint(1, 5)
        text = rng.choice(PREAMBLES) + rng.choice(
            [
                f"It is either \\boxed{{{value}}} or \\boxed{{{other}}}.",
                f"The answer is \\boxed{{{other}}} or \\boxed{{{value}}}",
            ]
        )
        yield row(text, str(value), False, "hedged_boxes")
    for _ in range(15):  # the same answer boxed twice is one answer
        value = rng.randint(2, 99)
        text = f"So $x = \\boxed{{{value}}}$.\n\nFinal: \\boxed{{{value}}}"
        yield row(text, str(value), True, "hedged_boxes")


def controls() -> Iterator[Row]:
    for _ in range(60):
        case = rng.randrange(4)
        if case == 0:
            v = small_value()
            gold, said, right = frac_tex(v), frac_tex(v), True
        elif case == 1:
            v = small_value()
            gold, said, right = frac_tex(v), frac_tex(v + 1), False
        elif case == 2:
            r = rng.choice([2, 3, 5, 6, 7])
            c = rng.randint(2, 5)
            gold, said, right = f"{c}\\sqrt{{{r}}}", f"\\sqrt{{{c * c * r}}}", True
        else:
            r = rng.choice([2, 3, 5, 6, 7])
            c = rng.randint(2, 5)
            gold, said, right = f"{c}\\sqrt{{{r}}}", f"\\sqrt{{{c * c * r + 1}}}", False
        yield row(reply(said), gold, right, "control")


# ---------------------------------------------------------------------------------------
# Classes of how chat models state answers (issue 21). Each builder makes right and wrong
# replies of its class; the label follows from the construction.

NOUNS = ["apples", "marbles", "students", "dollars", "pages", "tickets", "cookies", "books"]
REMARKS = [
    " (Check: {a} × {b} = {p}.)",
    "\n\nCheck: {a} × {b} = {p} ✓",
    " That is {c} cents.",
    "\n\nVerification: {p} / {a} = {b}, as required.",
    " (Note: {b} was the price per item.)",
    "\n\nDouble-check: {a} groups of {b} make {p}.",
]


def closing_statements() -> Iterator[Row]:
    """No box, no "answer is": a closing sentence, then a check or remark whose last
    number is not the answer."""
    for _ in range(70):
        a, b = rng.randint(2, 12), rng.randint(3, 25)
        total = a * b + rng.choice([0, 0, rng.randint(1, 9)])
        noun = rng.choice(NOUNS)
        closing = rng.choice(
            [
                f"So she has {total} {noun} altogether.",
                f"In total, there are {total} {noun}.",
                f"Therefore the store sold {total} {noun} in all.",
                f"So he pays ${total} in total.",
                f"That gives {total:,} {noun} overall.",
            ]
        )
        remark = rng.choice(REMARKS).format(a=a, b=b, p=a * b, c=total * 100)
        right = rng.random() < 0.6
        gold = str(total if right else total + rng.randint(1, 5))
        yield row(rng.choice(PREAMBLES) + closing + remark, gold, right, "closing_statement")


# (language, statement template, decimal comma?)
LANGUAGE_TEMPLATES = [
    ("es", "Por lo tanto, la respuesta es {x}. Comprobamos con 2 + 2 = 4.", True),
    ("es", "**Respuesta final:** {x}", True),
    ("fr", "Donc la réponse finale est {x}. (On vérifie : 3 × 3 = 9.)", True),
    ("fr", "La réponse est {x}.", True),
    ("de", "Die Antwort lautet {x}. Probe: 7 + 1 = 8.", True),
    ("de", "Antwort: {x}", True),
    ("pt", "Portanto, a resposta é {x}. Verificação: 5 - 1 = 4.", True),
    ("it", "Quindi la risposta è {x}. Controllo: 6 / 2 = 3.", True),
    ("ru", "Ответ: {x}. Проверка: 2 · 5 = 10.", True),
    ("ru", "Итак, ответ будет {x}.", True),
    ("uk", "Відповідь: {x}. Перевірка: 4 + 4 = 8.", True),
    ("zh", "所以答案是 {x}。验证：3 + 4 = 7。", False),
    ("zh", "最终答案：{x}", False),
    ("ja", "よって、答えは {x} です。確認：2 × 6 = 12。", False),
    ("ko", "따라서 정답은 {x}입니다. 확인: 9 - 3 = 6.", False),
    ("ar", "إذن الإجابة النهائية هي {x}. للتحقق: 8 + 1 = 9.", False),
    ("he", "לכן התשובה היא {x}. בדיקה: 5 + 5 = 10.", False),
    ("fa", "پاسخ نهایی: {x} (بررسی: 6 + 1 = 7)", False),
    ("hi", "अतः उत्तर {x} है। जाँच: 3 + 3 = 6।", False),
    ("tr", "Sonuç olarak cevap {x}'dir. Kontrol: 2 + 7 = 9.", True),
    ("vi", "Vậy đáp án là {x}. Kiểm tra: 1 + 8 = 9.", True),
    ("id", "Jadi, jawaban akhirnya adalah {x}. Cek: 4 × 2 = 8.", True),
    ("th", "ดังนั้นคำตอบคือ {x} ตรวจสอบ: 2 + 3 = 5", False),
    ("pl", "Zatem odpowiedź to {x}. Sprawdzenie: 9 - 4 = 5.", True),
    ("nl", "Het antwoord is {x}. Controle: 3 + 6 = 9.", True),
    ("cs", "Odpověď je {x}. Kontrola: 2 + 2 = 4.", True),
    ("sv", "Svaret är {x}. Kontroll: 5 + 2 = 7.", True),
    ("ro", "Deci răspunsul este {x}. Verificare: 3 + 1 = 4.", True),
    ("el", "Άρα η απάντηση είναι {x}. Έλεγχος: 6 + 2 = 8.", True),
]
FULL_WIDTH = str.maketrans("0123456789", "０１２３４５６７８９")


def languages() -> Iterator[Row]:
    """An answer statement in another language, then a check with other numbers."""
    for language, template, comma in LANGUAGE_TEMPLATES:
        for _ in range(3):
            whole, tenths = rng.randint(11, 99), rng.randint(1, 9)
            decimal = comma and rng.random() < 0.5
            value = f"{whole}.{tenths}" if decimal else str(whole)
            said = f"{whole},{tenths}" if decimal else str(whole)
            if language in ("zh", "ja") and rng.random() < 0.4:
                said = said.translate(FULL_WIDTH)
            right = rng.random() < 0.6
            if right:
                gold = value
            else:
                gold = f"{whole + 1}.{tenths}" if decimal else str(whole + 1)
            yield row(template.format(x=said), gold, right, "languages")


WORD_CASES = [
    ("five", 5), ("twelve", 12), ("one hundred and twenty", 120), ("twenty-three", 23),
    ("a third", Fraction(1, 3)), ("two thirds", Fraction(2, 3)), ("three quarters", Fraction(3, 4)),
    ("one half", Fraction(1, 2)), ("\\text{four}", 4), ("$\\text{seven}$", 7), ("the fifth", 5),
    ("negative two", -2), ("one thousand two hundred", 1200), ("cinq", 5), ("fünf", 5),
    ("五十", 50), ("十二", 12), ("dieci", 10),
]  # fmt: skip


def number_words() -> Iterator[Row]:
    for _ in range(60):
        said, value = rng.choice(WORD_CASES)
        right = rng.random() < 0.6
        gold = frac_tex(Fraction(value) if right else Fraction(value) + 1)
        text = rng.choice(PREAMBLES) + rng.choice(
            [f"The answer is {said}.", f"**Final answer:** {said}", f"\\boxed{{{said}}}"]
        )
        yield row(text, gold, right, "number_words")
    teens = ["thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
    for _ in range(15):  # a closing sentence with the count in words
        n = rng.randint(13, 19)
        right = rng.random() < 0.6
        text = (
            f"We count the remaining ones.\nSo there are {teens[n - 13]} {rng.choice(NOUNS)} left."
        )
        yield row(text, str(n if right else n + 1), right, "number_words")


COMPLEX_CASES = [
    ("2+3i", "3i+2", True), ("2+3i", "2+3\\mathrm{i}", True), ("2+3i", "2+3j", True),
    ("2+3i", "2-3i", False), ("-i", "i^{7} = i^{4} \\cdot i^{3} = -i", True),
    ("i", "i^{7} = i^{4} \\cdot i^{3} = -i", False), ("1", "i^{4}", True), ("-1", "e^{i\\pi}", True),
    ("1+i", "\\sqrt{2}e^{i\\pi/4}", True), ("1+i", "\\sqrt{2}\\left(\\cos\\frac{\\pi}{4} + i\\sin\\frac{\\pi}{4}\\right)", True),
    ("1-i", "\\sqrt{2}e^{i\\pi/4}", False), ("\\frac{1}{2}+\\frac{1}{2}i", "\\frac{1+i}{2}", True),
    ("\\frac{1}{2}-\\frac{1}{2}i", "\\frac{1}{1+i}", True), ("\\frac{1}{2}+\\frac{1}{2}i", "\\frac{1}{1+i}", False),
    ("-4", "(1+i)^{4}", True), ("4", "(1+i)^{4}", False), ("5", "(2+i)(2-i)", True),
]  # fmt: skip


def complex_numbers() -> Iterator[Row]:
    for gold, said, right in COMPLEX_CASES:
        for carrier in rng.sample(carriers(said), 3):
            yield row(rng.choice(PREAMBLES) + carrier, gold, right, "complex")


def revisions() -> Iterator[Row]:
    """Which of several stated answers the reply commits to."""
    for _ in range(20):  # a hypothetical box after the answer
        asked, other = rng.randint(5, 40), rng.randint(41, 80)
        text = rng.choice(
            [
                f"Had the endpoints counted, it would be \\boxed{{{other}}}; as stated the count is \\boxed{{{asked}}}.",
                f"So the count is \\boxed{{{asked}}}. (If the endpoints were included it would be \\boxed{{{other}}}.)",
            ]
        )
        yield row(text, str(asked), True, "revisions")
        yield row(text, str(other), False, "revisions")
    for _ in range(20):  # an unboxed correction after the box
        first, fixed = rng.randint(2, 30), -rng.randint(2, 30)
        text = rng.choice(
            [
                f"So $x = \\boxed{{{first}}}$.\n\nHold on — I dropped a sign; it is ${fixed}$.",
                f"\\boxed{{{first}}}\n\nWait, I made a mistake in step 2. The answer is {fixed}.",
            ]
        )
        yield row(text, str(fixed), True, "revisions")
        yield row(text, str(first), False, "revisions")
    for _ in range(20):  # a draft, then the revised box
        first, fixed = rng.randint(2, 50), rng.randint(51, 99)
        text = rng.choice(
            [
                f"At first I got \\boxed{{{first}}}, but rechecking the second case, the answer is \\boxed{{{fixed}}}.",
                f"\\boxed{{{first}}}\n\nActually, I misread the question: it asks for the total, \\boxed{{{fixed}}}.",
            ]
        )
        yield row(text, str(fixed), True, "revisions")
        yield row(text, str(first), False, "revisions")
    for _ in range(20):  # several boxes, no commitment: no answer, whichever the gold
        a, b = rng.randint(2, 50), rng.randint(51, 99)
        text = rng.choice(
            [
                f"It could be \\boxed{{{a}}}.\n\nOr maybe \\boxed{{{b}}}.",
                f"Case 1 gives \\boxed{{{a}}}.\n\nCase 2 gives \\boxed{{{b}}}.",
                f"\\boxed{{{a}}}\n\n\\boxed{{{b}}}",
            ]
        )
        yield row(text, str(rng.choice([a, b])), False, "revisions")


def refusals() -> Iterator[Row]:
    """A refusal that repeats a number of the question is no answer."""
    for _ in range(30):
        n = rng.randint(3, 500)
        text = rng.choice(
            [
                f"I cannot determine how many of the {n} tickets were sold from the information given.",
                f"The answer cannot be determined: we only know that {n} people attended.",
                f"I'm sorry, but with only {n} data points the problem is underspecified.",
                f"There is not enough information to find the value; the problem only says {n}.",
            ]
        )
        yield row(text, str(n), False, "refusal")
    for _ in range(10):  # not a refusal: "cannot" about a method, then an answer
        n = rng.randint(3, 500)
        text = f"We cannot use the formula directly, so we count by cases.\nThe answer is {n}."
        yield row(text, str(n), True, "refusal")


def markdown_anchors() -> Iterator[Row]:
    for _ in range(50):
        value = rng.randint(1000, 9_999_999)
        said = rng.choice(
            [f"{value:,}".replace(",", " "), f"{value:,}".replace(",", "\u202f"), str(value)]
        )
        text = rng.choice(PREAMBLES) + rng.choice(
            [
                f"**Final Answer**: {said}\n\n(Check: 12 × 3 = 36.)",
                f"### Answer\n{said}\n\nThis used 3 steps.",
                f"## Final Answer\n\n${said}$",
                f"| Quantity | Value |\n|---|---|\n| Answer | {said} |",
                f"Total: {said} people. (Rounded from step 4.)",
            ]
        )
        right = rng.random() < 0.6
        yield row(text, str(value if right else value + 1000), right, "markdown_anchors")
    for _ in range(15):  # two math spans in one sentence: the solutions together
        a, b = rng.randint(1, 9), rng.randint(10, 19)
        text = f"The solutions are $x = {a}$ and $x = {b}$. (Both satisfy 0 ≤ x ≤ 20.)"
        yield row(text, f"{a}, {b}", True, "markdown_anchors")
        yield row(text, str(b), False, "markdown_anchors")


def surd_denominators() -> Iterator[Row]:
    cases = [
        ("\\frac{\\sqrt{3}+1}{\\sqrt{3}-1}", "2+\\sqrt{3}", True),
        ("\\frac{1}{1+\\sqrt{2}}", "\\sqrt{2}-1", True), ("\\frac{1}{1+\\sqrt{2}}", "\\sqrt{2}+1", False),
        ("\\frac{1}{1+\\sqrt{2}+\\sqrt{3}}", "\\frac{2+\\sqrt{2}-\\sqrt{6}}{4}", True),
        ("\\frac{1}{1+\\sqrt{2}+\\sqrt{3}}", "\\frac{2-\\sqrt{2}+\\sqrt{6}}{4}", False),
        ("(1+\\sqrt{2})^{10}+(1-\\sqrt{2})^{10}", "6726", True),
        ("(2+\\sqrt{3})^{12}+(2-\\sqrt{3})^{12}", "7300802", True),
        ("(2+\\sqrt{3})^{12}+(2-\\sqrt{3})^{12}", "7300801", False),
        ("\\frac{\\sqrt{5}+\\sqrt{3}}{\\sqrt{5}-\\sqrt{3}}", "4+\\sqrt{15}", True),
        ("\\frac{\\sqrt{5}+\\sqrt{3}}{\\sqrt{5}-\\sqrt{3}}", "4-\\sqrt{15}", False),
    ]  # fmt: skip
    for gold, said, right in cases:
        for carrier in rng.sample(carriers(said), 3):
            yield row(rng.choice(PREAMBLES) + carrier, gold, right, "surds")


def final_headings() -> Iterator[Row]:
    """An intermediate box, then the final one under a "Final Answer" heading: the
    heading commits to the last box (a revision class: no words between the boxes)."""
    for _ in range(20):
        step, final = rng.randint(2, 40), rng.randint(41, 99)
        text = rng.choice(PREAMBLES) + rng.choice(
            [
                f"The first part gives \\boxed{{{step}}}.\n\nAdding the rest:\n\n**Final Answer**\n\\[\n\\boxed{{{final}}}\n\\]",
                f"Part one: \\boxed{{{step}}}\n\n### Final Answer\n$\\boxed{{{final}}}$",
                f"We get \\boxed{{{step}}} apples in the first crate.\n\nAnswer: \\boxed{{{final}}}",
            ]
        )
        yield row(text, str(final), True, "revisions")
        yield row(text, str(step), False, "revisions")


BUILDERS: list[Callable[[], Iterator[Row]]] = [
    currency, blank_fallback, inequalities, units, percent, logarithms, mixed_numbers,
    repeating, scientific, degrees, matrices, vectors, special_sets, multiple_answers,
    locales, after_think, unicode_math, large_words, hedges, controls,
    # how chat models state answers (issue 21)
    closing_statements, languages, number_words, complex_numbers, revisions, refusals,
    markdown_anchors, surd_denominators, final_headings,
]  # fmt: skip


def main() -> None:
    rows: list[Row] = []
    seen: set[tuple[object, object]] = set()
    for build in BUILDERS:
        for r in build():
            key = (r["prediction"], r["gold"])
            if key not in seen:
                seen.add(key)
                rows.append(r)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} rows -> {OUT}")


if __name__ == "__main__":
    main()
