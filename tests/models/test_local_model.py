"""Tests of `Local` and the `LivePolicy` engine it shares: sampling (fast), the real SmolLM2 (slow).

The slow tests share one model, loaded once per module from the cache under
`$NEMO_GYM_CACHE` (default `~/.cache/nemo_gym`); on an empty cache the first load
converts the embedded GGUF file, which takes tens of seconds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time

import pytest

from nemo_gym.errors import ConfigError, ModelError
from nemo_gym.models.chat import CHATML_TEMPLATE
from nemo_gym.models.local import Local, cache_root, default_threads, embedded_gguf_path
from nemo_gym.models.policy import sample_next
from nemo_gym.records import (
    Message,
    ModelCall,
    ModelRequest,
    Sampling,
    ToolSpec,
    Trajectory,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

GREEDY = Sampling(temperature=0.0, max_tokens=8)
ADD = ToolSpec(
    name="add",
    description="Add two numbers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
)


def run_sync(coroutine):
    """Run a coroutine to completion on a private loop (module fixtures are synchronous)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def ask(text: str, sampling: Sampling = GREEDY, **fields: object) -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),), sampling=sampling, **fields)


# ---------------------------------------------------------------------------------------
# Sampling (no model)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_greedy_picks_the_argmax_with_its_untempered_logprob() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, -1.0]])
    tokens, logprobs = sample_next(logits, [0.0, 0.0], [1.0, 1.0], [None, None])
    assert tokens == [1, 0]
    expected = torch.log_softmax(logits, dim=-1)
    assert logprobs == pytest.approx([float(expected[0, 1]), float(expected[1, 0])])


def test_sampled_logprob_is_under_the_tempered_distribution_before_top_p() -> None:
    logits = torch.randn(1, 50, generator=generator(0))
    tokens, logprobs = sample_next(logits, [0.7], [0.9], [generator(1)])
    expected = torch.log_softmax(logits[0] / 0.7, dim=-1)[tokens[0]]
    assert logprobs[0] == pytest.approx(float(expected))
    assert logprobs[0] <= 0.0


def test_top_p_keeps_only_the_nucleus() -> None:
    logits = torch.tensor([[5.0, 4.0, 0.0, -1.0]])
    seen = {sample_next(logits, [1.0], [0.5], [generator(s)])[0][0] for s in range(40)}
    assert seen == {0}  # token 0 alone holds more than half the mass
    seen = {sample_next(logits, [1.0], [0.9], [generator(s)])[0][0] for s in range(60)}
    assert seen == {0, 1}


def test_a_seeded_row_does_not_depend_on_its_batch() -> None:
    logits = torch.randn(3, 100, generator=generator(2))
    alone = sample_next(logits[1:2], [1.0], [1.0], [generator(7)])
    generators = [generator(3), generator(7), None]
    batched = sample_next(logits, [1.0, 1.0, 0.0], [1.0, 1.0, 1.0], generators)
    assert batched[0][1] == alone[0][0] and batched[1][1] == pytest.approx(alone[1][0])


# ---------------------------------------------------------------------------------------
# Bad input (no model)


@pytest.mark.parametrize(
    "options",
    [{"dtype": "int8"}, {"threads": 0}, {"max_batch_size": 0}, {"batch_window_s": -1.0}],
)
def test_bad_options_are_named(options: dict) -> None:
    with pytest.raises(ConfigError, match=next(iter(options))):
        Local(**options)


@pytest.mark.parametrize(
    ("sampling", "field"),
    [
        (Sampling(temperature=-1.0), "temperature"),
        (Sampling(top_p=0.0), "top_p"),
        (Sampling(max_tokens=0), "max_tokens"),
    ],
)
async def test_bad_sampling_fails_without_loading(sampling: Sampling, field: str) -> None:
    model = Local()
    with pytest.raises(ModelError, match=field):
        await model.generate(ask("hi", sampling))
    assert model.stats.load_s == 0.0


async def test_a_per_request_model_switch_is_refused() -> None:
    with pytest.raises(ModelError, match="cannot switch"):
        await Local().generate(ask("hi", model="gpt-4o"))


def test_default_threads_follow_omp_or_leave_cores_free(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_threads() == 3 and Local().threads == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr("nemo_gym.models.local._usable_cpus", lambda: 2)
    assert default_threads() == 1
    monkeypatch.setattr("nemo_gym.models.local._usable_cpus", lambda: 16)
    assert default_threads() == 8
    assert Local(threads=2).threads == 2


def test_the_embedded_gguf_ships_in_the_package() -> None:
    path = embedded_gguf_path()
    assert path.name.endswith(".gguf") and path.stat().st_size > 50_000_000


# ---------------------------------------------------------------------------------------
# The real model


@pytest.fixture(scope="module")
def smol():
    model = Local(threads=1, batch_window_s=0.05).load()
    yield model
    model.close()


@pytest.fixture(scope="module")
def first(smol: Local):
    """One greedy reply, shared by the tests that only read it."""
    return run_sync(smol.generate(ask("What is the capital of France?")))


@pytest.mark.slow
def test_completion_ids_decode_to_the_text(smol: Local, first) -> None:
    ids = first.completion_token_ids
    eos = smol.tokenizer.eos_token_id
    body = ids[:-1] if first.finish_reason == "stop" else ids
    assert first.finish_reason in ("stop", "length")
    assert (ids[-1] == eos) == (first.finish_reason == "stop")
    assert smol.tokenizer.decode(body) == first.message.content
    assert len(first.completion_logprobs) == len(ids) == first.usage.completion_tokens <= 8
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in first.completion_logprobs)
    assert first.usage.prompt_tokens == len(first.prompt_token_ids)
    rendered = smol.tokenizer.decode(first.prompt_token_ids)
    assert rendered.endswith("What is the capital of France?<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.slow
async def test_greedy_is_deterministic(smol: Local, first) -> None:
    again = await smol.generate(ask("What is the capital of France?"))
    assert again.completion_token_ids == first.completion_token_ids
    assert again.completion_logprobs == pytest.approx(first.completion_logprobs, abs=1e-4)


@pytest.mark.slow
async def test_seeded_sampling_is_reproducible(smol: Local) -> None:
    sampling = Sampling(temperature=1.0, top_p=0.95, max_tokens=8, seed=1234)
    one, two = [await smol.generate(ask("Tell me a story.", sampling)) for _ in range(2)]
    assert one.completion_token_ids == two.completion_token_ids


@pytest.mark.slow
async def test_stop_strings_end_the_reply(smol: Local, first) -> None:
    word = first.message.content.split()[1]
    stopped = await smol.generate(
        ask("What is the capital of France?", Sampling(temperature=0.0, max_tokens=8, stop=(word,)))
    )
    assert stopped.finish_reason == "stop"
    assert stopped.message.content == first.message.content[: first.message.content.index(word)]
    # The ids keep what the model generated, the stop string included.
    assert word in smol.tokenizer.decode(stopped.completion_token_ids)


@pytest.mark.slow
async def test_concurrent_requests_batch_and_match_unbatched(smol: Local) -> None:
    prompts = ["Name a color.", "Write a poem about the sea and the sky."]
    seeded = Sampling(temperature=1.0, max_tokens=8, seed=99)
    solo = [await smol.generate(ask(p)) for p in prompts]
    solo_seeded = await smol.generate(ask(prompts[0], seeded))
    before = smol.stats
    together = await asyncio.gather(
        *(smol.generate(ask(p)) for p in prompts), smol.generate(ask(prompts[0], seeded))
    )
    after = smol.stats
    assert after.largest_batch > 1
    assert after.batches - before.batches < len(together)
    # Left padding must not change any row: same ids, same logprobs up to float noise.
    for alone, batched in zip([*solo, solo_seeded], together, strict=True):
        assert batched.prompt_token_ids == alone.prompt_token_ids
        assert batched.completion_token_ids == alone.completion_token_ids
        assert batched.completion_logprobs == pytest.approx(alone.completion_logprobs, abs=1e-3)


@pytest.mark.slow
async def test_generation_does_not_block_the_event_loop(smol: Local) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    await smol.generate(ask("Name a fruit."))
    elapsed = time.perf_counter() - started
    ticker.cancel()
    # A blocked loop would tick once or not at all; allow for a heavily shared CPU.
    assert elapsed > 0.05
    assert ticks >= 5


@pytest.mark.slow
async def test_a_tool_turn_continues_from_the_exact_ids(smol: Local) -> None:
    opening = (Message.user("Use the add tool to add 2 and 3."),)
    one = await smol.generate(ModelRequest(messages=opening, tools=(ADD,), sampling=GREEDY))
    assert "<tools>" in smol.tokenizer.decode(one.prompt_token_ids)
    history = (*opening, one.message, Message.tool("5", tool_call_id="call_1", name="add"))
    before = smol.stats
    two = await smol.generate(ModelRequest(messages=history, tools=(ADD,), sampling=GREEDY))
    assert smol.stats.continued == before.continued + 1
    assert (one.metadata["history"], two.metadata["history"]) == ("fresh", "continued")
    exact = one.prompt_token_ids + one.completion_token_ids
    assert two.prompt_token_ids[: len(exact)] == exact
    added = smol.tokenizer.decode(two.prompt_token_ids[len(exact) :])
    # The first reply ran out of tokens, so the turn is closed for it.
    assert one.finish_reason == "length"
    assert added == (
        "<|im_end|>\n<|im_start|>tool\n<tool_response>\n5\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    calls = [ModelCall(request=ModelRequest(messages=opening), response=r) for r in (one, two)]
    trace = Trajectory(model_calls=calls).token_trace()
    assert sum(trace.loss_mask) == len(one.completion_token_ids) + len(two.completion_token_ids)


@pytest.mark.slow
async def test_a_reply_ended_by_eos_is_not_closed_twice(smol: Local) -> None:
    opening = (Message.system("Answer in one word."), Message.user("Say only the word yes."))
    one = await smol.generate(ModelRequest(messages=opening, sampling=GREEDY))
    assert one.finish_reason == "stop"
    two = await smol.generate(
        ModelRequest(messages=(*opening, one.message, Message.user("Again.")), sampling=GREEDY)
    )
    exact = one.prompt_token_ids + one.completion_token_ids
    assert two.prompt_token_ids[: len(exact)] == exact
    added = smol.tokenizer.decode(two.prompt_token_ids[len(exact) :])
    assert added == "\n<|im_start|>user\nAgain.<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.slow
async def test_an_edited_history_is_retokenized(smol: Local, first) -> None:
    edited = Message.assistant("Paris, of course.")
    history = (Message.user("What is the capital of France?"), edited, Message.user("Why?"))
    before = smol.stats
    reply = await smol.generate(ModelRequest(messages=history, sampling=GREEDY))
    assert smol.stats.retokenized == before.retokenized + 1
    assert smol.stats.continued == before.continued
    assert reply.metadata["history"] == "retokenized"
    assert "Paris, of course.<|im_end|>" in smol.tokenizer.decode(reply.prompt_token_ids)


@pytest.mark.slow
async def test_a_cancelled_request_leaves_the_worker_serving(smol: Local, first) -> None:
    task = asyncio.create_task(smol.generate(ask("Count to one hundred.")))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    again = await smol.generate(ask("What is the capital of France?"))
    assert again.completion_token_ids == first.completion_token_ids


@pytest.mark.slow
def test_the_converted_checkpoint_is_cached_and_reused(smol: Local, first) -> None:
    converted = list((cache_root() / "models").glob("SmolLM2-135M-Instruct*"))
    assert [p.name for p in converted if not p.name.startswith(".")], "no cached conversion"
    assert all((p / "config.json").is_file() for p in converted if not p.name.startswith("."))
    # The GGUF carries SmolLM2's own template: the fallback we document is that template.
    assert smol.tokenizer.chat_template == CHATML_TEMPLATE
    second = Local(threads=1).load()
    try:
        assert second.stats.loaded_from_cache is True
        reply = run_sync(second.generate(ask("What is the capital of France?")))
        assert reply.completion_token_ids == first.completion_token_ids
    finally:
        second.close()


def test_chatml_fallback_matches_the_embedded_template() -> None:
    import jinja2

    rendered = jinja2.Template(CHATML_TEMPLATE).render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    assert rendered.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert rendered.startswith("<|im_start|>system\n")


def test_the_conversion_cache_is_keyed_on_content_not_mtime(tmp_path, monkeypatch) -> None:
    import os
    import shutil
    from pathlib import Path

    from nemo_gym.models import local

    root = tmp_path / "cache"
    original = embedded_gguf_path()
    # What a pip install in another venv does: the same bytes, a new path and mtime.
    reinstalled = tmp_path / "venv2" / original.name
    reinstalled.parent.mkdir()
    shutil.copyfile(original, reinstalled)
    os.utime(reinstalled, ns=(1, original.stat().st_mtime_ns + 10**9))
    assert local._converted_dir(reinstalled, root) == local._converted_dir(original, root)

    # Same name, size and mtime, other bytes: another key.
    edited = tmp_path / "venv3" / original.name
    edited.parent.mkdir()
    blob = bytearray(reinstalled.read_bytes())
    blob[-1] ^= 1
    edited.write_bytes(bytes(blob))
    os.utime(edited, ns=(1, reinstalled.stat().st_mtime_ns))
    assert local._converted_dir(edited, root) != local._converted_dir(reinstalled, root)

    # The file is hashed once per (path, size, mtime): later loads read the record.
    reads: list[Path] = []
    real_open = Path.open

    def counting(self: Path, mode: str = "r", *args, **kwargs):
        if "b" in mode:
            reads.append(self)
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counting)
    again = local._converted_dir(reinstalled, root)
    assert again == local._converted_dir(original, root) and reads == []
