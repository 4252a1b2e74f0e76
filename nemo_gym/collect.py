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
import itertools
import json
import os
import time
import uuid
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import aclosing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, Unpack

from pydantic import ValidationError

from nemo_gym.errors import ConfigError, NemoGymError
from nemo_gym.lifecycle import close_all, is_interrupt
from nemo_gym.metrics import Group, MetricsAccumulator, compute_metrics, row_group
from nemo_gym.options import COLLECT_OPTIONS, DEFAULT_CONCURRENCY, CollectOptions, RunSettings
from nemo_gym.protocols import Environment, Harness, Model, Verifier, as_verifier
from nemo_gym.records import Rewards, Rollout, RunMetrics, Sampling, Task
from nemo_gym.registry import Spec, build, rebuild
from nemo_gym.rundir.files import (
    FAILURES,
    KNOWN_SCHEMA_VERSIONS,
    MANIFEST,
    METRICS,
    ROLLOUTS,
    check_version,
    complete_size,
    fsync_dir,
    iter_rows,
    lines,
    numbered_rows,
    parse_row,
    read_manifest,
    remove_stale_temp_files,
    repair_tail,
    write_atomic,
    write_line,
)
from nemo_gym.rundir.manifest import (
    check_resume,
    first_difference,
    manifest_parts,
    merged_manifest,
    new_manifest,
    part_label,
    run_identity,
)
from nemo_gym.runner import failure_of, run_spec, run_stream

__all__ = [
    "KNOWN_SCHEMA_VERSIONS",
    "Part",
    "RunResult",
    "aggregate",
    "as_parts",
    "collect",
    "evaluate",
    "iter_rows",
    "manifest_parts",
    "read_rollouts",
    "reverify",
    "run_sync",
]

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


def read_rollouts(run_dir: str | os.PathLike[str]) -> Iterator[Rollout]:
    """The rollouts stored in a run directory (or a `rollouts.jsonl` path), validated.

    Rows of every known schema version are read (v1 rows included); an unknown version
    or a row that is not a `Rollout` raises `ConfigError` naming file, line and field.
    """
    for _, rollout in _numbered_rollouts(run_dir):
        yield rollout


def _numbered_rollouts(run_dir: str | os.PathLike[str]) -> Iterator[tuple[str, Rollout]]:
    """(`file:line`, rollout) for each stored rollout, validated."""
    path = Path(run_dir)
    if path.is_dir():
        path = path / ROLLOUTS
    for number, row in numbered_rows(path):
        check_version(path, number, row)
        try:
            yield f"{path}:{number}", Rollout.model_validate(row)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"])
            raise ConfigError(
                f"{path}:{number}: field {field!r}: {error['msg']} (not a Rollout)"
            ) from exc
        except NemoGymError as exc:
            raise ConfigError(f"{path}:{number}: {exc}") from exc


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
        ids: tuple[Any, Any, Any] = (
            row_or_rollout.run_id,
            row_or_rollout.task_id,
            row_or_rollout.repeat,
        )
    else:
        failure = row_or_rollout.get("failure")
        ids = (row_or_rollout.get("run_id"), row_or_rollout["task_id"], row_or_rollout["repeat"])
    run_id, task_id, repeat = ids
    return json.dumps({"run_id": run_id, "task_id": task_id, "repeat": repeat, "failure": failure})


# --------------------------------------------------------------------------- parts


@dataclass(frozen=True, slots=True)
class Part:
    """One environment of a run; a mixed run has several, a run with variants one per
    (environment, variant).

    `harness`, `sampling` and `limit` are this part's (None: the run's). `tasks` replaces
    `env.tasks(split, limit)`; `source` says where they came from (a file and its hash),
    and is recorded in `run.json` so a resume must agree. `variant` names a setting the
    same tasks run under; every rollout of the part carries it as
    `Rollout.metadata["variant"]`. Within a run, (env name, variant) is unique.
    """

    env: Environment
    harness: Harness | None = None
    sampling: Sampling | None = None
    limit: int | None = None
    variant: str | None = None
    tasks: Iterable[Task] | None = None
    source: str | None = None

    @property
    def key(self) -> Group:
        return (self.env.name, self.variant)


def as_parts(
    env: Environment | Sequence[Part | Environment],
    *,
    harness: Harness | None = None,
    tasks: Iterable[Task] | None = None,
    limit: int | None = None,
    sampling: Sampling | None = None,
) -> list[Part]:
    """The parts of a run: one for an environment, else each given (an environment in
    the list is a part of its own), with the run's harness, limit and sampling filled in
    where a part has none. Two parts with one (env name, variant) are a `ConfigError`."""
    if isinstance(env, Sequence) and not isinstance(env, str | bytes):
        if tasks is not None:
            raise ConfigError("tasks= is for a run of one environment; give each Part its tasks")
        given = [item if isinstance(item, Part) else Part(item) for item in env]
        if not given:
            raise ConfigError("a run needs at least one environment")
    else:
        given = [Part(env, tasks=tasks)]
    parts = [
        replace(
            part,
            harness=part.harness if part.harness is not None else harness,
            sampling=part.sampling if part.sampling is not None else sampling,
            limit=part.limit if part.limit is not None else limit,
        )
        for part in given
    ]
    seen: set[Group] = set()
    for part in parts:
        if part.key in seen:
            raise ConfigError(
                f"two parts of this run are {part_label(*part.key)}; give them distinct "
                "variant names"
            )
        seen.add(part.key)
    return parts


def _check_shard(shard: tuple[int, int] | None) -> tuple[int, int] | None:
    if shard is None:
        return None
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"shard {index}/{count}: needs 0 <= index < count")
    return index, count


def _part_tasks(
    part: Part, split: str, shard: tuple[int, int] | None
) -> tuple[Iterable[Task] | None, int | None]:
    """The tasks and limit to hand the runner: a shard keeps every `count`-th task of the
    part's task list (after its limit), so shards of one run are disjoint and cover it."""
    if shard is None:
        return part.tasks, part.limit
    index, count = shard
    source: Iterable[Task]
    if part.tasks is None:
        source = part.env.tasks(split=split, limit=part.limit)
    else:
        source = part.tasks if part.limit is None else itertools.islice(part.tasks, part.limit)
    return (task for position, task in enumerate(source) if position % count == index), None


async def _local_stream(
    parts: Sequence[Part],
    model: Model,
    run: RunSettings,
    *,
    run_id: str,
    skip: Mapping[Group, set[tuple[str, int]]],
) -> AsyncGenerator[Rollout, None]:
    """The rollouts of every part, one part after the other, each with the runner at
    full `concurrency`; each rollout tagged with its part's variant. Parts never started
    (the stream closed early) are closed here unless `keep_open`. With
    `backend="ray"`, each part's rollouts are computed on `workers` Ray actors (the
    same stream)."""
    keep_open = run.keep_open
    pending = list(parts)
    try:
        while pending:
            part = pending.pop(0)
            tasks, limit = _part_tasks(part, run.split, run.shard)
            settings = run.replace(
                harness=part.harness,
                tasks=tasks,
                limit=limit,
                sampling=part.sampling,
                run_id=run_id,
                skip=skip.get(part.key),
            )
            if run.backend == "ray":
                from nemo_gym.integrations import ray

                stream = ray.run_stream(part.env, model, settings, workers=run.workers or 2)
            else:
                stream = run_stream(part.env, model, settings)
            async with aclosing(stream):
                async for item in stream:
                    if part.variant is not None:
                        item.metadata["variant"] = part.variant
                    yield item
    finally:
        if not keep_open and pending:
            await close_all(*(obj for p in pending for obj in (p.env, p.env.verifier, p.harness)))


# --------------------------------------------------------------------------- resume


def _part_record(
    part: Part, model: Model, *, seed: int | None, repeats: int, split: str
) -> dict[str, Any]:
    spec = run_spec(
        part.env,
        model,
        part.harness,
        sampling=part.sampling,
        seed=seed,
        repeats=repeats,
        split=split,
    )
    return {
        "env": part.env.name,
        "variant": part.variant,
        "spec": spec.model_dump(mode="json"),
        "limit": part.limit,
        "source": part.source,
    }


def _check_row_part(where: str, row: Mapping[str, Any], keys: set[Group]) -> Group:
    """The part a stored row belongs to; a row of no part of this run is an error."""
    env, variant = row_group(row, where)
    if (env, variant) in keys:
        return env, variant
    envs = {e for e, _ in keys}
    if env not in envs:
        raise ConfigError(
            f"{where}: field 'env' is {env!r} but this run is of "
            f"{', '.join(sorted(str(e) for e in envs))}; a run directory holds one run"
        )
    variants = sorted(str(v) for e, v in keys if e == env)
    raise ConfigError(
        f"{where}: field 'metadata.variant' is {variant!r} but this run's variants of "
        f"{env!r} are {', '.join(variants)}; a run directory holds one run"
    )


def _scan(
    run_dir: Path, keys: set[Group], retry_failed: bool, metrics: MetricsAccumulator
) -> dict[Group, set[tuple[str, int]]]:
    """Check every stored row, fold it into `metrics`, rewrite the failures sidecar from
    it, and return, per part, the (task id, repeat) pairs that need no new rollout."""
    rollouts_path = run_dir / ROLLOUTS
    done: dict[Group, set[tuple[str, int]]] = {key: set() for key in keys}
    failure_lines: list[str] = []
    if rollouts_path.exists():
        for number, row in numbered_rows(rollouts_path):
            where = f"{rollouts_path}:{number}"
            check_version(rollouts_path, number, row)
            key = _check_row_part(where, row, keys)
            metrics.add(row, where)
            ok = row["status"] == "ok"
            if not ok:
                failure_lines.append(_failure_line(row))
            if ok or not retry_failed:
                done[key].add((row["task_id"], row["repeat"]))
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
    env: Environment | Sequence[Part | Environment],
    model: Model,
    *,
    output: str | os.PathLike[str],
    **options: Unpack[CollectOptions],
) -> RunResult:
    """Run and stream every rollout to `output/rollouts.jsonl`, then compute metrics.

    `env` is an environment, or a list of `Part`s (a mixed run: several environments,
    or the same tasks under named variants), run one after the other into one run
    directory; `harness`, `limit` and `sampling` are the defaults of parts that set
    none. The options are `rollouts`' plus those of a run directory
    (`nemo_gym.options.RunSettings` says each one's meaning and default):
    `shard=(index, count)` runs every `count`-th task of each part (from `index`), for
    runs split across machines and merged with `aggregate`.

    Resumes a partial run in the same directory: each (task, repeat) already written is
    skipped (also failed ones, unless `retry_failed`), so no duplicate is written; the
    run must be the same run (`run.json`: each part's env, model, harness, sampling,
    seed, repeats, split and task source, the shard, the schema version), else
    `ConfigError` names the field and both values. Metrics come from the file, so file
    and metrics always agree. `on_rollout` is called with each rollout right after its
    line is written. The environments, their verifiers and the harnesses are closed at
    the end unless `keep_open`.

    `backend="ray"` runs the rollouts on `workers` Ray actors (default 2) instead of
    this process, and writes them here the same way (`nemo_gym.integrations.ray`).
    """
    run = _checked(RunSettings.of(options, COLLECT_OPTIONS, "collect"))
    return await _collect(env, model, Path(output), run)


def _checked(run: RunSettings) -> RunSettings:
    if run.backend not in ("local", "ray"):
        raise ConfigError(f"backend must be 'local' or 'ray', got {run.backend!r}")
    if run.workers is not None and run.backend != "ray":
        raise ConfigError("workers= needs backend='ray'")
    return run.replace(shard=_check_shard(run.shard))


async def _collect(
    env: Environment | Sequence[Part | Environment], model: Model, out: Path, run: RunSettings
) -> RunResult:
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(out)
    parts = as_parts(
        env, harness=run.harness, tasks=run.tasks, limit=run.limit, sampling=run.sampling
    )
    records = [
        _part_record(part, model, seed=run.seed, repeats=run.repeats, split=run.split)
        for part in parts
    ]
    manifest = check_resume(out / MANIFEST, new_manifest(records, uuid.uuid4().hex[:12], run.shard))
    write_atomic(out / MANIFEST, json.dumps(manifest, indent=2))
    rollouts_path = out / ROLLOUTS
    repair_tail(rollouts_path)
    metrics = MetricsAccumulator(success_threshold=run.success_threshold)
    done = _scan(out, {part.key for part in parts}, run.retry_failed, metrics)
    start = rollouts_path.stat().st_size if rollouts_path.exists() else 0
    new = 0
    on_rollout = run.on_rollout
    with (
        rollouts_path.open("a", encoding="utf-8") as rollouts_file,
        (out / FAILURES).open("a", encoding="utf-8") as failures_file,
    ):
        stream = _local_stream(parts, model, run, run_id=manifest["run_id"], skip=done)
        async with aclosing(stream):
            async for item in stream:
                write_line(rollouts_file, rollout_json(item))
                if not item.ok:
                    write_line(failures_file, _failure_line(item))
                new += 1
                if on_rollout is not None:
                    on_rollout(item)
    return RunResult(metrics=_finish(out, metrics, start), output=out, new=new)


async def _gather(
    env: Environment | Sequence[Part | Environment], model: Model, run: RunSettings
) -> RunResult:
    """What `collect` does, in memory: the same stream, metrics from the same rows."""
    if run.retry_failed:
        raise ConfigError("retry_failed= resumes a run directory; pass output= too")
    parts = as_parts(
        env, harness=run.harness, tasks=run.tasks, limit=run.limit, sampling=run.sampling
    )
    items: list[Rollout] = []
    on_rollout = run.on_rollout
    stream = _local_stream(parts, model, run, run_id=uuid.uuid4().hex[:12], skip={})
    async with aclosing(stream):
        async for item in stream:
            items.append(item)
            if on_rollout is not None:
                on_rollout(item)
    rows = (json.loads(rollout_json(item)) for item in items)
    return RunResult(
        metrics=compute_metrics(rows, success_threshold=run.success_threshold),
        rollouts=items,
        new=len(items),
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
    env: Environment | Sequence[Part | Environment],
    model: Model,
    *,
    output: str | os.PathLike[str] | None = None,
    **options: Unpack[CollectOptions],
) -> RunResult:
    """Synchronous evaluation for scripts and notebooks: `collect` to `output` when
    given, else the same run in memory (`RunResult.rollouts`). Options are `collect`'s."""
    run = _checked(RunSettings.of(options, COLLECT_OPTIONS, "evaluate"))
    if output is not None:
        return run_sync(_collect(env, model, Path(output), run))
    return run_sync(_gather(env, model, run))


async def reverify(
    run_dir: str | os.PathLike[str],
    verifier: Verifier | Callable[..., Awaitable[Any]] | None = None,
    *,
    env: Environment | None = None,
    output: str | os.PathLike[str] | None = None,
    judge_failed_only: bool = False,
    success_threshold: float = 1.0,
    concurrency: int = DEFAULT_CONCURRENCY,
    trust_code: bool = False,
) -> RunResult:
    """Recompute rewards of a stored run without inference; the originals stay as they are.

    The verifier is `verifier`, else `env.verifier`, else that of the environment the
    run's spec names, rebuilt with its options (`run.json`; in a mixed run, each row's
    part's). Rollouts whose harness finished (status ok, or a verifier failure) are
    verified again; the rest are copied unchanged, since they need inference. With
    `judge_failed_only`, only rows that failed with code `judge_failed` are verified
    again. New rows go to `output` (default `RUN_DIR/reverified`). Environments rebuilt
    here are closed at the end.

    A run directory is data, possibly someone else's: its `run.json` rebuilds only names
    this process knows (registered, built-in, plugins). `trust_code=True` also imports
    the factory paths it names (`target`), which runs whatever code they point at.
    """
    source = Path(run_dir)
    if not (source / ROLLOUTS).exists():
        raise ConfigError(f"{source}: no {ROLLOUTS} here")
    manifest = read_manifest(source / MANIFEST)
    built: dict[Group, Environment] = {}
    checks: dict[Group | None, Verifier] = {}
    if verifier is not None:
        checks[None] = as_verifier(verifier)
    elif env is not None:
        checks[None] = as_verifier(env.verifier)
    else:
        built = _rebuild_envs(source / MANIFEST, manifest, trust_code=trust_code)
        checks = {key: as_verifier(e.verifier) for key, e in built.items()}
        if len(checks) == 1:
            checks = {None: next(iter(checks.values()))}
    out = Path(output) if output is not None else source / "reverified"
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(out)
    for name in (ROLLOUTS, FAILURES):
        (out / name).write_text("")
    if manifest is not None:
        manifest["reverified_from"] = str(source)
        manifest["reverified_at"] = time.time()
        write_atomic(out / MANIFEST, json.dumps(manifest, indent=2))

    def check_of(where: str, item: Rollout) -> Verifier:
        single = checks.get(None)
        if single is not None:
            return single
        row = {"env": item.env, "metadata": item.metadata}
        return checks[_check_row_part(where, row, {k for k in checks if k is not None})]

    def wanted(item: Rollout) -> bool:
        failure = item.failure
        if judge_failed_only:
            return failure is not None and failure.code == "judge_failed"
        return item.ok or (failure is not None and failure.where == "verify")

    semaphore = asyncio.Semaphore(concurrency)

    async def again(where: str, item: Rollout) -> Rollout:
        if not wanted(item):
            return item
        check = check_of(where, item)
        async with semaphore:
            started = time.perf_counter()
            try:
                rewards = Rewards.of(await check.verify(item.task, item.trajectory))
                failure = None
            except BaseException as exc:
                if is_interrupt(exc):
                    raise
                rewards, failure = None, failure_of(exc, "verify")
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
            batch: list[tuple[str, Rollout]] = []

            async def flush() -> None:
                nonlocal new
                for item in await asyncio.gather(*(again(w, r) for w, r in batch)):
                    write_line(rollouts_file, rollout_json(item))
                    if not item.ok:
                        write_line(failures_file, _failure_line(item))
                    new += 1
                batch.clear()

            for where, item in _numbered_rollouts(source):
                batch.append((where, item))
                if len(batch) >= concurrency * 4:
                    await flush()
            await flush()
    finally:
        await close_all(*built.values(), *(checks.values() if built else ()))
    metrics = MetricsAccumulator(success_threshold=success_threshold)
    return RunResult(metrics=_finish(out, metrics), output=out, new=new)


def _rebuild_envs(
    path: Path, manifest: dict[str, Any] | None, *, trust_code: bool
) -> dict[Group, Environment]:
    """The environments a run's `run.json` names (one per part), rebuilt with their
    options, by the (env name, variant) of the rows they verify."""
    if manifest is None:
        raise ConfigError(f"{path}: missing, so the environment is unknown; pass verifier= or env=")
    if "parts" not in manifest and not isinstance(manifest.get("spec"), dict):
        name = manifest.get("env")  # a schema-1 run.json named the environment only
        if not isinstance(name, str):
            raise ConfigError(f"{path}: no field 'spec.env' (or 'env'); pass verifier= or env=")
        return {(name, None): build("env", name)}
    envs: dict[Group, Environment] = {}
    for index, part in enumerate(manifest_parts(manifest, path)):
        value = part["spec"].get("env")
        field = "spec.env" if "parts" not in manifest else f"parts[{index}].spec.env"
        try:
            env_spec = Spec.model_validate(value)
        except ValidationError as exc:
            raise ConfigError(f"{path}: field {field!r} is not a spec: {exc}") from exc
        try:
            env = rebuild(env_spec, trust_code=trust_code)
        except ConfigError as exc:
            raise ConfigError(f"{path}: field {field!r}: {exc}") from exc
        envs[(part.get("env") or env.name, part.get("variant"))] = env
    return envs


# --------------------------------------------------------------------------- aggregate


def aggregate(
    shards: Sequence[str | os.PathLike[str]],
    *,
    output: str | os.PathLike[str],
    success_threshold: float = 1.0,
) -> RunResult:
    """Merge run directories of one run collected separately (shards, or overlapping
    runs) into a new run directory at `output`, and compute its metrics from the merged
    rows.

    Every shard must be the same run (`run.json`: each part's specs, task source and
    the schema version; the shard itself may differ), else `ConfigError` names the
    shard, the field and both values. Each (environment, variant, task, repeat) is
    written once: an ok row wins over a failed one, otherwise the later (shard order,
    then line order) wins — as in metrics, the last row wins. Rows are copied byte for
    byte; a torn last line (a shard that crashed mid-write) is left out. `run.json`
    lists the shards merged (`aggregated_from`).
    """
    paths = [Path(s) for s in shards]
    if not paths:
        raise ConfigError("aggregate needs at least one run directory")
    out = Path(output)
    for path in paths:
        if not (path / ROLLOUTS).exists():
            raise ConfigError(f"{path}: no {ROLLOUTS} here (not a run directory)")
        if out.exists() and path.resolve() == out.resolve():
            raise ConfigError(f"--output {out} is one of the shards; write the merge elsewhere")
    if (out / ROLLOUTS).exists() and (out / ROLLOUTS).stat().st_size:
        raise ConfigError(f"{out / ROLLOUTS} exists; aggregate writes a new run directory")
    manifests = []
    for path in paths:
        manifest = read_manifest(path / MANIFEST)
        if manifest is None:
            raise ConfigError(f"{path / MANIFEST}: missing, so the run is unknown")
        manifests.append(manifest)
    first = run_identity(manifests[0], paths[0] / MANIFEST, shard=False)
    keys = {(p.get("env"), p.get("variant")) for p in manifest_parts(manifests[0], paths[0])}
    for path, manifest in zip(paths[1:], manifests[1:], strict=True):
        difference = first_difference(first, run_identity(manifest, path / MANIFEST, shard=False))
        if difference is not None:
            field, old, new = difference
            raise ConfigError(
                f"{path / MANIFEST}: field {field!r} is {new!r} but {old!r} in "
                f"{paths[0] / MANIFEST}; only shards of one run can be aggregated"
            )
    # Pass 1: which line of which shard holds each key's row.
    chosen: dict[tuple[Group, str, int], tuple[int, int, bool]] = {}
    ends: list[int] = []
    for index, path in enumerate(paths):
        rollouts_path = path / ROLLOUTS
        end = complete_size(rollouts_path)
        ends.append(end)
        for number, row in numbered_rows(rollouts_path, end=end):
            where = f"{rollouts_path}:{number}"
            check_version(rollouts_path, number, row)
            group = row_group(row, where)
            if None not in {e for e, _ in keys}:
                group = _check_row_part(where, row, keys)
            key = (group, row["task_id"], row["repeat"])
            ok = row["status"] == "ok"
            held = chosen.get(key)
            if held is None or ok or not held[2]:
                chosen[key] = (index, number, ok)
    # Pass 2: copy the chosen lines, in shard order.
    chosen_lines: dict[int, dict[int, bool]] = {}
    for index, number, ok in chosen.values():
        chosen_lines.setdefault(index, {})[number] = ok
    out.mkdir(parents=True, exist_ok=True)
    merged = merged_manifest(paths, manifests)
    write_atomic(out / MANIFEST, json.dumps(merged, indent=2))
    # Written beside, then renamed: an interrupted merge leaves no half run behind.
    rollouts_tmp, failures_tmp = out / f".{ROLLOUTS}.tmp", out / f".{FAILURES}.tmp"
    with (
        rollouts_tmp.open("wb") as rollouts_file,
        failures_tmp.open("w", encoding="utf-8") as failures_file,
    ):
        for index, path in enumerate(paths):
            wanted = chosen_lines.get(index, {})
            for number, line in lines(path / ROLLOUTS, end=ends[index]):
                ok = wanted.get(number)
                if ok is None:
                    continue
                rollouts_file.write(line if line.endswith(b"\n") else line + b"\n")
                if not ok:
                    row = parse_row(path / ROLLOUTS, number, line)
                    failures_file.write(_failure_line(row) + "\n")
        rollouts_file.flush()
        os.fsync(rollouts_file.fileno())
    os.replace(failures_tmp, out / FAILURES)
    os.replace(rollouts_tmp, out / ROLLOUTS)
    fsync_dir(out)
    metrics = MetricsAccumulator(success_threshold=success_threshold)
    return RunResult(metrics=_finish(out, metrics), output=out, new=len(chosen))
