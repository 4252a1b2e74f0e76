"""The LangGraph harness patterns, each driven by a scripted model with exact token ids."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.errors import HarnessError
from nemo_gym.records import Message, ModelRequest, ToolCall

pytest.importorskip("langgraph")

from nemo_gym.harnesses.langgraph import (
    Orchestrator,
    ParallelThinking,
    PlanStep,
    Reflection,
    ReWOO,
    parse_plan,
)
from tests.interop.test_langgraph import Counter
from tests.interop.tokenmodel import TokenModel, last_user

TASK = Counter().tasks()[0]


def _check_traces(trajectory: gym.Trajectory, agents: set[str]) -> None:
    """Every agent's calls form one exact token sequence; together they are refused."""
    assert set(trajectory.agents) == agents
    traces = trajectory.token_traces()
    assert set(traces) == agents
    for agent, trace in traces.items():
        calls = [c for c in trajectory.model_calls if c.request.agent == agent]
        generated = sum(len(c.response.completion_token_ids) for c in calls)
        assert sum(trace.loss_mask) == generated, agent
        last = calls[-1].response
        assert trace.token_ids[: len(last.prompt_token_ids)] == last.prompt_token_ids
        assert trace == trajectory.token_trace(agent=agent)
    if len(agents) > 1:
        with pytest.raises(HarnessError, match="agents"):
            trajectory.token_trace()
    # The tags survive the stored row.
    stored = gym.Trajectory.model_validate_json(trajectory.model_dump_json())
    assert stored.agents == trajectory.agents


# -- reflection -----------------------------------------------------------------------


def reflection_script(request: ModelRequest) -> Message:
    if request.agent == "critic":
        drafts = [m for m in request.messages if m.role == "user"]
        return Message.assistant("Wrong: the total is off." if len(drafts) == 1 else "APPROVED")
    users = [m for m in request.messages if m.role == "user"]
    tools = [m for m in request.messages if m.role == "tool"]
    if len(users) == 1 and not tools:
        return Message.assistant(
            None, tool_calls=(ToolCall(id="r1", name="add", arguments='{"amount": 2}'),)
        )
    if len(users) == 1:
        return Message.assistant("The total is 2.")
    if len(tools) == 1:
        return Message.assistant(
            None, tool_calls=(ToolCall(id="r2", name="add", arguments='{"amount": 3}'),)
        )
    return Message.assistant("The total is 5.")


async def test_reflection_drafts_reviews_revises_and_stops_when_approved() -> None:
    model = TokenModel(reflection_script)
    rollout = await gym.rollout(Counter(), model, TASK, harness=Reflection(max_rounds=3))
    assert rollout.ok, rollout.failure
    assert rollout.reward == 1.0
    trajectory = rollout.trajectory
    agents = [c.request.agent for c in trajectory.model_calls]
    assert agents == ["actor", "actor", "critic", "actor", "actor", "critic"]
    assert trajectory.final_text == "The total is 5."
    roles = [m.role for m in trajectory.messages]
    assert roles == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert "the total is off" in trajectory.messages[4].content
    # The critic saw the task and the first draft, then only the revision as a new turn.
    critic_calls = [c for c in trajectory.model_calls if c.request.agent == "critic"]
    assert "Add 2, then 3." in critic_calls[0].request.messages[1].content
    assert critic_calls[1].request.messages[-1].content == "Revised answer:\nThe total is 5."
    _check_traces(trajectory, {"actor", "critic"})


async def test_reflection_rounds_are_bounded() -> None:
    always_wrong = TokenModel(
        lambda r: "needs work" if r.agent == "critic" else f"draft {len(r.messages)}"
    )
    rollout = await gym.rollout(Counter(), always_wrong, TASK, harness=Reflection(max_rounds=2))
    assert [c.request.agent for c in rollout.trajectory.model_calls] == [
        "actor",
        "critic",
        "actor",
        "critic",
        "actor",
    ]
    none = await gym.rollout(Counter(), always_wrong, TASK, harness=Reflection(max_rounds=0))
    assert [c.request.agent for c in none.trajectory.model_calls] == ["actor"]


# -- orchestrator ---------------------------------------------------------------------


def orchestrator_script(started: list[str], both: asyncio.Event):
    async def script(request: ModelRequest) -> Message:
        agent = request.agent or ""
        if agent == "orchestrator":
            tools = [m for m in request.messages if m.role == "tool"]
            if not tools:
                return Message.assistant(
                    "Splitting it.",
                    tool_calls=(
                        ToolCall(id="d1", name="delegate", arguments='{"task": "add 2"}'),
                        ToolCall(id="d2", name="delegate", arguments='{"task": "add 3"}'),
                    ),
                )
            return Message.assistant("Done: " + "; ".join(m.content for m in tools))
        assert agent.startswith("worker/")
        assert [t.name for t in request.tools] == ["add"]
        if request.messages[-1].role == "tool":
            return Message.assistant(f"added, total now {request.messages[-1].content}")
        started.append(agent)
        if len(started) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)  # both sub-agents are in flight at once
        amount = int(last_user(request).split()[-1])
        return Message.assistant(
            None,
            tool_calls=(
                ToolCall(id=f"w{amount}", name="add", arguments=f'{{"amount": {amount}}}'),
            ),
        )

    return script


async def test_orchestrator_runs_sub_agents_concurrently_each_its_own_conversation() -> None:
    started: list[str] = []
    model = TokenModel(orchestrator_script(started, asyncio.Event()))
    rollout = await gym.rollout(Counter(), model, TASK, harness=Orchestrator())
    assert rollout.ok, rollout.failure
    assert rollout.reward == 1.0
    trajectory = rollout.trajectory
    assert sorted(started) == ["worker/0", "worker/1"]
    # The orchestrator sees only its delegate tool; results come back as tool messages.
    first = trajectory.model_calls[0].request
    assert first.agent == "orchestrator" and [t.name for t in first.tools] == ["delegate"]
    delegated = [r for r in trajectory.tool_results if r.name == "delegate"]
    assert [r.call_id for r in delegated] == ["d1", "d2"]
    assert all(r.output.startswith("added, total now") for r in delegated)
    assert sorted(r.arguments for r in trajectory.tool_results if r.name == "add") == [
        '{"amount": 2}',
        '{"amount": 3}',
    ]
    assert trajectory.final_text.startswith("Done: added")
    assert [m.role for m in trajectory.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    _check_traces(trajectory, {"orchestrator", "worker/0", "worker/1"})


async def test_orchestrator_sub_agent_limit_goes_back_to_the_model() -> None:
    def script(request: ModelRequest) -> Message:
        if request.agent == "orchestrator":
            if request.messages[-1].role == "tool":
                return Message.assistant("gave up")
            return Message.assistant(
                None,
                tool_calls=(
                    ToolCall(id="d1", name="delegate", arguments='{"task": "a"}'),
                    ToolCall(id="d2", name="delegate", arguments='{"task": "b"}'),
                ),
            )
        return Message.assistant("worker result")

    rollout = await gym.rollout(
        Counter(), TokenModel(script), TASK, harness=Orchestrator(max_subagents=1)
    )
    assert rollout.ok
    results = {r.call_id: r for r in rollout.trajectory.tool_results}
    assert results["d1"].output == "worker result" and results["d1"].error is None
    assert "sub-agent limit (1)" in results["d2"].error


# -- parallel thinking ----------------------------------------------------------------


async def test_parallel_thinking_fans_out_concurrently_then_aggregates() -> None:
    in_flight: list[str] = []
    all_started = asyncio.Event()

    async def script(request: ModelRequest) -> str:
        if request.agent == "aggregator":
            return "Final: 5"
        in_flight.append(request.agent)
        if len(in_flight) == 3:
            all_started.set()
        await asyncio.wait_for(all_started.wait(), 5)
        hint = request.messages[0].content
        return f"answer from {request.agent} ({hint.split(':')[0]})"

    model = TokenModel(script)
    rollout = await gym.rollout(Counter(), model, TASK, harness=ParallelThinking(n=3))
    trajectory = rollout.trajectory
    assert sorted(in_flight) == ["thinker/0", "thinker/1", "thinker/2"]
    thinker_prompts = {
        c.request.agent: c.request.messages
        for c in trajectory.model_calls
        if c.request.agent != "aggregator"
    }
    assert thinker_prompts["thinker/1"][0].content.startswith("You are thinker 2 of 3")
    assert thinker_prompts["thinker/1"][1] == TASK.messages[0]
    aggregator = trajectory.model_calls[-1].request
    assert aggregator.agent == "aggregator"
    text = aggregator.messages[-1].content
    assert text.index("Attempt 1:\nanswer from thinker/0") < text.index(
        "Attempt 3:\nanswer from thinker/2"
    )
    assert [m.role for m in trajectory.messages] == ["user", "assistant"]
    assert trajectory.final_text == "Final: 5"
    _check_traces(trajectory, {"thinker/0", "thinker/1", "thinker/2", "aggregator"})


# -- ReWOO ----------------------------------------------------------------------------


class Echo(Counter):
    """Counter plus a two-argument tool, to check evidence substitution."""

    async def open(self, task: gym.Task) -> gym.BasicEpisode:
        episode = await super().open(task)

        @gym.tool
        async def label(text: str, prefix: str) -> str:
            """Prefix a text."""
            return f"{prefix}{text}"

        return gym.BasicEpisode([*episode.tools, label], state=episode.state)


PLAN = """Plan: first add two.
#E1 = add[{"amount": 2}]
Plan: then add three; single-argument shorthand.
#E2 = add[3]
Plan: label the total.
#E3 = label[{"text": "total #E2", "prefix": "=> "}]
#E4 = missing[{}]
"""


async def test_rewoo_plans_then_runs_every_step_without_the_model_then_solves() -> None:
    def script(request: ModelRequest) -> str:
        if request.agent == "planner":
            assert "- add: Add to the total." in request.messages[0].content
            return PLAN
        assert request.agent == "solver"
        evidence = request.messages[-1].content
        assert '#E2 = add[{"amount": 3}]\nResult: 5' in evidence
        assert "Result: => total 5" in evidence
        assert "unknown tool 'missing'" in evidence
        return "The total is 5."

    rollout = await gym.rollout(Echo(), TokenModel(script), TASK, harness=ReWOO())
    assert rollout.ok, rollout.failure
    assert rollout.reward == 1.0
    trajectory = rollout.trajectory
    assert [c.request.agent for c in trajectory.model_calls] == ["planner", "solver"]
    results = trajectory.tool_results
    assert [(r.name, json.loads(r.arguments) if r.error is None else None) for r in results] == [
        ("add", {"amount": 2}),
        ("add", {"amount": 3}),
        ("label", {"text": "total 5", "prefix": "=> "}),
        ("missing", None),
    ]
    assert [m.role for m in trajectory.messages] == ["user", "assistant"]
    assert trajectory.final_text == "The total is 5."
    _check_traces(trajectory, {"planner", "solver"})


def test_parse_plan_reads_steps_and_their_reasoning() -> None:
    steps = parse_plan(PLAN)
    assert steps[0] == PlanStep(1, "add", '{"amount": 2}', "first add two.")
    assert steps[1].arguments == "3"
    assert steps[3] == PlanStep(4, "missing", "{}", "")
    assert parse_plan("no plan here\n#E = broken[") == []


_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
_args = st.text(
    alphabet=st.characters(exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
    max_size=30,
)
_reason = st.text(
    alphabet=st.characters(exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029#"),
    max_size=30,
)


@given(st.lists(st.tuples(_reason, _names, _args), max_size=6))
def test_parse_plan_round_trips_any_written_plan(steps: list[tuple[str, str, str]]) -> None:
    text = "\n".join(
        f"Plan: {reason}\n#E{i + 1} = {name}[{args}]"
        for i, (reason, name, args) in enumerate(steps)
    )
    parsed = parse_plan(text)
    assert [(p.evidence, p.tool, p.arguments, p.reasoning) for p in parsed] == [
        (i + 1, name, args.strip(), reason.strip()) for i, (reason, name, args) in enumerate(steps)
    ]


@given(st.text(max_size=200))
def test_parse_plan_never_raises(text: str) -> None:
    for step in parse_plan(text):
        assert step.evidence >= 0 and step.tool


# -- registry and specs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls", "options"),
    [
        ("reflection", Reflection, {"max_rounds": 1}),
        ("orchestrator", Orchestrator, {"max_subagents": 2}),
        ("parallel_thinking", ParallelThinking, {"n": 2}),
        ("rewoo", ReWOO, {"max_steps": 3}),
    ],
)
def test_patterns_are_registered_and_rebuild_from_their_spec(name, cls, options) -> None:
    harness = gym.registry.build("harness", name, **options)
    assert isinstance(harness, cls)
    spec = gym.registry.spec_of(harness, "harness")
    assert spec.name == name and spec.options == options and spec.rebuildable
    direct = gym.registry.spec_of(cls(**options), "harness")
    assert direct.name == name and direct.options == options
    assert isinstance(gym.registry.build(spec), cls)


async def test_a_pattern_runs_through_rollouts_with_a_seed_per_call() -> None:
    from nemo_gym.runner import call_seed

    model = TokenModel(lambda r: "APPROVED" if r.agent == "critic" else "5")
    seen = [r async for r in gym.rollouts(Counter(), model, harness=Reflection(), repeats=2)]
    assert len(seen) == 2 and all(r.ok for r in seen)
    for rollout in seen:
        seeds = [c.request.sampling.seed for c in rollout.trajectory.model_calls]
        assert rollout.seed is not None and seeds[0] == rollout.seed
        assert seeds == [call_seed(rollout.seed, i) for i in range(len(seeds))]
        assert len(set(seeds)) == len(seeds)
