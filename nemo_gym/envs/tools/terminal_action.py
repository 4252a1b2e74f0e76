"""`terminal_action`: a coding agent's next step (a shell command, a plan update, a final
message), compared with a teacher's by the rules of the agent's own harness.

NeMo Gym's `terminal_multi_harness`. The prompt is the agent's conversation so far with
its harness's tools; the reply is one model turn (the tools are declared, not run). Its
calls (in order; several are one ordered batch) or else its text are the action, compared
with the row's `expected_action` by NeMo Gym's own `ActionComparator` for the row's
`harness`: the same tool, arguments valid against the declared schema, commands and
paths normalised per harness, free text within `string_similarity_threshold` (NeMo
Gym's configs: 0.9; a row's `threshold` overrides it). Reward 1 on a match, else 0,
with the comparator's category (`NO_ACTION_FOUND`, `UNEXPECTED_TOOL`, ...).

Needs the `terminal` extra (openapi-schema-validator).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.tools.declared import declared_tools
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Rewards, Task, ToolCall, Trajectory

__all__ = ["TerminalAction", "TerminalActionMatch", "terminal_fields"]


def terminal_fields(row: Row) -> dict[str, Any]:
    """The row's `expected_action`, `harness`, `declared_tools` and `threshold`, checked
    by NeMo Gym's own action models."""
    from pydantic import TypeAdapter, ValidationError

    from nemo_gym.envs.tools.terminal_actions.verification_utils import ExpectedAction

    action = row.require("expected_action", dict)
    try:
        TypeAdapter(ExpectedAction).validate_python(action)
    except ValidationError as exc:
        raise row.bad("expected_action", str(exc).splitlines()[0]) from None
    harness = row.get("harness", "generic")
    if not isinstance(harness, str):
        raise row.bad("harness", "must be a string")
    declared = row.get("declared_tools")
    if declared is not None and not isinstance(declared, list):
        raise row.bad("declared_tools", "must be a list of tool definitions")
    threshold = row.get("threshold")
    if threshold is not None and not isinstance(threshold, int | float):
        raise row.bad("threshold", "must be a number")
    return {
        "expected_action": dict(action),
        "harness": harness,
        "declared_tools": declared,
        "threshold": threshold,
    }


class TerminalActionMatch:
    """NeMo Gym's verify: the reply's action against `expected_action`, per harness."""

    def __init__(self, *, string_similarity_threshold: float = 0.9) -> None:
        self.string_similarity_threshold = string_similarity_threshold

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        from pydantic import TypeAdapter

        from nemo_gym.envs.tools.terminal_actions.response_utils import build_action
        from nemo_gym.envs.tools.terminal_actions.verification_utils import (
            ActionComparator,
            ExpectedAction,
            FunctionCallAction,
            StepRewardCategory,
            ToolCallComparatorConfig,
        )

        md = task.metadata
        turns = [m for m in trajectory.messages[len(task.messages) :] if m.role == "assistant"]
        calls = [
            FunctionCallAction(type="function_call", name=c.name, arguments=c.arguments or "")
            for m in turns
            for c in m.tool_calls
        ]
        texts = [m.content for m in turns if m.content is not None]
        action = build_action(calls, "".join(texts) if texts else None)
        if action is None:
            category, score, matched = StepRewardCategory.NO_ACTION_FOUND, None, False
        else:
            config = ToolCallComparatorConfig(
                string_similarity_threshold=self.string_similarity_threshold
            )
            declared = md.get("declared_tools")
            result = ActionComparator(config=config).compare_action(
                expected_action=TypeAdapter(ExpectedAction).validate_python(md["expected_action"]),
                actual_action=action,
                declared_tools=declared if declared is not None else list(md.get("tools") or []),
                threshold_override=md.get("threshold"),
                harness=md.get("harness", "generic"),
            )
            category, score, matched = (
                result.category,
                result.similarity_score,
                result.matches,
            )
        return Rewards(
            reward=1.0 if matched else 0.0,
            metadata={
                "category": category.name,
                "category_reason": category.value,
                "similarity_score": score,
            },
        )


class TerminalAction(DatasetEnv):
    """Predict a coding agent's next action; compared with the teacher's by the agent's
    harness's rules (`TerminalActionMatch`).

    Rows are NeMo Gym's `terminal_multi_harness` layout: `responses_create_params`
    (`input`, `tools`), `expected_action` (a message, a function call or an ordered
    batch), `harness`, and optionally `declared_tools` and `threshold`.
    """

    name = "terminal_action"
    version = "1"
    domain = "tools"
    verification = "the next action against the teacher's, by the harness's rules"
    source = "NeMo Gym's terminal_multi_harness example rows and comparator"
    license = "Apache-2.0"
    sample = "tools/data/terminal_action.jsonl"
    requires = ("extra:terminal",)

    def __init__(
        self,
        *,
        string_similarity_threshold: float = 0.9,
        path: str | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        super().__init__(
            TerminalActionMatch(string_similarity_threshold=string_similarity_threshold),
            path=path,
            tasks=tasks,
            harness=ToolLoop(max_turns=1),
        )
        self.string_similarity_threshold = string_similarity_threshold

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, tools = prompt_of(row)
        return Task(
            id=self.task_id(row, split, "id", "uuid"),
            messages=messages,
            metadata={"tools": tools, **terminal_fields(row)},
        )

    async def open(self, task: Task) -> BasicEpisode:
        return BasicEpisode(declared_tools(task.metadata.get("tools") or []))

    def oracle(self, task: Task) -> Turns:
        action: Mapping[str, Any] = task.metadata["expected_action"]
        if action["type"] == "message":
            return [Message.assistant(str(action["content"]))]
        calls = action["calls"] if action["type"] == "function_call_batch" else [action]
        return [
            Message.assistant(
                tool_calls=tuple(
                    ToolCall(id=f"call_{i}", name=c["name"], arguments=c["arguments"])
                    for i, c in enumerate(calls)
                )
            )
        ]

    def wrong(self, task: Task) -> Turns:
        if task.metadata["expected_action"]["type"] == "message":
            name = (task.metadata.get("tools") or [{"name": "exec_command"}])[0]["name"]
            return [Message.assistant(tool_calls=(ToolCall(id="w", name=name, arguments="{}"),))]
        return [Message.assistant("I am not sure what to do next.")]
