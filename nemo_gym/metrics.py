"""Run metrics, computed from persisted rollout rows (never from in-memory state).

The same function serves `collect`, `reverify` and `gym aggregate`, so the numbers a
run reports are always the numbers its files give.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from nemo_gym.records import RunMetrics, Stats

__all__ = ["compute_metrics", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator (Chen et al. 2021) for n samples with c correct."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def _stats(values: list[float]) -> Stats:
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / n
    return Stats(n=n, mean=mean, std=math.sqrt(var), min=min(values), max=max(values))


def compute_metrics(
    rows: Iterable[Mapping[str, Any]], *, success_threshold: float = 1.0
) -> RunMetrics:
    """Metrics over rollout rows (dicts as written to `rollouts.jsonl`).

    The last row of each (task id, repeat) wins, so a resumed run that retried a
    failure counts it once. Failed rollouts are excluded from reward statistics and
    pass@k (masked, never scored 0) and counted by kind and code. pass@k is reported for
    k = 1, 2, 4, ... up to the smallest number of ok samples per task, averaged over
    tasks; a sample passes when its reward >= `success_threshold`.
    """
    latest: dict[tuple[str, int], Mapping[str, Any]] = {}
    for row in rows:
        latest[(row["task_id"], row["repeat"])] = row
    by_kind: Counter[str] = Counter()
    by_code: Counter[str] = Counter()
    values: dict[str, list[float]] = {"reward": []}
    per_task: dict[str, list[int]] = {}  # task id -> [ok samples, passing samples]
    tasks: set[str] = set()
    for (task_id, _), row in latest.items():
        tasks.add(task_id)
        if row["status"] != "ok":
            failure = row.get("failure") or {}
            by_kind[failure.get("kind", "unknown")] += 1
            by_code[failure.get("code", "unknown")] += 1
            continue
        rewards = row["rewards"]
        reward = float(rewards["reward"])
        values["reward"].append(reward)
        for name, value in (rewards.get("components") or {}).items():
            values.setdefault(name, []).append(float(value))
        counts = per_task.setdefault(task_id, [0, 0])
        counts[0] += 1
        counts[1] += reward >= success_threshold
    pass_k: dict[int, float] = {}
    if per_task:
        smallest = min(n for n, _ in per_task.values())
        k = 1
        while k <= smallest:
            pass_k[k] = math.fsum(pass_at_k(n, c, k) for n, c in per_task.values()) / len(per_task)
            k *= 2
    n_failed = sum(by_kind.values())
    return RunMetrics(
        n_rollouts=len(latest),
        n_ok=len(latest) - n_failed,
        n_failed=n_failed,
        n_tasks=len(tasks),
        failures_by_kind=dict(by_kind),
        failures_by_code=dict(by_code),
        rewards={name: _stats(v) for name, v in values.items() if v},
        pass_at_k=pass_k,
        success_threshold=success_threshold,
    )
