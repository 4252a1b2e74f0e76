"""Tests for the string and number verifiers, and the shared helpers."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Message, Task, Trajectory
from nemo_gym.verify.extract import extract_number, fenced_blocks, parse_number, strip_thinking
from nemo_gym.verify.text import (
    ExactMatch,
    NormalizedMatch,
    NumericMatch,
    RegexMatch,
    TokenF1,
    normalize_answer,
    token_f1,
)


def reply(text: str) -> Trajectory:
    return Trajectory(messages=[Message.user("q"), Message.assistant(text)])


async def test_exact_match() -> None:
    task = Task(prompt="q", answer=["Paris", "paris, france"])
    assert (await ExactMatch().verify(task, reply("  Paris\n"))).reward == 1.0
    assert (await ExactMatch().verify(task, reply("paris"))).reward == 0.0
    assert (await ExactMatch(case_sensitive=False).verify(task, reply("PARIS"))).reward == 1.0
    assert (await ExactMatch(strip=False).verify(task, reply(" Paris"))).reward == 0.0


async def test_normalized_match_is_squad_normalisation() -> None:
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an apple, a pear") == "apple pear"
    task = Task(prompt="q", answer="Eiffel Tower")
    assert (await NormalizedMatch().verify(task, reply("the Eiffel Tower."))).reward == 1.0
    assert (await NormalizedMatch().verify(task, reply("Eiffel"))).reward == 0.0


async def test_token_f1() -> None:
    assert token_f1("the cat sat", "cat sat down") == pytest.approx(0.8)
    assert token_f1("", "") == 1.0
    assert token_f1("x", "") == 0.0
    task = Task(prompt="q", answer=["blue whale", "the cat sat down"])
    result = await TokenF1().verify(task, reply("a cat sat"))
    assert result.reward == pytest.approx(0.8)
    assert result.components == {"f1": pytest.approx(0.8), "exact_match": 0.0}
    exact = await TokenF1().verify(task, reply("Blue whale."))
    assert exact.components["exact_match"] == 1.0 and exact.reward == 1.0


async def test_regex_match() -> None:
    verifier = RegexMatch(r"ANSWER:\s*(\w+)", flags=re.IGNORECASE)
    task = Task(prompt="q", answer="Blue")
    result = await verifier.verify(task, reply("answer: red\n...\nAnswer: blue"))
    assert result.reward == 1.0 and result.metadata["extracted_answer"] == "blue"
    missing = await verifier.verify(task, reply("blue"))
    assert missing.reward == 0.0 and missing.components["format"] == 0.0
    exact = RegexMatch(r"=(?P<v>.+)", group="v", normalize=False)
    assert (await exact.verify(Task(prompt="q", answer="Blue"), reply("x=blue"))).reward == 0.0
    with pytest.raises(ConfigError):
        RegexMatch("(")
    with pytest.raises(ConfigError):
        RegexMatch("(a)", group=2)
    with pytest.raises(ConfigError):
        RegexMatch("(a)", group="nope")


@pytest.mark.parametrize(
    ("text", "value", "percent"),
    [
        ("42", 42.0, False),
        ("-1,234,567.5", -1234567.5, False),
        ("+3.5e-3", 0.0035, False),
        ("1.5 × 10^{-3}", 0.0015, False),
        ("2.5\\times10^3", 2500.0, False),
        ("12%", 12.0, True),
        ("12.5 percent", 12.5, True),
        ("$1,000", 1000.0, False),
        ("3/4", 0.75, False),
        ("\\frac{3}{4}", 0.75, False),
        ("−7", -7.0, False),
        (".5", 0.5, False),
        ("７", 7.0, False),
    ],
)
def test_parse_number(text: str, value: float, percent: bool) -> None:
    parsed = parse_number(text)
    assert parsed is not None
    assert parsed.value == pytest.approx(value) and parsed.percent is percent


@pytest.mark.parametrize("text", ["", "abc", "1 2", "1/0", "1,23", "12 apples", "1e99999"])
def test_parse_number_rejects(text: str) -> None:
    assert parse_number(text) is None


def test_extract_number_prefers_boxed_then_statement_then_last() -> None:
    assert extract_number(r"so 3 + 4 = 7, \boxed{7} and 9 more").value == 7.0  # type: ignore[union-attr]
    assert extract_number(r"\boxed{\frac{1}{2}}").value == 0.5  # type: ignore[union-attr]
    assert extract_number("The answer is 12 apples, not 13.").value == 12.0  # type: ignore[union-attr]
    assert extract_number("We get 5, then 6, finally 1,024.").value == 1024.0  # type: ignore[union-attr]
    assert extract_number("no numbers here") is None


async def test_numeric_match() -> None:
    verifier = NumericMatch(rel_tol=1e-3)
    assert (
        await verifier.verify(Task(prompt="q", answer="1,000"), reply("It is 1000.4"))
    ).reward == 1.0
    assert (await verifier.verify(Task(prompt="q", answer=1000), reply("It is 1002"))).reward == 0.0
    assert (await verifier.verify(Task(prompt="q", answer=[3, "4"]), reply("= 4"))).reward == 1.0
    nothing = await verifier.verify(Task(prompt="q", answer=1), reply("none"))
    assert nothing.reward == 0.0 and nothing.components["format"] == 0.0
    assert nothing.metadata["extracted_answer"] is None  # no answer, not a wrong one
    with pytest.raises(ConfigError):
        NumericMatch(percent="half")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("percent", "gold", "said", "right"),
    [
        ("strip", "25", "25%", True),  # the sign is a unit (GSM8K/MATH graders)
        ("strip", "25%", "25", True),
        ("strip", "0.25", "25%", False),
        ("strip", "25%", "0.25", False),
        ("value", "0.25", "25%", True),
        ("value", "25", "25%", False),
        ("value", "25%", "25%", True),
        ("either", "0.25", "25%", True),
        ("either", "25", "25%", True),
        ("either", "25", "0.25", False),  # no percent sign on either side
    ],
)
async def test_numeric_match_percent_policy(
    percent: str, gold: str, said: str, right: bool
) -> None:
    verifier = NumericMatch(percent=percent)  # type: ignore[arg-type]
    result = await verifier.verify(Task(prompt="q", answer=gold), reply(f"Answer: {said}"))
    assert result.reward == float(right)
    with pytest.raises(VerifierError):
        await verifier.verify(Task(prompt="q", answer="many"), reply("1"))
    with pytest.raises(ConfigError):
        NumericMatch(rel_tol=-1)


async def test_missing_gold_and_extract_option() -> None:
    with pytest.raises(VerifierError):
        await ExactMatch().verify(Task(prompt="q"), reply("x"))
    with pytest.raises(VerifierError):
        await ExactMatch().verify(Task(prompt="q", answer={"a": 1}), reply("x"))
    last_line = ExactMatch(extract=lambda text: text.strip().splitlines()[-1] if text else None)
    task = Task(prompt="q", answer="42")
    assert (await last_line.verify(task, reply("work\nwork\n42"))).reward == 1.0
    none = await last_line.verify(task, reply(""))
    assert none.reward == 0.0 and none.metadata["reason"] == "extract found no answer"


def test_strip_thinking_and_fences() -> None:
    assert strip_thinking("<think>a</think>b") == "b"
    assert strip_thinking("no think") == "no think"
    blocks = fenced_blocks("x\n```json\n{}\n```\ntext\n~~~\nraw\n~~~\n```sql\nSELECT")
    assert [(b.lang, b.body) for b in blocks] == [
        ("json", "{}\n"),
        ("", "raw\n"),
        ("sql", "SELECT"),
    ]


BIG = [
    "1" * 1_000_000,
    "1," * 500_000,
    "1." * 500_000,
    "-" * 1_000_000,
    "1e" * 500_000,
    "\\boxed{" * 100_000,
    "\\frac{1}{" * 100_000,
    "answer is " * 100_000,
    "```\n" * 250_000,
    "3/" * 500_000,
]


@pytest.mark.parametrize("text", BIG, ids=lambda t: repr(t[:8]))
def test_megabyte_inputs_are_fast(text: str) -> None:
    start = time.perf_counter()
    extract_number(text)
    parse_number(text)
    normalize_answer(text)
    fenced_blocks(text)
    assert time.perf_counter() - start < 3.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_number_parsers_never_crash(text: str) -> None:
    for parsed in (parse_number(text), extract_number(text)):
        assert parsed is None or parsed.value == parsed.value  # never NaN


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15))
def test_parse_number_roundtrips_reprs(value: float) -> None:
    parsed = parse_number(repr(value))
    assert parsed is not None and parsed.value == pytest.approx(value, rel=1e-12, abs=1e-300)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_thousands_separators(value: int) -> None:
    assert parse_number(f"{value:,}").value == value  # type: ignore[union-attr]


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200), st.text(max_size=200))
def test_token_f1_is_bounded_and_symmetric(a: str, b: str) -> None:
    score = token_f1(a, b)
    assert 0.0 <= score <= 1.0
    assert score == pytest.approx(token_f1(b, a))


DOC = Path(__file__).parents[2] / "docs" / "verify-text.md"


def test_docs_examples_run() -> None:
    """Every ```python block of docs/verify-text.md runs as written."""
    blocks = [b.body for b in fenced_blocks(DOC.read_text()) if b.lang == "python"]
    assert blocks
    namespace: dict = {}
    for body in blocks:
        exec(compile(body, str(DOC), "exec"), namespace)
