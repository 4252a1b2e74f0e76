"""`LivePolicy`: the trainer's own Hugging Face model and tokenizer as a `Model`.

The adapter holds the model and tokenizer *objects* the trainer holds, never a copy of
the weights, so the rollout after an optimizer step samples from the new weights. It
gives exact prompt and completion ids, the logprob of each sampled token, and batches
concurrent requests. `Local` (the embedded SmolLM2, or any checkpoint path) is this
adapter plus loading.

**One worker thread runs the model.** `generate` puts the request on a queue and awaits
a future, so the event loop (tools, verifiers, other rollouts) never waits on torch.
The worker takes the first request, waits up to `batch_window_s` for more (up to
`max_batch_size`), renders and tokenizes them (`nemo_gym.models.chat`, continuing
earlier turns from their exact ids: `nemo_gym.models.tokens`), and runs them as one
left-padded batch through its own sampling loop with a KV cache. Rows that finish
leave the batch; a cancelled caller's row is dropped at the next step.

**Modes, restored.** Each batch runs under `torch.no_grad()` (`Local`, which owns its
model, uses `inference_mode`) with every module in eval mode; each module's own
`training` flag is put back when the batch ends, so a trainer in train mode gets train
mode back (and a module it froze in eval mode stays in eval mode). Grad mode is
thread-local: the trainer's thread is never affected by it.

**Thread safety.** A batch holds `weights_lock` from its first forward pass to its
last. A trainer that steps the optimizer inside `with policy.updating():` waits for the
batch in flight to end and keeps new batches from starting until it leaves, so no
generation ever mixes two versions of the weights. Without it, an optimizer step taken
while a batch runs races with that batch: its later tokens come from the new weights.
The adapter notices (the weights' version counters or fingerprint moved while the batch
ran), logs a warning and marks those responses `metadata["weights_changed"] = True`.
Every response carries `metadata["weights_version"]`, the adapter's count of the
weight changes it has seen when its batch started: it moves with every update of the
weights, seen either in the parameters' in-place version counters (optimizer steps,
`copy_`, `load_state_dict`) or in a fingerprint of sampled elements of every parameter
(fused optimizers and writes through `.data` leave the counters alone), so a trainer
can tell which rollouts came from which weights. Forward passes of the trainer
cannot run while a batch runs (eval mode is a module attribute, shared by all
threads, so dropout would silently be off): one started from another thread raises
`RuntimeError`, and a batch waits for those under way. Take them under `updating()`,
run rollouts and training in turn as a synchronous trainer does, or generate from a
copy (`nemo_gym.training.GenerationCopy`).
The tokenizer is used from the worker thread while requests are prepared.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import queue
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nemo_gym.errors import ConfigError, MissingDependency, ModelError, require
from nemo_gym.knobs import KNOBS, NEUTRAL, active_knobs, refuse_knobs
from nemo_gym.models.base import ModelAdapter, RetryPolicy
from nemo_gym.models.chat import ChatTemplate, ToolFormat
from nemo_gym.models.tokens import Continuations, History
from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling, ToolCall, Usage
from nemo_gym.records import replace as replace_record
from nemo_gym.registry import Spec

__all__ = ["DEFAULT_SAMPLING", "Knobs", "LivePolicy", "PolicyStats", "sample_next"]

log = logging.getLogger(__name__)

DEFAULT_SAMPLING = Sampling(temperature=1.0, top_p=1.0, max_tokens=256)
"""What an unset sampling field means for `LivePolicy` and `Local` (below `default_sampling`)."""


@dataclass(frozen=True, slots=True)
class PolicyStats:
    """Counters of one adapter since it was made (a snapshot; `.stats` makes a new one).

    `continued` counts requests that extended a conversation from its cached exact ids;
    `retokenized` counts requests that carried an assistant turn but had to be rendered
    from scratch (unknown or edited history). `weights_changed` counts batches during
    which the weights were updated in place. `load_s` and `loaded_from_cache` are
    `Local`'s.
    """

    requests: int = 0
    batches: int = 0
    largest_batch: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    continued: int = 0
    retokenized: int = 0
    weights_changed: int = 0
    generate_s: float = 0.0
    load_s: float = 0.0
    loaded_from_cache: bool | None = None

    @property
    def completion_tokens_per_s(self) -> float:
        """Completion tokens per second of batch generation (0.0 before any request)."""
        return self.completion_tokens / self.generate_s if self.generate_s else 0.0


@dataclass(frozen=True, slots=True)
class Knobs:
    """A row's sampling knobs beyond temperature and top_p (`nemo_gym.knobs`).

    Applied as vLLM applies them: `repetition_penalty` divides a positive logit (and
    multiplies a negative one) of every token already in the prompt or the completion;
    `presence_penalty` and `frequency_penalty` subtract from the logits of tokens in
    the completion (once, and once per occurrence); then temperature, `min_p` (drop
    tokens below `min_p` times the top probability), `top_k`, and `top_p`.
    """

    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    @classmethod
    def of(cls, extra: Mapping[str, Any], adapter: str) -> Knobs:
        """The knobs of `Sampling.extra`; `ModelError` naming a knob that is out of
        range, and (`nemo_gym.knobs.refuse_knobs`) any other key, which a local
        sampler has nowhere to send."""
        refuse_knobs(extra, adapter, KNOBS, other_fields=False)
        active = active_knobs(extra)
        if not active:
            return cls()
        defaults = cls()
        values = {**{k: getattr(defaults, k) for k in NEUTRAL}, **active}
        problems = []
        top_k, min_p = values["top_k"], values["min_p"]
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < -1:
            problems.append(f"top_k={top_k!r} must be an integer >= -1 (0 or -1: off)")
        if not _number(min_p) or not 0.0 <= min_p <= 1.0:
            problems.append(f"min_p={min_p!r} must be in [0, 1]")
        penalty = values["repetition_penalty"]
        if not _number(penalty) or penalty <= 0:
            problems.append(f"repetition_penalty={penalty!r} must be > 0")
        for name in ("presence_penalty", "frequency_penalty"):
            if not _number(values[name]) or not -2.0 <= values[name] <= 2.0:
                problems.append(f"{name}={values[name]!r} must be in [-2, 2]")
        if problems:
            raise ModelError(
                f"{adapter}: Sampling.extra " + "; ".join(problems), code="bad_request"
            )
        return cls(
            top_k=max(0, int(top_k)),
            min_p=float(min_p),
            repetition_penalty=float(penalty),
            presence_penalty=float(values["presence_penalty"]),
            frequency_penalty=float(values["frequency_penalty"]),
        )

    @property
    def penalised(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )


PLAIN = Knobs()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _penalise(scores: Any, knobs: Knobs, seen: Any, counts: Any) -> Any:
    """`scores` with the knobs' penalties applied (a copy). `seen`: a tensor of the ids
    in the prompt and completion; `counts`: (ids, occurrences) in the completion."""
    scores = scores.clone()
    if knobs.repetition_penalty != 1.0 and seen is not None and len(seen):
        chosen = scores[seen]
        scores[seen] = chosen.where(chosen <= 0, chosen / knobs.repetition_penalty).where(
            chosen > 0, chosen * knobs.repetition_penalty
        )
    if counts is not None and len(counts[0]):
        ids, occurrences = counts
        scores[ids] -= knobs.frequency_penalty * occurrences.to(scores.dtype)
        scores[ids] -= knobs.presence_penalty
    return scores


def sample_next(
    logits: Any,
    temperatures: Sequence[float],
    top_ps: Sequence[float],
    generators: Sequence[Any],
    knobs: Sequence[Knobs] | None = None,
    histories: Sequence[tuple[Any, Any] | None] | None = None,
) -> tuple[list[int], list[float]]:
    """Pick one token per row of `logits` (a float tensor `[batch, vocab]`).

    Temperature 0 is greedy, and its logprob is that of the untempered distribution.
    Otherwise the token is drawn with the row's own `torch.Generator` from the
    temperature-scaled distribution truncated by the row's `knobs` (`Knobs`: penalties,
    `min_p`, `top_k`) and the top-p nucleus, and the logprob returned is under the
    temperature-scaled distribution *before* penalties and truncation: what a trainer
    recomputes from its own logits (it applies temperature, nothing else). `histories`
    gives, per row with penalties, (a tensor of the ids in its prompt and completion,
    (ids, counts) of its completion).
    """
    import torch

    tokens: list[int] = []
    logprobs: list[float] = []
    for row, (temperature, top_p, generator) in enumerate(
        zip(temperatures, top_ps, generators, strict=True)
    ):
        raw = logits[row].float()
        row_knobs = knobs[row] if knobs is not None else PLAIN
        scores = raw
        if row_knobs.penalised:
            history = histories[row] if histories is not None else None
            seen, counts = history if history is not None else (None, None)
            scores = _penalise(raw, row_knobs, seen, counts)
        if temperature == 0.0:
            logp = torch.log_softmax(raw, dim=-1)
            token = int(torch.argmax(scores))
        else:
            logp = torch.log_softmax(raw / temperature, dim=-1)
            probs = torch.softmax(scores / temperature, dim=-1)
            if row_knobs.min_p > 0.0:
                probs = probs.masked_fill(probs < row_knobs.min_p * probs.max(), 0.0)
            if 0 < row_knobs.top_k < probs.shape[-1]:
                kth = torch.topk(probs, row_knobs.top_k).values[-1]
                probs = probs.masked_fill(probs < kth, 0.0)
            if top_p < 1.0:
                if row_knobs.min_p > 0.0 or row_knobs.top_k > 0:
                    probs = probs / probs.sum()  # the nucleus is of what min_p/top_k kept
                sorted_probs, order = torch.sort(probs, descending=True)
                # Keep each token whose preceding mass is still under top_p: the smallest
                # set reaching top_p, never empty.
                outside = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= top_p
                sorted_probs = sorted_probs.masked_fill(outside, 0.0)
                probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
            token = int(torch.multinomial(probs, 1, generator=generator))
        tokens.append(token)
        logprobs.append(float(logp[token]))
    return tokens, logprobs


def check_sampling(sampling: Sampling, where: str) -> None:
    """Raise `ConfigError` naming the field of `sampling` a token-level adapter refuses."""
    if sampling.temperature is not None and sampling.temperature < 0:
        raise ConfigError(f"{where}.temperature={sampling.temperature}: must be >= 0")
    if sampling.top_p is not None and not 0.0 < sampling.top_p <= 1.0:
        raise ConfigError(f"{where}.top_p={sampling.top_p}: must be in (0, 1]")
    if sampling.max_tokens is not None and sampling.max_tokens < 1:
        raise ConfigError(f"{where}.max_tokens={sampling.max_tokens}: must be at least 1")


# ---------------------------------------------------------------------------------------
# Requests in flight


@dataclass(slots=True)
class _Pending:
    request: ModelRequest
    sampling: Sampling
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[ModelResponse]


@dataclass(slots=True)
class _Row:
    pending: _Pending
    prompt_ids: list[int]
    history: History
    temperature: float
    top_p: float
    max_tokens: int
    stops: tuple[str, ...]
    seed: int
    generator: Any
    knobs: Knobs = PLAIN
    seen: set[int] = field(default_factory=set)  # prompt and completion ids, for penalties
    completion: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    stop_at: int | None = None  # where a stop string begins in the decoded completion
    ended_on_eos: bool = False

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.pending.future.done()


_CLOSE = object()


class LivePolicy(ModelAdapter):
    """A Hugging Face causal LM the caller holds, as a `Model`: batched, exact ids + logprobs.

    `model` is a `transformers` causal LM (a `PreTrainedModel`, or a PEFT model around
    one; not a DDP/FSDP wrapper: pass the module inside) and `tokenizer` its tokenizer.
    Neither is copied, moved or closed: generation runs on the model's own device and
    dtype, with the weights as they are at that moment. `name` is what responses report
    (default: the model's `name_or_path`). `chat_template` overrides the tokenizer's;
    `tool_format` is how tools are written and parsed ("hermes" or a `ToolFormat`).
    `max_conversations` bounds the cache of conversations later turns continue from.
    See the module docstring for batching, modes and thread safety.
    """

    # The model and tokenizer are the trainer's objects, not options: the spec records
    # the model's id (`name`, its name_or_path by default) instead.
    spec_exclude = frozenset({"api_key", "model", "tokenizer"})

    def to_spec(self) -> Spec:
        """The adapter's spec, with the model's id (`name`) as an option."""
        spec = super().to_spec()
        return spec.model_copy(update={"options": {**spec.options, "name": self.name}})

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str | None = None,
        chat_template: str | None = None,
        tool_format: str | ToolFormat = "hermes",
        max_batch_size: int = 8,
        batch_window_s: float = 0.005,
        default_sampling: Sampling | None = None,
        max_conversations: int = 4096,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if model is None or tokenizer is None:
            raise ConfigError("LivePolicy(model, tokenizer): both objects are required")
        self._configure(
            name=name or str(getattr(getattr(model, "config", None), "name_or_path", "") or ""),
            chat_template=chat_template,
            tool_format=tool_format,
            max_batch_size=max_batch_size,
            batch_window_s=batch_window_s,
            default_sampling=default_sampling,
            max_conversations=max_conversations,
            max_concurrency=max_concurrency,
            retry=retry,
        )
        self._attach(model, tokenizer, owned=False)

    def _configure(
        self,
        *,
        name: str,
        chat_template: str | None,
        tool_format: str | ToolFormat,
        max_batch_size: int,
        batch_window_s: float,
        default_sampling: Sampling | None,
        max_conversations: int,
        max_concurrency: int | None,
        retry: RetryPolicy | None,
    ) -> None:
        kind = type(self).__name__
        if max_batch_size < 1:
            raise ConfigError(f"{kind}(max_batch_size={max_batch_size}): must be at least 1")
        if batch_window_s < 0:
            raise ConfigError(f"{kind}(batch_window_s={batch_window_s}): must be >= 0")
        if max_conversations < 0:
            raise ConfigError(f"{kind}(max_conversations={max_conversations}): must be >= 0")
        base = default_sampling.merged_over(DEFAULT_SAMPLING) if default_sampling else None
        ModelAdapter.__init__(
            self,
            max_concurrency=max_concurrency,
            retry=retry,
            default_sampling=base or DEFAULT_SAMPLING,
        )
        check_sampling(self.default_sampling, "default_sampling")
        self.name = name or kind
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        self.max_conversations = max_conversations
        self.weights_lock = threading.Lock()
        """Held by each batch from its first forward pass to its last (see `updating()`)."""
        self._weights = _WeightsWatch()
        self._chat_template = chat_template
        self._tool_format = tool_format
        self._stats_lock = threading.Lock()
        self._stats = PolicyStats()
        self._model: Any = None
        self._tokenizer: Any = None
        self._torch: Any = None
        self._template: ChatTemplate | None = None
        self._continuations: Continuations | None = None
        self._owned = False
        self._device: Any = None
        self._cache_kwarg = "past_key_values"
        self._logits_kwarg: str | None = None
        self._eos_ids: frozenset[int] = frozenset()
        self._pad_id = 0
        self._max_context: int | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        # The forward guard (`_guard_forwards`): which thread generates now, and how many
        # forward passes of other threads are under way.
        self._modes = threading.Condition()
        self._generating: int | None = None
        self._foreign_forwards = 0
        self._hooks: list[Any] = []
        # Why the worker thread died (a missing extra, a crash outside a batch); set, every
        # request fails at once with it until close().
        self._broken: Exception | None = None
        # What the worker does now, for activity(): written by the worker only.
        self._doing: str | None = None
        self._batch_rows = 0
        self._batch_tokens = 0
        # The event loop takes this one, and must never wait behind a slow model load.
        self._worker_lock = threading.Lock()

    # -- public surface --------------------------------------------------------------

    @property
    def model(self) -> Any:
        """The Hugging Face model generation runs on (the caller's object)."""
        self._ensure_model()
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer (the caller's object)."""
        self._ensure_model()
        return self._tokenizer

    @property
    def template(self) -> ChatTemplate:
        """How prompts are rendered and replies parsed."""
        self._ensure_model()
        assert self._template is not None
        return self._template

    @property
    def stats(self) -> PolicyStats:
        """Counters so far: requests, batches, largest batch, tokens, continuations, timings."""
        with self._stats_lock:
            return self._stats

    def activity(self) -> str | None:
        """What the worker thread is doing now, for a progress display: "loading NAME",
        "generating N replies: T tokens so far", or None when idle."""
        doing = self._doing
        if doing == "loading":
            return f"loading {self.name}"
        if doing == "generating":
            rows, tokens = self._batch_rows, self._batch_tokens
            return f"generating {rows} repl{'y' if rows == 1 else 'ies'}: {tokens} tokens so far"
        return None

    @property
    def weights_version(self) -> int:
        """How many weight changes the adapter has seen, as of now (see the module doc)."""
        self._ensure_model()
        return self._weights.observe(self._model)

    @contextlib.contextmanager
    def updating(self) -> Iterator[None]:
        """Hold generation while the weights change (`with policy.updating(): opt.step()`).

        Waits for the batch in flight to finish its last forward pass, and keeps new
        batches from starting until the block ends. Blocking: call it from the trainer's
        thread, not from a coroutine on the loop that awaits this policy's rollouts.
        """
        with self.weights_lock:
            yield

    async def generate_group(self, request: ModelRequest, n: int) -> list[ModelResponse]:
        """`n` samples of one request, batched together (a GRPO group's first turn).

        With a seed `s` in the (merged) sampling, sample `i` uses seed `s + i`, and its
        response's `sampling.seed` says so; without one each sample is seeded randomly.
        """
        if n < 1:
            raise ModelError(f"generate_group(n={n}): n must be at least 1", code="bad_request")
        sampling = request.sampling.merged_over(self.default_sampling)
        futures = self._submit(
            [
                replace_record(
                    request,
                    sampling=sampling
                    if sampling.seed is None
                    else sampling.model_copy(update={"seed": sampling.seed + i}),
                )
                for i in range(n)
            ]
        )
        try:
            return list(await asyncio.gather(*futures))
        finally:
            for future in futures:
                future.cancel()

    def close(self) -> None:
        """Stop the worker thread; requests still queued fail with `ModelError`. Idempotent.

        The model and tokenizer are the caller's and stay as they are. The adapter stays
        usable: the next request starts a worker thread again.
        """
        with self._worker_lock:
            worker, self._worker = self._worker, None
            if worker is not None and worker.is_alive():
                if worker is threading.current_thread():
                    raise RuntimeError("close() called from the worker thread")
                self._queue.put(_CLOSE)
                worker.join()
            self._fail_queued(ModelError(f"{type(self).__name__} was closed", code="closed"))
            hooks, self._hooks = self._hooks, []
            for hook in hooks:  # the caller's model is left as it was given
                hook.remove()
            self._broken = None

    async def aclose(self) -> None:
        """`close()` without blocking the event loop. Idempotent."""
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> LivePolicy:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # -- requests ---------------------------------------------------------------------

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        (future,) = self._submit([request])
        return await future

    def _submit(self, requests: Sequence[ModelRequest]) -> list[asyncio.Future[ModelResponse]]:
        kind = type(self).__name__
        loop = asyncio.get_running_loop()
        pendings: list[_Pending] = []
        for request in requests:
            if request.model is not None and request.model != self.name:
                raise ModelError(
                    f"{kind} serves {self.name!r} and cannot switch to {request.model!r} "
                    "per request",
                    code="bad_request",
                )
            if not request.messages:
                raise ModelError("a request needs at least one message", code="bad_request")
            sampling = request.sampling.merged_over(self.default_sampling)
            try:
                check_sampling(sampling, "request.sampling")
            except ConfigError as exc:
                raise ModelError(str(exc), code="bad_request") from exc
            Knobs.of(sampling.extra, kind)
            pendings.append(_Pending(request, sampling, loop, loop.create_future()))
        # Under the worker lock, so a concurrent close() or a dying worker cannot strand
        # these requests.
        with self._worker_lock:
            if self._broken is not None:
                raise _copy_error(self._broken)
            self._ensure_worker()
            for pending in pendings:
                self._queue.put(pending)
        return [p.future for p in pendings]

    # -- the model --------------------------------------------------------------------

    def _ensure_model(self) -> None:
        """Make `_model`/`_tokenizer` available (`Local` loads them here)."""

    def _attach(self, model: Any, tokenizer: Any, *, owned: bool) -> None:
        torch = require("torch", "local")
        template = ChatTemplate(
            tokenizer, chat_template=self._chat_template, tool_format=self._tool_format
        )
        eos = {tokenizer.eos_token_id}
        generation_config = getattr(model, "generation_config", None)
        configured = getattr(generation_config, "eos_token_id", None)
        eos.update(configured if isinstance(configured, list) else [configured])
        eos_ids = frozenset(i for i in eos if i is not None)
        if not eos_ids:
            raise ModelError(f"{self.name!r} defines no EOS token", code="load_failed")
        pad = tokenizer.pad_token_id
        parameters = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        self._logits_kwarg = next(
            (k for k in ("logits_to_keep", "num_logits_to_keep") if k in parameters), None
        )
        self._eos_ids = eos_ids
        self._pad_id = pad if pad is not None else min(eos_ids)
        self._max_context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        self._device = next(model.parameters()).device
        self._owned = owned
        self._template = template
        self._continuations = Continuations(template, max_conversations=self.max_conversations)
        self._torch, self._tokenizer, self._model = torch, tokenizer, model
        self._guard_forwards(model)

    def _guard_forwards(self, model: Any) -> None:
        """Refuse a forward pass of another thread while a batch generates.

        A batch puts every module in eval mode (a module attribute, seen by all
        threads): a trainer's forward pass running meanwhile would silently train
        without dropout, and its restore could flip the batch back to train mode. So
        a forward pass on the root module from any thread but the worker raises while
        a batch runs, and a batch waits for the forward passes under way to end.
        """
        if self._hooks or not hasattr(model, "register_forward_pre_hook"):
            return

        counted = threading.local()  # this thread's forwards that `enter` counted

        def enter(module: Any, args: Any) -> None:
            if threading.get_ident() == self._generating:
                return
            with self._modes:
                if self._generating is not None:
                    raise RuntimeError(
                        f"a forward pass of {self.name!r} from thread "
                        f"{threading.current_thread().name!r} while {type(self).__name__} is "
                        "generating with it (in eval mode, so dropout would be off): run "
                        "training forwards between rollouts, under policy.updating(), or "
                        "on another copy of the model (nemo_gym.training.GenerationCopy)"
                    )
                self._foreign_forwards += 1
                counted.depth = getattr(counted, "depth", 0) + 1

        def leave(module: Any, args: Any, output: Any) -> None:
            # Also called after `enter` refused (always_call): count only what it counted.
            if not getattr(counted, "depth", 0):
                return
            with self._modes:
                counted.depth -= 1
                self._foreign_forwards -= 1
                self._modes.notify_all()

        self._hooks = [
            model.register_forward_pre_hook(enter),
            model.register_forward_hook(leave, always_call=True),
        ]

    # -- the worker -------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        # The caller holds _worker_lock.
        if self._model is not None:
            self._guard_forwards(self._model)
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(
                target=self._work, name=f"nemo_gym.{self!r}", daemon=True
            )
            self._worker.start()

    def _on_worker_start(self) -> None:
        """Per-thread setup in the worker (`Local` sets torch's thread count here)."""

    def _work(self) -> None:
        batch: list[_Pending] = []
        try:
            self._on_worker_start()
            while True:
                batch, closing = self._next_batch()
                if batch:
                    self._serve(batch)
                batch = []
                if closing:
                    return
        except BaseException as exc:
            # A dead worker would strand every request queued for it (the caller awaits
            # a future nothing resolves): fail them, and every later one, with its error.
            error = _as_model_error(exc)
            log.error("the worker thread of %s died: %s", self.name, error)
            with self._worker_lock:
                self._broken = error
                for pending in batch:
                    _deliver(pending, None, error)
                self._fail_queued(error)

    def _next_batch(self) -> tuple[list[_Pending], bool]:
        """The next batch (blocking), and whether close() was asked for."""
        first = self._queue.get()
        if first is _CLOSE:
            return [], True
        batch = [first]
        deadline = time.monotonic() + self.batch_window_s
        while len(batch) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else None
                if item is None:
                    item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _CLOSE:
                return batch, True
            batch.append(item)
        return batch, False

    def _fail_queued(self, error: Exception) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Pending):
                _deliver(item, None, error)

    def _grad_guard(self) -> Any:
        # The trainer's model: no_grad, never inference_mode, whose inference tensors
        # would poison a buffer the model caches during a forward pass for training.
        return self._torch.no_grad()

    def _serve(self, batch: list[_Pending]) -> None:
        live = [p for p in batch if not p.future.done()]
        if not live:
            return
        try:
            if self._model is None:
                self._doing = "loading"
            self._ensure_model()
        except Exception as exc:
            self._doing = None
            error = _as_model_error(exc)
            for pending in live:
                _deliver(pending, None, error)
            return
        self._doing = None
        rows: list[_Row] = []
        for pending in live:
            try:
                rows.append(self._prepare(pending))
            except Exception as exc:
                _deliver(pending, None, _as_model_error(exc))
        if not rows:
            return
        with self.weights_lock:
            with self._modes:  # the trainer's forward passes under way end first
                self._modes.wait_for(lambda: self._foreign_forwards == 0)
                self._generating = threading.get_ident()
            started = time.perf_counter()
            version = self._weights.observe(self._model)
            modes = [(module, module.training) for module in self._model.modules()]
            self._doing, self._batch_rows, self._batch_tokens = "generating", len(rows), 0
            try:
                self._model.eval()
                with self._grad_guard():
                    self._decode(rows)
            except Exception as exc:
                log.exception("batch of %d failed", len(rows))
                for row in rows:
                    _deliver(row.pending, None, _as_model_error(exc))
                return
            finally:
                self._doing = None
                for module, training in modes:
                    module.training = training
                with self._modes:
                    self._generating = None
            changed = self._weights.observe(self._model) != version
            elapsed = time.perf_counter() - started
        if changed:
            log.warning(
                "the weights of %s changed while a batch of %d was generating; its later "
                "tokens come from the new weights (step the optimizer inside "
                "policy.updating() to prevent this)",
                self.name,
                len(rows),
            )
        self._bump(
            requests=len(rows),
            batches=1,
            largest_batch=len(rows),
            prompt_tokens=sum(len(r.prompt_ids) for r in rows),
            completion_tokens=sum(len(r.completion) for r in rows),
            continued=sum(r.history == "continued" for r in rows),
            retokenized=sum(r.history == "retokenized" for r in rows),
            weights_changed=int(changed),
            generate_s=elapsed,
        )
        for row in rows:
            if row.pending.future.done():
                continue
            try:
                response = self._respond(row, version, changed)
            except Exception as exc:
                _deliver(row.pending, None, _as_model_error(exc))
            else:
                _deliver(row.pending, response, None)

    def _bump(self, **changes: Any) -> None:
        with self._stats_lock:
            current = self._stats
            update: dict[str, Any] = {}
            for name, value in changes.items():
                if name == "largest_batch":
                    update[name] = max(current.largest_batch, value)
                elif name in ("load_s", "loaded_from_cache"):
                    update[name] = value
                else:
                    update[name] = getattr(current, name) + value
            self._stats = replace(current, **update)

    # -- prompts ----------------------------------------------------------------------

    def _prepare(self, pending: _Pending) -> _Row:
        assert self._continuations is not None
        sampling = pending.sampling
        prompt = self._continuations.prompt(pending.request)
        max_tokens = int(sampling.max_tokens or 0)
        if self._max_context is not None:
            room = self._max_context - len(prompt.ids)
            if room <= 0:
                raise ModelError(
                    f"the prompt has {len(prompt.ids)} tokens; {self.name} holds "
                    f"{self._max_context}",
                    code="context_length",
                )
            max_tokens = min(max_tokens, room)
        # Not `random`: trainers seed it identically on every process (transformers'
        # set_seed), so unseeded samples of one group split across processes would repeat.
        seed = sampling.seed if sampling.seed is not None else secrets.randbits(63)
        generator = self._torch.Generator(device=self._device)
        generator.manual_seed(seed)
        knobs = Knobs.of(sampling.extra, type(self).__name__)
        return _Row(
            pending=pending,
            prompt_ids=prompt.ids,
            history=prompt.history,
            temperature=float(sampling.temperature or 0.0),
            top_p=float(sampling.top_p if sampling.top_p is not None else 1.0),
            max_tokens=max_tokens,
            stops=tuple(s for s in (sampling.stop or ()) if s),
            seed=seed,
            generator=generator,
            knobs=knobs,
            seen=set(prompt.ids) if knobs.repetition_penalty != 1.0 else set(),
        )

    # -- generation -------------------------------------------------------------------

    def _new_cache(self) -> Any:
        transformers = require("transformers", "local")
        try:
            return transformers.DynamicCache(config=self._model.config)
        except TypeError:  # transformers 4 takes no config
            return transformers.DynamicCache()

    def _decode(self, rows: list[_Row]) -> None:
        """Run the batch to completion: left-padded prefill, then one token per step."""
        torch, model, device = self._torch, self._model, self._device
        width = max(len(r.prompt_ids) for r in rows)
        input_ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for index, row in enumerate(rows):
            input_ids[index, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids)
            mask[index, width - len(row.prompt_ids) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        # Left padding shifts each row's positions; count them from its first real token.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = self._new_cache()
        extra: dict[str, Any] = {self._cache_kwarg: cache, "use_cache": True}
        if self._logits_kwarg is not None:
            extra[self._logits_kwarg] = 1
        for row in rows:
            if row.max_tokens <= 0:
                row.finish_reason = "length"
        active = [r for r in rows if not r.done]
        while active:
            logits = model(
                input_ids=input_ids, attention_mask=mask, position_ids=positions, **extra
            ).logits[:, -1, :]
            tokens, logprobs = sample_next(
                logits,
                [r.temperature for r in active],
                [r.top_p for r in active],
                [r.generator for r in active],
                [r.knobs for r in active],
                [self._history(r) for r in active],
            )
            for row, token, logprob in zip(active, tokens, logprobs, strict=True):
                if row.finish_reason is None:
                    self._advance(row, token, logprob)
            keep = [i for i, row in enumerate(active) if not row.done]
            if not keep:
                break
            if len(keep) < len(active) and hasattr(cache, "batch_select_indices"):
                # Finished rows leave the batch, so a long row does not drag short ones.
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                mask, positions = mask[index], positions[index]
                tokens = [tokens[i] for i in keep]
                active = [active[i] for i in keep]
            else:
                tokens = [
                    t if not row.done else self._pad_id
                    for t, row in zip(tokens, active, strict=True)
                ]
            input_ids = torch.tensor(tokens, device=device).unsqueeze(-1)
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
            positions = positions[:, -1:] + 1

    def _history(self, row: _Row) -> tuple[Any, Any] | None:
        """What the row's penalties need (`sample_next`'s `histories`)."""
        if not row.knobs.penalised:
            return None
        torch = self._torch
        seen = torch.tensor(sorted(row.seen), dtype=torch.long, device=self._device)
        counts = torch.unique(
            torch.tensor(row.completion, dtype=torch.long, device=self._device),
            return_counts=True,
        )
        return seen, counts

    def _advance(self, row: _Row, token: int, logprob: float) -> None:
        if row.knobs.repetition_penalty != 1.0:
            row.seen.add(token)
        self._batch_tokens += 1
        row.completion.append(token)
        row.logprobs.append(logprob)
        if token in self._eos_ids:
            row.finish_reason, row.ended_on_eos = "stop", True
            return
        if row.stops:
            text = self._tokenizer.decode(row.completion, skip_special_tokens=False)
            found = [i for i in (text.find(s) for s in row.stops) if i >= 0]
            if found:
                row.finish_reason, row.stop_at = "stop", min(found)
                return
        if len(row.completion) >= row.max_tokens:
            row.finish_reason = "length"

    def _respond(self, row: _Row, version: int, changed: bool) -> ModelResponse:
        assert self._template is not None and self._continuations is not None
        request = row.pending.request
        body = row.completion[:-1] if row.ended_on_eos else row.completion
        text = self._template.decode(body)
        if row.stop_at is not None:
            text = text[: row.stop_at]
        content: str | None = text
        calls: tuple[ToolCall, ...] = ()
        if request.tools:
            content, calls = self._template.parse(text)
        message = Message.assistant(content, tool_calls=calls)
        metadata: dict[str, Any] = {"history": row.history, "weights_version": version}
        if changed:
            metadata["weights_changed"] = True
        sampling = row.pending.sampling
        if sampling.seed != row.seed:
            # The seed drawn for an unseeded request, so the sample can be reproduced.
            sampling = sampling.model_copy(update={"seed": row.seed})
        response = ModelResponse(
            message=message,
            finish_reason=row.finish_reason or "length",
            usage=Usage(prompt_tokens=len(row.prompt_ids), completion_tokens=len(row.completion)),
            model=self.name,
            prompt_token_ids=list(row.prompt_ids),
            completion_token_ids=list(row.completion),
            completion_logprobs=list(row.logprobs),
            sampling=sampling,
            metadata=metadata,
        )
        self._continuations.remember(
            request, message, row.prompt_ids, row.completion, ended_on_stop_token=row.ended_on_eos
        )
        return response


class _WeightsWatch:
    """Counts the weight changes it sees between two looks at a model.

    A change is seen in either of two signs. The parameters' in-place version counters
    move with an optimizer step, `copy_` or `load_state_dict`, but not with a fused
    optimizer (`AdamW(fused=True)`, TRL's and HF's default `adamw_torch_fused`) or a
    write through `.data`; those are seen in a fingerprint: eight elements of every
    parameter at fixed spread-out positions (a real training step moves nearly every
    element of every tensor it trains), gathered with one copy to the host.
    """

    SAMPLES = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: tuple[int, bytes] | None = None
        self._indices: dict[tuple[int, str], Any] = {}
        self.version = 0

    def observe(self, model: Any) -> int:
        """The count after this look: one more than the last when the weights changed."""
        with self._lock:
            key = self._key(model)
            if self._seen is not None and key != self._seen:
                self.version += 1
            self._seen = key
            return self.version

    def _key(self, model: Any) -> tuple[int, bytes]:
        import torch

        parameters = list(model.parameters())
        counters = sum(p._version for p in parameters)
        picked = []
        with torch.no_grad():
            for p in parameters:
                if p.numel() == 0 or p.device.type == "meta":
                    continue
                try:
                    flat = p.detach().reshape(-1)
                    picked.append(flat[self._positions(p)].to(torch.float32))
                except Exception:
                    # A sharded or exotic tensor (DTensor, a quantized weight): its
                    # version counter still counts.
                    continue
            if not picked:
                return counters, b""
            sample = torch.cat([t.to(picked[0].device) for t in picked]).cpu()
        return counters, sample.numpy().tobytes()

    def _positions(self, p: Any) -> Any:
        import torch

        n = p.numel()
        key = (n, str(p.device))
        positions = self._indices.get(key)
        if positions is None:
            # Spread over the tensor (Knuth's multiplicative hash), first and last included.
            spots = sorted({0, n - 1, *((k * 2654435761) % n for k in range(1, self.SAMPLES - 1))})
            positions = torch.tensor(spots, dtype=torch.long, device=p.device)
            self._indices[key] = positions
        return positions


def _as_model_error(exc: BaseException) -> Exception:
    """`exc` as the failure it is for the rollout (a `ModelError` unless it is the user's
    `ConfigError`), its message kept."""
    if isinstance(exc, ModelError | ConfigError):
        return exc
    if isinstance(exc, MissingDependency):
        # A model failure (the model could not run), still naming the extra to install.
        error = ModelError(str(exc), code="missing_dependency")
    elif isinstance(exc, ImportError):
        error = ModelError(f"local generation failed: {exc}", code="missing_dependency")
    else:
        error = ModelError(f"local generation failed: {type(exc).__name__}: {exc}", code="local")
    error.__cause__ = exc
    return error


def _copy_error(error: Exception) -> Exception:
    """A fresh exception per request, so tracebacks do not pile up on one instance."""
    copy = (
        ModelError(str(error), code=error.code)
        if isinstance(error, ModelError)
        else ConfigError(str(error))
    )
    copy.__cause__ = error.__cause__
    return copy


def _deliver(pending: _Pending, response: ModelResponse | None, error: Exception | None) -> None:
    """Hand a result to the caller's event loop (thread-safe; a cancelled caller is skipped)."""

    def resolve() -> None:
        if pending.future.done():
            return
        if error is not None:
            pending.future.set_exception(error)
        else:
            pending.future.set_result(response)  # type: ignore[arg-type]

    try:
        pending.loop.call_soon_threadsafe(resolve)
    except RuntimeError:
        log.debug("the caller's event loop is closed; dropping its result")
