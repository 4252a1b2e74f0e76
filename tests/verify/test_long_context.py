"""Long-context scoring: RULER matches, node-set F1, MRCR's prefix-gated similarity, and
the penalty for reasoning copied from the prompt."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.records import Message
from nemo_gym.verify.long_context import (
    NodeSetF1,
    PenalizeCopying,
    ReferenceMatch,
    SequenceRatio,
    copied_share,
    parse_final_list,
    word_error_rate,
)

_nodes = st.lists(st.from_regex(r"[0-9a-f]{6}", fullmatch=True), max_size=6, unique=True)


@settings(max_examples=80, deadline=None)
@given(_nodes, st.booleans())
def test_final_lists_round_trip(nodes: list[str], quoted: bool) -> None:
    shown = ", ".join(f'"{n}"' if quoted else n for n in nodes)
    assert parse_final_list(f"reasoning\nFinal Answer: [{shown}]") == nodes
    assert parse_final_list(f"Final Answer: [{shown}]\nmore text") is None  # the last line only


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="ab c", max_size=30), st.text(alphabet="ab c", min_size=1, max_size=30))
def test_word_error_rate(hypothesis: str, reference: str) -> None:
    if reference.split():
        assert word_error_rate(reference, reference) == 0.0
        assert word_error_rate(hypothesis, reference) >= 0.0


async def test_reference_matches() -> None:
    all_ = await gym.testing.verify(
        ReferenceMatch("all"), prompt="q", answer=["AA", "BB"], response="aa and cc"
    )
    any_ = await gym.testing.verify(
        ReferenceMatch("any"), prompt="q", answer=["AA", "BB"], response="aa"
    )
    soft = await gym.testing.verify(
        ReferenceMatch("all", soft=True), prompt="q", answer=["a b c d"], response="a b c x"
    )
    far = await gym.testing.verify(
        ReferenceMatch("all", soft=True), prompt="q", answer=["a"], response="x y z w v"
    )
    per_task = await gym.testing.verify(
        ReferenceMatch("all"),
        prompt="q",
        answer=["AA", "BB"],
        metadata={"match": "any"},
        response="aa",
    )
    assert (all_.reward, any_.reward, soft.reward, per_task.reward) == (0.5, 1.0, 0.75, 1.0)
    assert far.reward == 0.0  # 1 - WER is below 0: clamped, never a negative reward


async def test_node_sets() -> None:
    f1 = NodeSetF1()
    assert (
        await gym.testing.verify(f1, prompt="q", answer=["a", "b"], response="Final Answer: [a, c]")
    ).reward == 0.5
    assert (
        await gym.testing.verify(f1, prompt="q", answer=[], response="Final Answer: []")
    ).reward == 1.0
    assert (await gym.testing.verify(f1, prompt="q", answer='["a"]', response="a")).reward == 0.0


async def test_mrcr_needs_the_prefix() -> None:
    task = gym.Task(prompt="q", answer="XYZpoem text", metadata={"prefix": "XYZ"})
    good = await gym.testing.verify(SequenceRatio(), task=task, response="XYZpoem text")
    missing = await gym.testing.verify(SequenceRatio(), task=task, response="poem text")
    assert (good.reward, missing.reward) == (1.0, 0.0)


async def test_copied_reasoning_is_penalised() -> None:
    source = " ".join(f"word{i}" for i in range(40))
    assert copied_share(source, source, n=16) == 1.0 and copied_share("short", source) == 0.0
    verifier = PenalizeCopying(ReferenceMatch("all"), n=4)
    task = gym.Task(prompt=source, answer=["word3"])
    copied = Message.assistant("word3", reasoning=" ".join(f"word{i}" for i in range(8)))
    own = Message.assistant("word3", reasoning="I look for the third word and find it.")
    assert (await gym.testing.verify(verifier, task=task, response=copied)).reward == 0.0
    assert (await gym.testing.verify(verifier, task=task, response=own)).reward == 1.0
    with pytest.raises(gym.errors.ConfigError):
        PenalizeCopying(ReferenceMatch(), rule="halve")  # type: ignore[arg-type]


async def test_echoing_the_context_finds_no_reference() -> None:
    filler = " ".join(f"filler{i} sentence about nothing" for i in range(40))
    prompt = f"{filler} The special magic number is: 4829103. {filler}\nWhat is the number?"
    task = gym.Task(prompt=prompt, answer=["4829103"])
    echoed = await gym.testing.verify(ReferenceMatch("all"), task=task, response=prompt)
    honest = await gym.testing.verify(
        ReferenceMatch("all"), task=task, response="The special magic number is 4829103."
    )
    raw = await gym.testing.verify(
        ReferenceMatch("all", copy_span=None), task=task, response=prompt
    )
    assert (echoed.reward, honest.reward, raw.reward) == (0.0, 1.0, 1.0)


async def test_hedged_candidates_score_zero() -> None:
    task = gym.Task(prompt="q", answer=["4829103"])
    hedge = await gym.testing.verify(
        ReferenceMatch("all"), task=task, response="It is 4829102, 4829103 or 4829104."
    )
    committed = await gym.testing.verify(
        ReferenceMatch("all"), task=task, response="Line 2019 says it: 4829103, in 2.5 s."
    )
    assert hedge.reward == 0.0 and "candidates" in hedge.metadata["reason"]
    assert committed.reward == 1.0  # other numbers of another shape are no candidates
    uuids = ["6f1c0c2e-8a47-4f4e-9b43-1d2f0a6b7c8d", "0b0e5d8a-3c4f-4d1e-8f2a-9c7b6a5d4e3f"]
    task = gym.Task(prompt="q", answer=uuids)
    both = await gym.testing.verify(ReferenceMatch("all"), task=task, response=" ".join(uuids))
    extra = [*uuids, "11111111-2222-4333-8444-555555555555"]
    hedge = await gym.testing.verify(ReferenceMatch("all"), task=task, response=" ".join(extra))
    assert (both.reward, hedge.reward) == (1.0, 0.0)
