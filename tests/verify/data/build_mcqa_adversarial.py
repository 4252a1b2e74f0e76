# ruff: noqa: E501  (a data builder: its templates read best on one line)
"""Build `mcqa_adversarial.jsonl`: multiple-choice replies where letter extractors go wrong.

Run `python tests/verify/data/build_mcqa_adversarial.py` to regenerate (deterministic).
Rows have the fields of `mcqa_outputs.jsonl`: `note` (the class), `text`, `letters`,
`expected` (the letter the reply commits to, None when it commits to none) and
`expected_strict` (the same with explicit statements only). The labels follow from how
each reply is built: a negated letter or a range's end is never the answer, several
boxes naming different letters commit to none, and the carriers (a Markdown table row
or column, a JSON object, a final line in math) hold the letter they show.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

OUT = Path(__file__).with_name("mcqa_adversarial.jsonl")
rng = random.Random(20261211)

REASONING = [
    "",
    "Let's consider each option in turn.\n",
    "We compare the rates: the first reaction is faster because its activation energy is lower.\n",
    "The derivative is positive on the interval, so the function is increasing there.\n",
    "Using conservation of momentum, the final velocity is 3 m/s.\n\n",
    "Recall that mitochondria produce most of the cell's ATP.\n",
]

Row = dict[str, object]


def row(
    note: str, text: str, letters: str, expected: str | None, strict: str | None = "same"
) -> Row:
    return {
        "note": note,
        "text": text,
        "letters": letters,
        "expected": expected,
        "expected_strict": expected if strict == "same" else strict,
    }


def pick(letters: str, k: int = 1) -> list[str]:
    return rng.sample(letters, k)


def option_sets() -> str:
    return rng.choice(["ABCD", "ABCDE", "ABCDEFGHIJ"])


def negated() -> Iterator[Row]:
    for _ in range(40):
        letters = option_sets()
        a, b, c = pick(letters, 3)
        pre = rng.choice(REASONING)
        form = rng.randrange(9)
        if form == 8:
            yield row("not X but Y", pre + f"The answer is not ({a}) but ({b}).", letters, b)
        elif form == 0:
            yield row("neither nor", pre + f"Neither ({a}) nor ({b}) is correct.", letters, None)
        elif form == 1:
            yield row(
                "neither nor, then answer",
                pre + f"Neither {a} nor {b} is correct, so the answer is {c}.",
                letters,
                c,
            )
        elif form == 2:
            yield row("not X; Y is correct", pre + f"Not {a}; {b} is correct.", letters, b)
        elif form == 3:
            yield row(
                "not X. Y is correct",
                pre + f"It is not ({a}). ({b}) is the correct answer.",
                letters,
                b,
            )
        elif form == 4:
            yield row("except", pre + f"Every option except {a} is correct.", letters, None)
        elif form == 5:
            yield row(
                "eliminate list",
                pre + f"We can eliminate {a} and {b}. Therefore the answer is {c}.",
                letters,
                c,
            )
        elif form == 6:
            yield row(
                "rule out then verdict",
                pre + f"I'd rule out {a} and {b}; {c} is right.",
                letters,
                c,
            )
        else:
            yield row(
                "negated answer only", pre + f"The answer is definitely not {a}.", letters, None
            )


def ranges() -> Iterator[Row]:
    dashes = ["–", "-", "—", " to ", " through "]
    for _ in range(35):
        letters = option_sets()
        first, last = letters[0], letters[-1]
        dash = rng.choice(dashes)
        pre = rng.choice(REASONING)
        c = pick(letters)[0]
        form = rng.randrange(6)
        if form == 0:
            yield row(
                "none of a range",
                pre + f"None of the options ({first}{dash}{last}) is correct.",
                letters,
                None,
            )
        elif form == 1:
            yield row(
                "none of a bracketed range",
                pre + f"None of ({first}){dash}({last}) is right.",
                letters,
                None,
            )
        elif form == 2:
            yield row(
                "range then answer",
                pre + f"Among options ({first}){dash}({last}), ({c}) is the best.",
                letters,
                c,
            )
        elif form == 3:
            yield row(
                "range mentioned, answer stated",
                pre + f"I checked {first}{dash}{last} one by one. Answer: {c}",
                letters,
                c,
            )
        elif form == 4:
            yield row(
                "answer is a range", pre + f"The answer is ({first}){dash}({last}).", letters, None
            )
        else:
            yield row(
                "all of a range wrong, one after",
                pre + f"Options {first}{dash}{letters[-2]} are all wrong; {last} is correct.",
                letters,
                last,
            )


def boxes() -> Iterator[Row]:
    for _ in range(35):
        letters = option_sets()
        a, b = pick(letters, 2)
        pre = rng.choice(REASONING)
        form = rng.randrange(5)
        if form == 0:
            yield row("two boxes adjacent", pre + f"\\boxed{{{a}}}\\boxed{{{b}}}", letters, None)
        elif form == 1:
            yield row(
                "two boxes, a change of mind",  # a draft, then a revision: the later one
                pre + f"At first I got \\boxed{{{a}}}, but on reflection \\boxed{{{b}}}.",
                letters,
                b,
            )
        elif form == 2:
            yield row(
                "two boxes hedged",
                pre + f"It is either $\\boxed{{{a}}}$ or $\\boxed{{\\text{{{b}}}}}$.",
                letters,
                None,
            )
        elif form == 3:
            yield row(
                "same box twice",
                pre + f"So the answer is \\boxed{{{a}}}. Checking once more: \\boxed{{{a}}}.",
                letters,
                a,
            )
        else:
            yield row(
                "box then a later statement",
                pre + f"Draft: \\boxed{{{a}}}. No wait, the answer is {b}.",
                letters,
                b,
            )


def tables() -> Iterator[Row]:
    for _ in range(35):
        letters = option_sets()
        a, b = pick(letters, 2)
        pre = rng.choice(REASONING)
        form = rng.randrange(5)
        if form == 0:
            text = (
                pre + f"| Step | Result |\n|---|---|\n| Check units | ok |\n| Final answer | {a} |"
            )
        elif form == 1:
            text = pre + f"| **Final Answer** | **{a}** |"
        elif form == 2:
            text = pre + f"| Question | Answer |\n|---|---|\n| 1 | {a} |"
        elif form == 3:
            text = (
                pre
                + f"| Option | Verdict |\n|:--|:--|\n| {b} | wrong |\n| {a} | right |\n\nAnswer: {a}"
            )
        else:
            text = pre + f"| # | Your answer |\n|:-:|:-:|\n| 1 | ({a}) |"
        yield row("markdown table", text, letters, a)
    for _ in range(8):  # a table listing the options names no answer
        letters = option_sets()
        a, b = pick(letters, 2)
        text = f"| Option | Value |\n|---|---|\n| {a} | 12 |\n| {b} | 15 |"
        yield row("table of options, no answer", text, letters, None)


def json_objects() -> Iterator[Row]:
    for _ in range(30):
        letters = option_sets()
        a, b = pick(letters, 2)
        form = rng.randrange(5)
        if form == 0:
            text = f'{{"answer": "{a}"}}'
        elif form == 1:
            text = f'```json\n{{"reasoning": "{b} fails the boundary case", "answer": "{a}"}}\n```'
        elif form == 2:
            text = f'{{"final_answer": "{a}", "confidence": 0.{rng.randint(1, 9)}}}'
        elif form == 3:
            text = f'Here is my answer:\n```json\n{{\n  "choice": "({a})"\n}}\n```'
        else:
            text = f'{{"answer": "{a.lower()}"}}'
        yield row("json object", rng.choice(REASONING) + text, letters, a)
    for _ in range(6):
        letters = option_sets()
        a, b = pick(letters, 2)
        yield row("json list of two", f'{{"answer": ["{a}", "{b}"]}}', letters, None)


def math_lines() -> Iterator[Row]:
    wraps = ["$\\text{{({x})}}$", "$\\textbf{{{x}}}$", "\\(\\mathrm{{{x}}}\\)", "$$\\text{{({x})}}$$",
             "\\[\\mathbf{{({x})}}\\]", "**$\\text{{{x}}}$**"]  # fmt: skip
    for _ in range(35):
        letters = option_sets()
        a = pick(letters)[0]
        pre = rng.choice(REASONING) or "Comparing the options carefully.\n"
        line = rng.choice(wraps).format(x=a)
        yield row("final line in math", pre + "\n" + line, letters, a, strict=None)
    for _ in range(10):  # in an answer statement: strict reads it too
        letters = option_sets()
        a = pick(letters)[0]
        text = rng.choice(REASONING) + f"The answer is $\\text{{({a})}}$."
        yield row("math-wrapped statement", text, letters, a)


def verdicts() -> Iterator[Row]:
    for _ in range(30):
        letters = option_sets()
        a, b, c = pick(letters, 3)
        pre = rng.choice(REASONING)
        form = rng.randrange(5)
        if form == 0:
            yield row(
                "sentence-initial verdict",
                pre + f"{a} is wrong. {b} is wrong. {c} is correct.",
                letters,
                c,
            )
        elif form == 1:
            yield row("so X is correct", pre + f"So {c} is correct.", letters, c)
        elif form == 2:
            yield row(
                "statement numeral trap",
                pre + "Statement I is correct and statement II is false.",
                letters,
                None,
            )
        elif form == 3:
            yield row("both correct", pre + f"Both {a} and {b} are correct.", letters, None)
        else:
            yield row(
                "option X is incorrect, option Y is correct",
                pre + f"Option {a} is incorrect, option {c} is correct.",
                letters,
                c,
            )


def controls() -> Iterator[Row]:
    for _ in range(40):
        letters = option_sets()
        a, b = pick(letters, 2)
        pre = rng.choice(REASONING)
        form = rng.randrange(6)
        if form == 0:
            yield row("plain answer", pre + f"Answer: {a}", letters, a)
        elif form == 1:
            yield row(
                "answer after distractors",
                pre + f"Option {b} is wrong because it ignores friction. The answer is ({a}).",
                letters,
                a,
            )
        elif form == 2:
            yield row("boxed", pre + f"$\\boxed{{{a}}}$", letters, a)
        elif form == 3:
            yield row(
                "draft then final",
                pre + f"The answer is {b}. Wait, no: the answer is {a}.",
                letters,
                a,
            )
        elif form == 4:
            yield row(
                "answer with a later mention",
                pre + f"The correct answer is {a}, not {b}.",
                letters,
                a,
            )
        else:
            yield row("lone letter", pre + f"\n{a}", letters, a, strict=None)


def main() -> None:
    rows: list[Row] = []
    seen: set[tuple[object, object]] = set()
    for build in (negated, ranges, boxes, tables, json_objects, math_lines, verdicts, controls):
        for r in build():
            if (r["text"], r["letters"]) not in seen:
                seen.add((r["text"], r["letters"]))
                rows.append(r)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} rows -> {OUT}")


if __name__ == "__main__":
    main()
