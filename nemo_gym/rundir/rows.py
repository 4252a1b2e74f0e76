"""The rows of a run directory: `Rollout`s read back and written as JSON lines, the
failures sidecar's lines, the part each row belongs to, the metrics written from the
rows, and `RunResult`, what a run (collect, evaluate, reverify, aggregate) returns."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nemo_gym.errors import ConfigError, NemoGymError
from nemo_gym.metrics import Group, MetricsAccumulator, row_group
from nemo_gym.records import Rollout, RunMetrics
from nemo_gym.rundir.files import METRICS, ROLLOUTS, check_version, numbered_rows, write_atomic

__all__ = [
    "RunResult",
    "check_row_part",
    "failure_line",
    "numbered_rollouts",
    "read_rollouts",
    "rollout_json",
    "write_metrics",
]


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


def read_rollouts(run_dir: str | os.PathLike[str]) -> Iterator[Rollout]:
    """The rollouts stored in a run directory (or a `rollouts.jsonl` path), validated.

    Rows of every known schema version are read (v1 rows included); an unknown version
    or a row that is not a `Rollout` raises `ConfigError` naming file, line and field.
    """
    for _, rollout in numbered_rollouts(run_dir):
        yield rollout


def numbered_rollouts(run_dir: str | os.PathLike[str]) -> Iterator[tuple[str, Rollout]]:
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


def failure_line(row_or_rollout: Rollout | dict[str, Any]) -> str:
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


def check_row_part(where: str, row: Mapping[str, Any], keys: set[Group]) -> Group:
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


def write_metrics(run_dir: Path, metrics: MetricsAccumulator, start: int = 0) -> RunMetrics:
    """Fold the rows from byte `start` on into `metrics` and write `metrics.json`."""
    path = run_dir / ROLLOUTS
    if path.exists():
        for number, row in numbered_rows(path, start):
            metrics.add(row, f"{path}:{number}")
    result = metrics.result()
    write_atomic(run_dir / METRICS, result.model_dump_json(indent=2))
    return result
