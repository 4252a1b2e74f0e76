"""The testing kit: `testing.verify`/`trajectory`, the pytest plugin, the fakes, strategies."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_gym import testing
from nemo_gym.records import Message, ModelResponse, Rewards, Task, ToolCall, Trajectory, Usage
from nemo_gym.testing import strategies as gst
from nemo_gym.testing.fakes import FakeOpenAI

pytest_plugins = ["pytester"]


# --- testing.verify / trajectory -------------------------------------------------------


async def exact(task: Task, trajectory: Trajectory) -> float:
    return float(trajectory.final_text.strip() == task.answer)


class Contains:
    """A class-based verifier that reports a component and the extracted answer."""

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        hit = str(task.answer) in trajectory.final_text
        return Rewards(reward=float(hit), components={"contains": float(hit)}, metadata={"n": 1})


async def test_verify_with_a_function_the_style_sketch() -> None:
    result = await testing.verify(exact, task=Task(prompt="2+2?", answer="4"), response="4")
    assert result == Rewards(reward=1.0)
    wrong = await testing.verify(exact, prompt="2+2?", answer="4", response="5")
    assert wrong.reward == 0.0


async def test_verify_with_a_class_and_a_message() -> None:
    reply = Message.assistant("It is 4.", reasoning="two and two")
    result = await testing.verify(Contains(), prompt="2+2?", answer=4, response=reply)
    assert result.reward == 1.0 and result.components == {"contains": 1.0}


async def test_verify_coerces_bools_and_sees_the_whole_trajectory() -> None:
    seen: list[tuple[Task, Trajectory]] = []

    async def check(task: Task, trajectory: Trajectory) -> bool:
        seen.append((task, trajectory))
        return trajectory.final_state == {"balance": 10}

    messages = [Message.system("Be terse."), Message.user("Deposit 10.")]
    result = await testing.verify(
        check, messages=messages, response="Done.", final_state={"balance": 10}
    )
    assert result.reward == 1.0
    [(task, trajectory)] = seen
    assert list(task.messages) == messages
    assert trajectory.messages == [*messages, Message.assistant("Done.")]


async def test_verify_rejects_bad_input_clearly() -> None:
    task = Task(prompt="2+2?", answer="4")
    with pytest.raises(ValueError, match="not both"):
        await testing.verify(exact, task=task, prompt="3+3?", response="4")
    with pytest.raises(ValueError, match="prompt or messages"):
        await testing.verify(exact, answer="4", response="4")
    with pytest.raises(ValueError, match="assistant"):
        await testing.verify(exact, task=task, response=Message.user("4"))
    with pytest.raises(TypeError, match="Verifier or an async function"):
        await testing.verify(lambda t, tr: 1.0, task=task, response="4")  # type: ignore[arg-type]

    async def returns_text(task: Task, trajectory: Trajectory) -> str:
        return "yes"

    with pytest.raises(TypeError, match="real number, a bool or Rewards"):
        await testing.verify(returns_text, task=task, response="4")  # type: ignore[arg-type]


def test_trajectory_builder() -> None:
    task = Task(prompt="Weather?")
    call = ToolCall(id="c1", name="weather", arguments='{"city": "Oslo"}')
    turns = [
        Message.assistant(None, tool_calls=(call,)),
        Message.tool("rain", tool_call_id="c1"),
        Message.assistant("It rains."),
    ]
    built = testing.trajectory(turns, task=task, final_state={"calls": 1})
    assert built.messages == [*task.messages, *turns]
    assert built.final_text == "It rains." and built.final_state == {"calls": 1}
    assert testing.trajectory("hi", prompt="Hello").messages == [
        Message.user("Hello"),
        Message.assistant("hi"),
    ]
    assert testing.trajectory().messages == []
    with pytest.raises(TypeError, match="Message"):
        testing.trajectory(["not a message"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="not both"):
        testing.trajectory("x", task=task, prompt="y")


def test_make_task() -> None:
    task = testing.make_task("2+2?", answer="4", metadata={"level": 1})
    assert task.messages == (Message.user("2+2?"),) and task.answer == "4"
    assert task.id == Task(prompt="2+2?", answer="4").id
    with pytest.raises(ValueError, match="not both"):
        testing.make_task("a", messages=[Message.user("b")])


# --- the fake OpenAI server ----------------------------------------------------------


async def test_fake_openai_serves_replies_through_the_real_sdk() -> None:
    call = ToolCall(id="call_1", name="add", arguments='{"a": 1, "b": 2}')
    replies = [
        "Hello there.",
        Message.assistant(None, tool_calls=(call,)),
        ModelResponse(
            message=Message.assistant("3"),
            usage=Usage(prompt_tokens=5, completion_tokens=1),
            prompt_token_ids=[1, 2, 3, 4, 5],
            completion_token_ids=[9],
            completion_logprobs=[-0.25],
        ),
    ]
    async with FakeOpenAI(replies) as fake:
        messages = [{"role": "user", "content": "hi"}]
        first = await fake.client.chat.completions.create(model="policy", messages=messages)
        assert first.choices[0].message.content == "Hello there."
        assert first.choices[0].finish_reason == "stop" and first.model == "policy"
        second = await fake.client.chat.completions.create(
            model="policy",
            messages=messages,
            tools=[{"type": "function", "function": {"name": "add"}}],
        )
        [tool_call] = second.choices[0].message.tool_calls
        assert (tool_call.id, tool_call.function.name) == ("call_1", "add")
        assert json.loads(tool_call.function.arguments) == {"a": 1, "b": 2}
        assert second.choices[0].finish_reason == "tool_calls"
        third = await fake.client.chat.completions.create(model="policy", messages=messages)
        assert third.usage.prompt_tokens == 5 and third.usage.completion_tokens == 1
        assert third.choices[0].logprobs.content[0].logprob == -0.25
        assert third.model_extra["prompt_token_ids"] == [1, 2, 3, 4, 5]
        assert third.choices[0].model_extra["token_ids"] == [9]
        assert [r["model"] for r in fake.requests] == ["policy"] * 3
        assert fake.requests[1]["tools"][0]["function"]["name"] == "add"
        with pytest.raises(openai.InternalServerError, match="ran out of replies"):
            await fake.client.chat.completions.create(model="policy", messages=messages)


async def test_fake_openai_streams_and_serves_from_a_function() -> None:
    async def reply(body: dict) -> Message:
        last = body["messages"][-1]["content"]
        return Message.assistant(f"echo: {last}", reasoning="thinking")

    async with FakeOpenAI(reply) as fake:
        stream = await fake.client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "ping"}], stream=True
        )
        text, reasoning, finish = "", "", None
        async for chunk in stream:
            delta = chunk.choices[0].delta
            text += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            finish = chunk.choices[0].finish_reason or finish
        assert (text, reasoning, finish) == ("echo: ping", "thinking", "stop")
        assert fake.requests[0]["stream"] is True


async def test_fake_openai_errors_reach_the_sdk_as_its_own_exceptions() -> None:
    rate_limited = httpx2.Response(429, json={"error": {"message": "slow down"}})
    replies = [rate_limited, httpx2.ConnectError("refused"), {"raw": "body"}]
    async with FakeOpenAI(replies) as fake:
        messages = [{"role": "user", "content": "x"}]
        with pytest.raises(openai.RateLimitError):
            await fake.client.chat.completions.create(model="m", messages=messages)
        with pytest.raises(openai.APIConnectionError):
            await fake.client.chat.completions.create(model="m", messages=messages)
        raw = await fake.client.chat.completions.with_raw_response.create(
            model="m", messages=messages
        )
        assert json.loads(raw.text) == {"raw": "body"}
        with pytest.raises(openai.NotFoundError, match="POST /chat/completions"):
            await fake.client.models.list()


# --- the pytest plugin ---------------------------------------------------------------

USER_INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"

PLUGIN_USER_TESTS = """
import openai
from nemo_gym.models.scripted import ScriptedModel
from nemo_gym.records import ModelRequest, Message, Task

async def test_scripted(scripted_model):
    model = scripted_model(["one", "two"])
    assert isinstance(model, ScriptedModel)
    request = ModelRequest(messages=(Message.user("hi"),))
    assert (await model.generate(request)).message.content == "one"
    echo = scripted_model(lambda req: req.messages[-1].content.upper())
    assert (await echo.generate(request)).message.content == "HI"
    assert len(echo.requests) == 1

async def test_fake(fake_openai):
    fake = fake_openai(["pong"])
    assert isinstance(fake.client, openai.AsyncOpenAI)
    reply = await fake.client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "ping"}])
    assert reply.choices[0].message.content == "pong"
    assert fake.requests[0]["messages"][0]["content"] == "ping"

def test_fake_in_a_sync_test(fake_openai):
    assert fake_openai(["x"]).requests == []

def test_task(gym_task):
    task = gym_task("2+2?", answer="4")
    assert isinstance(task, Task) and task.answer == "4"
"""


def test_plugin_fixtures_work_in_a_user_project(pytester: pytest.Pytester) -> None:
    pytester.makeini(USER_INI)
    pytester.makepyfile(test_user=PLUGIN_USER_TESTS)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_plugin_fixtures_are_listed(pytester: pytest.Pytester) -> None:
    pytester.makeini(USER_INI)
    result = pytester.runpytest_inprocess("--fixtures", "-p", "no:cacheprovider")
    for name in ("scripted_model", "fake_openai", "gym_task"):
        result.stdout.fnmatch_lines([f"{name}*"])


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest, nemo_gym.testing.plugin\n"
        "heavy = [m for m in ('openai', 'httpx2', 'hypothesis', 'nemo_gym.testing.fakes',"
        " 'nemo_gym.models.scripted') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- strategies ----------------------------------------------------------------------


def last_number(text: str) -> str | None:
    """The kind of lenient extraction a math verifier does: the last number in the text."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    return numbers[-1] if numbers else None


def last_option(text: str) -> str | None:
    """A lenient multiple-choice extraction: the last standalone capital A-J."""
    letters = re.findall(r"(?<![A-Za-z])([A-J])(?![A-Za-z])", text)
    return letters[-1] if letters else None


@settings(max_examples=60, deadline=None)
@given(gst.answer_formats("42"))
def test_answer_formats_state_the_answer_last(text: str) -> None:
    assert "42" in text
    assert last_number(text) == "42"


@settings(max_examples=60, deadline=None)
@given(st.integers(-1000, 1000).flatmap(lambda n: st.tuples(st.just(n), gst.answer_formats(n))))
def test_answer_formats_any_number(pair: tuple[int, str]) -> None:
    number, text = pair
    assert last_number(text) == str(number)


@settings(max_examples=60, deadline=None)
@given(gst.answer_formats("\\frac{1}{2}"))
def test_answer_formats_keep_braces_in_the_answer(text: str) -> None:
    assert "\\frac{1}{2}" in text


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from("ABCDEFGHIJ").flatmap(lambda c: st.tuples(st.just(c), gst.mc_answer_formats(c)))
)
def test_mc_answer_formats_name_the_letter_last(pair: tuple[str, str]) -> None:
    letter, text = pair
    assert last_option(text) == letter


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gst.answer_formats("4"))
async def test_a_lenient_verifier_accepts_every_format(text: str) -> None:
    async def lenient(task: Task, trajectory: Trajectory) -> float:
        return float(last_number(trajectory.final_text) == task.answer)

    result = await testing.verify(lenient, prompt="2+2?", answer="4", response=text)
    assert result.reward == 1.0


def test_strategy_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        gst.answer_formats("  ")
    with pytest.raises(ValueError, match="capital letter"):
        gst.mc_answer_formats("b")


@settings(max_examples=50, deadline=None)
@given(gst.tasks())
def test_tasks_are_valid(task: Task) -> None:
    assert task.messages[-1].role == "user" and task.id
    assert Task.model_validate_json(task.model_dump_json()) == task


@settings(max_examples=50, deadline=None)
@given(gst.trajectories(responses=gst.answer_formats("7")))
def test_trajectories_end_with_the_response(trajectory: Trajectory) -> None:
    assert trajectory.messages[-1].role == "assistant"
    assert last_number(trajectory.final_text) == "7"
    for message in trajectory.messages:
        for call in message.tool_calls:
            assert isinstance(call.parsed_arguments(), dict)
    Trajectory.model_validate_json(trajectory.model_dump_json())


@settings(max_examples=30, deadline=None)
@given(gst.trajectories(Task(prompt="fixed", answer="1"), max_tool_turns=0))
def test_trajectories_for_a_given_task(trajectory: Trajectory) -> None:
    assert trajectory.messages[0] == Message.user("fixed") and len(trajectory.messages) == 2


def test_the_docs_examples_run_as_written(pytester: pytest.Pytester) -> None:
    page = Path(__file__).parents[1] / "docs" / "testing.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert len(blocks) == 4
    pytester.makeini(USER_INI)
    pytester.makepyfile(**{f"test_docs_{i}": block for i, block in enumerate(blocks)})
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
