"""Our rollouts as NeMo Gym's trajectory evidence: `ng_trajectory` (its
`nemo_gym.rollout_observability.TrajectoryRecord`, schema 1.0) and the agent's
observation bundle (`AgentObservationBundle`, a result row's `ng_agent_observations`).

```python
from nemo_gym.interop import nemo_gym as ng

row = ng.to_row(rollout)
row["ng_trajectory"] = ng.to_trajectory_record(rollout)
row["ng_agent_observations"] = ng.to_agent_observations(rollout)
```

Invocations are the rollout's agents: one per `ModelRequest.agent` (a CLI agent's
segment suffix `/<n>` dropped, since its segments are one program's calls), `None`
being the rollout's root. Each model call keeps its request (Responses `input` items
and tools), its response (Responses `output` items; the assistant message carries the
exact `prompt_token_ids`, `generation_token_ids` and `generation_log_probs`, as in
NeMo Gym's training messages) and its token counts. Tool calls are the trajectory's
tool results, joined to the invocation whose model call asked for them, with their
output.

A **compaction break** is a model call whose request continues no earlier
conversation of its invocation (an earlier call's messages plus its reply): the
program replaced its history. NeMo Gym reports it as its agents do: a
`ContextCompactionObservation` in the observation bundle (`before_model_call`: the
call just before, `after_model_call`: the call that broke off), and, since its
`TrajectoryRecord` has no compaction field, the gaps of that observation in both
(`compaction_summary_unavailable`: we see the new history, not which of its messages
is the summary; `compaction_token_counts_unavailable` where the backend gave no token
ids). A side request that is never continued (OpenCode's title) breaks off the same
way and is reported the same way: either is a sequence a trainer must not join to the
one before. Our records carry no per-call wall-clock times, so `started_at` is left
None and each turn's timestamp is the rollout's start (turn numbers give the order).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from nemo_gym.harnesses.cli.segments import message_key
from nemo_gym.records import Rollout
from nemo_gym.trajectory import Message, ModelCall

__all__ = ["SCHEMA_VERSION", "to_agent_observations", "to_trajectory_record"]

SCHEMA_VERSION = "1.0"
SOURCE = "nemo_gym"
_SEGMENT = re.compile(r"/\d+$")


def _rollout_id(rollout: Rollout) -> str:
    return f"{rollout.run_id}:{rollout.task_id}:{rollout.repeat}"


def _invocation_id(rollout: Rollout, agent: str | None) -> str:
    root = _rollout_id(rollout)
    return root if agent is None else f"{root}:{_SEGMENT.sub('', agent)}"


def _call_id(rollout: Rollout, index: int) -> str:
    return f"{_rollout_id(rollout)}:call-{index}"


def _input_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as Responses input items (NeMo Gym's `NeMoGymResponseInputItem`)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id or "",
                    "output": message.content or "",
                }
            )
            continue
        if message.content or not message.tool_calls:
            items.append(
                {"type": "message", "role": message.role, "content": message.content or ""}
            )
        for call in message.tool_calls:
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                }
            )
    return items


def _request(call: ModelCall) -> dict[str, Any]:
    request = call.request
    return {
        "input": _input_items(request.messages),
        "tools": [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": False,
            }
            for tool in request.tools
        ],
        **({"model": request.model} if request.model else {}),
    }


def _response(call: ModelCall, call_id: str) -> dict[str, Any] | None:
    response = call.response
    if response is None:
        return None
    message = response.message
    output: list[dict[str, Any]] = []
    if message.reasoning:
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{call_id}",
                "summary": [{"type": "summary_text", "text": message.reasoning}],
            }
        )
    if message.content or not message.tool_calls:
        item: dict[str, Any] = {
            "type": "message",
            "id": f"msg_{call_id}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": message.content or "", "annotations": []}],
        }
        if response.completion_token_ids is not None:
            item["prompt_token_ids"] = list(response.prompt_token_ids or [])
            item["generation_token_ids"] = list(response.completion_token_ids)
            item["generation_log_probs"] = list(response.completion_logprobs or [])
        output.append(item)
    for tool_call in message.tool_calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{tool_call.id}",
                "call_id": tool_call.id,
                "name": tool_call.name,
                "arguments": tool_call.arguments,
                "status": "completed",
            }
        )
    return {
        "id": f"resp_{call_id}",
        "object": "response",
        "model": response.model,
        "status": "completed",
        "output": output,
    }


def _tokens_in(call: ModelCall) -> int | None:
    response = call.response
    if response is None or response.prompt_token_ids is None:
        return None
    return len(response.prompt_token_ids)


def _tokens_through(call: ModelCall) -> int | None:
    before = _tokens_in(call)
    response = call.response
    if before is None or response is None or response.completion_token_ids is None:
        return None
    return before + len(response.completion_token_ids)


def _analyse(rollout: Rollout) -> dict[str, Any]:
    """Invocations, model calls, tool calls, compactions and gaps, as plain dicts."""
    calls = rollout.trajectory.model_calls
    order: list[str] = []
    refs: dict[str, list[dict[str, Any]]] = {}
    conversations: dict[str, list[list[tuple[Any, ...]]]] = {}
    last_call: dict[str, int] = {}
    last_messages: dict[str, list[Message]] = {}
    owner_of_tool_call: dict[str, str] = {}
    model_calls: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    compactions: list[dict[str, Any]] = []
    gaps: list[dict[str, Any]] = []
    steps: dict[str, int] = {}
    rollout_id = _rollout_id(rollout)

    for index, call in enumerate(calls):
        invocation = _invocation_id(rollout, call.request.agent)
        call_id = _call_id(rollout, index)
        ref = {"model_call_id": call_id}
        if invocation not in refs:
            order.append(invocation)
            refs[invocation] = []
            conversations[invocation] = []
            steps[invocation] = 0
        keys = [message_key(m) for m in call.request.messages]
        seen = conversations[invocation]
        continues = any(len(keys) > len(tail) and keys[: len(tail)] == tail for tail in seen)
        if seen and not continues:
            before = last_call[invocation]
            compaction: dict[str, Any] = {
                "kind": "context_compaction",
                "invocation_id": invocation,
                "trigger": "history_replaced",
                "outcome": "completed",
                "before_model_call": {"model_call_id": _call_id(rollout, before)},
                "after_model_call": ref,
            }
            tokens_before, tokens_after = _tokens_through(calls[before]), _tokens_in(call)
            if tokens_before is not None and tokens_after is not None:
                compaction["tokens_before"] = tokens_before
                compaction["tokens_after"] = tokens_after
            else:
                gaps.append(
                    {
                        "code": "compaction_token_counts_unavailable",
                        "invocation_id": invocation,
                        "detail": call_id,
                    }
                )
            gaps.append(
                {
                    "code": "compaction_summary_unavailable",
                    "invocation_id": invocation,
                    "detail": call_id,
                }
            )
            compactions.append(compaction)
        if call.response is not None:
            seen.append([*keys, message_key(call.response.message)])
            last_messages[invocation] = [*call.request.messages, call.response.message]
        else:
            last_messages[invocation] = list(call.request.messages)
        last_call[invocation] = index
        refs[invocation].append(ref)

        response = call.response
        usage = response.usage if response is not None else None
        model_calls.append(
            {
                "model_call_id": call_id,
                "duration_ms": call.latency_s * 1000.0,
                "request": _request(call),
                "response": _response(call, call_id),
                "response_metadata": {
                    "response_id": f"resp_{call_id}" if response is not None else None,
                    "model": response.model if response is not None else call.request.model,
                    "dialect": "responses",
                    "finish_reason": response.finish_reason if response is not None else None,
                    "response_status": "completed" if response is not None else "failed",
                    "error_category": "model_error" if call.error else None,
                },
                "token_stats": {
                    "prompt_tokens": usage.prompt_tokens if usage is not None else None,
                    "completion_tokens": usage.completion_tokens if usage is not None else None,
                    "total_tokens": usage.total_tokens if usage is not None else None,
                },
            }
        )
        if response is None:
            # A call that returned nothing is not a model decision (NeMo Gym's rule).
            continue
        turn_no = sum(1 for turn in turns if turn["invocation_id"] == invocation) + 1
        answer = _response(call, call_id)
        turns.append(
            {
                "invocation_id": invocation,
                "task_id": rollout.task_id,
                "rollout_id": rollout_id,
                "turn_no": turn_no,
                "timestamp": rollout.timings.started_at,
                "question": _input_items(call.request.messages),
                "answer": [i for i in answer["output"] if i["type"] != "reasoning"]
                if answer
                else None,
                "reasoning_content": response.message.reasoning,
                "step_count": steps[invocation],
                "model_calls": [ref],
            }
        )
        steps[invocation] += len(response.message.tool_calls)
        for tool_call in response.message.tool_calls:
            owner_of_tool_call.setdefault(tool_call.id, invocation)

    root = _invocation_id(rollout, None)
    tool_calls = []
    for result in rollout.trajectory.tool_results:
        tool_calls.append(
            {
                "kind": "tool_call",
                "invocation_id": owner_of_tool_call.get(
                    result.call_id, order[0] if order else root
                ),
                "tool_call_id": result.call_id,
                "tool_name": result.name,
                "duration_ms": result.latency_s * 1000.0,
                "timing_source": "harness",
                "status": "failed" if result.error else "completed",
                "error_type": "tool_error" if result.error else None,
                "output": result.output,
            }
        )

    failure = rollout.failure
    invocations: list[dict[str, Any]] = [
        {
            "kind": "agent_invocation",
            "invocation_id": invocation,
            "status": "failed" if failure is not None else "completed",
            "error_type": failure.kind if failure is not None else None,
            "model_calls": refs[invocation],
            "conversation": _input_items(last_messages.get(invocation, [])),
        }
        for invocation in order
    ]
    if not invocations:
        # A rollout that failed before its first model call still had an agent.
        invocations.append(
            {
                "kind": "agent_invocation",
                "invocation_id": root,
                "status": "failed" if failure is not None else "completed",
                "error_type": failure.kind if failure is not None else None,
                "model_calls": [],
                "conversation": _input_items(rollout.trajectory.messages),
            }
        )
        gaps.append({"code": "model_calls_unavailable"})
    if len(invocations) == 1:
        invocations[0]["duration_ms"] = rollout.timings.duration_s * 1000.0
    if turns and rollout.rewards is not None and rollout.failure is None:
        turns[-1]["resolved"] = rollout.rewards.reward >= 1.0
    return {
        "rollout_id": rollout_id,
        "invocations": invocations,
        "turns": turns,
        "model_calls": model_calls,
        "tool_calls": tool_calls,
        "compactions": compactions,
        "gaps": gaps,
    }


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def to_trajectory_record(rollout: Rollout) -> dict[str, Any]:
    """`rollout` as NeMo Gym's `ng_trajectory` (a `TrajectoryRecord` dict, schema 1.0)."""
    parts = _analyse(rollout)
    return _drop_none(
        {
            "schema_version": SCHEMA_VERSION,
            "task_id": rollout.task_id,
            "rollout_id": parts["rollout_id"],
            "invocations": parts["invocations"],
            "turns": parts["turns"],
            "model_calls": parts["model_calls"],
            "tool_calls": parts["tool_calls"],
            "gaps": parts["gaps"],
        }
    )


def to_agent_observations(rollout: Rollout) -> dict[str, Any]:
    """`rollout`'s agent observations as NeMo Gym's `AgentObservationBundle` dict (a
    result row's `ng_agent_observations`): its invocations, tool calls (without their
    output, which the bundle does not carry) and compaction breaks."""
    parts = _analyse(rollout)
    tools = [{k: v for k, v in t.items() if k != "output"} for t in parts["tool_calls"]]
    return _drop_none(
        {
            "source": SOURCE,
            "records": [*parts["invocations"], *tools, *parts["compactions"]],
            "gaps": parts["gaps"],
        }
    )
