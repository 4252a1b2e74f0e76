"""The NeMo RL integration, against a restated copy of NeMo RL's interface.

NeMo RL is not installable here (PyPI's `nemo-rl` is a 0.0.0 placeholder; it installs
from its repository with a CUDA stack), so `nemo_rl_interface/` holds NeMo RL's
`EnvironmentInterface` / `EnvironmentReturn` and `driver.py` what its multi-turn
rollout loop does with them (see its README). The policy is scripted; the tokenizer is
SmolLM2's (from the embedded GGUF), so the texts and ids are those of a real template.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

import nemo_gym as gym
from nemo_gym.errors import ConfigError, HarnessError

pytest.importorskip("nemo_gym.models.chat", reason="needs the shared chat-template module")
INTERFACE = Path(__file__).parent / "nemo_rl_interface"


@pytest.fixture
def nemo_rl(monkeypatch):
    """Our module, imported with NeMo RL's interface importable."""
    monkeypatch.syspath_prepend(str(INTERFACE))
    for name in [n for n in sys.modules if n == "nemo_rl" or n.startswith("nemo_rl.")]:
        monkeypatch.delitem(sys.modules, name)
    module = importlib.reload(importlib.import_module("nemo_gym.integrations.nemo_rl"))
    driver = importlib.import_module("driver")
    yield module, driver
    monkeypatch.undo()
    importlib.reload(module)


def test_the_environment_is_a_nemo_rl_environment(nemo_rl) -> None:
    module, _ = nemo_rl
    from nemo_rl.environments.interfaces import EnvironmentInterface, EnvironmentReturn

    assert issubclass(module.NemoGymEnvironment, EnvironmentInterface)
    assert module.EnvironmentReturn is EnvironmentReturn


def test_without_nemo_rl_the_return_type_has_the_same_fields() -> None:
    module = importlib.import_module("nemo_gym.integrations.nemo_rl")
    sys.path.insert(0, str(INTERFACE))
    try:
        from nemo_rl.environments.interfaces import EnvironmentReturn
    finally:
        sys.path.remove(str(INTERFACE))
        for name in [n for n in sys.modules if n == "nemo_rl" or n.startswith("nemo_rl.")]:
            del sys.modules[name]
    assert module._EnvironmentReturn._fields == EnvironmentReturn._fields


def scripted(tokenizer, replies: list[list[str]]):
    """`generate(i, ids)`: sample i's next reply, tokenized, closed by the EOS token."""
    turn = [0] * len(replies)

    def generate(i: int, ids: list[int]) -> list[int]:
        text = replies[i][turn[i]]
        turn[i] += 1
        return [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]

    return generate


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def tools_of(env: gym.Environment, task: gym.Task) -> list[gym.ToolSpec]:
    async def probe():
        episode = await env.open(task)
        async with episode:
            return [t.spec for t in episode.tools]

    return asyncio.run(probe())


def bank_script(task: gym.Task) -> tuple[list[str], list[str]]:
    """Replies that solve a bank task in len(replies) turns, and the tool outputs."""
    start, final = dict(task.metadata["initial_balances"]), task.answer
    replies = [call("get_balance", account="checking")]
    outputs = [str(start["checking"])]
    for account in ("checking", "savings", "travel"):
        delta = final[account] - start[account]
        if delta:
            kind = "deposit" if delta > 0 else "withdraw"
            replies.append(call(kind, account=account, amount=abs(delta)))
            start[account] += delta
            outputs.append(f"ok: {account}={start[account]}")
    replies.append("All done.")
    return replies, outputs


def test_a_multi_turn_tool_rollout_is_token_exact_and_scored(nemo_rl, smollm2_tokenizer) -> None:
    module, driver = nemo_rl
    from nemo_gym.models.chat import ChatTemplate

    tokenizer = smollm2_tokenizer
    env = gym.make("bank")
    task = next(iter(env.tasks(split="train")))
    replies, outputs = bank_script(task)
    assert len(replies) >= 3
    nemo_env = module.NemoGymEnvironment(env=env, tokenizer=tokenizer)
    batch = [module.datum(env, task, tokenizer, idx=0)]
    driver.run(nemo_env, batch, tokenizer, scripted(tokenizer, [replies]))
    sample = batch[0]
    assert sample["total_reward"] == 1.0
    assert sample["turns"] == len(replies)
    roles = [m["role"] for m in sample["message_log"]]
    turns = len(replies) - 1
    assert roles == ["user", *["assistant", "tool"] * turns, "assistant", "environment"]

    # What NeMo RL concatenated (the prompt, the generations, the observations tokenized
    # raw) is exactly the chat template's rendering of the whole conversation.
    ids = torch.cat([m["token_ids"] for m in sample["message_log"]]).tolist()
    template = ChatTemplate(tokenizer)
    messages = gym.harnesses.opening_messages(task, env.harness.system_prompt)
    for number, (reply, output) in enumerate(zip(replies, outputs, strict=False)):
        content, calls = template.parse(reply)
        messages.append(gym.Message.assistant(content, tool_calls=calls))
        messages.append(gym.Message.tool(output, tool_call_id=f"c{number}"))
    messages.append(gym.Message.assistant(replies[-1]))
    text = template.render(messages, tools_of(env, task), generation_prompt=False)
    expected = template.encode(text)
    assert ids == expected[: len(ids)]
    assert tokenizer.decode(expected[len(ids) :]) == "\n"  # the template's final newline
    _, metrics = nemo_env.global_post_process_and_metrics(
        {"message_log": [], "loss_multiplier": torch.ones(1)}
    )
    assert metrics["nemo_gym/terminated"] == 1 and metrics["nemo_gym/failed"] == 0
    assert metrics["nemo_gym/open_rollouts"] == 0
    nemo_env.shutdown()


def test_a_group_of_samples_steps_together(nemo_rl, smollm2_tokenizer) -> None:
    module, driver = nemo_rl
    tokenizer = smollm2_tokenizer
    env = gym.make("bank")
    task = next(iter(env.tasks(split="train")))
    replies, _ = bank_script(task)
    lazy = [call("get_balance", account="savings"), "Done."]  # leaves the balances wrong
    nemo_env = module.NemoGymEnvironment(env=env, tokenizer=tokenizer)
    batch = [module.datum(env, task, tokenizer, idx=i) for i in range(3)]  # one GRPO group
    driver.run(nemo_env, batch, tokenizer, scripted(tokenizer, [replies, lazy, replies]))
    assert [s["total_reward"] for s in batch] == [1.0, 0.0, 1.0]
    assert [s["turns"] for s in batch] == [len(replies), 2, len(replies)]
    nemo_env.shutdown()


def test_single_turn_and_multi_step_environments(nemo_rl, smollm2_tokenizer) -> None:
    module, driver = nemo_rl
    tokenizer = smollm2_tokenizer
    arithmetic = gym.make("arithmetic")
    task = next(iter(arithmetic.tasks(split="train")))
    nemo_env = module.NemoGymEnvironment(env=arithmetic, tokenizer=tokenizer)
    batch = [module.datum(arithmetic, task, tokenizer, idx=0)] * 1
    batch = [dict(b, message_log=list(b["message_log"])) for b in batch]
    answer = f"\\boxed{{{task.answer}}}"
    driver.run(nemo_env, batch, tokenizer, scripted(tokenizer, [[answer]]))
    assert batch[0]["total_reward"] == 1.0 and batch[0]["turns"] == 1
    nemo_env.shutdown()

    guess = gym.make("guess_number", high=4, max_guesses=4)
    task = next(iter(guess.tasks(split="train")))
    nemo_env = module.NemoGymEnvironment(env=guess, tokenizer=tokenizer)
    batch = [module.datum(guess, task, tokenizer, idx=0)]
    order = [str(n) for n in range(1, 5)]
    driver.run(nemo_env, batch, tokenizer, scripted(tokenizer, [order]))
    sample = batch[0]
    assert sample["total_reward"] == 1.0
    assert sample["turns"] == int(task.answer)
    feedback = [m["content"] for m in sample["message_log"] if m["role"] == "user"][1:]
    assert all("Higher." in text for text in feedback)
    assert all(text.endswith("<|im_start|>assistant\n") for text in feedback)
    nemo_env.shutdown()


def test_a_failed_rollout_is_counted_and_masked(nemo_rl, smollm2_tokenizer) -> None:
    module, driver = nemo_rl

    async def crashing(task, trajectory):
        raise RuntimeError("verifier crashed")

    env = gym.Env(crashing, name="crash", tasks=[gym.Task(id="x", prompt="hi", answer="1")])
    task = env.tasks()[0]
    tokenizer = smollm2_tokenizer
    nemo_env = module.NemoGymEnvironment(env=env, tokenizer=tokenizer)
    batch = [module.datum(env, task, tokenizer, idx=0)]
    driver.run(nemo_env, batch, tokenizer, scripted(tokenizer, [["hello"]]))
    # NeMo RL's interface needs a number: 0.0, flagged, and masked in post-processing.
    assert batch[0]["total_reward"] == 0.0
    other = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    rows = {"message_log": [batch[0]["message_log"], other], "loss_multiplier": torch.ones(2)}
    rows, metrics = nemo_env.global_post_process_and_metrics(rows)
    assert rows["loss_multiplier"].tolist() == [0.0, 1.0]
    assert metrics["nemo_gym/failed"] == 1 and metrics["nemo_gym/masked_in_batch"] == 1
    nemo_env.shutdown()


def test_bad_input_and_abandoned_sessions(nemo_rl, smollm2_tokenizer) -> None:
    module, _ = nemo_rl
    tokenizer = smollm2_tokenizer
    env = gym.make("bank")
    task = next(iter(env.tasks(split="train")))
    nemo_env = module.NemoGymEnvironment(env=env, tokenizer=tokenizer, cfg={"session_ttl": 0})
    log = [
        {"role": "user", "content": "p"},
        {"role": "assistant", "content": call("get_balance", account="travel")},
    ]
    meta = {"task": task.model_dump_json()}
    first = nemo_env.step([log], [meta])
    assert not bool(first.terminateds[0]) and first.metadata[0]["session"]
    assert first.observations[0]["role"] == "tool"
    # NeMo RL stopped this sample (a turn or length limit) without telling us: the next
    # step cancels the paused rollout and closes its episode.
    nemo_env.step([log], [meta])
    _, metrics = nemo_env.global_post_process_and_metrics(
        {"message_log": [], "loss_multiplier": torch.ones(0)}
    )
    assert metrics["nemo_gym/reaped"] >= 1
    with pytest.raises(HarnessError, match="unknown"):
        nemo_env.step([log], [first.metadata[0]])
    with pytest.raises(ConfigError, match="no `task`"):
        nemo_env.step([log], [{}])
    with pytest.raises(ConfigError, match="assistant"):
        nemo_env.step([log[:1]], [meta])
    nemo_env.shutdown()
    with pytest.raises(ConfigError, match="cfg\\['env'\\]"):
        module.NemoGymEnvironment({})


def test_built_from_a_cfg_as_a_ray_actor_would_be(nemo_rl, smollm2_tokenizer, monkeypatch) -> None:
    module, _ = nemo_rl
    monkeypatch.setattr(module, "_load_tokenizer", lambda name: smollm2_tokenizer)
    nemo_env = module.NemoGymEnvironment(
        {"env": "guess_number", "env_options": {"high": 5}, "tokenizer": "smollm2"}
    )
    assert nemo_env.env.high == 5
    nemo_env.shutdown()


def test_a_success_with_the_text_of_a_failure_is_not_masked(nemo_rl, smollm2_tokenizer) -> None:
    module, driver = nemo_rl
    calls = {"n": 0}

    async def flaky(task, trajectory):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("verifier crashed once")
        return 1.0

    env = gym.Env(flaky, name="flaky", tasks=[gym.Task(id="x", prompt="hi", answer="1")])
    task = env.tasks()[0]
    tokenizer = smollm2_tokenizer
    nemo_env = module.NemoGymEnvironment(env=env, tokenizer=tokenizer, cfg={"max_new_tokens": 64})
    # One GRPO group: identical replies are common; the first rollout fails, the second
    # succeeds with the same conversation text.
    batch = [module.datum(env, task, tokenizer, idx=0) for _ in range(2)]
    driver.run(nemo_env, batch, tokenizer, scripted(tokenizer, [["hello"], ["hello"]]))
    assert [s["total_reward"] for s in batch] == [0.0, 1.0]
    rows = {
        "message_log": [s["message_log"] for s in batch],
        "total_reward": torch.tensor([s["total_reward"] for s in batch]),
        "loss_multiplier": torch.ones(2),
    }
    rows, metrics = nemo_env.global_post_process_and_metrics(rows)
    assert rows["loss_multiplier"].tolist() == [0.0, 1.0]
    assert metrics["nemo_gym/masked_in_batch"] == 1 and metrics["nemo_gym/failed_unmasked"] == 0
    # The failure was consumed: the same text succeeding in a later step stays trained.
    later = [module.datum(env, task, tokenizer, idx=0)]
    driver.run(nemo_env, later, tokenizer, scripted(tokenizer, [["hello"]]))
    rows = {
        "message_log": [later[0]["message_log"]],
        "total_reward": torch.tensor([later[0]["total_reward"]]),
        "loss_multiplier": torch.ones(1),
    }
    rows, _ = nemo_env.global_post_process_and_metrics(rows)
    assert later[0]["total_reward"] == 1.0 and rows["loss_multiplier"].tolist() == [1.0]
    nemo_env.shutdown()


def test_a_turn_cut_at_max_new_tokens_is_closed_by_the_observation(
    nemo_rl, smollm2_tokenizer
) -> None:
    module, driver = nemo_rl
    from nemo_gym.models.chat import ChatTemplate

    tokenizer = smollm2_tokenizer
    env = gym.make("guess_number", high=4, max_guesses=4)
    task = next(t for t in env.tasks(split="train") if int(t.answer) > 2)
    cap = 6
    long = "1 and that is my final answer for now"  # over `cap` tokens: cut, no EOS
    replies = [long, "2", str(task.answer)]
    nemo_env = module.NemoGymEnvironment(env=env, tokenizer=tokenizer, cfg={"max_new_tokens": cap})
    batch = [module.datum(env, task, tokenizer, idx=0)]
    driver.run(nemo_env, batch, tokenizer, scripted(tokenizer, [replies]), max_new_tokens=cap)
    sample = batch[0]
    assert sample["total_reward"] == 1.0
    first = sample["message_log"][1]
    assert first["role"] == "assistant" and len(first["token_ids"]) == cap
    assert tokenizer.eos_token_id not in first["token_ids"].tolist()
    # What NeMo RL trains on closes every assistant turn, the cut one included: it is
    # the template's rendering of the conversation.
    ids = torch.cat([m["token_ids"] for m in sample["message_log"]]).tolist()
    template = ChatTemplate(tokenizer)
    messages = gym.harnesses.opening_messages(task, env.harness.system_prompt)
    texts = [m["content"] for m in sample["message_log"] if m["role"] == "assistant"]
    feedback = ["Higher.", "Higher."]
    for text, said in zip(texts, feedback, strict=False):
        messages += [gym.Message.assistant(text), gym.Message.user(said)]
    messages.append(gym.Message.assistant(texts[-1]))
    rendered = template.render(messages, (), generation_prompt=False)
    assert tokenizer.decode(ids) == rendered[: len(tokenizer.decode(ids))]
    assert tokenizer.decode(ids).count(tokenizer.eos_token) == rendered.count(tokenizer.eos_token)
    _, metrics = nemo_env.global_post_process_and_metrics(
        {"message_log": [], "loss_multiplier": torch.ones(0)}
    )
    assert metrics["nemo_gym/cut_turns"] == 1
    nemo_env.shutdown()


def test_an_over_long_prompt_is_cut_and_masked_as_nemo_rls_processors_do(
    nemo_rl, smollm2_tokenizer
) -> None:
    module, driver = nemo_rl
    tokenizer = smollm2_tokenizer
    env = gym.make("bank")
    task = next(iter(env.tasks(split="train")))
    whole = module.datum(env, task, tokenizer, idx=0)
    full = whole["length"]
    datum = module.datum(env, task, tokenizer, idx=0, max_seq_length=full - 1)
    (message,) = datum["message_log"]
    assert message["token_ids"].tolist() == whole["message_log"][0]["token_ids"].tolist()[:4]
    assert message["content"] == whole["message_log"][0]["content"]
    assert datum["length"] == full and datum["loss_multiplier"] == 0.0
    # The environment ends it at once: no rollout against a prompt the model never saw.
    nemo_env = module.NemoGymEnvironment(env=env, tokenizer=tokenizer, cfg={"max_new_tokens": 64})
    driver.run(nemo_env, [datum], tokenizer, scripted(tokenizer, [["Done."]]))
    assert datum["total_reward"] == 0.0 and datum["turns"] == 1
    _, metrics = nemo_env.global_post_process_and_metrics(
        {"message_log": [], "loss_multiplier": torch.ones(0)}
    )
    assert metrics["nemo_gym/prompt_too_long"] == 1 and metrics["nemo_gym/open_rollouts"] == 0
    nemo_env.shutdown()
