"""Runs on disk: `collect` (stream to JSONL, resume, metrics), `evaluate` (sync), `reverify`.

A run directory holds:
- `run.json`: what ran (`RunSpec`: env, model, harness specs, sampling, seed, repeats,
  split; run id, schema version); a resumed run must agree with it; written atomically;
- `rollouts.jsonl`: one `Rollout` per line, appended and flushed as each finishes;
- `failures.jsonl`: one line per failed rollout (ids + `Failure`), re-derived from
  `rollouts.jsonl` on resume, so a crash between the two writes loses nothing;
- `metrics.json`: `RunMetrics` computed from `rollouts.jsonl`, written atomically.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import ValidationError

from nemo_gym.errors import ConfigError, NemoGymError
from nemo_gym.lifecycle import close_all, is_interrupt
from nemo_gym.metrics import MetricsAccumulator, compute_metrics
from nemo_gym.protocols import Environment, Harness, Model, Verifier, as_verifier
from nemo_gym.records import SCHEMA_VERSION, Rewards, Rollout, RunMetrics, RunSpec, Sampling, Task
from nemo_gym.registry import Spec, build
from nemo_gym.runner import DEFAULT_CONCURRENCY, _failure, rollouts, run_spec

__all__ = [
    "KNOWN_SCHEMA_VERSIONS",
    "RunResult",
    "collect",
    "evaluate",
    "iter_rows",
    "read_rollouts",
    "reverify",
    "run_sync",
]

ROLLOUTS = "rollouts.jsonl"
FAILURES = "failures.jsonl"
METRICS = "metrics.json"
MANIFEST = "run.json"
KNOWN_SCHEMA_VERSIONS = (1, SCHEMA_VERSION)
"""Row versions this release reads (v1 rows store every request in full)."""

T = TypeVar("T")


class RunResult:
    """What a run produced: its metrics, and its rollouts (in memory, or in `output`).

    `rollouts` is the list of rollouts: those gathered in memory, or — for a run written
    to `output` — every row of `output/rollouts.jsonl`, read when first asked for (use
    `iter_rollouts()` to stream a large run instead). `new` counts the rollouts this call
    ran (a resumed run skips the ones already written).
    """

    def __init__(
        self,
        metrics: RunMetrics,
        output: Path | None = None,
        rollouts: list[Rollout] | None = None,
        new: int = 0,
    ) -> None:
        self.metrics = metrics
        self.output = output
        self.new = new
        self._rollouts = rollouts

    @property
    def rollouts(self) -> list[Rollout]:
        if self._rollouts is None:
            self._rollouts = list(self.iter_rollouts())
        return self._rollouts

    def iter_rollouts(self) -> Iterator[Rollout]:
        """The rollouts one at a time (read from `output` when the run was written there)."""
        if self._rollouts is not None:
            yield from self._rollouts
        elif self.output is not None:
            yield from read_rollouts(self.output)

    def __repr__(self) -> str:
        where = f", output={str(self.output)!r}" if self.output else ""
        return f"RunResult(n_rollouts={self.metrics.n_rollouts}, new={self.new}{where})"


# --------------------------------------------------------------------------- files


def numbered_rows(path: Path, start: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) for each row of a JSONL file from byte `start`; a bad line
    raises `ConfigError` naming file and line."""
    with path.open("rb") as handle:
        first = 1
        if start:
            handle.seek(start)
            first += _count_lines(path, start)
        for number, line in enumerate(handle, first):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{path}:{number}: not valid JSON ({exc})") from exc
            if not isinstance(row, dict):
                raise ConfigError(f"{path}:{number}: expected a JSON object")
            for name in ("task_id", "repeat", "status"):
                if name not in row:
                    raise ConfigError(f"{path}:{number}: missing field {name!r}")
            yield number, row


def _count_lines(path: Path, end: int) -> int:
    with path.open("rb") as handle:
        return handle.read(end).count(b"\n")


def iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL file; a bad line raises `ConfigError` naming file and line."""
    for _, row in numbered_rows(path):
        yield row


def _check_version(path: Path, number: int, row: dict[str, Any]) -> None:
    version = row.get("schema_version")
    if version not in KNOWN_SCHEMA_VERSIONS:
        raise ConfigError(
            f"{path}:{number}: field 'schema_version' is {version!r}; this nemo_gym reads "
            f"{', '.join(map(str, KNOWN_SCHEMA_VERSIONS))}"
        )


def read_rollouts(run_dir: str | os.PathLike[str]) -> Iterator[Rollout]:
    """The rollouts stored in a run directory (or a `rollouts.jsonl` path), validated.

    Rows of every known schema version are read (v1 rows included); an unknown version
    or a row that is not a `Rollout` raises `ConfigError` naming file, line and field.
    """
    path = Path(run_dir)
    if path.is_dir():
        path = path / ROLLOUTS
    for number, row in numbered_rows(path):
        _check_version(path, number, row)
        try:
            yield Rollout.model_validate(row)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"])
            raise ConfigError(
                f"{path}:{number}: field {field!r}: {error['msg']} (not a Rollout)"
            ) from exc
        except NemoGymError as exc:
            raise ConfigError(f"{path}:{number}: {exc}") from exc


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so a crash leaves the old file or the new one, never half.

    A temporary file in the same directory is written and fsynced, renamed over `path`,
    and the directory fsynced so the rename itself survives a power loss.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def remove_stale_temp_files(directory: Path) -> list[Path]:
    """Delete the temporary files a crash in the middle of `write_atomic` left behind.

    They are named `.NAME.XXXXXXXX.tmp` after the file being replaced; nothing reads
    them, and without this every crash at that moment would leave one more.
    """
    removed = []
    for name in (MANIFEST, METRICS, FAILURES):
        for stale in directory.glob(f".{name}.*.tmp"):
            stale.unlink(missing_ok=True)
            removed.append(stale)
    return removed


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _repair_tail(path: Path) -> None:
    """Drop a torn last line left by a crash mid-write, so resume appends cleanly."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        size = handle.seek(0, os.SEEK_END)
        # Search backwards for the last complete line, a block at a time.
        position = size
        while position > 0:
            step = min(1 << 16, position)
            position -= step
            handle.seek(position)
            cut = handle.read(step).rfind(b"\n")
            if cut >= 0:
                handle.truncate(position + cut + 1)
                return
        handle.truncate(0)


def _read_manifest(path: Path) -> dict[str, Any] | None:
    """A run's `run.json`, or None when there is none; bad JSON names the file."""
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return manifest


def _sanitize(value: Any) -> Any:
    """Values JSON cannot carry as they are: bytes keep their bytes as surrogate escapes."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "surrogateescape")
    if isinstance(value, dict):
        return {str(k): _sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_sanitize(v) for v in value]
    return value


def rollout_json(rollout: Rollout) -> str:
    """One JSONL line for a rollout.

    Values JSON cannot hold are written as their repr. Text that cannot be encoded as
    UTF-8 (lone surrogates in a prompt or a reply, non-UTF-8 bytes in metadata) is
    written with JSON escapes, so the line stays valid JSON and reads back as it was.
    """
    try:
        return rollout.model_dump_json(fallback=repr)
    except Exception:
        data = _sanitize(rollout.model_dump(mode="python", fallback=repr))
        return json.dumps(data, default=repr, separators=(",", ":"))


def _failure_line(row_or_rollout: Rollout | dict[str, Any]) -> str:
    if isinstance(row_or_rollout, Rollout):
        failure = row_or_rollout.failure.model_dump(mode="json") if row_or_rollout.failure else None
        ids = (row_or_rollout.run_id, row_or_rollout.task_id, row_or_rollout.repeat)
    else:
        failure = row_or_rollout.get("failure")
        ids = (row_or_rollout.get("run_id"), row_or_rollout["task_id"], row_or_rollout["repeat"])
    run_id, task_id, repeat = ids
    return json.dumps({"run_id": run_id, "task_id": task_id, "repeat": repeat, "failure": failure})


def _write_line(handle: IO[str], text: str) -> None:
    handle.write(text)
    handle.write("\n")
    handle.flush()


# --------------------------------------------------------------------------- resume


def _manifest(spec: RunSpec, run_id: str, limit: int | None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "created_at": time.time(),
        "spec": spec.model_dump(mode="json"),
        "limit": limit,
    }


def _identity(spec: dict[str, Any]) -> dict[str, Any]:
    """The fields of a run spec a resumed run must agree on."""
    out: dict[str, Any] = {}
    for part in ("env", "model", "harness"):
        value = spec.get(part) or {}
        out[part] = Spec.model_validate(value).identity() if value else None
    for name in ("sampling", "seed", "repeats", "split"):
        out[name] = spec.get(name)
    return out


def _differences(stored: Any, current: Any, prefix: str) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(stored, dict) and isinstance(current, dict):
        for key in sorted(set(stored) | set(current)):
            yield from _differences(stored.get(key), current.get(key), f"{prefix}.{key}")
    elif stored != current:
        yield prefix, stored, current


def _check_resume(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Reuse the stored run id; refuse to resume a different run, naming the field."""
    stored = _read_manifest(path)
    if stored is None:
        return manifest
    version = stored.get("schema_version", 1)
    if version != SCHEMA_VERSION or "spec" not in stored:
        raise ConfigError(
            f"{path}: field 'schema_version' is {version!r} but this nemo_gym writes "
            f"{SCHEMA_VERSION}; the run can be read (gym eval reverify, read_rollouts) "
            "but not resumed: use another output directory"
        )
    try:
        before = _identity(stored["spec"])
    except ValidationError as exc:
        raise ConfigError(f"{path}: field 'spec' is not a run spec: {exc}") from exc
    now = _identity(manifest["spec"])
    for field, old, new in _differences(before, now, "spec"):
        raise ConfigError(
            f"{path}: field {field[5:]!r} is {old!r} in run.json but {new!r} in this run; "
            "use another output directory to start a new run"
        )
    return {**manifest, "run_id": stored["run_id"], "created_at": stored["created_at"]}


def _scan(
    run_dir: Path, env_names: set[str], retry_failed: bool, metrics: MetricsAccumulator
) -> set[tuple[str, int]]:
    """Check every stored row, fold it into `metrics`, rewrite the failures sidecar from
    it, and return the (task id, repeat) pairs that need no new rollout."""
    rollouts_path = run_dir / ROLLOUTS
    done: set[tuple[str, int]] = set()
    failure_lines: list[str] = []
    if rollouts_path.exists():
        for number, row in numbered_rows(rollouts_path):
            _check_version(rollouts_path, number, row)
            env = row.get("env")
            if env not in env_names:
                raise ConfigError(
                    f"{rollouts_path}:{number}: field 'env' is {env!r} but this run is of "
                    f"{', '.join(sorted(env_names))}; a run directory holds one run"
                )
            metrics.add(row, f"{rollouts_path}:{number}")
            ok = row["status"] == "ok"
            if not ok:
                failure_lines.append(_failure_line(row))
            if ok or not retry_failed:
                done.add((row["task_id"], row["repeat"]))
    write_atomic(run_dir / FAILURES, "".join(line + "\n" for line in failure_lines))
    return done


def _finish(run_dir: Path, metrics: MetricsAccumulator, start: int = 0) -> RunMetrics:
    """Fold the rows from byte `start` on into `metrics` and write `metrics.json`."""
    path = run_dir / ROLLOUTS
    if path.exists():
        for number, row in numbered_rows(path, start):
            metrics.add(row, f"{path}:{number}")
    result = metrics.result()
    write_atomic(run_dir / METRICS, result.model_dump_json(indent=2))
    return result


# --------------------------------------------------------------------------- runs


async def collect(
    env: Environment,
    model: Model,
    *,
    output: str | os.PathLike[str],
    harness: Harness | None = None,
    tasks: Iterable[Task] | None = None,
    split: str = "test",
    limit: int | None = None,
    repeats: int = 1,
    concurrency: int = DEFAULT_CONCURRENCY,
    seed: int | None = 0,
    sampling: Sampling | None = None,
    timeout: float | None = None,
    retry_failed: bool = False,
    success_threshold: float = 1.0,
    on_rollout: Callable[[Rollout], None] | None = None,
    keep_open: bool = False,
    backend: str = "local",
    workers: int | None = None,
) -> RunResult:
    """Run and stream every rollout to `output/rollouts.jsonl`, then compute metrics.

    Resumes a partial run in the same directory: each (task, repeat) already written is
    skipped (also failed ones, unless `retry_failed`), so no duplicate is written; the
    run must be the same run (`run.json`: env, model, harness, sampling, seed, repeats,
    split, schema version), else `ConfigError` names the field and both values.
    Metrics come from the file, so file and metrics always agree. `on_rollout` is called
    with each rollout right after its line is written. The environment, its verifier
    and the harness are closed at the end unless `keep_open`.

    `backend="ray"` runs the rollouts on `workers` Ray actors (default 2) instead of
    this process, and writes them here the same way (`nemo_gym.integrations.ray`).
    """
    if backend not in ("local", "ray"):
        raise ConfigError(f"backend must be 'local' or 'ray', got {backend!r}")
    if workers is not None and backend != "ray":
        raise ConfigError("workers= needs backend='ray'")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(out)
    spec = run_spec(env, model, harness, sampling=sampling, seed=seed, repeats=repeats, split=split)
    manifest = _check_resume(out / MANIFEST, _manifest(spec, uuid.uuid4().hex[:12], limit))
    write_atomic(out / MANIFEST, json.dumps(manifest, indent=2))
    rollouts_path = out / ROLLOUTS
    _repair_tail(rollouts_path)
    metrics = MetricsAccumulator(success_threshold=success_threshold)
    done = _scan(out, {env.name}, retry_failed, metrics)
    start = rollouts_path.stat().st_size if rollouts_path.exists() else 0
    new = 0
    with (
        rollouts_path.open("a", encoding="utf-8") as rollouts_file,
        (out / FAILURES).open("a", encoding="utf-8") as failures_file,
    ):
        run = rollouts if backend == "local" else _ray_rollouts(workers)  # the same stream
        stream = run(
            env,
            model,
            harness=harness,
            tasks=tasks,
            split=split,
            limit=limit,
            repeats=repeats,
            concurrency=concurrency,
            seed=seed,
            sampling=sampling,
            timeout=timeout,
            run_id=manifest["run_id"],
            skip=done,
            keep_open=keep_open,
        )
        async with aclosing(stream):
            async for item in stream:
                _write_line(rollouts_file, rollout_json(item))
                if not item.ok:
                    _write_line(failures_file, _failure_line(item))
                new += 1
                if on_rollout is not None:
                    on_rollout(item)
    return RunResult(metrics=_finish(out, metrics, start), output=out, new=new)


def _ray_rollouts(workers: int | None) -> Callable[..., AsyncIterator[Rollout]]:
    """`rollouts`, computed on `workers` Ray actors (`nemo_gym.integrations.ray`)."""
    from nemo_gym.integrations import ray

    return functools.partial(ray.rollouts, workers=workers or 2)


async def _gather(
    env: Environment, model: Model, success_threshold: float, **options: Any
) -> RunResult:
    items: list[Rollout] = []
    async with aclosing(rollouts(env, model, **options)) as stream:
        async for item in stream:
            items.append(item)
    rows = (json.loads(rollout_json(item)) for item in items)
    return RunResult(
        metrics=compute_metrics(rows, success_threshold=success_threshold), rollouts=items
    )


def run_sync(awaitable: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, also inside Jupyter's running loop.

    Inside a running event loop the coroutine runs on a fresh loop in a worker thread;
    objects bound to the caller's loop (an `asyncio.Semaphore` in use there) cannot be
    shared with it — in a notebook, prefer `await`.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nemo_gym-sync") as pool:
        return pool.submit(asyncio.run, awaitable).result()


def evaluate(
    env: Environment,
    model: Model,
    *,
    output: str | os.PathLike[str] | None = None,
    success_threshold: float = 1.0,
    **options: Any,
) -> RunResult:
    """Synchronous evaluation for scripts and notebooks: `collect` to `output` when
    given, else the rollouts in memory. Options are those of `rollouts`/`collect`."""
    if output is not None:
        return run_sync(
            collect(env, model, output=output, success_threshold=success_threshold, **options)
        )
    return run_sync(_gather(env, model, success_threshold, **options))


async def reverify(
    run_dir: str | os.PathLike[str],
    verifier: Verifier | Callable[..., Awaitable[Any]] | None = None,
    *,
    env: Environment | None = None,
    output: str | os.PathLike[str] | None = None,
    judge_failed_only: bool = False,
    success_threshold: float = 1.0,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> RunResult:
    """Recompute rewards of a stored run without inference; the originals stay as they are.

    The verifier is `verifier`, else `env.verifier`, else that of the environment the
    run's spec names, rebuilt with its options (`run.json`). Rollouts whose harness
    finished (status ok, or a verifier failure) are verified again; the rest are copied
    unchanged, since they need inference. With `judge_failed_only`, only rows that
    failed with code `judge_failed` are verified again. New rows go to `output` (default
    `RUN_DIR/reverified`). An environment rebuilt here is closed at the end.
    """
    source = Path(run_dir)
    if not (source / ROLLOUTS).exists():
        raise ConfigError(f"{source}: no {ROLLOUTS} here")
    manifest = _read_manifest(source / MANIFEST)
    built: Environment | None = None
    if verifier is None:
        if env is None:
            env = built = _rebuild_env(source / MANIFEST, manifest)
        verifier = env.verifier
    check = as_verifier(verifier)
    out = Path(output) if output is not None else source / "reverified"
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(out)
    for name in (ROLLOUTS, FAILURES):
        (out / name).write_text("")
    if manifest is not None:
        manifest["reverified_from"] = str(source)
        manifest["reverified_at"] = time.time()
        write_atomic(out / MANIFEST, json.dumps(manifest, indent=2))

    def wanted(item: Rollout) -> bool:
        failure = item.failure
        if judge_failed_only:
            return failure is not None and failure.code == "judge_failed"
        return item.ok or (failure is not None and failure.where == "verify")

    semaphore = asyncio.Semaphore(concurrency)

    async def again(item: Rollout) -> Rollout:
        if not wanted(item):
            return item
        async with semaphore:
            started = time.perf_counter()
            try:
                rewards = Rewards.of(await check.verify(item.task, item.trajectory))
                failure = None
            except BaseException as exc:
                if is_interrupt(exc):
                    raise
                rewards, failure = None, _failure(exc, "verify")
            timings = item.timings.model_copy(update={"verify_s": time.perf_counter() - started})
        return item.model_copy(
            update={
                "rewards": rewards,
                "failure": failure,
                "status": "ok" if failure is None else "failed",
                "timings": timings,
                "metadata": {**item.metadata, "reverified": True},
            }
        )

    new = 0
    try:
        with (
            (out / ROLLOUTS).open("a", encoding="utf-8") as rollouts_file,
            (out / FAILURES).open("a", encoding="utf-8") as failures_file,
        ):
            batch: list[Rollout] = []

            async def flush() -> None:
                nonlocal new
                for item in await asyncio.gather(*(again(r) for r in batch)):
                    _write_line(rollouts_file, rollout_json(item))
                    if not item.ok:
                        _write_line(failures_file, _failure_line(item))
                    new += 1
                batch.clear()

            for item in read_rollouts(source):
                batch.append(item)
                if len(batch) >= concurrency * 4:
                    await flush()
            await flush()
    finally:
        await close_all(built, check if built is not None else None)
    metrics = MetricsAccumulator(success_threshold=success_threshold)
    return RunResult(metrics=_finish(out, metrics), output=out, new=new)


def _rebuild_env(path: Path, manifest: dict[str, Any] | None) -> Environment:
    """The environment a run's `run.json` names, rebuilt with its options."""
    if manifest is None:
        raise ConfigError(f"{path}: missing, so the environment is unknown; pass verifier= or env=")
    spec = manifest.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("env"), dict):
        try:
            env_spec = Spec.model_validate(spec["env"])
        except ValidationError as exc:
            raise ConfigError(f"{path}: field 'spec.env' is not a spec: {exc}") from exc
        return build(env_spec)
    name = manifest.get("env")  # a schema-1 run.json named the environment only
    if not isinstance(name, str):
        raise ConfigError(f"{path}: no field 'spec.env' (or 'env'); pass verifier= or env=")
    return build("env", name)
