"""Property tests, one per class of how chat models state answers (issue 21).

Each property is drawn over the class, not over its examples: the phrase, the values,
the reasoning before it and the remark after it vary. The corpora built by
tests/verify/data/build_*.py pin the same classes by example.
"""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_gym.records import Message, Trajectory
from nemo_gym.verify.extract import (
    LANGUAGES,
    extract_answer,
    extract_choice,
    extract_choice_details,
    spelled_number,
)
from nemo_gym.verify.extract._lang import PHRASES
from nemo_gym.verify.math import verify_math

# Derandomized: the same examples on every run, so CI cannot turn red on a rare draw. A
# random search found one open case, kept as a known gap until fixed in _choice.py: an
# answer word ending a paragraph, then a sentence about another option ("...: cevap\n\nB
# is too large ..., which leaves only A." reads B).
_prop = settings(
    max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
_REASONING = st.text(
    alphabet=st.sampled_from("abcdefghkmnopqrstuvwxyz .,\n0123456789"), max_size=120
).map(lambda t: "Reasoning: " + t + "\n\n")
_LETTERS = st.sampled_from(["ABCD", "ABCDE", "ABCDEFGHIJ"])


def _fast(prediction: str, gold: str) -> bool:
    """The verdict of a pair the fast path decides (no worker pool)."""
    result = asyncio.run(verify_math(prediction, gold))
    assert result.path == "fast", result
    return result.correct


# ---------------------------------------------------------------------------------------
# Math


@_prop
@given(
    _REASONING,
    st.integers(2, 20),
    st.integers(2, 30),
    st.sampled_from(
        [
            " (Check: {a} × {b} = {p}.)",
            "\n\nCheck: {a} × {b} = {p} ✓",
            " That is {c} cents.",
            "\n\nVerification: {p} / {a} = {b}.",
            " (Note: {b} was the price of one.)",
        ]
    ),
    st.sampled_from(
        [
            "So she pays ${t} altogether.",
            "In total, there are {t} apples.",
            "Therefore {t} tickets were sold in all.",
        ]
    ),
)
def test_the_closing_statement_is_the_answer_not_the_remark_after_it(
    before: str, a: int, b: int, remark: str, closing: str
) -> None:
    total = a * b + 1  # never the check's own product
    text = before + closing.format(t=total) + remark.format(a=a, b=b, p=a * b, c=total * 100)
    assert extract_answer(text).answer == str(total)


def test_twenty_languages_or_more() -> None:
    assert len(LANGUAGES) >= 20
    for needed in ("es", "fr", "de", "pt", "it", "ru", "ja", "ko", "zh", "ar", "hi", "tr"):
        assert needed in LANGUAGES
    for needed in ("vi", "id", "pl", "nl", "th", "he", "uk", "fa"):
        assert needed in LANGUAGES


_STATEMENTS = [
    ("es", "La respuesta es {x}."),
    ("es", "Respuesta final: {x}"),
    ("fr", "La réponse finale est {x}."),
    ("de", "Die Antwort lautet {x}."),
    ("pt", "Portanto, a resposta é {x}."),
    ("it", "Quindi la risposta è {x}."),
    ("ru", "Ответ: {x}."),
    ("uk", "Відповідь: {x}."),
    ("zh", "所以答案是 {x}。"),
    ("ja", "答えは {x} です。"),
    ("ko", "따라서 정답은 {x}입니다."),
    ("ar", "الإجابة النهائية هي {x}."),
    ("he", "התשובה היא {x}."),
    ("fa", "پاسخ نهایی: {x}"),
    ("hi", "अतः उत्तर {x} है।"),
    ("tr", "Cevap {x}'dir."),
    ("vi", "Vậy đáp án là {x}."),
    ("id", "Jadi jawabannya adalah {x}."),
    ("th", "คำตอบคือ {x}"),
    ("pl", "Odpowiedź: {x}."),
    ("nl", "Het antwoord is {x}."),
]


@_prop
@given(
    _REASONING,
    st.sampled_from(_STATEMENTS),
    st.integers(10, 99_999),
    st.sampled_from(["", " Check: 2 + 3 = 5.", "\n(7 × 8 = 56)"]),
)
def test_answer_statements_in_other_languages(
    before: str, statement: tuple[str, str], value: int, after: str
) -> None:
    text = before + statement[1].format(x=value) + after
    assert extract_answer(text).answer == str(value), text


@_prop
@given(
    st.sampled_from([p for p in PHRASES if p.decimal_comma]), st.integers(1, 99), st.integers(1, 9)
)
def test_a_decimal_comma_language_writes_three_comma_five(phrase, whole: int, tenth: int) -> None:
    statement = {
        "es": "La respuesta es {x}.",
        "fr": "La réponse est {x}.",
        "de": "Die Antwort ist {x}.",
        "pt": "A resposta é {x}.",
        "it": "La risposta è {x}.",
        "ru": "Ответ: {x}.",
        "pl": "Odpowiedź: {x}.",
        "nl": "Het antwoord is {x}.",
    }.get(phrase.language)
    if statement is None:
        return
    text = statement.format(x=f"{whole},{tenth}")
    assert _fast(text, f"{whole}.{tenth}")


_ONES = "zero one two three four five six seven eight nine".split()
_TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def _english(n: int) -> str:
    if n < 10:
        return _ONES[n]
    if n < 20:
        return _TEENS[n - 10]
    if n < 100:
        return _TENS[n // 10 - 2] + ("-" + _ONES[n % 10] if n % 10 else "")
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + (" and " + _english(rest) if rest else "")
    rest = n % 1000
    return _english(n // 1000) + " thousand" + (" " + _english(rest) if rest else "")


@_prop
@given(st.integers(0, 999_999), st.sampled_from(["{w}", "\\text{{{w}}}", "**{w}**"]))
def test_numbers_in_words(n: int, form: str) -> None:
    words = _english(n)
    assert spelled_number(form.format(w=words)) == str(n)
    assert _fast(f"The answer is {form.format(w=words)}.", str(n))
    assert not _fast(f"The answer is {form.format(w=words)}.", str(n + 1))


@_prop
@given(st.integers(1, 9), st.sampled_from([2, 3, 4, 5, 6, 8, 10]))
def test_fractions_in_words(numerator: int, denominator: int) -> None:
    names = {2: "half", 3: "third", 4: "quarter", 5: "fifth", 6: "sixth", 8: "eighth", 10: "tenth"}
    name = names[denominator] + ("s" if numerator > 1 and denominator != 2 else "")
    if numerator > 1 and denominator == 2:
        name = "halves"
    said = ("a " if numerator == 1 else _ONES[numerator] + " ") + name
    assert spelled_number(said) == str(Fraction(numerator, denominator))


@_prop
@given(_REASONING, st.integers(2, 60), st.integers(61, 120))
def test_a_hypothetical_box_is_not_the_answer(before: str, asked: int, other: int) -> None:
    for text in (
        f"Had the endpoints counted it would be \\boxed{{{other}}}; "
        f"as stated the count is \\boxed{{{asked}}}.",
        f"So the count is \\boxed{{{asked}}}.\n\n"
        f"(If the endpoints were included it would be \\boxed{{{other}}}.)",
    ):
        assert extract_answer(before + text).answer == str(asked)


@_prop
@given(_REASONING, st.integers(2, 60), st.integers(-60, -2))
def test_an_unboxed_correction_after_the_box_is_the_answer(
    before: str, first: int, fixed: int
) -> None:
    text = f"{before}So $x = \\boxed{{{first}}}$.\n\nHold on, I dropped a sign; it is ${fixed}$."
    assert extract_answer(text).answer == str(fixed)


@_prop
@given(
    _REASONING,
    st.integers(2, 60),
    st.integers(61, 120),
    st.sampled_from(["\n\n", " or ", " or maybe ", ". Alternatively, ", "\n\nCase 2 gives "]),
)
def test_several_boxes_without_commitment_are_no_answer(
    before: str, a: int, b: int, gap: str
) -> None:
    """A policy that boxes every candidate must not be paid for the one that is right."""
    text = f"{before}\\boxed{{{a}}}{gap}\\boxed{{{b}}}"
    found = extract_answer(text)
    if gap in (" or ", "\n\n"):  # one sentence, or one per line: the set {a, b}
        assert found.answer == f"{a}, {b}"
    else:
        assert found.answer is None and found.anchor == "ambiguous"
    assert not _fast(text, str(a)) and not _fast(text, str(b))


@_prop
@given(
    _REASONING,
    st.integers(2, 40),
    st.integers(41, 99),
    st.sampled_from(
        [
            "**Final Answer**\n\\[\n\\boxed{{{v}}}\n\\]",
            "### Final Answer\n$\\boxed{{{v}}}$",
            "Answer: \\boxed{{{v}}}",
        ]
    ),
)
def test_a_final_answer_heading_commits_to_the_box_under_it(
    before: str, step: int, final: int, heading: str
) -> None:
    text = f"{before}The first part gives \\boxed{{{step}}}.\n\n" + heading.format(v=final)
    assert extract_answer(text).answer == str(final)
    letters = "ABCD"
    a, b = letters[step % 4], letters[(step + 1) % 4]
    choice = f"{before}Part one: \\boxed{{{b}}}.\n\n" + heading.format(v=a)
    assert extract_choice(choice, letters=letters) == a


@_prop
@given(
    st.integers(3, 999),
    st.sampled_from(
        [
            "I cannot determine how many of the {n} items were sold.",
            "The answer cannot be determined from the {n} values given.",
            "I'm sorry, but with only {n} data points this is underspecified.",
            "There is not enough information; we only know {n}.",
        ]
    ),
)
def test_a_refusal_repeating_a_number_is_no_answer(n: int, refusal: str) -> None:
    found = extract_answer(refusal.format(n=n))
    assert found.answer is None


@_prop
@given(
    st.integers(1000, 99_999_999),
    st.sampled_from([" ", "\u202f", "\u00a0"]),
    st.sampled_from(
        [
            "**Final Answer**: {x}\n\n(Check: 3 × 4 = 12.)",
            "### Answer\n{x}\n\nThis took 3 steps.",
            "| Quantity | Value |\n|---|---|\n| Answer | {x} |",
            "The total is {x}.",
        ]
    ),
)
def test_markdown_anchors_and_space_thousands(value: int, space: str, form: str) -> None:
    said = f"{value:,}".replace(",", space)
    assert _fast(form.format(x=said), str(value))


@_prop
@given(st.integers(-9, 9), st.integers(1, 9), st.integers(0, 3))
def test_complex_forms_are_read_as_the_answer(real: int, imag: int, unit: int) -> None:
    written = ["i", "\\mathrm{i}", "j", "\\,i"][unit]
    found = extract_answer(f"The answer is ${real}+{imag}{written}$.")
    assert found.answer == f"{real}+{imag}{written}"


# ---------------------------------------------------------------------------------------
# Multiple choice


@_prop
@given(_LETTERS, _REASONING, st.data())
def test_answer_tags(letters: str, before: str, data) -> None:
    a = data.draw(st.sampled_from(letters))
    form = data.draw(
        st.sampled_from(
            ["<choice>{a}</choice>", "<answer>({a})</answer>", "<answer>\n{a}\n</answer>"]
        )
    )
    listing = "<choices>" + "".join(f"<choice>{c}</choice>" for c in letters) + "</choices>\n"
    for text in (before + form.format(a=a), listing + before + form.format(a=a)):
        assert extract_choice(text, letters=letters, strict=True) == a


def test_bunsenbench_rows_score_a_letter_in_choice_tags() -> None:
    """NeMo Gym scores these 1; they scored 0 here before."""
    from nemo_gym.interop import nemo_gym as ng

    path = Path(__file__).parents[1] / "data" / "nemo_gym" / "bunsenbench_chemistry_mcq.jsonl"
    env = ng.load(path, server="bunsenbench_chemistry_mcq")
    tasks = list(env.tasks(split="test"))
    assert tasks
    for task in tasks:
        for reply, reward in (
            (f"<choice>{task.answer}</choice>", 1.0),
            (f"Thinking it over.\n<choice>({task.answer})</choice>", 1.0),
            ("<choice>A</choice>\n<choice>B</choice>\n<choice>C</choice>\n<choice>D</choice>", 0.0),
        ):
            trajectory = Trajectory(messages=[Message.assistant(reply)])
            rewards = asyncio.run(env.verifier.verify(task, trajectory))
            assert rewards.reward == reward, (reply, rewards)


@_prop
@given(_LETTERS, _REASONING, st.data())
def test_committing_closings(letters: str, before: str, data) -> None:
    a, b, c = data.draw(st.permutations(letters))[:3]
    form = data.draw(
        st.sampled_from(
            [
                "Options {b} and {c} break conservation of energy. Hence ({a}).",
                "{b} is too large and {c} has the wrong sign, which leaves only {a}.",
                "I leaned towards {b} at first. Actually, it's {a}.",
                "By elimination: {a}.",
            ]
        )
    )
    assert extract_choice(before + form.format(a=a, b=b, c=c), letters=letters) == a


@_prop
@given(st.sampled_from(["ABCD", "ABCDE"]), _REASONING, st.data())
def test_a_verdict_list_names_the_option_marked_correct(letters: str, before: str, data) -> None:
    a = data.draw(st.sampled_from(letters))
    style = data.draw(st.integers(0, 3))
    lines = []
    for c in letters:
        good = c == a
        lines.append(
            [
                f"{c}: {'correct' if good else 'incorrect'}",
                f"- **{c}** {'✓' if good else '✗'}",
                f"({c}) {'True' if good else 'False'}",
                f"Option {c}: {'✅ correct' if good else '❌ wrong'}",
            ][style]
        )
    assert extract_choice(before + "\n".join(lines), letters=letters) == a
    # two options marked correct: no single answer
    b = data.draw(st.sampled_from([c for c in letters if c != a]))
    marked = [
        line.replace("incorrect", "correct") if line.startswith(f"{b}:") else line for line in lines
    ]
    if style == 0:
        assert extract_choice(before + "\n".join(marked), letters=letters) is None


@_prop
@given(st.sampled_from(["ABCD", "ABCDE", "ABCDEFGHIJ"]), st.data())
def test_an_echo_of_the_options_is_never_an_answer(letters: str, data) -> None:
    """Restating every option (or every letter) must score for no gold: it would
    otherwise read as the last letter, a reward hack whenever that is the gold."""
    values = data.draw(st.lists(st.integers(0, 999), min_size=len(letters), max_size=len(letters)))
    form = data.draw(st.integers(0, 5))
    pairs = list(zip(letters, values, strict=True))
    text = [
        "\n".join(f"{c}) {v}" for c, v in pairs),
        "\n".join(letters),
        " ".join(f"({c}) {v}" for c, v in pairs),
        "Answer: " + " ".join(f"{c}) {v}" for c, v in pairs),
        "\n\n".join(f"{c}. {v}" for c, v in pairs),
        ", ".join(letters[:-1]) + " or " + letters[-1],
    ][form]
    assert extract_choice(text, letters=letters) is None
    assert extract_choice(text, letters=letters, strict=True) is None


@_prop
@given(_LETTERS, _REASONING, st.data())
def test_uncommitted_boxes_are_ambiguous_and_revisions_commit(
    letters: str, before: str, data
) -> None:
    a, b = data.draw(st.permutations(letters))[:2]
    hedge = data.draw(
        st.sampled_from(
            ["\\boxed{{{b}}}\n\n\\boxed{{{a}}}", "Maybe \\boxed{{{b}}}, or perhaps \\boxed{{{a}}}."]
        )
    )
    found = extract_choice_details(before + hedge.format(a=a, b=b), letters=letters)
    assert found.letter is None and "ambiguous" in (found.reason or "")
    revision = data.draw(
        st.sampled_from(
            [
                "At first I thought \\boxed{{{b}}}, but after checking the units, "
                "the answer is \\boxed{{{a}}}.",
                "\\boxed{{{b}}}\n\nWait, I misread the question. "
                "The correct choice is \\boxed{{{a}}}.",
                "If the gas were ideal, it would be \\boxed{{{b}}}. "
                "As stated, the answer is \\boxed{{{a}}}.",
            ]
        )
    )
    assert extract_choice(before + revision.format(a=a, b=b), letters=letters) == a


_CHOICE_STATEMENTS = [
    "La respuesta correcta es la {x}.", "La opción correcta es la {x}.",
    "La bonne réponse est {x}.", "Die richtige Antwort ist {x}.",
    "A resposta correta é a alternativa {x}.", "La risposta corretta è la {x}.",
    "Правильный ответ: {x}", "Відповідь: {x}", "正确答案是 {x}。", "正解は {x} です。",
    "정답은 {x}입니다.", "الإجابة الصحيحة هي {x}", "सही उत्तर {x} है।", "Doğru cevap {x}'dir.",
    "Đáp án đúng là {x}.", "Jawaban yang benar adalah {x}.", "Poprawna odpowiedź to {x}.",
    "Het juiste antwoord is {x}.", "คำตอบที่ถูกต้องคือ {x}", "התשובה הנכונה היא {x}",
    "پاسخ صحیح {x} است",
]  # fmt: skip


@_prop
@given(_LETTERS, _REASONING, st.sampled_from(_CHOICE_STATEMENTS), st.data())
def test_the_correct_option_in_other_languages(
    letters: str, before: str, statement: str, data
) -> None:
    a, b = data.draw(st.permutations(letters))[:2]
    text = f"{before}Option {b} contradicts the data.\n\n" + statement.format(x=a)
    assert extract_choice(text, letters=letters, strict=True) == a


@_prop
@given(_LETTERS, st.data())
def test_a_bold_letter_opening_the_reply(letters: str, data) -> None:
    a = data.draw(st.sampled_from(letters))
    form = data.draw(
        st.sampled_from(
            ["**{a}**\n\nBecause ...", "**{a}.** 42\n\nThe rest is wrong.", "**({a})**"]
        )
    )
    assert extract_choice(form.format(a=a), letters=letters) == a


# -- Readers of one boxed answer apply the commitment rule (the reward-hacking suite's
# boxed_many class scored 1 on arithmetic, short_answer and hotpotqa by boxing every
# candidate; math scored the question's own expression echoed back).


@pytest.mark.parametrize(
    "reply",
    [
        "The answer is \\boxed{41} \\boxed{43} \\boxed{42}",
        "Final answer: \\boxed{42} \\boxed{43} \\boxed{41}",
        "\\boxed{41}. Or maybe \\boxed{42}",
    ],
)
def test_boxing_every_candidate_reads_no_integer(reply: str) -> None:
    from nemo_gym.verify.extract import extract_number, final_integer

    assert final_integer(reply).value != 42
    found = extract_number(reply)
    assert found is None or found.value != 42


def test_a_revised_box_is_still_the_integer() -> None:
    from nemo_gym.verify.extract import final_integer

    assert (
        final_integer("At first I got \\boxed{41}, but I made a mistake: \\boxed{42}").value == 42
    )
    assert final_integer("So the total is \\boxed{42}.").value == 42


@pytest.mark.parametrize("extract", ["boxed", "json"])
def test_a_short_answer_is_one_box_never_a_list_of_candidates(extract: str) -> None:
    from nemo_gym.verify.short_answer import extract_short_answer

    hedge = "The answer is \\boxed{Rhine} \\boxed{42} \\boxed{Danube}"
    assert extract_short_answer(hedge, extract) is None  # type: ignore[arg-type]
    assert extract_short_answer("It is \\boxed{Danube}.", extract) == "Danube"  # type: ignore[arg-type]


async def test_the_question_s_own_expression_is_no_math_answer() -> None:
    from nemo_gym.verify.math import verify_math

    question = "What is $\\frac{3}{4} + \\frac{1}{6}$? Put your final answer within \\boxed{}."
    echoed = await verify_math(question, "\\frac{11}{12}", question=question)
    assert not echoed.correct and echoed.extracted_answer is None
    worked = "$\\frac{3}{4} + \\frac{1}{6} = \\frac{9}{12} + \\frac{2}{12} = \\frac{11}{12}$"
    assert (await verify_math(worked, "\\frac{11}{12}", question=question)).correct
    # a lone number copied from the question can be the answer ("the larger of 3 and 7")
    assert (await verify_math("It is 7", "7", question="Which is larger, 3 or 7?")).correct


@pytest.mark.parametrize("word", ["cevap", "answer", "option", "उत्तर", "选", "yanıt"])
@pytest.mark.parametrize("gap", ["\n", "\n\n"])
def test_an_answer_word_ending_a_line_of_prose_does_not_claim_the_next_lines_letter(
    word: str, gap: str
) -> None:
    """Only a heading ("## Final Answer") reads its answer off the next line."""
    reply = f"Reasoning: {word}{gap}B is too large and C has the wrong sign, which leaves only A."
    assert extract_choice(reply, letters="ABCD") == "A"
    for heading in ("## Final Answer", "**Answer:**", "1. Answer", "> Correct answer"):
        assert extract_choice(f"Reasoning: {word}\n\n{heading}{gap}B", letters="ABCD") == "B"
