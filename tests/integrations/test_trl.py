"""The TRL integration, against the installed `trl` release.

The `GRPOTrainer` tests build a tiny random-weight Llama from a config (the SmolLM2
tokenizer comes from the embedded GGUF, so nothing is downloaded) and run two
optimisation steps on the CPU.
"""

from __future__ import annotations

import json
import logging
import os
from types import SimpleNamespace

import pytest
from charpolicy import EOS, CharPolicy, Counter, adder, decode
from tinyllama import tiny_llama

import nemo_gym as gym
from nemo_gym.errors import ConfigError, SandboxError, ToolError

trl = pytest.importorskip("trl", reason="the TRL tests need `pip install 'nemo-gym[trl]'`")
gym_trl = pytest.importorskip("nemo_gym.integrations.trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


async def always(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return 1.0


def fake_trainer(**fields):
    """What `rollout_func` reads of a GRPOTrainer, for tests that do not train."""
    tokenizer = SimpleNamespace(eos_token_id=EOS, pad_token_id=0)
    defaults = dict(
        temperature=1.0, top_p=1.0, max_completion_length=32, processing_class=tokenizer
    )
    return SimpleNamespace(**{**defaults, **fields})


# -- dataset -----------------------------------------------------------------------------


def test_dataset_has_conversational_prompts_and_the_tasks() -> None:
    env = gym.make("arithmetic", size=5)
    data = gym_trl.dataset(env, split="train", limit=3)
    assert data.column_names == ["prompt", "task_id", "task", "env"]
    assert len(data) == 3
    row = data[0]
    task = gym.Task.model_validate_json(row["task"])
    assert row["task_id"] == task.id == "arithmetic-train-0"
    # The harness's system prompt is part of what the model sees.
    assert row["prompt"][0] == {"role": "system", "content": env.harness.system_prompt}
    assert row["prompt"][1] == {"role": "user", "content": task.messages[0].content}
    assert row["env"] == "arithmetic"


def test_dataset_refuses_duplicate_task_ids() -> None:
    tasks = [gym.Task(id="same", prompt="a"), gym.Task(id="same", prompt="b")]
    env = gym.Env(always, name="dup", tasks=tasks)
    with pytest.raises(ConfigError, match="positions 0 and 1"):
        gym_trl.dataset(env, tasks=tasks)


# -- reward functions ----------------------------------------------------------------------


async def exact(task: gym.Task, trajectory: gym.Trajectory) -> gym.Rewards:
    if trajectory.final_text == "boom":
        raise RuntimeError("verifier crashed")
    right = trajectory.final_text.strip() == task.answer
    return gym.Rewards(reward=float(right), components={"length": len(trajectory.final_text)})


def echo_env() -> gym.Env:
    tasks = [gym.Task(id=f"t{i}", prompt=f"say {i}", answer=str(i)) for i in range(3)]
    return gym.Env(exact, name="echo", tasks={"train": tasks})


@pytest.mark.parametrize("asynchronous", [True, False])
async def test_reward_funcs_verify_completions_and_mask_failures(asynchronous, caplog) -> None:
    env = echo_env()
    data = gym_trl.dataset(env, split="train")
    (score,) = gym_trl.reward_funcs(env, asynchronous=asynchronous)
    assert score.__name__ == "nemo_gym_echo"
    logged: dict[str, float] = {}
    completions = [
        [{"role": "assistant", "content": "0"}],
        [{"role": "assistant", "content": "7"}],
        [{"role": "assistant", "content": "boom"}],
    ]
    kwargs = dict(
        prompts=data["prompt"],
        completions=completions,
        task=data["task"],
        task_id=data["task_id"],
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    with caplog.at_level(logging.WARNING):
        if asynchronous:
            rewards = await score(**kwargs)
        else:
            import asyncio

            rewards = await asyncio.to_thread(score, **kwargs)
    assert rewards == [1.0, 0.0, None]  # a crashed verifier masks the sample
    assert "verifier crashed" in caplog.text
    assert logged["nemo_gym_echo/length"] == pytest.approx(1.0)
    assert logged["nemo_gym_echo/masked_fraction"] == pytest.approx(1 / 3)


def test_reward_funcs_plain_text_completions_and_missing_task_column() -> None:
    env = echo_env()
    data = gym_trl.dataset(env, split="train")
    (score,) = gym_trl.reward_funcs(env, asynchronous=False)
    assert score(prompts=None, completions=["1", "1"], task=data["task"][:2]) == [0.0, 1.0]
    with pytest.raises(ConfigError, match="no `task` column"):
        score(prompts=None, completions=["1"])


def test_reward_funcs_pass_rollout_rewards_through() -> None:
    (score,) = gym_trl.reward_funcs(echo_env(), asynchronous=False)
    logged: dict[str, float] = {}
    out = score(
        completions=["x", "y"],
        nemo_gym_reward=[0.5, None],
        nemo_gym_components=[{"accounts": 1.0}, {}],
        log_metric=lambda n, v: logged.__setitem__(n, v),
    )
    assert out == [0.5, None]
    assert logged["nemo_gym_echo/accounts"] == 1.0


# -- environment_factory --------------------------------------------------------------------


def test_environment_factory_runs_bank_episodes_through_trl_shaped_calls() -> None:
    from transformers.utils import get_json_schema

    env = gym.make("bank")
    data = gym_trl.dataset(env, split="train", limit=2)
    cls = gym_trl.environment_factory(env, split="train")
    instance = cls()
    # What TRL's GRPOTrainer sees: reset, get_reward and the tools as public functions.
    import inspect

    members = {n for n, _ in inspect.getmembers(type(instance), inspect.isfunction)}
    public = {n for n in members if not n.startswith("_")}
    assert public == {"reset", "get_reward", "get_balance", "transfer", "deposit", "withdraw"}
    schema = get_json_schema(instance.transfer)["function"]
    assert schema["name"] == "transfer"
    assert schema["description"] == "Move money between two accounts."
    assert schema["parameters"]["properties"]["amount"]["type"] == "integer"
    assert set(schema["parameters"]["required"]) == {"from_account", "to_account", "amount"}

    row = data[0]
    task = gym.Task.model_validate_json(row["task"])
    assert instance.reset(**row) is None
    start = task.metadata["initial_balances"]
    assert instance.get_balance(account="checking") == str(start["checking"])
    with pytest.raises(KeyError):
        instance.get_balance(account="nope")  # TRL shows the error to the model
    # Replay the operations the task asks for, then score the final state.
    final = task.answer
    for account in ("checking", "savings", "travel"):
        delta = final[account] - start[account]
        if delta > 0:
            instance.deposit(account=account, amount=delta)
        elif delta < 0:
            instance.withdraw(account=account, amount=-delta)
    assert instance.get_reward() == 1.0
    assert [r.name for r in instance.tool_results][:2] == ["get_balance", "get_balance"]
    assert instance.tool_results[1].error is not None
    # A fresh episode for the next row; doing nothing leaves the balances wrong.
    instance.reset(**data[1])
    assert instance.get_reward() == 0.0


@pytest.mark.parametrize("error", [ToolError, SandboxError])
def test_environment_factory_masks_a_broken_episode(error: type[ToolError | SandboxError]) -> None:
    class Fragile(gym.Env):
        name = "fragile"

        def tasks(self, split="test", limit=None):
            return [gym.Task(id="f0", prompt="go")]

        async def open(self, task):
            @gym.tool
            async def poke() -> str:
                """Poke the world."""
                raise error("the sandbox died")

            return gym.BasicEpisode([poke])

    cls = gym_trl.environment_factory(Fragile(always))
    instance = cls()
    instance.reset(task=gym.Task(id="f0", prompt="go").model_dump_json())
    with pytest.raises(error):
        instance.poke()
    assert instance.failure is not None and instance.failure.startswith(error.kind)
    assert instance.get_reward() is None
    with pytest.raises(ConfigError, match="no `task` column"):
        instance.reset(prompt=[])


def test_environment_factory_refuses_tools_that_cannot_be_methods() -> None:
    class Clash(gym.Env):
        name = "clash"

        def tasks(self, split="test", limit=None):
            return [gym.Task(id="c0", prompt="go")]

        async def open(self, task):
            @gym.tool(name="reset")
            async def thing() -> str:
                """A tool named like TRL's reset."""
                return ""

            return gym.BasicEpisode([thing])

    with pytest.raises(ConfigError, match="reset"):
        gym_trl.environment_factory(Clash(always))


# -- rollout_func ---------------------------------------------------------------------------


def test_rollout_func_plays_groups_and_masks_everything_the_policy_did_not_generate() -> None:
    env = Counter(target=3, tasks=2)
    data = gym_trl.dataset(env, split="train")
    plans = {"reach 3 (task 0)": [1, 2], "reach 3 (task 1)": [3]}
    seen_seeds: list[int | None] = []

    def reply(request: gym.ModelRequest) -> gym.Message:
        seen_seeds.append(request.sampling.seed)
        prompt = next(m.content for m in request.messages if m.role == "user")
        return adder(plans[prompt])(request)

    policy = CharPolicy(reply)
    rollout = gym_trl.rollout_func(env, policy=policy)
    prompts = [data["prompt"][0]] * 3 + [data["prompt"][1]] * 3  # num_generations=3
    out = rollout(prompts, fake_trainer())
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == 6
    assert [r.task_id for r in rollout.last_rollouts] == ["c0"] * 3 + ["c1"] * 3
    assert [r.repeat for r in rollout.last_rollouts] == [0, 1, 2] * 2
    for i, item in enumerate(rollout.last_rollouts):
        calls = item.trajectory.model_calls
        assert out["prompt_ids"][i] == calls[0].response.prompt_token_ids
        full = out["prompt_ids"][i] + out["completion_ids"][i]
        last = calls[-1].response
        assert full == last.prompt_token_ids + last.completion_token_ids
        mask = out["env_mask"][i]
        assert len(mask) == len(out["completion_ids"][i]) == len(out["logprobs"][i])
        generated = [t for t, m in zip(out["completion_ids"][i], mask, strict=True) if m]
        assert generated == [t for c in calls for t in c.response.completion_token_ids]
        off = decode([t for t, m in zip(out["completion_ids"][i], mask, strict=True) if not m])
        assert "<tool>" in off  # the tool results are not trained on
        assert out["nemo_gym_reward"][i] == item.reward == 1.0
        assert out["nemo_gym_turns"][i] == len(calls)
    # Sampling is the trainer's, and every repeat got its own seed.
    first = rollout.last_rollouts[0].trajectory.model_calls[0].request.sampling
    assert (first.temperature, first.max_tokens) == (1.0, 32)
    assert len({r.seed for r in rollout.last_rollouts}) == 6
    # The next call samples anew (fresh seeds), as a later visit of a task should.
    before = {r.seed for r in rollout.last_rollouts}
    rollout(prompts, fake_trainer())
    assert before.isdisjoint({r.seed for r in rollout.last_rollouts})


def test_rollout_func_masks_failed_and_retokenized_rollouts() -> None:
    env = Counter(target=3, tasks=2)
    data = gym_trl.dataset(env, split="train")

    def reply(request: gym.ModelRequest) -> gym.Message:
        if request.sampling.seed % 2:
            raise RuntimeError("engine died")
        return adder([3])(request)

    rollout = gym_trl.rollout_func(env, policy=CharPolicy(reply))
    out = rollout([data["prompt"][0]] * 4, fake_trainer())
    statuses = out["nemo_gym_status"]
    assert "ok" in statuses and any(s.startswith("failed: model") for s in statuses)
    for status, reward, mask, ids in zip(
        statuses, out["nemo_gym_reward"], out["env_mask"], out["completion_ids"], strict=True
    ):
        if status == "ok":
            assert reward == 1.0 and sum(mask) > 0
        else:  # masked: no reward (not 0) and nothing to train on
            assert reward is None and mask == [0] and ids == [EOS]

    retokenizing = gym_trl.rollout_func(env, policy=CharPolicy(adder([1, 2]), retokenize=True))
    out = retokenizing([data["prompt"][1]] * 2, fake_trainer())
    assert all(s.startswith("retokenized") for s in out["nemo_gym_status"])
    assert out["nemo_gym_reward"] == [None, None]


def test_closing_the_spec_closes_what_it_opened() -> None:
    closed: list[str] = []

    class Owning(Counter):
        async def aclose(self) -> None:
            closed.append("env")

    class Built(CharPolicy):
        async def aclose(self) -> None:
            closed.append("policy")

    env = Owning(tasks=1)
    given = CharPolicy(adder([3]))
    s = gym_trl.spec(env, split="train", policy=given)
    prompt = s.train_dataset["prompt"][0]
    s.rollout_func([prompt] * 2, fake_trainer())
    s.rollout_func([prompt] * 2, fake_trainer())
    assert closed == []  # environments stay open across steps
    s.close()
    assert closed == ["env"]  # a policy handed in is the caller's to close
    built = gym_trl.spec(Owning(tasks=1), split="train", policy=lambda trainer: Built(adder([3])))
    built.rollout_func([prompt] * 2, fake_trainer())
    built.rollout_func([prompt] * 2, fake_trainer())  # another trainer: the old policy closes
    built.close()
    assert closed == ["env", "policy", "env", "policy"]


def test_rollout_func_finds_tasks_or_says_why_not() -> None:
    env = Counter(tasks=1)
    rollout = gym_trl.rollout_func(env, policy=CharPolicy(adder([3])))
    with pytest.raises(ConfigError, match="none of the 1 tasks"):
        rollout([[{"role": "user", "content": "something else"}]], fake_trainer())
    twins = [gym.Task(id="a", prompt="same", answer=1), gym.Task(id="b", prompt="same", answer=2)]
    ambiguous = gym_trl.rollout_func(env, tasks=twins, policy=CharPolicy(adder([3])))
    with pytest.raises(ConfigError, match="'a', 'b' have the same prompt"):
        ambiguous([[{"role": "user", "content": "same"}]], fake_trainer())
    # The same task under two ids (a generator repeating itself) is not ambiguous.
    copies = [
        gym.Task(id="x", prompt="reach 3", answer=3),
        gym.Task(id="y", prompt="reach 3", answer=3),
    ]
    rollout = gym_trl.rollout_func(env, tasks=copies, policy=CharPolicy(adder([3])))
    rollout([[{"role": "user", "content": "reach 3"}]] * 2, fake_trainer())
    assert [r.task_id for r in rollout.last_rollouts] == ["x", "x"]


def test_rollout_func_handles_a_slice_with_split_and_repeated_groups() -> None:
    # On several processes a slice can cut a group, and a small dataset can put one
    # prompt in two groups of one batch: each run of identical prompts is its own group.
    env = Counter(target=3, tasks=2)
    data = gym_trl.dataset(env, split="train")
    a, b = data["prompt"]
    prompts = [a, b, b, a, a]
    rollout = gym_trl.rollout_func(env, policy=CharPolicy(adder([3])))
    rollout(prompts, fake_trainer())
    assert [r.task_id for r in rollout.last_rollouts] == ["c0", "c1", "c1", "c0", "c0"]
    assert len({r.seed for r in rollout.last_rollouts}) == 5


def test_every_sampling_knob_of_the_trainer_reaches_the_policy(tmp_path) -> None:
    """GRPOConfig's top_k/min_p/repetition_penalty and its generation_kwargs (which TRL
    lets override them) arrive in Sampling; a policy that cannot apply one stops the
    call with the adapter's reason instead of masking every rollout."""
    env = Counter(target=3, tasks=1)
    prompt = gym_trl.dataset(env, split="train")["prompt"][0]
    seen: list[gym.Sampling] = []

    def reply(request: gym.ModelRequest) -> gym.Message:
        seen.append(request.sampling)
        return adder([3])(request)

    config = trl.GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to=[],
        top_k=7,
        min_p=0.1,
        repetition_penalty=1.1,
        generation_kwargs={"presence_penalty": 0.5, "top_k": 9, "max_new_tokens": 5},
    )
    trainer = fake_trainer(
        top_k=config.top_k,
        min_p=config.min_p,
        repetition_penalty=config.repetition_penalty,
        args=config,
    )
    gym_trl.rollout_func(env, policy=CharPolicy(reply))([prompt], trainer)
    assert seen[0].extra == {
        "top_k": 9,
        "min_p": 0.1,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.5,
    }
    assert seen[0].max_tokens == 5
    # TRL's defaults (top_k 0, min_p None, repetition_penalty 1.0) send nothing.
    seen.clear()
    gym_trl.rollout_func(env, policy=CharPolicy(reply))(
        [prompt], fake_trainer(top_k=0, repetition_penalty=1.0)
    )
    assert seen[0].extra == {}

    def refuse(request: gym.ModelRequest) -> gym.Message:
        from nemo_gym.knobs import refuse_knobs

        refuse_knobs(request.sampling.extra, "NoKnobs", ())
        return adder([3])(request)

    with pytest.raises(ConfigError, match=r"NoKnobs cannot honour .*min_p=0.1"):
        gym_trl.rollout_func(env, policy=CharPolicy(refuse))([prompt] * 2, trainer)


def test_trainer_policy_against_trl_s_vllm_server() -> None:
    pytest.importorskip("openai")
    client = SimpleNamespace(base_url="http://127.0.0.1:8000", model="policy")
    trainer = fake_trainer(
        use_vllm=True, vllm_mode="server", vllm_generation=SimpleNamespace(vllm_client=client)
    )
    policy = gym_trl.trainer_policy(trainer)
    assert isinstance(policy, gym.models.OpenAIChat)
    assert policy.return_token_ids and policy.logprobs
    assert policy.model == "policy"


# -- GRPOTrainer end to end --------------------------------------------------------------------


@pytest.fixture
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer


def grpo_config(tmp_path, **overrides):
    fields = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    return trl.GRPOConfig(**{**fields, **overrides})


def test_grpo_trainer_two_steps_with_reward_funcs(tokenizer, tmp_path) -> None:
    import torch

    async def lengthy(task: gym.Task, trajectory: gym.Trajectory) -> gym.Rewards:
        # Random tokens decode to texts of varying length: a reward with a spread.
        text = trajectory.final_text
        return gym.Rewards(reward=len(text) / 40, components={"spaces": text.count(" ")})

    tasks = [gym.Task(id=f"q{i}", prompt=f"Write something about {i}.") for i in range(8)]
    env = gym.Env(lengthy, name="lengthy", tasks={"train": tasks})
    s = gym_trl.spec(env, split="train")
    model = tiny_llama(tokenizer)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=s.reward_funcs,
        args=grpo_config(tmp_path),
        train_dataset=s.train_dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    for entry in logs:
        assert entry["rewards/nemo_gym_lengthy/mean"] > 0
        assert "nemo_gym_lengthy/spaces" in entry  # named components are logged
        assert entry["nemo_gym_lengthy/masked_fraction"] == 0.0
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())


def test_grpo_trainer_two_steps_with_rollout_func_on_a_tool_environment(
    tokenizer, tmp_path
) -> None:
    """The TRL plumbing of multi-turn rollouts: exact ids, env_mask, pass-through rewards.

    The policy here is scripted (so the rewards vary and the advantages are non-zero);
    the test with the trainer's own live model is `test_grpo_rollouts_follow_the_weights`.
    """
    env = Counter(target=3, tasks=4)
    plans = {0: [3], 1: [1, 2], 2: [1], 3: [2, 2]}

    def reply(request: gym.ModelRequest) -> gym.Message:
        return adder(plans[request.sampling.seed % 4])(request)

    s = gym_trl.spec(env, split="train", policy=CharPolicy(reply))
    trainer = trl.GRPOTrainer(
        model=tiny_llama(tokenizer),
        reward_funcs=s.reward_funcs,
        args=grpo_config(tmp_path),
        train_dataset=s.train_dataset,
        processing_class=tokenizer,
        rollout_func=s.rollout_func,
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2 and s.rollout_func.calls == 2
    rewards = [r.reward for r in s.rollout_func.last_rollouts]
    assert set(rewards) <= {0.0, 1.0} and None not in rewards
    assert all(r.trajectory.tool_results for r in s.rollout_func.last_rollouts)
    assert all(entry["completions/mean_length"] > 0 for entry in logs)
    assert json.dumps(logs)  # the logged numbers are plain floats


class EveryReplyCalls:
    """A tool format under which any text is a call to `add` (n = its length mod 3).

    A random-weight model writes no `<tool_call>` blocks, so with this format its own
    replies drive the tool loop: every rollout is multi-turn with real tool results.
    """

    name = "every-reply-calls"

    def tools_prompt(self, tools):
        return "Tools: " + ", ".join(t.name for t in tools)

    def render_calls(self, content, calls):
        return content or ""

    def render_result(self, content):
        return f"[result {content}]"

    def parse(self, text):
        n = len(text) % 3
        return text, (gym.ToolCall(id=f"c{len(text)}", name="add", arguments=f'{{"n": {n}}}'),)


def test_grpo_rollouts_follow_the_weights(tokenizer, tmp_path) -> None:
    """rollout_func with the trainer's own model on a multi-turn tool environment: the
    second step's rollouts are sampled from the weights the first step produced."""
    import torch
    import transformers

    async def even(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return float(trajectory.final_state["value"] % 2 == 0)  # about half the rollouts

    env = Counter(tasks=4)
    env.verifier = gym.as_verifier(even)
    env.harness = gym.harnesses.ToolLoop(max_turns=3)
    model = tiny_llama(tokenizer)
    s = gym_trl.spec(
        env,
        split="train",
        policy=lambda trainer: gym.models.LivePolicy(
            trainer.model, trainer.processing_class, tool_format=EveryReplyCalls()
        ),
    )
    snapshots: list[dict[str, torch.Tensor]] = []
    calls: list[list[gym.Rollout]] = []

    class Watch(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})
            calls.append(list(s.rollout_func.last_rollouts))

    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=s.reward_funcs,
        args=grpo_config(tmp_path, max_completion_length=6),
        train_dataset=s.train_dataset,
        processing_class=tokenizer,
        rollout_func=s.rollout_func,
        callbacks=[Watch()],
    )
    assert isinstance(gym_trl.trainer_policy(trainer), gym.models.LivePolicy)
    trainer.train()
    assert len(calls) == 2
    first, second = calls
    # Multi-turn, with the tool results between the turns off the mask.
    for item in first + second:
        assert item.ok and len(item.trajectory.model_calls) == 3
        assert len(item.trajectory.tool_results) == 3
        sample = gym.training.sample(item)
        assert (
            sample.trainable and sample.num_generated < len(sample.token_ids) - sample.prompt_length
        )
    # Step 1 changed the weights, and step 2's rollouts were sampled from them: their
    # behaviour logprobs are those of the weights after step 1, not the initial ones.
    assert any(not torch.equal(initial[n], snapshots[0][n]) for n in initial)

    def logprobs(weights, rollout):
        model.load_state_dict(weights, strict=False)
        sample = gym.training.sample(rollout)
        ids = torch.tensor([sample.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        chosen = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(sample.loss_mask[1:], dtype=torch.bool)
        return chosen[mask], torch.tensor(sample.logprobs[1:])[mask]

    # Batched, cached sampling and one teacher-forced pass differ by float32 rounding (up
    # to ~5e-4 here; tests/models/test_policy.py allows 2e-3); the initial weights are
    # off by ~0.17.
    recomputed, behaviour = logprobs(snapshots[0], second[0])
    assert torch.allclose(recomputed, behaviour, atol=2e-3)
    stale, _ = logprobs(initial, second[0])
    assert not torch.allclose(stale, behaviour, atol=2e-2)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> list[dict]:
    """`trl_world.py` on two processes (torchrun, gloo, CPU): each process's record of
    a synchronous run and a run with prefetched steps (one launch for both)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("trl_world.py")
    tests = str(Path(__file__).parents[1])  # trl_world imports the shared tiny model
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    tmp_path = tmp_path_factory.mktemp("trl-world")
    command += ["--nproc_per_node", "2", str(script), str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    return ranks


def test_grpo_groups_split_across_processes_hold_distinct_samples(world) -> None:
    """Two processes (torchrun, gloo, CPU) with per-device batch 2 and num_generations 4:
    each group is split in halves. Every sample of a group must be sampled with its own
    seed; with per-process seeds both halves were the same two samples."""
    calls = list(zip(world[0]["sync"], world[1]["sync"], strict=True))
    assert len(calls) == 2
    for first, second in calls:
        assert first["step"] == second["step"]
        group = first["rollouts"] + second["rollouts"]  # process 0's slice, then 1's
        assert len({r["task"] for r in group}) == 1  # one group, split in two
        assert [r["repeat"] for r in group] == [0, 1, 2, 3]
        assert all(r["ok"] for r in group)
        assert len({r["seed"] for r in group}) == 4
        assert len({tuple(r["completion"]) for r in group}) == 4
    seeds = [r["seed"] for first, second in calls for r in first["rollouts"] + second["rollouts"]]
    assert len(set(seeds)) == len(seeds)  # and the next step samples anew


def test_grpo_prefetched_steps_across_processes(world) -> None:
    """The same world with ahead=1: each process returns its half of every group, of
    the same task, from the same weights version, at most one sync old."""
    calls = list(zip(world[0]["ahead"], world[1]["ahead"], strict=True))
    assert len(calls) == 2
    tasks = []
    for number, (first, second) in enumerate(calls):
        assert first["step"] == second["step"] == number
        group = first["rollouts"] + second["rollouts"]
        assert len({r["task"] for r in group}) == 1
        assert [r["repeat"] for r in group] == [0, 1, 2, 3]  # disjoint, complete
        assert all(r["ok"] for r in group)
        assert len({r["seed"] for r in group}) == 4
        assert len({tuple(r["completion"]) for r in group}) == 4
        assert len({r["version"] for r in group}) == 1  # one version per group
        assert first["staleness"] == second["staleness"] == [0 if number == 0 else 1] * 2
        tasks.append(group[0]["task"])
    assert [r["version"] for first, _ in calls for r in first["rollouts"][:1]] == [1, 1]
    assert len(set(tasks)) == 2  # the first epoch of the order: distinct tasks


def test_rollout_func_seeds_follow_the_world_s_sample_index() -> None:
    """What each process derives from TRL's layout: the global index, not a local count."""
    env = Counter(target=3, tasks=2)
    data = gym_trl.dataset(env, split="train")
    a, b = data["prompt"]

    def trainer(rank: int, step: int, training: bool = True) -> SimpleNamespace:
        return fake_trainer(
            accelerator=SimpleNamespace(process_index=rank),
            state=SimpleNamespace(global_step=step),
            model=SimpleNamespace(training=training),
            num_generations=4,
            num_generations_eval=2,
        )

    played: dict[tuple[int, int], list[gym.Rollout]] = {}
    for rank, prompts in ((0, [a, a, a, a, b, b]), (1, [b, b, a, a, a, a])):
        rollout = gym_trl.rollout_func(env, policy=CharPolicy(adder([3])))
        rollout(prompts, trainer(rank, 5))
        played[rank, 5] = rollout.last_rollouts
        rollout(prompts, trainer(rank, 6))
        played[rank, 6] = rollout.last_rollouts
    world = played[0, 5] + played[1, 5]
    # Groups: [a x4] [b x4, split across the processes] [a x4]; the same task twice.
    assert [r.repeat for r in world] == [0, 1, 2, 3] * 3
    assert [r.task_id for r in world] == ["c0"] * 4 + ["c1"] * 4 + ["c0"] * 4
    assert len({r.seed for r in world}) == 12
    assert {r.seed for r in world}.isdisjoint(r.seed for r in played[0, 6] + played[1, 6])
    # The same process, step and batch reproduce the same seeds (a restarted run).
    again = gym_trl.rollout_func(env, policy=CharPolicy(adder([3])))
    again([a, a, a, a, b, b], trainer(0, 5))
    assert [r.seed for r in again.last_rollouts] == [r.seed for r in played[0, 5]]
    # Evaluation at the same step uses num_generations_eval and seeds of its own.
    again([a, a, b, b], trainer(0, 5, training=False))
    assert [r.repeat for r in again.last_rollouts] == [0, 1, 0, 1]
    assert {r.seed for r in again.last_rollouts}.isdisjoint(r.seed for r in world)


def test_grpo_trainer_runs_environment_factory_episodes(tokenizer, tmp_path) -> None:
    """TRL's own tool loop over our bank episodes: every sample's episode is opened by
    reset(), scored by get_reward() and closed. (A random model calls no tools, so the
    balances stay put and every reward is a real 0.)"""
    import copy
    from pathlib import Path

    template = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
    if not template.is_file():
        pytest.skip(f"this trl has no {template.name}")
    tool_tokenizer = copy.deepcopy(tokenizer)
    tool_tokenizer.chat_template = template.read_text()  # ChatML, with tools, as Qwen2.5's

    opened: list[str] = []
    closed: list[str] = []

    class CountingBank(type(gym.make("bank"))):
        async def open(self, task):
            episode = await super().open(task)
            opened.append(task.id)

            async def note() -> None:
                closed.append(task.id)

            episode.on_close(note)
            return episode

    env = CountingBank()
    s = gym_trl.spec(env, split="train", limit=4)
    trainer = trl.GRPOTrainer(
        model=tiny_llama(tokenizer),
        reward_funcs=s.reward_funcs,
        args=grpo_config(tmp_path, max_steps=1, max_tool_calling_iterations=2),
        train_dataset=s.train_dataset,
        processing_class=tool_tokenizer,
        environment_factory=s.environment_factory,
    )
    trainer.train()
    (entry,) = [e for e in trainer.state.log_history if "loss" in e]
    assert entry["rewards/BankEnvironment/mean"] == 0.0
    # Our reward function stepped aside (None for every sample), so nothing counted twice.
    assert entry["rewards/nemo_gym_bank/mean"] is None
    assert "nemo_gym_bank/masked_fraction" not in entry
    assert len(opened) == 1 + 4  # the probe, then one episode per sample of the step
    assert sorted(closed) == sorted(opened)


# -- prefetched steps (ahead > 0) ---------------------------------------------------------


class Versioned(CharPolicy):
    """A slow scripted policy whose `version` moves only on `sync`; every response
    records the version at the start and at the end of its call."""

    def __init__(self) -> None:
        super().__init__(adder([3]))
        self.version = 0

    def sync(self, trainer: object) -> None:
        self.version += 1

    async def generate(self, request: gym.ModelRequest) -> gym.ModelResponse:
        import asyncio

        start = self.version
        await asyncio.sleep(0.02)  # long enough for the next call's sync to land mid-step
        response = await super().generate(request)
        return response.model_copy(update={"metadata": {"saw": [start, self.version]}})


def async_trainer(rank: int = 0, world: int = 1, group: int = 2, step: int = 0):
    return fake_trainer(
        accelerator=SimpleNamespace(process_index=rank, num_processes=world),
        state=SimpleNamespace(global_step=step),
        model=SimpleNamespace(training=True),
        num_generations=group,
        num_iterations=1,
        args=SimpleNamespace(steps_per_generation=1, gradient_accumulation_steps=1),
        use_vllm=False,
    )


def test_a_prefetching_rollout_func_returns_the_step_generated_during_the_last() -> None:
    """ahead=1: call k returns the step generated while TRL trained step k-1 (one sync
    old), from one version of the weights, and starts step k+1; the sync waits for it."""
    import time

    env = Counter(target=3, tasks=3)
    policy = Versioned()
    rollout = gym_trl.rollout_func(env, policy=policy, ahead=1, sync=policy.sync)
    prompts = gym_trl.dataset(env, split="train")["prompt"][:1] * 4  # TRL's: only the size counts
    outs, seen = [], []
    for step in range(5):
        outs.append(rollout(prompts, async_trainer(step=step)))
        seen.append(list(rollout.last_rollouts))
        if step == 0:  # the next step generates with no further call
            deadline = time.monotonic() + 10
            while len(policy.seen) <= 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(policy.seen) > 8  # 4 rollouts x 2 turns returned, more under way
    rollout.close()
    assert [out[gym_trl.STALENESS_FIELD] for out in outs] == [[0] * 4] + [[1] * 4] * 4
    assert [out[gym_trl.VERSION_FIELD][0] for out in outs] == [1, 1, 2, 3, 4]
    for out, rollouts in zip(outs, seen, strict=True):
        assert len(out["prompt_ids"]) == 4 and all(r.ok for r in rollouts)
        version = out[gym_trl.VERSION_FIELD][0]
        for r in rollouts:
            assert r.metadata["weights_version"] == version
            # Every model call of every group ran on that version, start to end: a sync
            # that did not wait for the generation in flight would show here.
            for call in r.trajectory.model_calls:
                assert call.response.metadata["saw"] == [version, version]
        # Two groups of two, in TRL's layout; the reward functions see the task played.
        assert [r.repeat for r in rollouts] == [0, 1, 0, 1]
        assert rollouts[0].task_id == rollouts[1].task_id
        assert rollouts[2].task_id == rollouts[3].task_id
        assert out["task_id"] == [r.task_id for r in rollouts]
        assert [json.loads(t)["id"] for t in out["task"]] == out["task_id"]
    groups = [r.task_id for rollouts in seen for r in rollouts[::2]]
    # Each epoch of the order visits every task once; seeds are never reused.
    assert sorted(groups[0:3]) == sorted(groups[3:6]) == ["c0", "c1", "c2"]
    seeds = [r.seed for rollouts in seen for r in rollouts]
    assert len(set(seeds)) == len(seeds)


def test_prefetching_processes_return_disjoint_complete_slices_of_one_batch() -> None:
    """Two processes, 6 samples each, num_generations 4: three groups per step, the
    middle one split. Each process derives the same tasks with no communication."""
    env = Counter(target=3, tasks=5)
    prompts = gym_trl.dataset(env, split="train")["prompt"][:1] * 6
    played: dict[int, list[list[gym.Rollout]]] = {0: [], 1: []}
    for rank in (0, 1):
        rollout = gym_trl.rollout_func(env, policy=CharPolicy(adder([3])), ahead=1, sync=print)
        for step in range(3):
            rollout(prompts, async_trainer(rank, world=2, group=4, step=step))
            played[rank].append(list(rollout.last_rollouts))
        rollout.close()
    single = gym_trl.rollout_func(env, policy=CharPolicy(adder([3])), ahead=1, sync=print)
    for step in range(3):
        world = played[0][step] + played[1][step]  # process 0's slice, then 1's
        assert [r.repeat for r in world] == [0, 1, 2, 3] * 3
        for g in range(3):
            assert len({r.task_id for r in world[4 * g : 4 * g + 4]}) == 1
        assert len({r.seed for r in world}) == 12
        # The same batch as one process playing all 12 samples would.
        single(prompts * 2, async_trainer(group=4, step=step))
        assert [(r.task_id, r.repeat, r.seed) for r in single.last_rollouts] == [
            (r.task_id, r.repeat, r.seed) for r in world
        ]
    single.close()


def test_a_prefetching_rollout_func_refuses_what_it_cannot_do_right() -> None:
    env = Counter(target=3, tasks=2)
    prompts = gym_trl.dataset(env, split="train")["prompt"][:1] * 3
    with pytest.raises(ConfigError, match="give sync="):
        gym_trl.rollout_func(env, policy=CharPolicy(adder([3])), ahead=1)
    with pytest.raises(ConfigError, match="ahead <= max_staleness"):
        gym_trl.rollout_func(env, ahead=2, max_staleness=1)
    rollout = gym_trl.rollout_func(env, policy=CharPolicy(adder([3])), ahead=1, sync=print)
    with pytest.raises(ConfigError, match="not a whole number of groups"):
        rollout(prompts, async_trainer(group=2))
    vllm = async_trainer()
    vllm.use_vllm = True
    with pytest.raises(ConfigError, match="use_vllm=True"):
        rollout(prompts[:2], vllm)


def test_grpo_trains_on_steps_prefetched_from_the_weights_one_step_back(
    tokenizer, tmp_path
) -> None:
    """GRPOTrainer with ahead=1 and the default generation copy: the step trained third
    was sampled by the weights after the first optimizer step, not the second."""
    import torch
    import transformers

    async def lengthy(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return len(trajectory.final_text) / 40

    tasks = [gym.Task(id=f"q{i}", prompt=f"Write something about {i}.") for i in range(4)]
    env = gym.Env(lengthy, name="lengthy", tasks={"train": tasks})
    model = tiny_llama(tokenizer)
    s = gym_trl.spec(env, split="train", ahead=1)
    snapshots: list[dict[str, torch.Tensor]] = []

    class Watch(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})

    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=s.reward_funcs,
        args=grpo_config(tmp_path, max_steps=3),
        train_dataset=s.train_dataset,
        processing_class=tokenizer,
        rollout_func=s.rollout_func,
        callbacks=[Watch()],
    )
    trainer.train()
    steps = s.rollout_func.steps
    s.close()
    assert [step.staleness for step in steps] == [0, 1, 1]
    assert [step.weights_version for step in steps] == [1, 1, 2]
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["nemo_gym_lengthy/staleness"] for entry in logs] == [0, 1, 1]
    third = s.rollout_func.last_rollouts
    assert all(r.metadata["weights_version"] == 2 for r in third)

    def logprobs(weights, rollout):
        model.load_state_dict(weights, strict=False)
        sample = gym.training.sample(rollout)
        ids = torch.tensor([sample.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        chosen = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(sample.loss_mask[1:], dtype=torch.bool)
        return chosen[mask], torch.tensor(sample.logprobs[1:])[mask]

    recomputed, behaviour = logprobs(snapshots[0], third[0])
    assert torch.allclose(recomputed, behaviour, atol=2e-3)
    current, _ = logprobs(snapshots[1], third[0])
    assert not torch.allclose(current, behaviour, atol=2e-2)


def test_a_resumed_prefetching_run_continues_the_order_and_evaluation_stays_synchronous() -> None:
    env = Counter(target=3, tasks=5)
    data = gym_trl.dataset(env, split="train")["prompt"]
    prompts = data[:1] * 4

    def played(rollout) -> list[str]:
        return [r.task_id for r in rollout.last_rollouts[::2]]

    whole = gym_trl.rollout_func(env, policy=CharPolicy(adder([3])), ahead=1, sync=print)
    order = []
    for step in range(4):
        whole(prompts, async_trainer(step=step))
        order.append(played(whole))
    whole.close()
    # Restarted from a checkpoint at step 3: the tasks of step 3, not those of step 0.
    resumed = gym_trl.rollout_func(env, policy=CharPolicy(adder([3])), ahead=1, sync=print)
    resumed(prompts, async_trainer(step=3))
    assert played(resumed) == order[3] != order[0]
    # An evaluation call plays TRL's own prompts, now, and starts nothing.
    evaluation = async_trainer(step=3)
    evaluation.model.training = False
    resumed([data[4], data[4]], evaluation)
    assert [r.task_id for r in resumed.last_rollouts] == ["c4", "c4"]
    assert resumed.last_step is not None and resumed.last_step.weights_version == 1
    resumed.close()
