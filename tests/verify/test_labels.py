"""Word labels ("both of them", "a red cube"): one label or none, never a guess."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.verify.gates import RequireBoxed
from nemo_gym.verify.labels import LabelMatch, extract_label_answer, resolve_label

LABELS = ["the small red cube", "a big blue ball", "both of them", "none of them"]
ALIASES = {"both of them": ["both"], "none of them": ["neither"]}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(LABELS), st.text(alphabet="I think so .\n", max_size=40))
def test_a_stated_label_is_found(label: str, prose: str) -> None:
    assert (
        resolve_label(
            extract_label_answer(f"{prose}\nFinal answer: {label.upper()}."), LABELS, ALIASES
        )
        == label
    )


def test_echoing_two_labels_resolves_to_none() -> None:
    assert resolve_label("the small red cube or a big blue ball", LABELS) is None
    assert resolve_label("neither", LABELS, ALIASES) == "none of them"
    assert resolve_label("the small red cube, I am sure", LABELS) == "the small red cube"
    assert extract_label_answer("line one\nlast line") == "last line"


async def test_label_match_scores_the_gold() -> None:
    task = gym.Task(
        prompt="q", answer="both of them", metadata={"labels": LABELS, "aliases": ALIASES}
    )
    assert (
        await gym.testing.verify(LabelMatch(), task=task, response="Final answer: both")
    ).reward == 1.0
    assert (
        await gym.testing.verify(LabelMatch(), task=task, response="Final answer: a big blue ball")
    ).reward == 0.0


async def test_require_boxed_gates_all_tasks_or_flagged_ones() -> None:
    async def anything(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return 1.0

    always, flagged = RequireBoxed(anything), RequireBoxed(anything, always=False)
    plain = gym.Task(prompt="q")
    strict = gym.Task(prompt="q", metadata={"require_boxed": True})
    assert (await gym.testing.verify(always, task=plain, response="42")).reward == 0.0
    assert (await gym.testing.verify(always, task=plain, response="\\boxed{42}")).reward == 1.0
    assert (await gym.testing.verify(flagged, task=plain, response="42")).reward == 1.0
    assert (await gym.testing.verify(flagged, task=strict, response="42")).reward == 0.0
