"""`LivePolicy` over the real SmolLM2, loaded as a trainer holds it (model + tokenizer objects).

What a trainer relies on: the rollout's token trace is exactly what the model consumed,
behaviour logprobs are what the trainer recomputes from its own logits, the next rollout
after an optimizer step samples from the new weights, train mode and grad mode come back
as they were, and an update racing a generation is prevented (`updating()`) or flagged.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tool_rollouts  # noqa: E402

from nemo_gym.errors import ConfigError  # noqa: E402
from nemo_gym.models import LivePolicy  # noqa: E402
from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path  # noqa: E402
from nemo_gym.records import Message, ModelRequest, Sampling  # noqa: E402

pytestmark = pytest.mark.slow

SAMPLED = Sampling(temperature=0.7, top_p=1.0, max_tokens=12)


@pytest.fixture(scope="module")
def hf():
    """The trainer's objects: a fresh float32 SmolLM2 and its tokenizer, in train mode."""
    torch.set_num_threads(1)
    directory, _ = converted_checkpoint(embedded_gguf_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    model.train()
    return model, tokenizer


@pytest.fixture
async def policy(hf):
    model, tokenizer = hf
    adapter = LivePolicy(model, tokenizer, batch_window_s=0.05)
    yield adapter
    await adapter.aclose()


def ask(text: str, sampling: Sampling = SAMPLED) -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),), sampling=sampling)


def record_prefills(model):
    """Record the ids of every prefill forward (a decode step feeds one token per row)."""
    seen: list[list[int]] = []

    def hook(module, args, kwargs):
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        if ids.shape[1] > 1:
            for row, row_mask in zip(ids, mask[:, -ids.shape[1] :], strict=True):
                seen.append(row[row_mask.bool()].tolist())

    return seen, model.register_forward_pre_hook(hook, with_kwargs=True)


async def test_a_three_turn_tool_rollout_traces_what_the_model_consumed(hf) -> None:
    model, tokenizer = hf
    adapter = LivePolicy(model, tokenizer, tool_format=tool_rollouts.NoteEveryReply())
    seen, handle = record_prefills(model)
    try:
        rollout = await tool_rollouts.three_turn_rollout(adapter, sampling=SAMPLED)
    finally:
        handle.remove()
        await adapter.aclose()
    tool_rollouts.check_trace(rollout, seen, tokenizer.decode)
    # The behaviour logprobs are what the trainer recomputes from its own logits with
    # teacher forcing over the trace: log_softmax(logits / T) at each generated token.
    trace = rollout.trajectory.token_trace()
    ids = torch.tensor([trace.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits[:-1] / SAMPLED.temperature, dim=-1)
    positions = [i for i, m in enumerate(trace.loss_mask) if m]
    recomputed = [float(logp[i - 1, trace.token_ids[i]]) for i in positions]
    behaviour = [trace.logprobs[i] for i in positions]
    assert recomputed == pytest.approx(behaviour, abs=2e-3)
    assert model.training  # handed back in train mode


async def test_the_next_rollout_after_an_optimizer_step_sees_the_new_weights(
    policy: LivePolicy, hf
) -> None:
    model, _ = hf
    request = ask("Name a color.", Sampling(temperature=0.0, max_tokens=4))
    before = await policy.generate(request)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    try:
        ids = torch.tensor([before.prompt_token_ids + before.completion_token_ids])
        with policy.updating():
            # Make the greedy first token less likely: one big step on its NLL, reversed.
            logits = model(input_ids=ids).logits[0, len(before.prompt_token_ids) - 1]
            loss = torch.log_softmax(logits, -1)[before.completion_token_ids[0]]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        after = await policy.generate(request)
        assert after.metadata["weights_version"] > before.metadata["weights_version"]
        assert after.completion_logprobs[0] != pytest.approx(before.completion_logprobs[0])
    finally:
        with torch.no_grad():
            model.load_state_dict(saved)


@pytest.mark.parametrize("how", ["fused_adamw", "data_write"])
async def test_updates_that_leave_the_version_counters_alone_are_seen(
    policy: LivePolicy, hf, how: str
) -> None:
    # A fused optimizer (TRL's and HF's default `adamw_torch_fused`) and a write through
    # `.data` do not bump the tensors' version counters; the fingerprint sees them.
    model, _ = hf
    request = ask("Name a color.", Sampling(temperature=0.0, max_tokens=2))
    before = await policy.generate(request)
    counters = sum(p._version for p in model.parameters())
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with policy.updating():
            if how == "fused_adamw":
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
                ids = torch.tensor([before.prompt_token_ids + before.completion_token_ids])
                model(input_ids=ids).logits.sum().backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            else:
                layer = model.model.layers[-1].mlp.down_proj.weight
                layer.data.mul_(0.5)
        assert sum(p._version for p in model.parameters()) == counters  # the blind spot
        after = await policy.generate(request)
        assert after.metadata["weights_version"] > before.metadata["weights_version"]
        assert policy.weights_version == after.metadata["weights_version"]
        again = await policy.generate(request)  # nothing changed since: the same version
        assert again.metadata["weights_version"] == after.metadata["weights_version"]
    finally:
        with torch.no_grad():
            model.load_state_dict(saved)


async def test_train_mode_and_frozen_modules_are_restored_and_no_grad_leaks(
    policy: LivePolicy, hf
) -> None:
    model, _ = hf
    model.train()
    frozen = model.model.layers[0]
    frozen.eval()
    try:
        reply = await policy.generate(ask("Say hi."))
        assert reply.completion_token_ids
        assert model.training and model.lm_head.training
        assert not frozen.training  # a module the trainer froze stays frozen
        assert all(p.grad is None for p in model.parameters())
        assert torch.is_grad_enabled()  # the caller's thread keeps its grad mode
    finally:
        frozen.train()


async def test_concurrent_requests_are_batched_and_groups_share_a_batch(
    policy: LivePolicy,
) -> None:
    replies = await asyncio.gather(*(policy.generate(ask(f"Count to {i}.")) for i in range(3)))
    assert policy.stats.largest_batch >= 2
    group = await policy.generate_group(
        ask("Tell me a joke.", SAMPLED.model_copy(update={"seed": 5})), 4
    )
    assert [r.sampling.seed for r in group] == [5, 6, 7, 8]
    assert len({tuple(r.completion_token_ids) for r in group}) > 1
    assert all(r.prompt_token_ids == group[0].prompt_token_ids for r in group)
    alone = await policy.generate(ask("Tell me a joke.", SAMPLED.model_copy(update={"seed": 6})))
    assert alone.completion_token_ids == group[1].completion_token_ids
    # An unseeded request reports the seed it drew, so the sample can be reproduced.
    assert all(r.sampling.seed is not None for r in replies)
    again = await policy.generate(ask("Count to 0.", replies[0].sampling))
    assert again.completion_token_ids == replies[0].completion_token_ids


async def test_updating_holds_generation_until_the_weights_are_stepped(
    policy: LivePolicy,
) -> None:
    await policy.generate(ask("Warm up."))
    entered, release = threading.Event(), threading.Event()

    def trainer_step() -> None:
        with policy.updating():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=trainer_step)
    thread.start()
    entered.wait(10)
    pending = asyncio.ensure_future(policy.generate(ask("Hello.")))
    await asyncio.sleep(0.5)
    assert not pending.done()  # held behind the update
    release.set()
    reply = await asyncio.wait_for(pending, 60)
    thread.join()
    assert "weights_changed" not in reply.metadata


async def test_an_update_racing_a_generation_is_flagged(policy: LivePolicy, hf) -> None:
    model, _ = hf
    calls = {"n": 0}
    parameter = model.lm_head.weight

    def racing_update(module, args, kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # mid-generation, as an unguarded optimizer step would
            with torch.no_grad():
                parameter.mul_(1.0)

    handle = model.register_forward_pre_hook(racing_update, with_kwargs=True)
    try:
        reply = await policy.generate(
            ask("Tell me a story.", Sampling(temperature=0.0, max_tokens=6))
        )
    finally:
        handle.remove()
    assert reply.metadata["weights_changed"] is True
    assert policy.stats.weights_changed == 1


async def test_close_keeps_the_callers_model_and_the_adapter_usable(hf) -> None:
    model, tokenizer = hf
    adapter = LivePolicy(model, tokenizer)
    greedy = Sampling(temperature=0.0, max_tokens=2)
    first = await adapter.generate(ask("Hi.", greedy))
    worker = adapter._worker
    await adapter.aclose()
    await adapter.aclose()  # idempotent
    assert worker is not None and not worker.is_alive()  # the thread it started is gone
    assert adapter.model is model and next(model.parameters()).numel() > 0
    again = await adapter.generate(ask("Hi.", greedy))  # the next use starts a new one
    assert again.completion_token_ids == first.completion_token_ids
    await adapter.aclose()


def test_bad_construction_is_named() -> None:
    with pytest.raises(ConfigError, match="model, tokenizer"):
        LivePolicy(None, None)


async def test_adapter_works_across_event_loops(hf) -> None:
    # A trainer that calls asyncio.run once per step: each loop gets its own futures.
    model, tokenizer = hf
    adapter = LivePolicy(model, tokenizer)

    def one_step() -> list[int]:
        reply = asyncio.run(adapter.generate(ask("Hi.", Sampling(temperature=0.0, max_tokens=3))))
        return reply.completion_token_ids

    started = time.perf_counter()
    first, second = await asyncio.to_thread(one_step), await asyncio.to_thread(one_step)
    assert first == second and time.perf_counter() - started < 120
    await adapter.aclose()


def test_the_docs_example_runs() -> None:
    import re
    from pathlib import Path

    page = Path(__file__).parents[2] / "docs" / "live-policy.md"
    (block,) = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)[:1]
    namespace: dict = {}
    exec(block, namespace)
    assert namespace["traces"] and namespace["policy"].stats.requests == 4
