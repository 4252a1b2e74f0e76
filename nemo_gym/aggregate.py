"""`aggregate`: shards of one run, collected separately, merged into one run directory."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from nemo_gym.errors import ConfigError
from nemo_gym.metrics import Group, MetricsAccumulator, row_group
from nemo_gym.rundir.files import (
    FAILURES,
    MANIFEST,
    ROLLOUTS,
    check_version,
    complete_size,
    fsync_dir,
    lines,
    numbered_rows,
    parse_row,
    write_atomic,
)
from nemo_gym.rundir.manifest import (
    first_difference,
    merged_manifest,
    read_manifest,
    run_identity,
)
from nemo_gym.rundir.rows import RunResult, check_row_part, failure_line, write_metrics

__all__ = ["aggregate"]


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
        if not manifest.resumable:
            raise ConfigError(
                f"{path / MANIFEST}: field 'schema_version' is 1: its specs were not "
                "recorded, so shards of it cannot be checked to be one run"
            )
        manifests.append(manifest)
    first = run_identity(manifests[0], shard=False)
    keys = {(p.env, p.variant) for p in manifests[0].parts}
    for path, manifest in zip(paths[1:], manifests[1:], strict=True):
        difference = first_difference(first, run_identity(manifest, shard=False))
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
                group = check_row_part(where, row, keys)
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
    write_atomic(out / MANIFEST, merged.to_json())
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
                    failures_file.write(failure_line(row) + "\n")
        rollouts_file.flush()
        os.fsync(rollouts_file.fileno())
    os.replace(failures_tmp, out / FAILURES)
    os.replace(rollouts_tmp, out / ROLLOUTS)
    fsync_dir(out)
    metrics = MetricsAccumulator(success_threshold=success_threshold)
    return RunResult(metrics=write_metrics(out, metrics), output=out, new=len(chosen))
