"""`workplace_assistant`: NeMo Gym's workplace world, verified on its tables, not the reply."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.envs.tools.workplace import World, same_state
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message, ToolCall

ROWS = Path(__file__).parents[1] / "data" / "nemo_gym" / "workplace_assistant.jsonl"


def _call(name: str, i: int = 0, **arguments: Any) -> Message:
    call = ToolCall(id=f"c{i}", name=name, arguments=json.dumps(arguments))
    return Message.assistant(tool_calls=(call,))


async def test_the_tools_act_on_a_world_of_the_episodes_own() -> None:
    env = gym.make("workplace_assistant")
    task = env.tasks()[0]  # reply to email 00000057
    body = "Thanks for the update - I will get back to you tomorrow."
    script = [
        _call("email_get_email_information_by_id", email_id="00000057", field="subject"),
        _call("email_reply_email", 1, email_id="00000057", body=body),
        "Replied.",
    ]
    done = await gym.rollout(env, gym.models.ScriptedModel(script), task)
    assert done.reward == 1.0, done.failure
    outputs = [json.loads(m.content or "") for m in done.trajectory.messages if m.role == "tool"]
    assert outputs[0]["output"]["subject"].startswith("Task Update on Develop prototype")
    assert outputs[1] == {"output": "Email replied successfully."}
    # The next episode starts from the initial tables: replying again is one reply, not two.
    again = await gym.rollout(env, gym.models.ScriptedModel(script), task)
    assert again.reward == 1.0
    claimed = await gym.rollout(env, gym.models.ScriptedModel(["I replied."]), task)
    assert claimed.reward == 0.0


async def test_a_failing_call_is_shown_to_the_model_and_changes_nothing() -> None:
    env = gym.make("workplace_assistant")
    task = env.tasks()[0]
    script = [_call("calendar_update_event", event_id="00000252", bogus=1), "ok"]
    done = await gym.rollout(env, gym.models.ScriptedModel(script), task)
    [output] = [m.content or "" for m in done.trajectory.messages if m.role == "tool"]
    assert "Error executing tool 'calendar_update_event'" in output
    assert done.reward == 0.0 and done.failure is None


def test_states_compare_case_insensitively_but_for_status() -> None:
    def update(field: str, value: str) -> list[dict[str, str]]:
        arguments = {"customer_id": "00000037", "field": field, "new_value": value}
        name = "customer_relationship_manager_update_customer"
        return [{"name": name, "arguments": json.dumps(arguments)}]

    assert same_state(
        World().replay(update("notes", "CALL")), World().replay(update("notes", "call"))
    )
    assert not same_state(
        World().replay(update("status", "LOST")), World().replay(update("status", "Lost"))
    )
    assert not same_state(World().replay(update("notes", "call")), World())


def test_worlds_do_not_share_tables() -> None:
    first = World()
    first.call("email_delete_email", {"email_id": "00000057"})
    assert not same_state(first, World()) and same_state(World(), World())


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"ground_truth": "email_send_email"}, "ground_truth"),
        ({"ground_truth": [{"arguments": "{}"}]}, r"ground_truth\[0\]"),
        (
            {"ground_truth": [{"name": "email_delete_email", "arguments": "{x"}]},
            r"ground_truth\[0\].arguments",
        ),
    ],
)
def test_bad_rows_name_the_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    row = {**json.loads(ROWS.read_text().splitlines()[0]), **change}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(gym.errors.ConfigError, match=rf"rows.jsonl:1: field .{field}"):
        ng.load(path, server="workplace_assistant").tasks()


def test_a_row_naming_a_tool_the_world_lacks_is_refused() -> None:
    row = json.loads(ROWS.read_text().splitlines()[0])
    row["responses_create_params"]["tools"].append(
        {"type": "function", "name": "email_purge_all", "parameters": {"type": "object"}}
    )
    env = ng.load([row], server="workplace_assistant")

    async def opened() -> None:
        async with await env.open(env.tasks()[0]):
            pass

    import asyncio

    with pytest.raises(gym.errors.ConfigError, match="no tool named 'email_purge_all'"):
        asyncio.run(opened())
