"""`next_action`: one step of an expert trajectory: say something, or make the expert's call(s).

Behaviour cloning per step, scored as NeMo Gym's
`single_step_tool_use_with_argument_comparison` scores it: the conversation so far is the
prompt, the expert's next action the answer. A message where the expert sent a message
scores 1 (any text); a tool call where one was expected scores 1 when the name is the
same and the arguments match: the same keys, lists of the same length, numbers equal
(floats within `float_tolerance`), one-word strings equal, longer strings with enough
words in common (`word_similarity`, the shared word count over both strings' word
counts). Tool calls win over text in the same reply.

Several calls are matched in any order (a maximum bipartite matching). NeMo Gym's
default ignores surplus calls ("did it make the expected calls?"); here the number of
calls must be right by default (`parallel_rewarding=True`): a reply that fires many
guesses at one tool must not score as the one right call. `allow_subset`,
`allow_superset` and `parallel_mode` ("binary_strict", "fractional", "f1") are NeMo
Gym's settings of the same names.

`match="swe_pivot"` scores a coding agent's next call as NeMo Gym's `swe_pivot` server
does instead (`nemo_gym.envs.tools.swe_pivot`: the tool or its category, the target
file or command, difflib similarity of the arguments; `reward_mode` binary or
continuous); its rows' expected call may also sit in `expected_answer` or
`metadata.expected_action`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.tools.declared import declared_tools
from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.harnesses import ToolLoop
from nemo_gym.limits import loads_json
from nemo_gym.records import Message, Rewards, Task, ToolCall, Trajectory

__all__ = ["NextAction", "NextActionMatch", "expected_action", "reply_calls"]

ParallelMode = Literal["binary_strict", "fractional", "f1"]
_MODES = ("binary_strict", "fractional", "f1")


@dataclass(frozen=True)
class _Call:
    name: str
    arguments: str


def _expected(task: Task) -> tuple[str, list[_Call]]:
    """("message", []) or ("calls", [...]) from the task's `expected_action`."""
    action = task.metadata.get("expected_action")
    if not isinstance(action, Mapping):
        raise VerifierError(f"task {task.id}: no expected_action")
    kind = action.get("type")
    if kind == "message":
        return "message", []
    if kind == "function_call":
        return "calls", [_Call(str(action["name"]), str(action.get("arguments") or "{}"))]
    if kind == "function_call_batch" and action.get("calls"):
        calls = [_Call(str(c["name"]), str(c.get("arguments") or "{}")) for c in action["calls"]]
        return "calls", calls
    raise VerifierError(
        f"task {task.id}: expected_action must be a message, function_call or a non-empty "
        f"function_call_batch, got {action!r}"[:300]
    )


def reply_calls(task: Task, trajectory: Trajectory) -> tuple[list[_Call], str | None]:
    """The model's calls and its first non-empty text, over the turns it generated."""
    turns = [mc.response.message for mc in trajectory.model_calls if mc.response is not None]
    if not turns:
        turns = [m for m in trajectory.messages[len(task.messages) :] if m.role == "assistant"]
    calls = [_Call(c.name, c.arguments or "") for m in turns for c in m.tool_calls]
    text = next((m.content for m in turns if m.content), None)
    return calls, text


def _words(text: str) -> Counter[str]:
    return Counter(text.strip().lower().split())


class NextActionMatch:
    """NeMo Gym's action comparison (see the module doc); components `accuracy` (every
    expected call matched, no surplus) and `matched` (how many expected calls matched)."""

    def __init__(
        self,
        *,
        word_similarity: float = 0.1,
        float_tolerance: float = 1e-6,
        parallel_rewarding: bool = True,
        allow_subset: bool = False,
        allow_superset: bool = False,
        parallel_mode: ParallelMode = "binary_strict",
    ) -> None:
        if parallel_mode not in _MODES:
            raise ConfigError(f"parallel_mode {parallel_mode!r}: one of {', '.join(_MODES)}")
        self.word_similarity = word_similarity
        self.float_tolerance = float_tolerance
        self.parallel_rewarding = parallel_rewarding
        self.allow_subset = allow_subset
        self.allow_superset = allow_superset
        self.parallel_mode = parallel_mode

    def _same(self, expected: Any, actual: Any) -> bool:
        # isinstance, not type equality: NeMo Gym accepts True for an expected 1 (bool is
        # an int) and refuses 1 for an expected 1.0.
        if not isinstance(actual, type(expected)):
            return False
        if isinstance(expected, dict):
            return set(expected) == set(actual) and all(
                self._same(v, actual[k]) for k, v in expected.items()
            )
        if isinstance(expected, list):
            return len(expected) == len(actual) and all(
                self._same(e, a) for e, a in zip(expected, actual, strict=True)
            )
        if isinstance(expected, float):
            return abs(actual - expected) < self.float_tolerance
        if isinstance(expected, str):
            want, got = _words(expected), _words(actual)
            if want.total() < 2 or got.total() < 2:
                return expected == actual
            shared = (want & got).total()
            return shared / (want.total() + got.total()) >= self.word_similarity
        return bool(expected == actual)

    def _call_matches(self, expected: _Call, actual: _Call) -> bool:
        if expected.name != actual.name:
            return False
        try:
            got = loads_json(actual.arguments)
        except ValueError:  # not JSON, or over the document limits: no match
            return False
        return self._same(json.loads(expected.arguments), got)

    def _matched(self, expected: Sequence[_Call], actual: Sequence[_Call]) -> int:
        """The size of a maximum matching of expected to actual calls (Kuhn's algorithm)."""
        options = [[j for j, a in enumerate(actual) if self._call_matches(e, a)] for e in expected]
        owner: dict[int, int] = {}

        def augment(i: int, seen: set[int]) -> bool:
            for j in options[i]:
                if j not in seen:
                    seen.add(j)
                    if j not in owner or augment(owner[j], seen):
                        owner[j] = i
                        return True
            return False

        for i in sorted(range(len(expected)), key=lambda k: len(options[k])):
            augment(i, set())
        return len(owner)

    def _score(self, matched: int, expected: int, actual: int) -> float:
        if not self.parallel_rewarding:
            return float(matched == expected)
        if actual != expected and not (
            self.allow_subset if actual < expected else self.allow_superset
        ):
            return 0.0
        if self.parallel_mode == "f1":
            return 2 * matched / (expected + actual)
        required = min(expected, actual) if self.allow_subset else expected
        if self.parallel_mode == "fractional":
            return matched / required if required else 0.0
        return float(matched == required)

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Score the reply's action against the task's `expected_action`."""
        kind, expected = _expected(task)
        calls, text = reply_calls(task, trajectory)
        made: Any = [{"name": c.name, "arguments": c.arguments} for c in calls] or text
        if kind == "message":
            reward = float(not calls and text is not None)
            return Rewards(
                reward=reward,
                components={"accuracy": reward, "matched": reward},
                metadata={"extracted_answer": made, "expected": "message"},
            )
        matched = self._matched(expected, calls) if calls else 0
        reward = self._score(matched, len(expected), len(calls)) if calls else 0.0
        exact = float(matched == len(expected) == len(calls))
        return Rewards(
            reward=reward,
            components={"accuracy": exact, "matched": float(matched)},
            metadata={"extracted_answer": made, "expected": len(expected)},
        )


class NextAction(DatasetEnv):
    """The next action of an expert tool-use conversation: a message, or the expert's
    tool call(s) with matching arguments (`NextActionMatch`).

    Rows are NeMo Gym's layout: `responses_create_params` (`input`: the conversation so
    far, `tools`) and `expected_action` ({"type": "message"}, a `function_call` with
    JSON `arguments`, or a `function_call_batch` of them). The model gets one turn; the
    tools only acknowledge. Ships 6 steps written by us;
    `dataset="nvidia/Nemotron-RL-Agentic-Conversational-Tool-Use-Pivot-v1"` reads
    NVIDIA's (`load_options={"data_files": "train.jsonl"}`).
    """

    name = "next_action"
    version = "1"
    domain = "tools"
    verification = "the expert's next action: any message, or the call(s) with matching arguments"
    source = "6 conversation steps written by us; NeMo Gym's row layout"
    license = "Apache-2.0 (sample); the Nemotron pivot data is CC BY 4.0"
    sample = "tools/data/next_action.jsonl"
    public = "nvidia/Nemotron-RL-Agentic-Conversational-Tool-Use-Pivot-v1"

    def __init__(
        self,
        *,
        word_similarity: float = 0.1,
        float_tolerance: float = 1e-6,
        parallel_rewarding: bool = True,
        allow_subset: bool = False,
        allow_superset: bool = False,
        parallel_mode: ParallelMode = "binary_strict",
        match: Literal["arguments", "swe_pivot"] = "arguments",
        reward_mode: Literal["binary", "continuous"] = "binary",
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        from nemo_gym.envs.tools.swe_pivot import SwePivotMatch

        if match not in ("arguments", "swe_pivot"):
            raise ConfigError(f"match {match!r}: arguments or swe_pivot")
        self.match = match
        verifier: NextActionMatch | SwePivotMatch = (
            SwePivotMatch(reward_mode=reward_mode)
            if match == "swe_pivot"
            else NextActionMatch(
                word_similarity=word_similarity,
                float_tolerance=float_tolerance,
                parallel_rewarding=parallel_rewarding,
                allow_subset=allow_subset,
                allow_superset=allow_superset,
                parallel_mode=parallel_mode,
            )
        )
        super().__init__(
            verifier,
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=ToolLoop(max_turns=1),
        )

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.envs.tools.swe_pivot import pivot_action
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, tools = prompt_of(row)
        action = pivot_action(row) if self.match == "swe_pivot" else expected_action(row)
        return Task(
            id=self.task_id(row, split, "id", "uuid"),
            messages=messages,
            metadata={"tools": tools, "expected_action": action},
        )

    async def open(self, task: Task) -> BasicEpisode:
        return BasicEpisode(declared_tools(task.metadata.get("tools") or []))

    def oracle(self, task: Task) -> Turns:
        kind, expected = _expected(task)
        if kind == "message":
            return [
                Message.assistant(str(task.metadata["expected_action"].get("content") or "OK."))
            ]
        calls = tuple(
            ToolCall(id=f"call_{i}", name=c.name, arguments=c.arguments)
            for i, c in enumerate(expected)
        )
        return [Message.assistant(tool_calls=calls)]

    def wrong(self, task: Task) -> Turns:
        kind, _ = _expected(task)
        if kind == "message":
            name = (task.metadata.get("tools") or [{"name": "lookup"}])[0]["name"]
            return [
                Message.assistant(tool_calls=(ToolCall(id="call_0", name=name, arguments="{}"),))
            ]
        return [Message.assistant("Could you tell me more?")]


def expected_action(row: Row) -> dict[str, Any]:
    """A row's `expected_action`: a message, a function call or a batch of them."""
    action = row.require("expected_action", dict)
    if action.get("type") not in ("message", "function_call", "function_call_batch"):
        raise row.bad("expected_action", "type must be message, function_call or batch")
    return dict(action)
