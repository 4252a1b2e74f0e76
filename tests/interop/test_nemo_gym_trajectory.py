"""`to_trajectory_record` / `to_agent_observations`: our rollouts as NeMo Gym's
`ng_trajectory` and `ng_agent_observations`, validated by NeMo Gym's own pydantic
models (`nemo_gym.rollout_observability`, every model `extra="forbid"`) in the
reference venv's Python, as tests/interop/nemo_gym_reference.py runs its verifiers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nemo_gym.interop.nemo_gym import to_agent_observations, to_trajectory_record
from nemo_gym.records import Failure, Rewards, Rollout, Timings
from nemo_gym.testing import make_task
from nemo_gym.trajectory import (
    Message,
    ModelCall,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResult,
    ToolSpec,
    Trajectory,
    Usage,
)

PYTHON = os.environ.get(
    "NEMO_GYM_REFERENCE_PYTHON",
    str(Path(__file__).resolve().parents[2] / ".venv-nemo-gym-reference" / "bin" / "python"),
)
# Validates each JSON line {"trajectory": ..., "observations": ...} with NeMo Gym's models
# and answers the validated dumps, or the error.
VALIDATE = """
import json, sys
from nemo_gym import rollout_observability as ro
Bundle, Record = ro.AgentObservationBundle, ro.TrajectoryRecord
for line in sys.stdin:
    case = json.loads(line)
    try:
        out = {
            "trajectory": Record.model_validate(case["trajectory"]).model_dump(mode="json"),
            "observations": Bundle.model_validate(case["observations"]).model_dump(mode="json"),
        }
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))
"""

SYSTEM, USER = Message.system("You fix bugs."), Message.user("Make the test pass.")
TOOLS = (ToolSpec(name="bash", description="run a command"),)


def _response(message: Message, prompt: list[int], completion: list[int]) -> ModelResponse:
    return ModelResponse(
        message=message,
        finish_reason="tool_calls" if message.tool_calls else "stop",
        usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(completion)),
        model="policy",
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        completion_logprobs=[-0.5] * len(completion),
    )


def _rollout(
    calls: list[ModelCall],
    messages: list[Message],
    tools: list[ToolResult] = (),  # type: ignore[assignment]
    failure: Failure | None = None,
) -> Rollout:
    return Rollout(
        run_id="run1",
        env="swe",
        task_id="django-1",
        repeat=0,
        seed=7,
        task=make_task(messages=[SYSTEM, USER], id="django-1"),
        trajectory=Trajectory(messages=messages, model_calls=calls, tool_results=list(tools)),
        rewards=None if failure else Rewards(reward=1.0),
        status="failed" if failure else "ok",
        failure=failure,
        timings=Timings(started_at=1_700_000_000.0, duration_s=3.0),
    )


def plain() -> Rollout:
    reply = Message.assistant("Done.", reasoning="easy")
    call = ModelCall(
        request=ModelRequest(messages=(SYSTEM, USER)),
        response=_response(reply, [1, 2, 3], [4, 5]),
        latency_s=0.25,
    )
    return _rollout([call], [SYSTEM, USER, reply])


def tool_calling() -> Rollout:
    first = Message.assistant(
        None, tool_calls=(ToolCall(id="c1", name="bash", arguments='{"cmd": "ls"}'),)
    )
    result = Message.tool("setup.py", tool_call_id="c1", name="bash")
    last = Message.assistant("Fixed.")
    calls = [
        ModelCall(
            request=ModelRequest(messages=(SYSTEM, USER), tools=TOOLS),
            response=_response(first, [1, 2, 3], [4]),
        ),
        ModelCall(
            request=ModelRequest(messages=(SYSTEM, USER, first, result), tools=TOOLS),
            response=_response(last, [1, 2, 3, 4, 9], [6]),
        ),
    ]
    tools = [ToolResult(call_id="c1", name="bash", arguments='{"cmd": "ls"}', output="setup.py")]
    return _rollout(calls, [SYSTEM, USER, first, result, last], tools)


def compacted() -> Rollout:
    """A program that, after two turns, replaces its history with a summary."""
    rollout = tool_calling()
    summary = Message.user("Summary so far: listed the files.")
    reply = Message.assistant("Done after compaction.")
    rollout.trajectory.model_calls.append(
        ModelCall(
            request=ModelRequest(messages=(SYSTEM, summary), tools=TOOLS),
            response=_response(reply, [1, 2, 8], [7]),
        )
    )
    rollout.trajectory.messages = [SYSTEM, summary, reply]
    return rollout


def validated(rollouts: list[Rollout]) -> list[dict[str, Any]]:
    if not Path(PYTHON).is_file():
        reason = (
            "no NeMo Gym reference venv (scripts/test-nemo-gym-reference.sh builds "
            ".venv-nemo-gym-reference, or set NEMO_GYM_REFERENCE_PYTHON)"
        )
        if os.environ.get("NEMO_GYM_REQUIRE_REFERENCE"):
            pytest.fail(reason)
        pytest.skip(reason)
    lines = "".join(
        json.dumps(
            {"trajectory": to_trajectory_record(r), "observations": to_agent_observations(r)}
        )
        + "\n"
        for r in rollouts
    )
    # Their package, not ours: -I keeps PYTHONPATH and the working directory (our
    # worktree, whose `nemo_gym` would shadow theirs) off the path.
    done = subprocess.run(
        [PYTHON, "-I", "-c", VALIDATE], input=lines, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    for answer in answers:
        assert "error" not in answer, answer["error"]
    return answers


def test_plain_tool_calling_and_compacted_rollouts_validate_with_nemo_gyms_models() -> None:
    answers = validated([plain(), tool_calling(), compacted()])
    for answer, rollout in zip(answers, [plain(), tool_calling(), compacted()], strict=True):
        # What NeMo Gym read back is what we wrote (nothing dropped or coerced).
        assert answer["trajectory"]["task_id"] == "django-1"
        assert len(answer["trajectory"]["model_calls"]) == len(rollout.trajectory.model_calls)


def test_model_calls_carry_exact_token_ids_and_turns_count_tool_steps() -> None:
    record = to_trajectory_record(tool_calling())
    first, second = record["model_calls"]
    message = next(i for i in second["response"]["output"] if i["type"] == "message")
    assert message["prompt_token_ids"] == [1, 2, 3, 4, 9]
    assert message["generation_token_ids"] == [6]
    assert message["generation_log_probs"] == [-0.5]
    assert first["response"]["output"][0]["type"] == "function_call"
    assert first["token_stats"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    assert [t["step_count"] for t in record["turns"]] == [0, 1]
    assert [t["turn_no"] for t in record["turns"]] == [1, 2]
    assert record["turns"][-1]["resolved"] is True
    assert record["gaps"] == []


def test_tool_calls_are_joined_to_their_invocation_with_the_output() -> None:
    record = to_trajectory_record(tool_calling())
    (invocation,) = record["invocations"]
    (tool,) = record["tool_calls"]
    assert tool["invocation_id"] == invocation["invocation_id"]
    assert (tool["tool_call_id"], tool["tool_name"], tool["output"]) == ("c1", "bash", "setup.py")
    assert tool["status"] == "completed"
    # The agent's conversation ends with the tool result fed back and the last reply.
    assert invocation["conversation"][-2] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": "setup.py",
    }
    observations = to_agent_observations(tool_calling())
    assert "output" not in next(r for r in observations["records"] if r["kind"] == "tool_call")


def test_a_compaction_break_is_a_context_compaction_observation_and_gaps() -> None:
    rollout = compacted()
    observations = to_agent_observations(rollout)
    (compaction,) = [r for r in observations["records"] if r["kind"] == "context_compaction"]
    ids = [c["model_call_id"] for c in to_trajectory_record(rollout)["model_calls"]]
    assert compaction["before_model_call"] == {"model_call_id": ids[1]}
    assert compaction["after_model_call"] == {"model_call_id": ids[2]}
    # tokens through the last call before (5 prompt + 1 generated), and the new prompt
    assert (compaction["tokens_before"], compaction["tokens_after"]) == (6, 3)
    codes = [g["code"] for g in to_trajectory_record(rollout)["gaps"]]
    assert codes == ["compaction_summary_unavailable"]
    # a plain continuation is no break
    for unbroken in (plain(), tool_calling()):
        assert not [
            r
            for r in to_agent_observations(unbroken)["records"]
            if r["kind"] == "context_compaction"
        ]


def test_a_compaction_without_token_ids_says_its_counts_are_unavailable() -> None:
    rollout = compacted()
    call = rollout.trajectory.model_calls[2]
    assert call.response is not None
    call.response = call.response.model_copy(update={"prompt_token_ids": None})
    codes = {g["code"] for g in to_trajectory_record(rollout)["gaps"]}
    assert codes == {"compaction_summary_unavailable", "compaction_token_counts_unavailable"}


def test_a_failed_rollout_is_a_failed_invocation_with_its_kind_and_no_resolved_turn() -> None:
    failure = Failure(kind="sandbox", code="swe_no_results", message="no tests ran", error_type="X")
    rollout = _rollout(plain().trajectory.model_calls, plain().trajectory.messages, failure=failure)
    record = to_trajectory_record(rollout)
    assert record["invocations"][0]["status"] == "failed"
    assert record["invocations"][0]["error_type"] == "sandbox"
    assert "resolved" not in record["turns"][-1]
    validated([rollout])


def test_a_subagents_calls_are_an_invocation_of_their_own() -> None:
    rollout = tool_calling()
    side = ModelCall(
        request=ModelRequest(messages=(Message.user("Title this session."),), agent="opencode/1"),
        response=_response(Message.assistant("Fix test"), [5], [6]),
    )
    rollout.trajectory.model_calls.insert(0, side)
    record = to_trajectory_record(rollout)
    assert len(record["invocations"]) == 2
    assert [len(i["model_calls"]) for i in record["invocations"]] == [1, 2]
    assert record["gaps"] == []
    validated([rollout])


async def test_a_real_cli_agent_that_compacts_exports_one_compaction_and_validates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stdlib agent of tests/harnesses/test_cli_agents.py, run for real (local
    sandbox), replaces its history with a summary after two calls: one break, between
    its second and third call, in one invocation; the tool runs it reported back are the
    tool calls, each with its output."""
    # test_cli_agents imports its sibling `agent_policy` as a top-level module.
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "harnesses"))
    from harnesses.test_cli_agents import _run, chained, needs_local, tiny

    for mark in needs_local.mark.args:
        if mark:
            pytest.skip(needs_local.mark.kwargs["reason"])
    rollout, _ = await _run(tiny(compact_after=2), chained)
    assert rollout.ok, rollout.failure
    record = to_trajectory_record(rollout)
    ids = [c["model_call_id"] for c in record["model_calls"]]
    (invocation,) = record["invocations"]
    assert [r["model_call_id"] for r in invocation["model_calls"]] == ids
    (compaction,) = [
        r for r in to_agent_observations(rollout)["records"] if r["kind"] == "context_compaction"
    ]
    assert (compaction["before_model_call"], compaction["after_model_call"]) == (
        {"model_call_id": ids[1]},
        {"model_call_id": ids[2]},
    )
    assert [t["tool_call_id"] for t in record["tool_calls"]] == ["call_ng0", "call_ng1", "call_ng2"]
    assert record["tool_calls"][1]["output"] == "ok\n"
    validated([rollout])
