"""Training batches: exact multi-turn traces, masks, advantages, exclusions, collation."""

from __future__ import annotations

import math

import pytest
import torch
from charpolicy import EOS, CharPolicy, Counter, adder, decode, encode
from hypothesis import given
from hypothesis import strategies as st
from tinyllama import tiny_llama

import nemo_gym as gym
from nemo_gym import training
from nemo_gym.errors import ModelError


async def test_three_turn_trace_is_exactly_what_the_policy_saw_and_made() -> None:
    env = Counter()
    policy = CharPolicy(adder([1, 2]))
    rollout = await gym.rollout(env, policy, env.tasks()[0])
    assert rollout.ok and rollout.reward == 1.0
    item = training.sample(rollout)
    assert item.trainable and len(item.turns) == 3
    # Each turn's prompt is a prefix of the trace, and the trace is the last turn's
    # prompt followed by its completion.
    for prompt in policy.seen:
        assert item.token_ids[: len(prompt)] == prompt
    last = rollout.trajectory.model_calls[-1].response
    assert item.token_ids == [*last.prompt_token_ids, *last.completion_token_ids]
    # The mask is 1 exactly on the generated tokens, turn by turn.
    generated = [i for i, m in enumerate(item.loss_mask) if m]
    spans = [i for start, end in item.turns for i in range(start, end)]
    assert generated == spans
    for (start, end), call in zip(item.turns, rollout.trajectory.model_calls, strict=True):
        assert item.token_ids[start:end] == call.response.completion_token_ids
        assert item.token_ids[end - 1] == EOS
    assert decode(item.token_ids[item.turns[2][0] : item.turns[2][1]]) == "done"
    # Tool results sit between the turns, off the mask.
    between = decode(item.token_ids[item.turns[0][1] : item.turns[1][0]])
    assert between == "<tool>1<assistant>"
    assert item.prompt_length == len(policy.seen[0])
    assert item.logprobs is not None
    assert [lp for lp, m in zip(item.logprobs, item.loss_mask, strict=True) if m] == [-0.5] * len(
        generated
    )
    assert all(lp == 0.0 for lp, m in zip(item.logprobs, item.loss_mask, strict=True) if not m)


async def test_retokenized_history_is_excluded_with_its_reason_not_retokenized() -> None:
    env = Counter()
    rollout = await gym.rollout(env, CharPolicy(adder([3]), retokenize=True), env.tasks()[0])
    assert rollout.ok
    item = training.sample(rollout)
    assert not item.trainable
    assert item.excluded.startswith("retokenized:")
    assert item.reward is None and item.num_generated == 0


async def test_failed_rollout_is_masked_never_scored_zero() -> None:
    env = Counter()

    def broken(request: gym.ModelRequest) -> str:
        raise ModelError("backend down", code="unavailable")

    failed = await gym.rollout(env, gym.models.ScriptedModel(broken), env.tasks()[0])
    ok = await gym.rollout(env, CharPolicy(adder([3])), env.tasks()[0], repeat=1)
    zero = await gym.rollout(env, CharPolicy(adder([1])), env.tasks()[0], repeat=2)
    batch = training.build([[failed, ok, zero]])
    assert batch.samples[0].excluded == "failed: model/unavailable"
    assert batch.samples[0].reward is None and batch.samples[0].advantage == 0.0
    # The baseline is the two scored rollouts only: 1.0 and 0.0.
    assert batch.samples[1].advantage > 0 > batch.samples[2].advantage
    assert batch.samples[1].advantage == pytest.approx(-batch.samples[2].advantage)
    assert batch.excluded == {"failed": 1}
    tensors = batch.collate(pad_token_id=0)
    assert tensors["sample_mask"].tolist() == [False, True, True]
    assert tensors["loss_mask"][0].sum() == 0
    assert math.isnan(tensors["rewards"][0])
    # The empty row attends to one pad token, so no attention row is empty.
    assert tensors["attention_mask"][0].tolist()[:1] == [1]


async def test_backend_without_token_ids_or_logprobs() -> None:
    env = Counter()
    plain = await gym.rollout(env, gym.models.ScriptedModel(["done"]), env.tasks()[0])
    assert training.sample(plain).excluded.startswith("no token ids")
    no_logprobs = await gym.rollout(env, CharPolicy(adder([3]), logprobs=False), env.tasks()[0])
    item = training.sample(no_logprobs)
    assert item.trainable and item.logprobs is None
    tensors = training.collate([item], pad_token_id=0)
    assert tensors["has_logprobs"].tolist() == [False]


async def test_logprobs_that_do_not_line_up_are_refused() -> None:
    class Short(CharPolicy):
        async def generate(self, request: gym.ModelRequest) -> gym.ModelResponse:
            response = await super().generate(request)
            return response.model_copy(update={"completion_logprobs": [-1.0]})

    env = Counter()
    rollout = await gym.rollout(env, Short(adder([3])), env.tasks()[0])
    assert training.sample(rollout).excluded.startswith("logprobs misaligned")


async def test_too_long_is_excluded_never_cut() -> None:
    env = Counter()
    rollout = await gym.rollout(env, CharPolicy(adder([3])), env.tasks()[0])
    length = len(training.sample(rollout).token_ids)
    assert training.sample(rollout, max_length=length).trainable
    assert training.sample(rollout, max_length=length - 1).excluded.startswith("too long")


async def test_groups_from_the_runner_become_a_batch() -> None:
    env = Counter(tasks=3)
    plans = {0: [3], 1: [1, 2], 2: [2], 3: [5]}

    def reply(request: gym.ModelRequest) -> gym.Message:
        # The repeat is not visible to the model; vary by the seed the runner sends.
        seed = request.sampling.seed or 0
        return adder(plans[seed % 4])(request)

    groups = [g async for g in gym.groups(env, CharPolicy(reply), repeats=4, seed=1)]
    batch = training.build(groups, advantage="rloo")
    assert len(batch) == 12 and {s.group for s in batch.samples} == {0, 1, 2}
    for index, group in enumerate(groups):
        members = [s for s in batch.samples if s.group == index]
        assert [s.task_id for s in members] == [r.task_id for r in group]
        expected = training.group_advantages([r.reward for r in group], "rloo")
        assert [s.advantage for s in members] == pytest.approx(expected)
    metrics = batch.metrics()
    assert metrics["samples"] == 12 and metrics["trainable"] == 12


def test_advantage_methods_on_a_known_group() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0]
    std = math.sqrt(1 / 3)  # Bessel-corrected
    assert training.group_advantages(rewards, "grpo") == pytest.approx(
        [0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 1 + [-0.5 / (std + 1e-4), 0.5 / (std + 1e-4)]
    )
    assert training.group_advantages(rewards, "dr_grpo") == [0.5, -0.5, -0.5, 0.5]
    assert training.group_advantages(rewards, "rloo") == pytest.approx(
        [1 - 1 / 3, -2 / 3, -2 / 3, 1 - 1 / 3]
    )
    assert training.group_advantages([0.7, 0.7, None], "grpo") == [0.0, 0.0, 0.0]
    assert training.group_advantages([0.7], "rloo") == [0.0]
    assert training.group_advantages([None, None], "dr_grpo") == [0.0, 0.0]
    with pytest.raises(ValueError, match="unknown advantage"):
        training.group_advantages(rewards, "ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        training.group_advantages([1.0, float("inf")])


def test_grpo_advantages_equal_trl_s_own_computation() -> None:
    """The default epsilon is TRL's: with a small reward spread, 1e-6 (our old default,
    verl's) gives advantages ~14% larger than the ones GRPOTrainer trains on."""
    trl_utils = pytest.importorskip("trl.trainer.utils")
    groups = [[0.0, 0.001, 0.0, 0.001], [1.0, 0.0, float("nan"), 0.5], [0.2, 0.2, 0.2, 0.3]]
    rewards = torch.tensor(groups, dtype=torch.float32)
    # GRPOTrainer._generate_and_score_completions, scale_rewards="group":
    mean = torch.nanmean(rewards, dim=1, keepdim=True)
    std = trl_utils.nanstd(rewards, dim=1, keepdim=True)
    expected = torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)
    for group, want in zip(groups, expected.tolist(), strict=True):
        ours = training.group_advantages([None if math.isnan(r) else r for r in group])
        assert ours == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert training.GRPO_EPSILON == 1e-4
    verl_like = training.group_advantages(groups[0], epsilon=1e-6)
    assert verl_like[1] == pytest.approx(0.001 / 2 / (math.sqrt(1e-6 / 3) + 1e-6))


rewards_lists = st.lists(
    st.one_of(st.none(), st.floats(-100, 100, allow_nan=False)), min_size=1, max_size=12
)


@given(rewards_lists, st.sampled_from(training.ADVANTAGES))
def test_advantages_are_centred_and_ignore_masked(rewards, method) -> None:
    values = training.group_advantages(rewards, method)
    assert len(values) == len(rewards)
    assert all(v == 0.0 for v, r in zip(values, rewards, strict=True) if r is None)
    valid = [v for v, r in zip(values, rewards, strict=True) if r is not None]
    scale = max([1.0] + [abs(r) for r in rewards if r is not None])
    # Every estimator is centred on the group (RLOO's leave-one-out sums to zero too).
    assert abs(math.fsum(valid)) <= 1e-6 * scale * max(1, len(valid)) * 1e3
    # Masked rewards have no say in the others' advantages.
    assert valid == pytest.approx(
        training.group_advantages([r for r in rewards if r is not None], method), abs=1e-9
    )


def _item(ids: list[int], mask: list[int], turns: tuple = (), excluded: str | None = None):
    return training.TrainingSample(
        task_id="t",
        repeat=0,
        token_ids=ids,
        loss_mask=mask,
        logprobs=[-0.1 * m for m in mask],
        prompt_length=mask.index(1) if 1 in mask else len(ids),
        turns=turns,
        reward=None if excluded else 1.0,
        advantage=0.0 if excluded else 0.5,
        excluded=excluded,
    )


@given(
    st.lists(st.lists(st.integers(0, 1), min_size=0, max_size=9), min_size=1, max_size=5),
    st.sampled_from(["left", "right"]),
    st.one_of(st.none(), st.integers(1, 8)),
)
def test_collation_keeps_every_row_token_for_token(masks, side, multiple) -> None:
    items = [_item([100 + i for i in range(len(m))], m) for m in masks]
    out = training.collate(items, pad_token_id=7, padding_side=side, pad_to_multiple_of=multiple)
    width = out["input_ids"].shape[1]
    if multiple:
        assert width % multiple == 0
    for row, item in enumerate(items):
        attended = out["attention_mask"][row].bool()
        length = max(1, len(item.token_ids))
        assert int(attended.sum()) == length
        positions = torch.nonzero(attended).flatten().tolist()
        # Real tokens are contiguous, at the end (left padding) or the start (right).
        assert positions == list(range(width - length, width) if side == "left" else range(length))
        ids = out["input_ids"][row][attended].tolist()
        assert ids == (item.token_ids or [7])
        assert out["position_ids"][row][attended].tolist() == list(range(length))
        if item.token_ids:
            assert out["loss_mask"][row][attended].tolist() == item.loss_mask
            assert out["logprobs"][row][attended].tolist() == pytest.approx(item.logprobs)
        assert int(out["loss_mask"][row][~attended].sum()) == 0


def test_collation_of_turns_and_excluded_rows() -> None:
    kept = _item([1, 2, 3, 4, 5, 6], [0, 1, 1, 0, 1, 0], turns=((1, 3), (4, 5)))
    dropped = _item([1, 2, 3], [0, 1, 1], excluded="retokenized: x")
    batch = training.TrainingBatch([kept, dropped])
    out = batch.collate(pad_token_id=0, padding_side="left")
    assert out["turn_index"][0].tolist() == [-1, 0, 0, -1, 1, -1]
    assert out["loss_mask"][1].sum() == 0 and out["turn_index"][1].max() == -1
    assert out["advantages"].tolist() == [0.5, 0.0]
    only = batch.collate(pad_token_id=0, drop_excluded=True)
    assert only["input_ids"].shape == (1, 6)
    with pytest.raises(ValueError, match="padding_side"):
        training.collate([kept], pad_token_id=0, padding_side="middle")  # type: ignore[arg-type]


def test_encode_roundtrip() -> None:
    assert decode(encode("a<b>")) == "a<b>"


# -- rollouts that overlap training ------------------------------------------------------


def counter_batches(steps: int, per_step: int = 2) -> list[list[gym.Task]]:
    tasks = Counter(target=3, tasks=steps * per_step).tasks()
    return [tasks[i * per_step : (i + 1) * per_step] for i in range(steps)]


def test_async_rollouts_bound_and_record_staleness() -> None:
    import threading

    generating = threading.Semaphore(0)
    active = [0]
    synced_while_generating: list[int] = []

    def reply(request: gym.ModelRequest) -> gym.Message:
        active[0] += 1
        try:
            return adder([3])(request)
        finally:
            active[0] -= 1
            generating.release()

    env = Counter(target=3, tasks=12)
    pipeline = training.AsyncRollouts(
        env,
        CharPolicy(reply),
        counter_batches(6),
        repeats=2,
        ahead=1,
        max_staleness=1,
        sync=lambda: synced_while_generating.append(active[0]),
    )
    steps: list[training.Step] = []
    for number, step in enumerate(pipeline):
        steps.append(step)
        # The next step is generating while this one "trains": its calls start now.
        if number < 5:
            assert generating.acquire(timeout=10)
        if number == 3:
            pipeline.sync()  # two syncs before the next step: it is now too stale
        pipeline.sync()
    pipeline.close()
    assert [s.index for s in steps] == list(range(6))
    assert synced_while_generating == [0] * 7  # every sync waited for generation
    for step in steps:
        assert step.staleness <= 1  # the bound held, and is recorded
        for group in step.groups:
            assert {r.metadata["weights_version"] for r in group} == {step.weights_version}
        batch = step.batch()
        assert {s.weights_version for s in batch.samples} == {step.weights_version}
    # Step 4 was prefetched at version 3 and due at version 5: regenerated from the
    # current weights (staleness 0), never trained on 2 syncs old.
    assert [s.staleness for s in steps] == [0, 1, 1, 1, 0, 1]
    assert [s.regenerated for s in steps] == [0, 0, 0, 0, 1, 0]
    assert pipeline.regenerated == 1
    assert [s.weights_version for s in steps] == [0, 0, 1, 2, 5, 5]


def test_async_rollouts_ahead_zero_is_the_synchronous_loop() -> None:
    pipeline = training.AsyncRollouts(
        Counter(target=3, tasks=6), CharPolicy(adder([3])), counter_batches(3), repeats=2, ahead=0,
        max_staleness=0,
    )  # fmt: skip
    seen = []
    for step in pipeline:
        seen.append((step.index, step.weights_version, step.staleness))
        pipeline.sync()
    assert seen == [(0, 0, 0), (1, 1, 0), (2, 2, 0)]
    with pytest.raises(gym.errors.ConfigError, match="ahead <= max_staleness"):
        training.AsyncRollouts(Counter(), CharPolicy(adder([3])), [], repeats=2, ahead=2)


def test_a_sample_whose_weights_changed_mid_call_is_excluded() -> None:
    async def run() -> gym.Rollout:
        class Racing(CharPolicy):
            async def generate(self, request):
                response = await super().generate(request)
                return response.model_copy(update={"metadata": {"weights_changed": True}})

        env = Counter()
        return await gym.rollout(env, Racing(adder([3])), env.tasks()[0])

    import asyncio

    item = training.sample(asyncio.run(run()))
    assert item.excluded.startswith("mixed weights")


def tiny_model():
    transformers = pytest.importorskip("transformers")
    from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path

    directory, _ = converted_checkpoint(embedded_gguf_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    return tiny_llama(tokenizer, attention_dropout=0.5), tokenizer


def test_a_training_forward_while_the_model_generates_is_refused() -> None:
    """The race: a batch puts the shared model in eval mode, so a trainer's forward pass
    meanwhile would run without dropout. It is refused, not silently run."""
    import asyncio
    import threading

    model, tokenizer = tiny_model()
    model.train()
    policy = gym.models.LivePolicy(model, tokenizer)
    in_batch, release = threading.Event(), threading.Event()
    worker: list[int] = []

    def slow_step(module, args, kwargs):
        if threading.get_ident() != threading.main_thread().ident:
            worker.append(threading.get_ident())
            in_batch.set()
            release.wait(10)

    handle = model.register_forward_pre_hook(slow_step, with_kwargs=True)
    request = gym.ModelRequest(
        messages=(gym.Message.user("hi"),), sampling=gym.Sampling(temperature=0.0, max_tokens=3)
    )
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(asyncio.run(policy.generate(request))))
    thread.start()
    try:
        assert in_batch.wait(30)
        assert not model.training  # the batch's eval mode, visible to every thread
        with pytest.raises(RuntimeError, match="while LivePolicy is generating"):
            model(input_ids=torch.tensor([[1, 2, 3]]))
    finally:
        handle.remove()
        release.set()
        thread.join(30)
    assert done and model.training  # the batch finished and gave train mode back
    model(input_ids=torch.tensor([[1, 2, 3]]))  # between batches: allowed
    policy.close()
    assert not model._forward_pre_hooks  # the caller's model is left as given


def test_generation_copy_moves_only_on_sync() -> None:
    import asyncio

    model, tokenizer = tiny_model()
    copy = training.GenerationCopy(model, tokenizer)
    assert copy.model is not model and copy.policy.model is copy.model
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    assert not torch.equal(copy.model.lm_head.weight, model.lm_head.weight)
    copy.sync()
    assert torch.equal(copy.model.lm_head.weight, model.lm_head.weight)
    asyncio.run(copy.aclose())
