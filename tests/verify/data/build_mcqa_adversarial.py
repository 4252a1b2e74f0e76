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


# ---------------------------------------------------------------------------------------
# Classes of how chat models answer (issue 21): tags, closings, verdict lists, echoes,
# revisions, other languages.

VALUES = ["12", "3/4", "Paris", "H2O", "0.5 m/s", "mitosis", "x = 2", "42"]


def tags() -> Iterator[Row]:
    for _ in range(30):
        letters = option_sets()
        a = pick(letters)[0]
        listing = "".join(f"<choice>{c}</choice>" for c in letters[:4])
        form = rng.randrange(4)
        text = (
            rng.choice(REASONING)
            + [
                f"<choice>{a}</choice>",
                f"<answer>({a})</answer>",
                f"Reasoning done.\n<choices>{listing}</choices>\n<choice>{a}</choice>",
                f"<answer>\n{a}\n</answer>",
            ][form]
        )
        yield row("answer tags", text, letters, a)


def letter_forms() -> Iterator[Row]:
    for _ in range(30):
        letters = option_sets()
        a = pick(letters)[0]
        value = rng.choice(VALUES)
        form = rng.randrange(5)
        if form == 0:
            yield row(
                "letter with its value",
                rng.choice(REASONING) + f"\n{a}) {value}",
                letters,
                a,
                strict=None,
            )
        elif form == 1:
            yield row(
                "letter with its value",
                rng.choice(REASONING) + f"The answer is {a}) {value}.",
                letters,
                a,
            )
        elif form == 2:
            yield row(
                "bold letter opening",
                f"**{a}**\n\nBecause the rate law is first order, the half-life is constant.",
                letters,
                a,
                strict=None,
            )
        elif form == 3:
            yield row(
                "bold letter opening",
                f"**{a}.** {value}\n\nThe other options contradict the data.",
                letters,
                a,
                strict=None,
            )
        else:
            yield row(
                "letter with its value",
                rng.choice(REASONING) + f"**Answer: {a}. {value}**",
                letters,
                a,
            )


def closings() -> Iterator[Row]:
    for _ in range(40):
        letters = option_sets()
        a, b, c = pick(letters, 3)
        form = rng.randrange(6)
        text = (
            rng.choice(REASONING)
            + [
                f"Options {b} and {c} violate conservation of energy. Hence ({a}).",
                f"{b} is too large and {c} has the wrong sign, which leaves only {a}.",
                f"Eliminating {b} and {c}, we're left with {a}.",
                f"I first leaned towards {b}. Actually, it's {a}.",
                f"By elimination: {a}.",
                f"So the answer must be ({a}).",
            ][form]
        )
        strict = a if form == 5 else None
        yield row("committing closing", text, letters, a, strict=strict)


def verdict_lists() -> Iterator[Row]:
    for _ in range(40):
        letters = rng.choice(["ABCD", "ABCDE"])
        a = pick(letters)[0]
        style = rng.randrange(4)
        lines = []
        for c in letters:
            good = c == a
            lines.append(
                [
                    f"{c}: {'correct' if good else 'incorrect'}",
                    f"- **{c}** {'✓' if good else '✗'}",
                    f"({c}) {'True' if good else 'False'} — {rng.choice(VALUES)}",
                    f"Option {c}: {'✅ correct' if good else '❌ wrong, it ignores the sign'}",
                ][style]
            )
        yield row(
            "per-option verdicts", rng.choice(REASONING) + "\n".join(lines), letters, a, strict=None
        )


def echoes() -> Iterator[Row]:
    """Restating the options, or several letters with no commitment: never an answer
    (whatever the gold, a reply like this must not score)."""
    for _ in range(40):
        letters = rng.choice(["ABCD", "ABCDE"])
        values = rng.sample(VALUES, len(letters))
        form = rng.randrange(6)
        text = [
            "\n".join(f"{c}) {v}" for c, v in zip(letters, values, strict=True)),
            "\n".join(letters),
            " ".join(f"({c}) {v}" for c, v in zip(letters, values, strict=True)),
            "Answer: " + " ".join(f"{c}) {v}" for c, v in zip(letters, values, strict=True)),
            "\n\n".join(f"{c}. {v}" for c, v in zip(letters, values, strict=True)),
            ", ".join(letters[:-1]) + " or " + letters[-1],
        ][form]
        yield row("echo of the options", text, letters, None)


def revised_boxes() -> Iterator[Row]:
    for _ in range(25):
        letters = option_sets()
        a, b = pick(letters, 2)
        form = rng.randrange(3)
        text = (
            rng.choice(REASONING)
            + [
                f"At first I thought \\boxed{{{b}}}, but after checking the units, the answer is \\boxed{{{a}}}.",
                f"\\boxed{{{b}}}\n\nWait, I misread the question. The correct choice is \\boxed{{{a}}}.",
                f"If the gas were ideal, it would be \\boxed{{{b}}}. As stated, the answer is \\boxed{{{a}}}.",
            ][form]
        )
        yield row("revised boxes", text, letters, a)
    for _ in range(15):
        letters = option_sets()
        a, b = pick(letters, 2)
        text = rng.choice(REASONING) + rng.choice(
            [
                f"\\boxed{{{b}}}\n\n\\boxed{{{a}}}",
                f"Maybe \\boxed{{{b}}}, or perhaps \\boxed{{{a}}}.",
            ]
        )
        yield row("boxes with no commitment", text, letters, None)


LANGUAGE_CHOICES = [
    "La respuesta correcta es la {x}.", "La opción correcta es la {x}.", "La bonne réponse est {x}.",
    "Die richtige Antwort ist {x}.", "Antwort: {x}", "A resposta correta é a alternativa {x}.",
    "La risposta corretta è la {x}.", "Правильный ответ: {x}", "Ответ: {x}", "Відповідь: {x}",
    "正确答案是 {x}。", "答案：{x}", "正解は {x} です。", "정답은 {x}입니다.", "الإجابة الصحيحة هي {x}",
    "सही उत्तर {x} है।", "Doğru cevap {x}'dir.", "Đáp án đúng là {x}.", "Jawaban yang benar adalah {x}.",
    "Poprawna odpowiedź to {x}.", "Het juiste antwoord is {x}.", "คำตอบที่ถูกต้องคือ {x}",
    "התשובה הנכונה היא {x}", "پاسخ صحیح {x} است", "Správná odpověď je {x}.", "Svaret är {x}.",
]  # fmt: skip


def languages() -> Iterator[Row]:
    for template in LANGUAGE_CHOICES:
        for _ in range(2):
            letters = option_sets()
            a, b = pick(letters, 2)
            text = f"Option {b} contradicts the data.\n\n" + template.format(x=a)
            yield row("other languages", text, letters, a)


def option_text() -> Iterator[Row]:
    for _ in range(20):
        options = rng.sample(["Paris", "London", "Berlin", "Madrid", "Rome", "Vienna"], 4)
        k = rng.randrange(4)
        text = rng.choice(["", "Thinking about the capitals listed.\n"]) + rng.choice(
            [f"{options[k]}", f"It is {options[k]}.", f"**{options[k]}**"]
        )
        r = row("option text alone", text, "ABCD", "ABCD"[k], strict=None)
        r["options"] = options
        yield r


def main() -> None:
    rows: list[Row] = []
    seen: set[tuple[object, object]] = set()
    builders = (negated, ranges, boxes, tables, json_objects, math_lines, verdicts, controls)
    # how chat models answer (issue 21)
    builders += (tags, letter_forms, closings, verdict_lists, echoes, revised_boxes)
    builders += (languages, option_text)
    for build in builders:
        for r in build():
            if (r["text"], r["letters"]) not in seen:
                seen.add((r["text"], r["letters"]))
                rows.append(r)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} rows -> {OUT}")


if __name__ == "__main__":
    main()
