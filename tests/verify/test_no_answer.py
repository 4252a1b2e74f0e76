"""The no-answer record: every extracting verifier says "extracted nothing" with
`metadata["extracted_answer"] = None`, distinct from an answer that is wrong.

The run metrics count ok rollouts with that None as the no-answer rate, so a verifier
that forgot the key, or wrote "" or [] for nothing, would make the rate lie.
"""

from __future__ import annotations

import pytest

import nemo_gym as gym
from nemo_gym.envs.arithmetic import verify_integer
from nemo_gym.records import Message, Task, ToolCall, Trajectory
from nemo_gym.verify.code import CodeVerifier
from nemo_gym.verify.math import MathVerifier
from nemo_gym.verify.mcqa import MultipleChoiceVerifier
from nemo_gym.verify.sql import SQLVerifier
from nemo_gym.verify.structured import JSONMatch, ToolCallMatch
from nemo_gym.verify.text import ExactMatch, NormalizedMatch, NumericMatch, RegexMatch, TokenF1


class _NoPool:
    async def call(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the slow path was taken")


def said(text: str | None, *, calls: tuple[ToolCall, ...] = ()) -> Trajectory:
    return Trajectory(messages=[Message.user("q"), Message.assistant(text, tool_calls=calls)])


_SQL_TASK = Task(
    prompt="q",
    answer="SELECT 1",
    metadata={"db_setup": "CREATE TABLE t(x INTEGER);"},
)
_CODE_TASK = Task(prompt="q", metadata={"tests": [{"input": "1\n", "output": "1\n"}]})
_CALLS = Task(prompt="q", answer=[{"name": "f", "arguments": {"x": 1}}])

# (verifier, task, a reply with no answer, a reply with a wrong answer)
CASES = [
    ("math", MathVerifier(pool=_NoPool()), Task(prompt="q", answer="5"),  # type: ignore[arg-type]
     said("I could not solve it."), said("The answer is 6.")),
    ("math blank box", MathVerifier(pool=_NoPool()), Task(prompt="q", answer="5"),  # type: ignore[arg-type]
     said("\\boxed{\\$}"), said("\\boxed{6}")),
    ("mcqa", MultipleChoiceVerifier(), Task(prompt="q", answer="C"),
     said("Neither (A) nor (B) is correct."), said("Answer: B")),
    ("numeric", NumericMatch(), Task(prompt="q", answer="5"), said("no idea"), said("It is 6.")),
    ("exact", ExactMatch(), Task(prompt="q", answer="Paris"), said("   "), said("Lyon")),
    ("exact extract", ExactMatch(extract=lambda t: t.partition("A: ")[2] or None),
     Task(prompt="q", answer="Paris"), said("Lyon?"), said("A: Lyon")),
    ("normalized", NormalizedMatch(), Task(prompt="q", answer="Paris"), said(""), said("Lyon")),
    ("token f1", TokenF1(), Task(prompt="q", answer="the cat"), said(""), said("a dog")),
    ("regex", RegexMatch(r"Final: (\w+)"), Task(prompt="q", answer="blue"), said("blue"),
     said("Final: red")),
    ("json", JSONMatch(), Task(prompt="q", answer={"a": 1}), said("no json here"),
     said('{"a": 2}')),
    ("tool calls", ToolCallMatch(), _CALLS, said("I will not call anything."),
     said(None, calls=(ToolCall(id="1", name="f", arguments='{"x": 2}'),))),
    ("sql", SQLVerifier(), _SQL_TASK, said("```sql\n\n```"), said("SELECT 2")),
    ("code", CodeVerifier(), _CODE_TASK, said(""), None),  # running code needs a sandbox
    ("arithmetic", verify_integer, Task(prompt="q", answer="5"), said("I am not sure."),
     said("\\boxed{\\frac{1}{2}}")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("verifier", "task", "nothing", "wrong"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_no_answer_is_none_and_a_wrong_answer_is_not(
    verifier: object, task: Task, nothing: Trajectory, wrong: Trajectory | None
) -> None:
    verify = getattr(verifier, "verify", verifier)  # a Verifier, or a verify function
    empty = await verify(task, nothing)
    assert empty.reward == 0.0
    assert "extracted_answer" in empty.metadata and empty.metadata["extracted_answer"] is None
    if wrong is not None:
        scored = await verify(task, wrong)
        assert scored.reward == 0.0
        assert scored.metadata.get("extracted_answer") is not None


async def test_a_json_null_is_an_answer() -> None:
    result = await JSONMatch().verify(Task(prompt="q", answer={"a": 1}), said("null"))
    assert result.reward == 0.0 and result.metadata["extracted_answer"] == "null"


async def test_no_calls_expected_and_none_made_is_an_answer() -> None:
    result = await ToolCallMatch().verify(Task(prompt="q", answer=[]), said("Nothing to do."))
    assert result.reward == 1.0 and result.metadata["extracted_answer"] == []


async def test_the_arithmetic_env_records_what_it_read() -> None:
    env = gym.make("arithmetic")
    task = next(iter(env.tasks(limit=1)))
    right = await verify_integer(task, said(f"<think>\\boxed{{0}}</think>\\boxed{{{task.answer}}}"))
    assert right.reward == 1.0 and right.metadata["extracted_answer"] == task.answer
    assert right.metadata["value"] == int(task.answer)
