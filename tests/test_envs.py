"""Built-in environments: determinism, verifiers, the stateful bank world."""

from __future__ import annotations

import json

import pytest

import nemo_gym as gym
from nemo_gym.models import ScriptedModel
from nemo_gym.verify.extract import final_integer, last_boxed


def test_catalog_lists_and_makes_builtins() -> None:
    assert {"arithmetic", "bank", "guess_number"} <= {info.name for info in gym.list_envs()}
    assert gym.make("arithmetic").name == "arithmetic"
    with pytest.raises(gym.errors.ConfigError, match="no environment named 'nope'"):
        gym.make("nope")


def test_register_a_custom_env() -> None:
    async def anything(task, trajectory):
        return 1.0

    # isolated: a name left registered changed the catalog page another test compares.
    with gym.registry.isolated():
        gym.register("env", "echo-test", lambda **kw: gym.Env(anything, name="echo-test", **kw))
        assert gym.make("echo-test").name == "echo-test"
        with pytest.raises(gym.errors.ConfigError, match="already registered"):
            gym.register("env", "arithmetic", lambda: None)


def test_arithmetic_is_seeded_and_splits_differ() -> None:
    a = list(gym.make("arithmetic", seed=1).tasks(limit=5))
    b = list(gym.make("arithmetic", seed=1).tasks(limit=5))
    c = list(gym.make("arithmetic", seed=1).tasks(split="train", limit=5))
    assert a == b and [t.prompt for t in a] != [t.prompt for t in c]
    for task in a:
        assert str(eval(task.metadata["expression"])) == task.answer
    with pytest.raises(ValueError, match="unknown split"):
        list(gym.make("arithmetic").tasks(split="dev"))


@pytest.mark.parametrize(
    ("text", "value", "boxed"),
    [
        ("so it is \\boxed{42}.", 42, True),
        ("\\boxed{1,234}", 1234, True),
        ("The answer is -7", -7, False),
        ("first 3 then \\boxed{\\frac{1}{2}}", None, True),  # not an integer: no fallback
        ("no digits", None, False),
        ("\\boxed{12.0}", 12, True),
        ("\\boxed{ {5} }", 5, True),
    ],
)
def test_final_integer(text: str, value: int | None, boxed: bool) -> None:
    found = final_integer(text)
    assert (found.value, found.boxed) == (value, boxed)


def test_last_boxed_handles_unbalanced_braces() -> None:
    assert last_boxed("\\boxed{a{b}c}") == "a{b}c"
    assert last_boxed("\\boxed{open") is None


async def test_arithmetic_end_to_end_with_a_correct_model() -> None:
    env = gym.make("arithmetic")

    def solve(request: gym.ModelRequest) -> str:
        expression = request.messages[-1].content.removeprefix("What is ").rstrip("?")
        return f"Compute: \\boxed{{{eval(expression)}}}"

    results = [r async for r in gym.rollouts(env, ScriptedModel(solve), limit=20)]
    assert len(results) == 20 and all(r.reward == 1.0 for r in results)
    assert results[0].rewards.components == {"accuracy": 1.0, "format": 1.0}
    assert results[0].messages[0].role == "system"


def _bank_solver(request: gym.ModelRequest) -> gym.Message | str:
    """Carry out the task's operations with tool calls, then confirm."""
    if request.messages[-1].role == "tool":
        return "Done."
    prompt = request.messages[-1].content.removeprefix("Please ").rstrip(".")
    calls = []
    for i, step in enumerate(prompt.split(", then ")):
        words = step.split()
        amount = int(words[1].lstrip("$"))
        if words[0] == "move":
            name, args = (
                "transfer",
                {"from_account": words[3], "to_account": words[5], "amount": amount},
            )
        elif words[0] == "deposit":
            name, args = "deposit", {"account": words[3], "amount": amount}
        else:
            name, args = "withdraw", {"account": words[3], "amount": amount}
        calls.append(gym.ToolCall(id=f"c{i}", name=name, arguments=json.dumps(args)))
    return gym.Message.assistant(tool_calls=tuple(calls))


async def test_bank_is_verified_on_final_state_not_wording() -> None:
    env = gym.make("bank", size=10)
    results = [r async for r in gym.rollouts(env, ScriptedModel(_bank_solver), concurrency=1)]
    assert all(r.ok for r in results)
    assert [r.reward for r in results] == [1.0] * 10
    assert all(r.trajectory.final_state == r.task.answer for r in results)


async def test_bank_claims_without_tool_calls_score_zero() -> None:
    env = gym.make("bank", size=3)
    results = [
        r
        async for r in gym.rollouts(env, ScriptedModel(["All done, balances updated!"], cycle=True))
    ]
    assert all(r.ok and r.reward == 0.0 for r in results)


async def test_bank_tools_refuse_overdrafts_and_unknown_accounts() -> None:
    env = gym.make("bank", size=1)
    task = next(iter(env.tasks()))
    async with await env.open(task) as episode:
        tools = {t.name: t for t in episode.tools}
        start = dict(episode.state)
        with pytest.raises(ValueError, match="insufficient funds"):
            await tools["withdraw"](account="checking", amount=10**9)
        with pytest.raises(KeyError, match="no account 'gold'"):
            await tools["transfer"](from_account="checking", to_account="gold", amount=1)
        assert episode.state == start


async def test_guess_number_reads_a_guess_through_the_extractor() -> None:
    from nemo_gym.envs.games.guess_number import GuessEpisode

    episode = GuessEpisode(secret=37, max_guesses=5)
    assert (await episode.step("<think>maybe 12?</think> My guess is 50.")).observation == "Lower."
    assert (await episode.step("\\boxed{37}")).terminated
    assert (await episode.step("about 3.5")).observation == "Reply with one integer."
    assert episode.state["guesses"] == [50, 37]
