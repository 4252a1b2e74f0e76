"""Runs on disk: `collect` (stream to JSONL, resume, metrics), `evaluate` (sync), `reverify`.

A run directory holds:
- `run.json`: what ran (run id, env, seed, repeats, model, harness); checked on resume;
- `rollouts.jsonl`: one `Rollout` per line, appended and flushed as each finishes;
- `failures.jsonl`: one line per failed rollout (ids + `Failure`), the failures sidecar;
- `metrics.json`: `RunMetrics` computed from `rollouts.jsonl` after the run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from nemo_gym.errors import ConfigError
from nemo_gym.metrics import compute_metrics
from nemo_gym.protocols import Environment, Harness, Model, Verifier, as_verifier
from nemo_gym.records import Rewards, Rollout, RunMetrics, Sampling, Task
from nemo_gym.runner import _failure, rollouts

__all__ = [
    "RunResult",
    "collect",
    "evaluate",
    "read_rollouts",
    "reverify",
    "run_sync",
]

ROLLOUTS = "rollouts.jsonl"
FAILURES = "failures.jsonl"
METRICS = "metrics.json"
MANIFEST = "run.json"

T = TypeVar("T")


@dataclass
class RunResult:
    """What a run produced: its metrics, and the rollouts or the directory holding them."""

    metrics: RunMetrics
    output: Path | None = None
    rollouts: list[Rollout] = field(default_factory=list)
    new: int = 0


def iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL file; a bad line raises `ConfigError` naming file and line."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
            if not isinstance(row, dict):
                raise ConfigError(f"{path}:{number}: expected a JSON object")
            for name in ("task_id", "repeat", "status"):
                if name not in row:
                    raise ConfigError(f"{path}:{number}: missing field {name!r}")
            yield row


def read_rollouts(run_dir: str | os.PathLike[str]) -> Iterator[Rollout]:
    """The rollouts stored in a run directory (or a `rollouts.jsonl` path), validated."""
    path = Path(run_dir)
    if path.is_dir():
        path = path / ROLLOUTS
    for number, row in enumerate(iter_rows(path), 1):
        try:
            yield Rollout.model_validate(row)
        except ValueError as exc:
            raise ConfigError(f"{path}: row {number}: not a Rollout: {exc}") from exc


def _repair_tail(path: Path) -> None:
    """Drop a torn last line left by a crash mid-write, so resume appends cleanly."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        handle.seek(0)
        handle.truncate(handle.read().rfind(b"\n") + 1)


def _read_manifest(path: Path) -> dict[str, Any] | None:
    """A run's `run.json`, or None when there is none; bad JSON names the file."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg})") from exc


def _check_manifest(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Reuse the stored run id and seed; refuse to resume a different run."""
    stored = _read_manifest(path)
    if stored is None:
        return manifest
    for name in ("env", "seed"):
        if stored.get(name) != manifest[name]:
            raise ConfigError(
                f"{path}: field {name!r} is {stored.get(name)!r} but this run has "
                f"{manifest[name]!r}; use another output directory to start a new run"
            )
    return {**manifest, "run_id": stored["run_id"], "created_at": stored["created_at"]}


def _write_line(handle: IO[str], text: str) -> None:
    handle.write(text)
    handle.write("\n")
    handle.flush()


def rollout_json(rollout: Rollout) -> str:
    """One JSONL line for a rollout; values JSON cannot hold are written as text."""
    return rollout.model_dump_json(fallback=repr)


def _failure_line(rollout: Rollout) -> str:
    return json.dumps(
        {
            "run_id": rollout.run_id,
            "task_id": rollout.task_id,
            "repeat": rollout.repeat,
            "failure": rollout.failure.model_dump(mode="json") if rollout.failure else None,
        }
    )


def _finish(output: Path, success_threshold: float) -> RunMetrics:
    metrics = compute_metrics(iter_rows(output / ROLLOUTS), success_threshold=success_threshold)
    (output / METRICS).write_text(metrics.model_dump_json(indent=2))
    return metrics


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
    concurrency: int = 32,
    seed: int | None = 0,
    sampling: Sampling | None = None,
    timeout: float | None = None,
    retry_failed: bool = False,
    success_threshold: float = 1.0,
    on_rollout: Callable[[Rollout], None] | None = None,
) -> RunResult:
    """Run and stream every rollout to `output/rollouts.jsonl`, then compute metrics.

    Resumes a partial run in the same directory: each (task, repeat) already written is
    skipped (also failed ones, unless `retry_failed`), so no duplicate is written.
    Metrics come from the file, so file and metrics always agree.
    """
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    manifest = _check_manifest(
        out / MANIFEST,
        {
            "run_id": uuid.uuid4().hex[:12],
            "created_at": time.time(),
            "env": env.name,
            "seed": seed,
            "repeats": repeats,
            "split": split,
            "limit": limit,
            "model": repr(model),
            "harness": repr(harness) if harness is not None else None,
            "sampling": sampling.model_dump(mode="json") if sampling else None,
        },
    )
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2))
    rollouts_path = out / ROLLOUTS
    _repair_tail(rollouts_path)
    done: set[tuple[str, int]] = set()
    if rollouts_path.exists():
        for row in iter_rows(rollouts_path):
            if not retry_failed or row["status"] == "ok":
                done.add((row["task_id"], row["repeat"]))
    new = 0
    with (
        rollouts_path.open("a", encoding="utf-8") as rollouts_file,
        (out / FAILURES).open("a", encoding="utf-8") as failures_file,
    ):
        stream = rollouts(
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
        )
        async with aclosing(stream):
            async for item in stream:
                _write_line(rollouts_file, rollout_json(item))
                if not item.ok:
                    _write_line(failures_file, _failure_line(item))
                new += 1
                if on_rollout is not None:
                    on_rollout(item)
    return RunResult(metrics=_finish(out, success_threshold), output=out, new=new)


async def _gather(
    env: Environment, model: Model, success_threshold: float, **options: Any
) -> RunResult:
    items: list[Rollout] = []
    async with aclosing(rollouts(env, model, **options)) as stream:
        async for item in stream:
            items.append(item)
    rows = (item.model_dump(mode="json", fallback=repr) for item in items)
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
    given, else the rollouts in memory. Options are those of `rollouts`."""
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
    concurrency: int = 32,
) -> RunResult:
    """Recompute rewards of a stored run without inference; the originals stay as they are.

    The verifier is `verifier`, else `env.verifier`, else that of the environment named
    in `run.json` (`nemo_gym.make`). Rollouts whose harness finished (status ok, or a
    verifier failure) are verified again; the rest are copied unchanged, since they need
    inference. With `judge_failed_only`, only rows that failed with code `judge_failed`
    are verified again. New rows go to `output` (default `RUN_DIR/reverified`).
    """
    source = Path(run_dir)
    if not (source / ROLLOUTS).exists():
        raise ConfigError(f"{source}: no {ROLLOUTS} here")
    manifest = _read_manifest(source / MANIFEST)
    if verifier is None:
        if env is None:
            if manifest is None:
                raise ConfigError(
                    f"{source / MANIFEST}: missing, so the environment is unknown; "
                    "pass verifier= or env="
                )
            from nemo_gym.catalog import make

            env = make(manifest["env"])
        verifier = env.verifier
    check = as_verifier(verifier)
    out = Path(output) if output is not None else source / "reverified"
    out.mkdir(parents=True, exist_ok=True)
    for name in (ROLLOUTS, FAILURES):
        (out / name).write_text("")
    if manifest is not None:
        manifest["reverified_from"] = str(source)
        manifest["reverified_at"] = time.time()
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2))

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
            except Exception as exc:
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
    return RunResult(metrics=_finish(out, success_threshold), output=out, new=new)
