"""Short answers: where the answer is read, and when two answers are the same answer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.verify.short_answer import (
    ShortAnswer,
    answer_forms,
    contains_answer,
    extract_short_answer,
    same_answer,
)

_words = st.lists(st.from_regex(r"[A-Za-z]{2,8}", fullmatch=True), min_size=1, max_size=4).map(
    " ".join
)


@settings(max_examples=80, deadline=None)
@given(_words, st.text(alphabet="abc .\n", max_size=40))
def test_the_final_answer_line_is_read(answer: str, prose: str) -> None:
    assert extract_short_answer(f"{prose}\nFinal answer: {answer}", "final_answer") == answer
    assert extract_short_answer(f"{prose}\n\\boxed{{{answer}}}", "boxed") == answer
    assert same_answer(f'"{answer}."', answer.upper())


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9))
def test_numbers_compare_as_numbers(n: int) -> None:
    assert same_answer(f"{n:,}", str(n)) and same_answer(f"{n}.0", str(n))
    assert not same_answer(str(n + 1), str(n))


def test_answers_that_are_and_are_not_the_same() -> None:
    assert same_answer("The Pacific Ocean", "pacific ocean")
    assert same_answer("Paris, London and Rome", "paris london rome")
    assert same_answer("\\text{Saturn}", "Saturn")
    assert not same_answer("79.5", "80") and not same_answer("Parisian", "Paris")


def test_containment_is_by_whole_words_near_the_start() -> None:
    assert contains_answer("It was Ed Wood.", ["Ed Wood"])
    assert not contains_answer("It was Ed Woodward.", ["Ed Wood"])
    assert (
        contains_answer("five", ["5"])
        and contains_answer("Arthurs Magazine", ["Arthur's Magazine"]) is False
    )
    long = "x " * 40 + "Chief of Protocol"
    assert not contains_answer(long, ["Chief of Protocol"])  # buried at the end of a long answer
    assert "Magazine" in " ".join(answer_forms("The Magazine (US)"))


async def test_the_verifier_reports_what_it_read() -> None:
    verifier = ShortAnswer()
    good = await gym.testing.verify(
        verifier,
        prompt="q",
        answer=["William Shakespeare", "Shakespeare"],
        response="Final answer: Shakespeare.",
    )
    none = await gym.testing.verify(verifier, prompt="q", answer="x", response="no marker here")
    assert good.reward == 1.0 and good.metadata["extracted_answer"] == "Shakespeare"
    assert none.reward == 0.0 and none.metadata["extracted_answer"] is None
    json_mode = await gym.testing.verify(
        ShortAnswer(extract="json", match="contains"),
        prompt="q",
        answer="yes",
        response='Thinking.\n{"answer": "yes, they were"}',
    )
    assert json_mode.reward == 1.0
    with pytest.raises(gym.errors.ConfigError):
        ShortAnswer(extract="nowhere")  # type: ignore[arg-type]


async def test_verbatim_match_keeps_case_per_verifier_or_per_task() -> None:
    verbatim = ShortAnswer(match="verbatim")
    same = await gym.testing.verify(
        verbatim, prompt="q", answer="Paris", response="Final answer: Paris"
    )
    lower = await gym.testing.verify(
        verbatim, prompt="q", answer="Paris", response="Final answer: paris"
    )
    assert same.reward == 1.0 and lower.reward == 0.0
    task = gym.Task(prompt="q", answer="Paris", metadata={"match": "verbatim"})
    per_task = await gym.testing.verify(ShortAnswer(), task=task, response="Final answer: paris")
    assert per_task.reward == 0.0
    with pytest.raises(gym.errors.ConfigError, match="match must be one of"):
        ShortAnswer(match="fuzzy")  # type: ignore[arg-type]
