"""Tests for the multiple-choice extractor and verifier."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Message, Task, Trajectory
from nemo_gym.verify.extract import extract_choice, extract_choice_details
from nemo_gym.verify.mcqa import MultipleChoiceVerifier


def _load(name: str) -> list[dict]:
    path = Path(__file__).parent / "data" / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


CORPUS = _load("mcqa_outputs.jsonl")
ADVERSARIAL = _load("mcqa_adversarial.jsonl")


def reply(text: str) -> Trajectory:
    return Trajectory(messages=[Message.user("q"), Message.assistant(text)])


def test_corpus_is_large_and_has_traps() -> None:
    assert len(CORPUS) >= 40
    assert sum(row["expected"] is None for row in CORPUS) >= 10
    assert sum(row["expected"] != row["expected_strict"] for row in CORPUS) >= 5


@pytest.mark.parametrize("row", CORPUS, ids=[row["note"] for row in CORPUS])
@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
def test_corpus(row: dict, strict: bool) -> None:
    expected = row["expected_strict"] if strict else row["expected"]
    got = extract_choice(
        row["text"], letters=row["letters"], strict=strict, options=row.get("options")
    )
    assert got == expected, extract_choice_details(
        row["text"], letters=row["letters"], strict=strict, options=row.get("options")
    )


def test_the_adversarial_corpus_covers_every_class() -> None:
    assert len(ADVERSARIAL) >= 250
    notes = {row["note"] for row in ADVERSARIAL}
    for needed in ("neither nor", "none of a range", "two boxes adjacent", "markdown table",
                   "json object", "final line in math", "not X; Y is correct", "answer tags",
                   "letter with its value", "bold letter opening", "committing closing",
                   "per-option verdicts", "echo of the options", "revised boxes",
                   "boxes with no commitment", "other languages", "option text alone"):  # fmt: skip
        assert needed in notes, needed
    assert sum(row["expected"] is None for row in ADVERSARIAL) >= 60


@pytest.mark.parametrize(
    "row", ADVERSARIAL, ids=[f"{i}-{r['note']}" for i, r in enumerate(ADVERSARIAL)]
)
@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
def test_adversarial_corpus(row: dict, strict: bool) -> None:
    expected = row["expected_strict"] if strict else row["expected"]
    options = row.get("options")
    got = extract_choice(row["text"], letters=row["letters"], strict=strict, options=options)
    assert got == expected, extract_choice_details(
        row["text"], letters=row["letters"], strict=strict, options=options
    )


# Properties of each class: any letters, any reasoning before them.
_LETTERS = st.sampled_from(["ABCD", "ABCDE", "ABCDEFGHIJ"])
_REASONING = st.text(
    alphabet=st.sampled_from("abcdefghkmnopqrstuvwxyz .,\n0123456789"), max_size=120
).map(lambda t: "Reasoning: " + t)  # a first line that is no lone letter
_prop = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))


@_prop
@given(_LETTERS, _REASONING, st.data())
def test_a_negated_letter_is_never_the_answer(letters: str, before: str, data) -> None:
    a, b = data.draw(st.permutations(letters))[:2]
    form = data.draw(
        st.sampled_from(
            [
                "Neither ({a}) nor ({b}) is correct.",
                "Not {a}, and not {b} either.",
                "Every option except {a} is right.",
                "The answer is not {a}.",
                "It cannot be ({a}), nor is it ({b}).",
            ]
        )
    )
    text = before + "\n" + form.format(a=a, b=b)
    assert extract_choice(text, letters=letters) not in (a, b)


@_prop
@given(_LETTERS, _REASONING, st.sampled_from(["–", "-", "—", " to ", " through "]), st.data())
def test_a_range_end_is_never_the_answer(letters: str, before: str, dash: str, data) -> None:
    first, last = letters[0], letters[-1]
    form = data.draw(
        st.sampled_from(
            [
                "None of the options ({f}{d}{l}) is correct.",
                "None of ({f}){d}({l}) is right.",
                "The answer is ({f}){d}({l}).",
                "Answer: {f}{d}{l}",
            ]
        )
    )
    text = before + "\n" + form.format(f=first, l=last, d=dash)
    assert extract_choice(text, letters=letters) is None


@_prop
@given(_LETTERS, _REASONING, st.data())
def test_a_clause_after_a_negation_still_answers(letters: str, before: str, data) -> None:
    a, b = data.draw(st.permutations(letters))[:2]
    form = data.draw(
        st.sampled_from(
            [
                "Not {a}; {b} is correct.",
                "It is not ({a}). ({b}) is the correct answer.",
                "We rule out {a}. So {b} is correct.",
                "Neither {a} nor that. Answer: {b}",
                "The answer is not ({a}) but ({b}).",
            ]
        )
    )
    assert extract_choice(before + "\n" + form.format(a=a, b=b), letters=letters) == b


@_prop
@given(_LETTERS, _REASONING, st.data())
def test_boxes_naming_different_letters_are_ambiguous(letters: str, before: str, data) -> None:
    a, b = data.draw(st.permutations(letters))[:2]
    gap = data.draw(st.sampled_from(["", " or ", " or maybe ", "\n\n", " and then ", ", "]))
    text = f"{before}\n\n\\boxed{{{a}}}{gap}\\boxed{{{b}}}"
    found = extract_choice_details(text, letters=letters)
    assert found.letter is None and "ambiguous" in (found.reason or "")
    assert extract_choice(f"{before}\n\n\\boxed{{{a}}}{gap}\\boxed{{{a}}}", letters=letters) == a


@_prop
@given(_LETTERS, _REASONING, st.data())
def test_a_revision_commits_to_the_later_box(letters: str, before: str, data) -> None:
    a, b = data.draw(st.permutations(letters))[:2]
    form = data.draw(
        st.sampled_from(
            [
                "At first I thought \\boxed{{{a}}}, but rechecking, the answer is \\boxed{{{b}}}.",
                "\\boxed{{{a}}}. Actually, \\boxed{{{b}}}.",
                "\\boxed{{{a}}}\n\nWait, I misread the question. \\boxed{{{b}}}",
                "Initially \\boxed{{{a}}}; correcting the sign gives \\boxed{{{b}}}.",
                "<answer>{a}</answer>\nHold on, that was wrong.\n<answer>{b}</answer>",
            ]
        )
    )
    text = f"{before}\n\n" + form.format(a=a, b=b)
    assert extract_choice(text, letters=letters) == b
    assert extract_choice(text, letters=letters, strict=True) == b


@_prop
@given(_LETTERS, _REASONING, st.data(), st.booleans())
def test_carriers_tables_json_and_math(letters: str, before: str, data, lower: bool) -> None:
    a = data.draw(st.sampled_from(letters))
    shown = a.lower() if lower else a
    carrier = data.draw(
        st.sampled_from(
            [
                "| Final answer | {x} |",
                "| **Answer** | **{x}** |",
                "| Question | Answer |\n|---|---|\n| 1 | {x} |",
                '{{"answer": "{x}"}}',
                '```json\n{{"reasoning": "...", "answer": "({x})"}}\n```',
                '{{"final_answer": "{x}", "confidence": 0.7}}',
            ]
        )
    )
    text = before + "\n\n" + carrier.format(x=shown)
    assert extract_choice(text, letters=letters) == a
    assert extract_choice(text, letters=letters, strict=True) == a
    math_line = data.draw(
        st.sampled_from(
            ["$\\text{{({x})}}$", "$\\textbf{{{x}}}$", "\\(\\mathrm{{{x}}}\\)", "$({x})$"]
        )
    )
    assert extract_choice(before + "\n\n" + math_line.format(x=a), letters=letters) == a


def test_long_replies_stay_fast() -> None:
    long = (
        "Let's analyze each option. Option A is wrong because it ignores friction; "
        "neither B nor the options C-D hold. "
        * 15
        + "\n\n| Step | Result |\n|---|---|\n| Final answer | C |"
    )
    texts = [long, *(row["text"] for row in ADVERSARIAL)]
    start = time.perf_counter()
    for _ in range(10):
        for text in texts:
            extract_choice(text, letters="ABCDEFGHIJ")
    per_call = (time.perf_counter() - start) / (10 * len(texts))
    assert per_call < 2e-3  # ~20-50 us on an idle core (bench/verify.py); generous for CI


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: D", "D"),
        ("**Answer:** D", "D"),
        ("$D$ is my answer. The answer is $D$", "D"),
        ("(D)", "D"),
        (r"\boxed{D}", "D"),
        (r"\boxed{\text{E}}", "E"),
        (r"\boxed{\text{Answer: G}}", "G"),
        (r"\boxed{(D)}", "D"),
        ("the correct option is D", "D"),
        ("（Ｄ）", "D"),
        ("Ｄ", "D"),
        ("答案：Ｄ", "D"),
        ("The answer is K.", "K"),
        ("The answer is A or B", None),
        ("The answer is A/B", None),
        ("The answer is A and C", None),
        ("Option A is wrong because it is too large.", None),
    ],
)
def test_brief_forms(text: str, expected: str | None) -> None:
    assert extract_choice(text, letters="ABCDEFGHIJKL") == expected


def test_final_answer_wins_over_draft() -> None:
    text = "Answer: A\nHmm, I misread the units.\nAnswer: C"
    assert extract_choice(text) == "C"
    # a draft in a \boxed{} followed by a corrected statement
    assert extract_choice(r"First guess \boxed{B}. No: the answer is D.") == "D"


def test_strict_vs_lenient() -> None:
    assert extract_choice("After all that, B", strict=False) is None  # not a lone letter
    assert extract_choice("Reasoning...\n\nB", strict=False) == "B"
    assert extract_choice("Reasoning...\n\nB", strict=True) is None
    assert extract_choice("Reasoning...\n\nAnswer: B", strict=True) == "B"


def test_option_text_fallback_and_letters_win() -> None:
    options = ["red", "green", "blue", "yellow"]
    assert extract_choice("The answer is blue.", options=options) == "C"
    assert extract_choice("The answer is (B) blue.", options=options) == "B"
    assert extract_choice("The answer is blue.") is None  # no options given
    assert extract_choice("red or blue, hard to say", options=options) is None


def test_invalid_configuration() -> None:
    with pytest.raises(ConfigError):
        extract_choice("A", letters="abc")
    with pytest.raises(ConfigError):
        extract_choice("A", letters="AAB")
    with pytest.raises(ConfigError):
        extract_choice("A", letters="AB", options=["x", "y", "z"])


def test_details_say_why() -> None:
    assert "ambiguous" in (extract_choice_details("Answer: A or B").reason or "")
    assert "not an option" in (extract_choice_details("Answer: F").reason or "")
    assert extract_choice_details("Answer: C").method == "statement"
    assert extract_choice_details(r"\boxed{C}").method == "boxed"


async def test_verifier_scores_and_components() -> None:
    verifier = MultipleChoiceVerifier()
    task = Task(prompt="q", answer="C")
    good = await verifier.verify(task, reply("Answer: C"))
    assert good.reward == 1.0 and good.components == {"accuracy": 1.0, "format": 1.0}
    assert good.metadata["extracted_answer"] == "C"
    lenient = await verifier.verify(task, reply("Thinking...\n\nC"))
    assert lenient.reward == 1.0 and lenient.components["format"] == 0.0
    wrong = await verifier.verify(task, reply("Answer: B"))
    assert wrong.reward == 0.0 and wrong.metadata["extracted_answer"] == "B"
    none = await verifier.verify(task, reply("I don't know"))
    assert none.reward == 0.0 and none.metadata["reason"] == "no answer letter found"


async def test_verifier_weights_and_thinking() -> None:
    verifier = MultipleChoiceVerifier(weights={"accuracy": 1.0, "format": 0.5})
    task = Task(prompt="q", answer="(b)")
    result = await verifier.verify(task, reply("<think>The answer is A?</think>The answer is B"))
    assert result.reward == 1.5
    drafted = await verifier.verify(task, reply("<think>The answer is B</think>nothing"))
    assert drafted.reward == 0.0  # the reasoning block is not the answer


async def test_verifier_options_from_metadata() -> None:
    task = Task(
        prompt="q",
        answer="Canberra",
        metadata={"options": ["Sydney", "Melbourne", "Canberra", "Perth", "Hobart"]},
    )
    verifier = MultipleChoiceVerifier()
    assert (await verifier.verify(task, reply("The answer is E"))).metadata["gold"] == "C"
    assert (await verifier.verify(task, reply("The answer is Canberra."))).reward == 1.0
    assert (await verifier.verify(task, reply("The answer is (C)"))).reward == 1.0
    no_text = MultipleChoiceVerifier(match_option_text=False)
    assert (await no_text.verify(task, reply("The answer is Canberra."))).reward == 0.0
    mapping = Task(prompt="q", answer=1, metadata={"choices": {"A": "x", "B": "y"}})
    assert (await verifier.verify(mapping, reply("Answer: B"))).reward == 1.0


async def test_verifier_bad_gold_raises() -> None:
    verifier = MultipleChoiceVerifier()
    with pytest.raises(VerifierError):
        await verifier.verify(Task(prompt="q"), reply("A"))
    with pytest.raises(VerifierError):
        await verifier.verify(Task(prompt="q", answer="Z"), reply("A"))
    with pytest.raises(VerifierError):
        await verifier.verify(Task(prompt="q", answer=7), reply("A"))
    custom = MultipleChoiceVerifier(gold=lambda task: task.metadata["label"])
    task = Task(prompt="q", metadata={"label": "D"})
    assert (await custom.verify(task, reply("Answer: D"))).reward == 1.0


def test_speed_on_typical_outputs() -> None:
    texts = [row["text"] for row in CORPUS]
    long = (
        "Let's analyze each option. Option A is wrong because it ignores friction. "
        "Option B double counts the normal force. " * 12 + "\n\nTherefore, the answer is (C)."
    )
    texts.append(long)
    start = time.perf_counter()
    for _ in range(20):
        for text in texts:
            extract_choice(text, letters="ABCDEFGHIJ")
    per_call = (time.perf_counter() - start) / (20 * len(texts))
    # ~20-50 us on an idle core; generous here for loaded CI machines
    assert per_call < 2e-3


PATHOLOGICAL = [
    "a" * 1_000_000,
    "answer: " * 125_000,
    "(" * 1_000_000,
    "{" * 500_000 + "}" * 500_000,
    "\\boxed{" * 100_000,
    "A or " * 200_000,
    "Answer: (A) " * 80_000,
    " " * 1_000_000 + "D",
    "answer" + " " * 1_000_000 + "is D",
    "A is correct " * 80_000,
    "İ" * 500_000,
    "是" * 1_000_000,
]


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=lambda t: repr(t[:10]))
def test_megabyte_inputs_are_fast(text: str) -> None:
    start = time.perf_counter()
    extract_choice(text, options=["x", "y", "z", "w"])
    extract_choice(text, strict=True)
    assert time.perf_counter() - start < 2.0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400), st.booleans())
def test_arbitrary_unicode_never_crashes(text: str, strict: bool) -> None:
    got = extract_choice(text, letters="ABCDEFGHIJ", strict=strict, options=["α", "b b", "3"])
    assert got is None or got in "ABCDEFGHIJ"


_ALPHABET = st.sampled_from([*"ABCDabcd()[]{}$*:\\ \n.,/", "answer", "boxed", " is "])


@settings(max_examples=150, deadline=None)
@given(st.lists(_ALPHABET, max_size=200).map("".join))
def test_answer_like_soup_never_crashes(text: str) -> None:
    start = time.perf_counter()
    got = extract_choice(text)
    assert got is None or got in "ABCD"
    assert time.perf_counter() - start < 1.0


@settings(max_examples=60, deadline=None)
@given(st.sampled_from("ABCDEFGHIJ"), st.text(max_size=200))
def test_explicit_final_statement_after_any_text(letter: str, prefix: str) -> None:
    got = extract_choice(prefix + f"\n\nThe final answer is ({letter}).", letters="ABCDEFGHIJ")
    assert got == letter
