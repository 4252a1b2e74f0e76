"""Tests of the IFEval checkers, registry, strict/loose scoring, verifier and metrics."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_gym.errors import MissingDependency, VerifierError
from nemo_gym.records import Message, Rewards, Task, Trajectory
from nemo_gym.verify.ifeval import (
    INSTRUCTIONS,
    IFEvalVerifier,
    ifeval_metrics,
    ifeval_task,
    loose_variants,
    make_instruction,
    score_response,
)
from nemo_gym.verify.ifeval import text as ifeval_text

SAMPLE = Path(__file__).parent / "data" / "ifeval_sample.jsonl"
ROWS = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]

# Valid arguments for every instruction that takes any (used by the property tests).
VALID_KWARGS: dict[str, dict[str, Any]] = {
    "keywords:existence": {"keywords": ["river", "bridge"]},
    "keywords:frequency": {"keyword": "tea", "frequency": 3, "relation": "at least"},
    "keywords:forbidden_words": {"forbidden_words": ["good", "bad"]},
    "keywords:letter_frequency": {"letter": "z", "let_frequency": 3, "let_relation": "at least"},
    "language:response_language": {"language": "fr"},
    "length_constraints:number_sentences": {"num_sentences": 3, "relation": "less than"},
    "length_constraints:number_paragraphs": {"num_paragraphs": 3},
    "length_constraints:number_words": {"num_words": 10, "relation": "less than"},
    "length_constraints:nth_paragraph_first_word": {
        "num_paragraphs": 2,
        "nth_paragraph": 2,
        "first_word": "however",
    },
    "detectable_content:number_placeholders": {"num_placeholders": 2},
    "detectable_content:postscript": {"postscript_marker": "P.S."},
    "detectable_format:number_bullet_lists": {"num_bullets": 3},
    "detectable_format:number_highlighted_sections": {"num_highlights": 2},
    "detectable_format:multiple_sections": {"section_spliter": "SECTION", "num_sections": 2},
    "combination:repeat_prompt": {"prompt_to_repeat": "Write a haiku about rain."},
    "startend:end_checker": {"end_phrase": "Any other questions?"},
    "change_case:capital_word_frequency": {"capital_frequency": 3, "capital_relation": "at least"},
}
CHECKERS = {iid: make_instruction(iid, VALID_KWARGS.get(iid, {})) for iid in INSTRUCTIONS}


def trajectory(text: str) -> Trajectory:
    return Trajectory(messages=[Message.user("prompt"), Message.assistant(text)])


# --- the sample file -----------------------------------------------------------------------


def test_registry_has_the_25_ifeval_ids() -> None:
    assert len(INSTRUCTIONS) == 25
    assert {"punctuation:no_comma", "combination:two_responses"} <= set(INSTRUCTIONS)


def test_sample_covers_every_checker_with_a_pass_and_a_fail() -> None:
    assert len(ROWS) >= 30
    passed: set[str] = set()
    failed: set[str] = set()
    for row in ROWS:
        for iid, ok in zip(row["instruction_id_list"], row["expected_strict"], strict=True):
            (passed if ok else failed).add(iid)
    assert passed == set(INSTRUCTIONS)
    assert failed == set(INSTRUCTIONS)
    assert any(row["expected_strict"] != row["expected_loose"] for row in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['key']}-{r['why']}" for r in ROWS])
def test_sample_row(row: dict[str, Any]) -> None:
    score = score_response(row["response"], row["instruction_id_list"], row["kwargs"])
    assert [r.strict for r in score.results] == row["expected_strict"], row["why"]
    assert [r.loose for r in score.results] == row["expected_loose"], row["why"]
    assert [r.instruction_id for r in score.results] == row["instruction_id_list"]


# --- text utilities --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello world. This is Dr. Smith! Is it? Yes...", 4),
        ("Title\n\nThe body is here. And here", 2),
        ("1. Apples are red.\n2. Pears are green.", 2),
        ('He said "no." Then he left.', 2),
        ("It was 1990. Then J. K. Rowling wrote it.", 2),
        ("I lived in the U.S. It was fun.", 2),
        ("We saw cats, dogs, etc. and more.", 1),
        ("Wait... what? Ok... Then we go.", 3),
        ("Pi is 3.14 exactly", 1),
        ("", 0),
        (" \n\t ", 0),
    ],
)
def test_count_sentences(text: str, expected: int) -> None:
    assert ifeval_text.count_sentences(text) == expected
    assert len(ifeval_text.split_sentences(text)) == expected


def test_split_sentences_keeps_the_text() -> None:
    assert ifeval_text.split_sentences('One. "Two?" Three!') == ["One.", '"Two?"', "Three!"]


def test_words_and_capitals() -> None:
    assert ifeval_text.count_words("Short answer: yes, it's 42.") == 6  # \w+ runs
    assert ifeval_text.word_tokens("I'M DON'T WELL-KNOWN (A) HELLO, U.S. it's") == [
        "I",
        "'M",
        "DO",
        "N'T",
        "WELL-KNOWN",
        "A",
        "HELLO",
        "U.S.",
        "it",
        "'s",
    ]
    text = "I'M SURE, DON'T Worry 42 it's OK"
    expected = sum(w.isupper() for w in ifeval_text.word_tokens(text))
    assert ifeval_text.count_capital_words(text) == expected == 6


def test_detect_language_is_deterministic_and_thread_safe() -> None:
    text = "Ceci est une phrase en français, assez longue pour être détectée sans doute."
    results: list[str | None] = []

    def run() -> None:
        results.extend(ifeval_text.detect_language(text) for _ in range(3))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == ["fr"] * 12
    assert ifeval_text.detect_language("12345 !!! ...") is None


def test_missing_langdetect_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ifeval_text, "_factory", None)
    monkeypatch.setitem(sys.modules, "langdetect.detector_factory", None)
    monkeypatch.setitem(sys.modules, "langdetect.lang_detect_exception", None)
    with pytest.raises(MissingDependency) as caught:
        ifeval_text.detect_language("hello")
    assert caught.value.extra == "ifeval"


# --- registry validation ---------------------------------------------------------------------


AT_LEAST = "at least"


def test_unknown_instruction_id() -> None:
    with pytest.raises(VerifierError, match="keywords:exists") as caught:
        make_instruction("keywords:exists", {})
    assert caught.value.code == "ifeval_unknown_instruction"


@pytest.mark.parametrize(
    ("iid", "kwargs", "field"),
    [
        ("keywords:existence", {}, "keywords"),
        ("keywords:existence", {"keywords": "river"}, "keywords"),
        ("keywords:existence", {"keywords": ["river", ""]}, "keywords"),
        (
            "keywords:frequency",
            {"keyword": "a", "frequency": "3", "relation": "at least"},
            "frequency",
        ),
        ("keywords:frequency", {"keyword": "a", "frequency": 3, "relation": "at most"}, "relation"),
        (
            "keywords:frequency",
            {"keyword": "a", "frequency": -1, "relation": "at least"},
            "frequency",
        ),
        (
            "keywords:letter_frequency",
            {"letter": "ab", "let_frequency": 1, "let_relation": "at least"},
            "letter",
        ),
        ("language:response_language", {"language": "klingon"}, "language"),
        (
            "length_constraints:number_words",
            {"num_words": True, "relation": "at least"},
            "num_words",
        ),
        (
            "length_constraints:nth_paragraph_first_word",
            {"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "so"},
            "nth_paragraph",
        ),
        ("punctuation:no_comma", {"num_words": 3}, "num_words"),
        ("punctuation:no_comma", ["not", "a", "dict"], "kwargs"),
    ],
)
def test_bad_kwargs_name_the_id_and_field(iid: str, kwargs: Any, field: str) -> None:
    with pytest.raises(VerifierError) as caught:
        make_instruction(iid, kwargs)
    assert iid in str(caught.value) and repr(field) in str(caught.value)
    assert caught.value.code == "ifeval_bad_kwargs"


def test_nulls_and_integral_floats_are_accepted() -> None:
    # Hugging Face rows list every argument, null where unused; pandas turns ints to floats.
    instruction = make_instruction(
        "length_constraints:number_words",
        {"num_words": 3.0, "relation": "at least", "keywords": None, "frequency": float("nan")},
    )
    assert instruction.kwargs == {"num_words": 3, "relation": "at least"}
    assert instruction("one two three") and not instruction("one two")


def test_row_shape_errors() -> None:
    with pytest.raises(VerifierError, match="2 entries for 1"):
        score_response("x", ["punctuation:no_comma"], [{}, {}])
    with pytest.raises(VerifierError, match="empty"):
        score_response("x", [], [])
    with pytest.raises(VerifierError, match="instruction_id_list"):
        score_response("x", "punctuation:no_comma", [{}])  # type: ignore[arg-type]
    assert score_response("x", ["punctuation:no_comma"], None).prompt_strict


# --- checker details that mirror IFEval's reference code ---------------------------------------


def test_checker_semantics() -> None:
    assert CHECKERS["keywords:existence"]("a RIVER under a bridge")
    assert make_instruction("keywords:existence", {"keywords": ["c++"]})("I like C++ a lot")
    assert not make_instruction("keywords:existence", {"keywords": ["c++"]})("I like C a lot")
    assert CHECKERS["detectable_format:title"]("<<a>> and more")
    assert not CHECKERS["detectable_format:title"]("<<>>")
    assert not CHECKERS["detectable_format:title"]("<<a\n>>")
    placeholders = CHECKERS["detectable_content:number_placeholders"]
    assert placeholders("[a] [b]") and placeholders("[[a] x]") is False
    assert placeholders("[a\n[b] [c]")
    assert CHECKERS["detectable_format:number_bullet_lists"]("\n\n  * a\n\t- b\n* c")
    assert CHECKERS["length_constraints:number_paragraphs"]("***\na\n***\nb\n***\nc\n***")
    assert CHECKERS["detectable_format:json_format"]("```JSON\n[1, 2]\n```")
    assert not CHECKERS["detectable_format:json_format"]("[" * 100_000)
    assert CHECKERS["combination:two_responses"]("******a******b")
    assert not CHECKERS["combination:two_responses"]("a******b******c")
    lowercase = make_instruction("change_case:english_lowercase")
    assert lowercase("12345 !!!") is False  # not lowercase: has no cased letter at all


def test_loose_variants_are_ifevals_eight() -> None:
    assert loose_variants("*first*\nmiddle *x*\nlast") == [
        "*first*\nmiddle *x*\nlast",
        "first\nmiddle x\nlast",
        "middle *x*\nlast",
        "*first*\nmiddle *x*",
        "middle *x*",
        "middle x\nlast",
        "first\nmiddle x",
        "middle x",
    ]


# --- property tests: never crash, always a bool, fast on 1 MB ------------------------------


@pytest.mark.parametrize("iid", sorted(INSTRUCTIONS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=st.text(max_size=300))
def test_every_checker_returns_a_bool_on_any_text(iid: str, response: str) -> None:
    assert isinstance(CHECKERS[iid](response), bool)


@settings(max_examples=30, deadline=None)
@given(
    response=st.text(alphabet=st.sampled_from(list("ab .?!*[]<>-\n\"'{}1#SECTION,")), max_size=400)
)
def test_scoring_on_markup_heavy_text(response: str) -> None:
    score = score_response(response, ["detectable_format:title"], [{}])
    result = score.results[0]
    assert isinstance(result.strict, bool) and isinstance(result.loose, bool)
    assert result.loose or not result.strict  # strict implies loose
    assert ifeval_text.count_sentences(response) == len(ifeval_text.split_sentences(response))


def _reference_counts(response: str) -> tuple[int, bool, int, bool]:
    """IFEval's own regexes (quadratic on some 1 MB inputs, fine on short text)."""
    placeholders = len(re.findall(r"\[.*?\]", response))
    title = any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", response))
    bullets = len(re.findall(r"^\s*\*[^\*].*$", response, flags=re.MULTILINE)) + len(
        re.findall(r"^\s*-.*$", response, flags=re.MULTILINE)
    )
    postscript = bool(re.findall(r"\s*p\.\s?s\..*$", response.lower(), flags=re.MULTILINE))
    return placeholders, title, bullets, postscript


@settings(max_examples=200, deadline=None)
@given(response=st.text(alphabet=st.sampled_from(list("ab []<>*-\n\t.pPsS")), max_size=60))
def test_linear_rewrites_match_ifevals_regexes(response: str) -> None:
    placeholders, title, bullets, postscript = _reference_counts(response)
    for count in range(4):
        check = make_instruction(
            "detectable_content:number_placeholders", {"num_placeholders": count}
        )
        assert check(response) == (placeholders >= count)
        check = make_instruction("detectable_format:number_bullet_lists", {"num_bullets": count})
        assert check(response) == (bullets == count)
    assert CHECKERS["detectable_format:title"](response) == title
    assert CHECKERS["detectable_content:postscript"](response) == postscript


ONE_MB = 1 << 20
_PROSE = "The QUICK fox. Dr. Smith [x] *hi* P.S. SECTION 1 <<t>> ****** \n* a\n- b\n\n, "
BIG_INPUTS = {
    "prose": (_PROSE * (ONE_MB // len(_PROSE) + 1))[:ONE_MB],
    "newlines": "\n" * ONE_MB,
    "open_brackets": "[" * ONE_MB,
    "angles": "<" * ONE_MB + ">>",
    "stars": "*" * ONE_MB,
    "periods": ". " * (ONE_MB // 2),
    "list_markers": "1. " * (ONE_MB // 3),
}


@pytest.mark.timeout(600)
def test_every_checker_is_linear_on_one_megabyte() -> None:
    # A quadratic pattern would take hours on 1 MB; a linear one takes well under a
    # second here. The bound is loose because CI shares its cores.
    for name, response in BIG_INPUTS.items():
        for iid, check in CHECKERS.items():
            started = time.perf_counter()
            assert isinstance(check(response), bool)
            elapsed = time.perf_counter() - started
            assert elapsed < 20, f"{iid} took {elapsed:.1f}s on 1 MB of {name}"


# --- the verifier --------------------------------------------------------------------------------

TASK = Task(
    prompt="Describe a sunset without commas, mentioning the sunset.",
    metadata={
        "instruction_id_list": ["punctuation:no_comma", "keywords:existence"],
        "kwargs": [{}, {"keywords": ["sunset"]}],
    },
)


async def test_verifier_prompt_and_instruction_rewards() -> None:
    half = trajectory("Red, orange and gold at sunset.")
    rewards = await IFEvalVerifier().verify(TASK, half)
    assert rewards.reward == 0.0
    assert rewards.components == {
        "prompt_strict": 0.0,
        "instruction_strict": 0.5,
        "prompt_loose": 0.0,
        "instruction_loose": 0.5,
    }
    assert rewards.metadata["instructions"] == [
        {"instruction_id": "punctuation:no_comma", "strict": False, "loose": False},
        {"instruction_id": "keywords:existence", "strict": True, "loose": True},
    ]
    fraction = await IFEvalVerifier(reward="instruction").verify(TASK, half)
    assert fraction.reward == 0.5
    full = await IFEvalVerifier().verify(TASK, trajectory("Red and gold at sunset."))
    assert full.reward == 1.0


async def test_verifier_loose_mode() -> None:
    task = Task(prompt="Quote it.", metadata={"instruction_id_list": ["startend:quotation"]})
    response = trajectory('Sure, here it is:\n"A quoted answer."')
    assert (await IFEvalVerifier(mode="strict").verify(task, response)).reward == 0.0
    assert (await IFEvalVerifier(mode="loose").verify(task, response)).reward == 1.0


async def test_verifier_bad_task_raises_verifier_error() -> None:
    with pytest.raises(VerifierError, match="instruction_id_list"):
        await IFEvalVerifier().verify(Task(prompt="x"), trajectory("y"))
    bad = Task(prompt="x", metadata={"instruction_id_list": ["nope:nope"], "kwargs": [{}]})
    with pytest.raises(VerifierError, match="nope:nope"):
        await IFEvalVerifier().verify(bad, trajectory("y"))
    with pytest.raises(ValueError, match="mode"):
        IFEvalVerifier(mode="lenient")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reward"):
        IFEvalVerifier(reward="task")  # type: ignore[arg-type]


async def test_sample_rows_through_tasks_and_metrics() -> None:
    verifier = IFEvalVerifier()
    results: list[Rewards | None] = []
    for row in ROWS:
        task = ifeval_task(row)
        assert task.id == str(row["key"])
        results.append(await verifier.verify(task, trajectory(row["response"])))
    results.append(None)  # a failed rollout is skipped, not scored 0
    metrics = ifeval_metrics(results, per_instruction=True)
    n_instructions = sum(len(row["instruction_id_list"]) for row in ROWS)
    strict_hits = sum(sum(row["expected_strict"]) for row in ROWS)
    assert metrics["n_prompts"] == len(ROWS)
    assert metrics["n_skipped"] == 1
    assert metrics["n_instructions"] == n_instructions
    assert metrics["instruction_strict"] == pytest.approx(strict_hits / n_instructions)
    assert metrics["prompt_strict"] == pytest.approx(
        sum(all(row["expected_strict"]) for row in ROWS) / len(ROWS)
    )
    assert metrics["prompt_loose"] >= metrics["prompt_strict"]
    assert "punctuation:no_comma/loose" in metrics


def test_metrics_pool_instructions_over_prompts() -> None:
    # IFEval's instruction-level accuracy pools all instructions: (1 + 0 + 0) / 3, not the
    # mean of per-prompt fractions ((1 + 0) / 2).
    def rewards(*followed: bool) -> Rewards:
        results = [{"instruction_id": "a:b", "strict": f, "loose": True} for f in followed]
        return Rewards(reward=0.0, metadata={"instructions": results})

    metrics = ifeval_metrics([rewards(True), rewards(False, False)])
    assert metrics["instruction_strict"] == pytest.approx(1 / 3)
    assert metrics["prompt_strict"] == 0.5
    assert metrics["instruction_loose"] == 1.0
    with pytest.raises(ValueError, match="no IFEval results"):
        ifeval_metrics([None])
    with pytest.raises(ValueError, match="IFEvalVerifier"):
        ifeval_metrics([Rewards(reward=1.0)])


def test_ifeval_task_validates_rows() -> None:
    with pytest.raises(VerifierError, match="prompt"):
        ifeval_task({"instruction_id_list": ["punctuation:no_comma"]})
    with pytest.raises(VerifierError, match="'num_words'"):
        ifeval_task(
            {
                "prompt": "p",
                "instruction_id_list": ["length_constraints:number_words"],
                "kwargs": [{"num_words": "ten", "relation": "at least"}],
            }
        )


async def test_a_reply_that_only_repeats_the_prompt_follows_nothing() -> None:
    import nemo_gym as gym
    from nemo_gym.verify.ifeval import IFEvalVerifier

    prompt = (
        "Name a fruit and say why you like it. "
        "The last word of your response should be the word summer."
    )
    task = gym.Task(
        prompt=prompt,
        metadata={
            "instruction_id_list": ["keywords:existence"],
            "kwargs": [{"keywords": ["fruit", "summer"]}],
        },
    )
    echoed = await gym.testing.verify(IFEvalVerifier(), task=task, response=prompt)
    assert echoed.reward == 0.0 and echoed.metadata["reason"] == "the reply only repeats the prompt"
    own = "A mango: its fruit tastes of summer."
    assert (await gym.testing.verify(IFEvalVerifier(), task=task, response=own)).reward == 1.0
    repeated = f"{prompt}\n\nA mango: its fruit tastes of summer."
    assert (await gym.testing.verify(IFEvalVerifier(), task=task, response=repeated)).reward == 1.0
