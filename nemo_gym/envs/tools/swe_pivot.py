"""NeMo Gym's `swe_pivot` rule: a coding agent's next tool call at a pivot turn against the
demonstrated one, with no judge model (`next_action`'s `match="swe_pivot"`).

A port of NeMo Gym 0.7.0's `resources_servers/swe_pivot/app.py` (Apache-2.0, NVIDIA),
layered cheap to expensive, on the first tool call of the reply:

- level 0: the same tool name (any case), or two names of one category (edit, bash,
  search, read, finish, think, planning; an unknown name matches only itself);
- level 1: the same target: for edits the same editor sub-command, the same last two
  path components, a `view_range` covering 80% of the expected one; for shell commands
  the same verb, a shared path (last three components) and difflib similarity at
  least 0.3; for reads and searches the same last three path components;
- level 2: argument similarity (difflib, first 2000 characters): for edits the lower of
  the `old_str` and `new_str` similarities (else the patch/diff/content), for shell
  commands the commands'; `reward_mode="binary"` (NeMo Gym's default) scores 1 from
  0.8, else 0; `"continuous"` scores 0.5 to 1 between 0.4 and 0.8, then takes off up
  to 0.1 for an edit's size (500 characters and more: the whole 0.1).

Arguments that are JSON but not an object reach NeMo Gym's checks as they are; where its
code then fails (`.get` on a list), it scores 0 (`unknown_error`), and so does this port.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from difflib import SequenceMatcher
from typing import Any, Literal

from nemo_gym.envs.rows import Row
from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Rewards, Task, Trajectory

__all__ = ["PivotScore", "SwePivotMatch", "pivot_action", "pivot_score"]

RewardMode = Literal["binary", "continuous"]

_CATEGORIES: dict[str, tuple[str, ...]] = {
    "edit": (
        "str_replace_editor",
        "text_editor",
        "file_editor",
        "code_editor",
        "edit_file",
        "modify_file",
        "update_file",
        "file_edit",
        "edit",
        "modify",
        "apply_patch",
        "patch_file",
        "apply_diff",
        "apply_changes",
        "write",
        "write_file",
        "save_file",
        "create_file",
    ),
    "bash": (
        "execute_bash",
        "run_bash",
        "bash_exec",
        "shell_run",
        "shell",
        "bash",
        "terminal",
        "shell_command",
        "shell_cmd",
        "run_shell_cmd",
        "exec_command",
        "exec_cmd",
    ),
    "search": (
        "grep",
        "search_text",
        "find_pattern",
        "text_search",
        "glob",
        "find_files",
        "file_glob",
        "match_files",
        "grep_files",
        "search_files",
        "find_in_files",
        "code_search",
        "list_dir",
        "ls",
        "show_dir",
        "ls_dir",
        "list_directory",
    ),
    "read": (
        "read",
        "read_file",
        "view_file",
        "cat_file",
        "view",
        "file_view",
        "inspect",
        "show_file",
        "read_file_content",
    ),
    "finish": ("finish", "submit"),
    "think": ("think",),
    "planning": (
        "task_tracker",
        "todo_tracker",
        "plan_tracker",
        "todo_read",
        "todo_write",
        "update_plan",
        "list_tasks",
        "update_tasks",
        "read_todos",
        "write_todos",
        "edit_plan",
        "modify_plan",
    ),
}
# Each name, and its CamelCase form (OpenHands, OpenCode and Codex name tools either way),
# lower-cased: a later category wins a name two share, as in NeMo Gym's registration order.
_CATEGORY: dict[str, str] = {
    spelled.lower(): category
    for category, names in _CATEGORIES.items()
    for name in names
    for spelled in (name, "".join(w.capitalize() for w in name.split("_")))
}

_TARGET_FLOOR = 0.3
_MAX_CHARS = 2000
_FULL_CREDIT = 0.8
_PARTIAL_FROM = 0.4
_SIZE_ALPHA = 0.1
_PATH_IN_COMMAND = re.compile(
    r"""(?:^|[\s='"(])((?:/[\w._-]+)+|\.\.?/[\w._/-]+|[\w._-]+/[\w._/-]+)"""
)


def _category(name: str) -> str:
    return _CATEGORY.get(name.lower(), "unknown")


def _arguments(raw: Any) -> Any:
    """A dict as it is, a JSON string decoded (whatever it holds), else {}."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return {}
    return {}


def _file(args: Any) -> str:
    for key in ("path", "file", "file_path", "filename", "file_name"):
        if key in args:
            return str(args[key]).strip()
    return ""


def _suffix(path: str, parts: int = 3) -> str:
    return "/".join(path.strip("/").split("/")[-parts:])


def _command(args: Any) -> str:
    for key in ("command", "cmd"):
        if key in args:
            return str(args[key]).strip()
    return ""


def _edit_content(args: Any) -> str:
    if "new_str" in args:
        return "\n".join((str(args.get("old_str", "")), str(args["new_str"])))
    if "patch" in args:
        return str(args["patch"])
    if "diff" in args:
        return str(args["diff"])
    if "content" in args or "file_text" in args:
        return str(args.get("content", args.get("file_text", "")))
    return ""


def _verb(command: str) -> str:
    command = command.strip()
    return command.split()[0].rsplit("/", 1)[-1] if command else ""


def _paths(command: str) -> list[str]:
    found = _PATH_IN_COMMAND.findall(command) if command else []
    return [p for p in found if not p.startswith("--") and len(p) > 2]


def _view_range(raw: Any) -> tuple[int, int] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return None
    if isinstance(raw, list) and len(raw) == 2:
        try:
            return int(raw[0]), int(raw[1])
        except (ValueError, TypeError):
            return None
    return None


def _similarity(a: str, b: str) -> float:
    return SequenceMatcher(None, a[:_MAX_CHARS], b[:_MAX_CHARS]).ratio()


def _same_tool(name: str, category: str, expected_name: str, expected_category: str) -> bool:
    if name.lower() == expected_name.lower():
        return True
    return category == expected_category and category != "unknown"


def _same_target(category: str, args: Any, expected_category: str, expected: Any) -> bool:
    if category == expected_category == "edit":
        mine, theirs = str(args.get("command", "")), str(expected.get("command", ""))
        if bool(mine) != bool(theirs) or (mine and theirs and mine != theirs):
            return False
        path, want = _file(args), _file(expected)
        if path and want and _suffix(path, 2) != _suffix(want, 2):
            return False
        if mine == theirs == "view":
            seen, wanted = (
                _view_range(args.get("view_range")),
                _view_range(expected.get("view_range")),
            )
            if seen and wanted:
                overlap = max(0, min(seen[1], wanted[1]) - max(seen[0], wanted[0]))
                if overlap / max(1, wanted[1] - wanted[0]) < 0.8:
                    return False
        return True
    if category == expected_category == "bash":
        mine, theirs = _command(args), _command(expected)
        if bool(mine) != bool(theirs):
            return False
        verb, want = _verb(mine), _verb(theirs)
        if verb and want and verb != want:
            return False
        paths, gold_paths = _paths(mine), _paths(theirs)
        if paths and gold_paths:
            ours = {_suffix(p.rstrip("/")) for p in paths} - {""}
            gold = {_suffix(p.rstrip("/")) for p in gold_paths} - {""}
            if ours and gold and not ours & gold:
                return False
        return not (mine and theirs and _similarity(mine, theirs) < _TARGET_FLOOR)
    if category in ("search", "read") and expected_category in ("search", "read"):
        path, want = _file(args), _file(expected)
        return _suffix(path) == _suffix(want) if path and want else True
    return True


def _argument_similarity(category: str, args: Any, expected_category: str, expected: Any) -> float:
    if category == expected_category == "edit":
        old, want_old = str(args.get("old_str", "")), str(expected.get("old_str", ""))
        new, want_new = str(args.get("new_str", "")), str(expected.get("new_str", ""))
        if (old or new) and (want_old or want_new):

            def one(a: str, b: str) -> float:
                return _similarity(a, b) if a and b else float(a == b)

            return min(one(old, want_old), one(new, want_new))
        content, wanted = _edit_content(args), _edit_content(expected)
        if content and wanted:
            return _similarity(content, wanted)
        return 0.0 if bool(content) != bool(wanted) else 1.0
    if category == expected_category == "bash":
        mine, theirs = _command(args), _command(expected)
        if mine and theirs:
            return _similarity(mine, theirs)
        return 1.0 if not mine and not theirs else 0.0
    return 1.0


class PivotScore:
    """One verdict: `reward`, NeMo Gym's `failure_reason` (`verdict`), the levels' results."""

    def __init__(self, reward: float, verdict: str, components: Mapping[str, float]) -> None:
        self.reward, self.verdict, self.components = reward, verdict, dict(components)


def pivot_score(
    expected: Mapping[str, Any],
    call: Mapping[str, Any] | None,
    reward_mode: RewardMode = "binary",
) -> PivotScore:
    """swe_pivot's `verify`: `expected` and `call` are {"name", "arguments"} (the reply's
    first tool call, None without one)."""
    if call is None:
        return PivotScore(0.0, "model_output_invalid", {})
    want_name, name = str(expected["name"]), str(call.get("name", ""))
    want_category, category = _category(want_name), _category(name)
    levels: dict[str, float] = {}
    try:
        want = _arguments(expected.get("arguments", ""))
        args = _arguments(call.get("arguments", ""))
        if not _same_tool(name, category, want_name, want_category):
            return PivotScore(0.0, "tool_name_mismatch", {"tool_name_match": 0.0})
        levels["tool_name_match"] = 1.0
        if not _same_target(category, args, want_category, want):
            return PivotScore(0.0, "target_mismatch", {**levels, "target_match": 0.0})
        levels["target_match"] = 1.0
        similarity = _argument_similarity(category, args, want_category, want)
        levels["similarity"] = similarity
        if similarity >= _FULL_CREDIT:
            reward = 1.0
        elif reward_mode == "continuous" and similarity >= _PARTIAL_FROM:
            reward = 0.5 + 0.5 * (similarity - _PARTIAL_FROM) / (_FULL_CREDIT - _PARTIAL_FROM)
        else:
            return PivotScore(0.0, "similarity_below_threshold", levels)
        if reward_mode == "continuous":
            content = _edit_content(args) if category == "edit" else ""
            penalty = _SIZE_ALPHA * min(len(content) / 500, 1.0) if content else 0.0
            levels["diff_size_penalty"] = penalty
            reward *= 1.0 - penalty
    except (AttributeError, TypeError, KeyError, ValueError, RecursionError):
        # Arguments that are JSON but not an object (or nested past the parser): NeMo
        # Gym's checks raise and it scores 0 (`unknown_error`).
        return PivotScore(0.0, "unknown_error", levels)
    return PivotScore(reward, "none", levels)


def pivot_action(row: Row) -> dict[str, Any]:
    """The row's expected function call, where swe_pivot looks for it: `expected_action`,
    else `expected_answer` as a JSON string, else `metadata.expected_action`; each counts
    only as {"type": "function_call", "name": ...}. A row with none is refused (NeMo Gym
    scores it 0 whatever the reply: `expected_action_invalid`)."""
    candidates: list[tuple[str, Any]] = [("expected_action", row.data.get("expected_action"))]
    answer = row.data.get("expected_answer")
    if isinstance(answer, str) and answer:
        try:
            candidates.append(("expected_answer", json.loads(answer)))
        except json.JSONDecodeError:
            pass
    metadata = row.data.get("metadata")
    if isinstance(metadata, dict):
        candidates.append(("metadata.expected_action", metadata.get("expected_action")))
    for field, found in candidates:
        if isinstance(found, dict) and found.get("type") == "function_call":
            if not isinstance(found.get("name"), str):
                raise row.bad(field, "is a function_call without a string 'name'")
            return {
                "type": "function_call",
                "name": found["name"],
                "arguments": found.get("arguments", ""),
            }
    raise row.bad(
        "expected_action",
        "holds no function call: swe_pivot reads {'type': 'function_call', 'name', "
        "'arguments'} from expected_action, expected_answer (JSON) or "
        "metadata.expected_action",
    )


class SwePivotMatch:
    """The verifier: the task's `expected_action` (a function call) against the reply's
    first tool call, by `pivot_score`; components `tool_name_match`, `target_match`,
    `similarity` (and `diff_size_penalty` in continuous mode) as far as the levels went."""

    def __init__(self, *, reward_mode: RewardMode = "binary") -> None:
        if reward_mode not in ("binary", "continuous"):
            raise ConfigError(f"reward_mode {reward_mode!r}: binary or continuous")
        self.reward_mode: RewardMode = reward_mode

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        from nemo_gym.envs.tools.next_action import reply_calls

        expected = task.metadata.get("expected_action")
        if not isinstance(expected, Mapping) or expected.get("type") != "function_call":
            raise VerifierError(
                f"task {task.id}: swe_pivot needs a function_call expected_action", code="bad_task"
            )
        calls, text = reply_calls(task, trajectory)
        call = {"name": calls[0].name, "arguments": calls[0].arguments} if calls else None
        found = pivot_score(expected, call, self.reward_mode)
        return Rewards(
            reward=found.reward,
            components=found.components,
            metadata={"verdict": found.verdict, "extracted_answer": call or text},
        )
