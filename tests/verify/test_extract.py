"""nemo_gym.verify.extract: the one place answers are read from replies."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_gym.verify import extract
from nemo_gym.verify.extract import (
    MATH_SPAN,
    boxed_spans,
    extract_answer,
    final_integer,
    is_blank,
    last_boxed,
    last_number,
    parse_number,
    span_content,
    strip_thinking,
)

_settings = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
_prose = st.text(alphabet=st.sampled_from("abcdefgh ijk.,\n"), max_size=80)
_amount = st.builds(lambda d, c: f"{d}.{c:02d}", st.integers(0, 99_999), st.integers(0, 99))


def test_the_package_is_the_one_import_point() -> None:
    for name in extract.__all__:
        assert getattr(extract, name) is not None
    # the old copies are gone
    with pytest.raises(ImportError):
        __import__("nemo_gym.envs.answers")
    from nemo_gym.verify import common

    assert not hasattr(common, "last_boxed") and not hasattr(common, "fenced_blocks")


def test_boxes() -> None:
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{5} and \\boxed{}") == "5"  # an empty last box: the one before
    assert last_boxed("\\boxed{open") is None
    assert last_boxed("\\boxed 7.") == "7"
    assert [b.content for b in boxed_spans("\\boxed{\\boxed{5}} \\fbox{6}")] == ["\\boxed{5}", "6"]


@_settings
@given(_prose, _amount, st.sampled_from(["$\\$§$", "$\\$ §$", "\\(\\$§\\)", "$$\\$§$$"]))
def test_an_escaped_dollar_is_never_a_math_delimiter(before: str, amount: str, form: str) -> None:
    text = f"{before} The answer is {form.replace('§', amount)}."
    found = extract_answer(text)
    assert found.anchor == "answer"
    assert found.answer is not None and amount in found.answer
    span = MATH_SPAN.search(form.replace("§", amount))
    assert span is not None and amount in span_content(span)


@_settings
@given(
    _prose,
    st.integers(1, 10**6),
    st.sampled_from(["\\boxed{}", "\\boxed{ }", "\\boxed{.}", "\\boxed{\\$}", "\\boxed{\\,}"]),
    st.booleans(),
)
def test_a_blank_candidate_falls_back_and_says_so(
    before: str, value: int, blank: str, answer_first: bool
) -> None:
    text = (
        f"{before} The answer is {value}. {blank}"
        if answer_first
        else f"{before} {blank} so the answer is {value}."
    )
    found = extract_answer(text)
    assert found.answer == str(value)
    content = blank.removeprefix("\\boxed{").removesuffix("}").strip()
    assert found.skipped == ((content,) if content else ())


def test_blank_means_no_letter_or_digit() -> None:
    for blank in ["", "\\", "\\$", ".", "\\,", "{}", " \\quad ", "\\text{ }", "()"]:
        assert is_blank(blank), blank
    for answer in ["0", "x", "\\infty", "\\emptyset", "\\{\\}", "∅", "\\$5", "(A)"]:
        assert not is_blank(answer), answer


@_settings
@given(st.lists(st.integers(-50, 50), min_size=2, max_size=4, unique=True), _prose)
def test_boxes_and_spans_of_one_sentence_are_one_answer(values: list[int], before: str) -> None:
    boxes = " or ".join(f"$x = \\boxed{{{v}}}$" for v in values)
    assert extract_answer(f"{before}\nThe roots are {boxes}.").answer == ", ".join(map(str, values))
    spans = " and ".join(f"$x={v}$" for v in values)
    assert extract_answer(f"{before}\nSo {spans}.").answer == ", ".join(f"x={v}" for v in values)
    # a correction between two boxes ends the run: the last box is the answer
    draft = f"\\boxed{{{values[0]}}}. Wait, that is wrong: \\boxed{{{values[1]}}}"
    assert extract_answer(draft).answer == str(values[1])


def test_answers_in_words_and_multipliers() -> None:
    assert extract_answer("Thus there is no solution.").answer == "no solution"
    assert extract_answer("The answer is 2.5 million.").answer == "2.5 million"
    assert extract_answer("The answer is $3$ billion dollars.").answer == "3 billion"
    assert extract_answer("The answer is 12 apples.").answer == "12"


@_settings
@given(st.integers(0, 999), st.integers(0, 999), _prose)
def test_reasoning_before_think_end_is_never_the_answer(draft: int, final: int, text: str) -> None:
    think = f"<think>{text} \\boxed{{{draft}}} the answer is {draft}</think>"
    reply = f"{think}\nThe answer is {final}."
    assert extract_answer(reply).answer == str(final)
    assert strip_thinking(reply) == f"\nThe answer is {final}."


@pytest.mark.parametrize(
    ("text", "read", "value", "boxed"),
    [
        ("so it is \\boxed{42}.", "42", 42, True),
        ("\\boxed{1,234}", "1,234", 1234, True),
        ("The answer is -7. Check: -7 + 2 = -5", "-7", -7, False),
        ("first 3 then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", None, True),
        ("\\boxed{x+1}", "x+1", None, True),  # a box is a whole answer, not its last digit
        ("no digits", None, None, False),
        ("<think>\\boxed{5}</think>\\boxed{123456789012345678901}", "123456789012345678901",
         123456789012345678901, True),
    ],
)  # fmt: skip
def test_final_integer(text: str, read: str | None, value: int | None, boxed: bool) -> None:
    found = final_integer(strip_thinking(text))
    assert (found.text, found.value, found.boxed) == (read, value, boxed)


def test_numbers() -> None:
    assert last_number("from 3 to 1,250 in all") == "1,250"
    assert last_number("nothing") is None
    assert parse_number("12%").candidates() == (12.0,)
    assert parse_number("12%").candidates("value") == (0.12,)
    assert parse_number("12%").candidates("either") == (12.0, 0.12)


@_settings
@given(st.text(max_size=400))
def test_extractors_never_raise(text: str) -> None:
    extract_answer(text)
    final_integer(text)
    last_number(text)
    extract.extract_number(text)
    extract.extract_choice(text, letters="ABCDEFGHIJ")


@pytest.mark.parametrize(
    "unit", ["\\boxed{", "$\\$", "answer is ", "$x=1$ or ", "|", '"answer": ', "\\boxed{A}"]
)
def test_a_megabyte_costs_milliseconds(unit: str) -> None:
    text = unit * (1_000_000 // len(unit))
    started = time.perf_counter()
    extract_answer(text)
    final_integer(text)
    extract.extract_choice(text)
    assert time.perf_counter() - started < 2.0  # linear scans; generous for loaded CI


def test_the_docs_page_runs() -> None:
    from pathlib import Path

    from nemo_gym.verify.extract import fenced_blocks

    page = Path(__file__).parents[2] / "docs" / "extract.md"
    blocks = [b.body for b in fenced_blocks(page.read_text()) if b.lang == "python"]
    assert blocks
    for body in blocks:
        exec(compile(body, str(page), "exec"), {})
