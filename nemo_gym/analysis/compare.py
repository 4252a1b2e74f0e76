"""Is B better than A? A paired comparison over the tasks both runs scored.

Per task, each side's score is the mean reward of its ok rollouts (or, with
`metric="pass"`, the share that pass the success threshold); failed rollouts are
masked, and a task with no ok rollout on a side is left out of the pairs (counted).
Then, over the n paired tasks, with d = B - A:

- the mean difference and a percentile bootstrap interval: `resamples` times, n tasks
  drawn with replacement and their mean d taken; the interval is the
  (1 - confidence) / 2 and (1 + confidence) / 2 quantiles. Deterministic given `seed`.
- the exact two-sided sign test: of the tasks where d != 0, how unlikely a split at
  least this lopsided is if B and A were equally likely to win a task,
  p = min(1, 2 * P(X <= min(wins, losses))), X ~ Binomial(wins + losses, 1/2).

Pairing by task removes the variance between tasks (some are hard for both): a
difference far too small to see in two independent means is often clear here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from nemo_gym.errors import ConfigError, require

__all__ = [
    "Paired",
    "bootstrap_interval",
    "compare",
    "sign_test",
    "task_scores",
]

TaskKey = tuple[str | None, str]
"""(environment, task id)."""


def sign_test(wins: int, losses: int) -> float:
    """The exact two-sided sign-test p-value of `wins` against `losses` (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    low = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(low + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def bootstrap_interval(
    values: list[float],
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of `values` (deterministic given
    `seed`; numpy's PCG64 generator)."""
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be between 0 and 1, got {confidence!r}")
    if resamples < 1:
        raise ConfigError(f"resamples must be >= 1, got {resamples!r}")
    if not values:
        return (math.nan, math.nan)
    np = require("numpy", "cli")
    data = np.asarray(values, dtype=np.float64)
    n = len(data)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, 1_000_000 // n)  # bounded memory: chunk x n indices at a time
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = data[idx].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high)


@dataclass
class Paired:
    """The comparison of B against A over their paired tasks."""

    a: str
    b: str
    n: int
    mean_a: float
    mean_b: float
    diff: float
    low: float
    high: float
    confidence: float
    wins: int
    losses: int
    ties: int
    p_value: float
    only_a: int = 0
    only_b: int = 0
    metric: str = "reward"
    by_env: dict[str, Paired] = field(default_factory=dict)
    tasks: list[tuple[TaskKey, float, float]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k not in ("by_env", "tasks")}
        data["by_env"] = {name: p.to_json() for name, p in self.by_env.items()}
        data["tasks"] = [
            {"env": env, "task_id": task, "a": a, "b": b, "diff": b - a}
            for (env, task), a, b in self.tasks
        ]
        return data


def compare(
    a: Mapping[TaskKey, float],
    b: Mapping[TaskKey, float],
    *,
    a_label: str = "A",
    b_label: str = "B",
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
    metric: str = "reward",
    per_env: bool = True,
) -> Paired:
    """Compare per-task scores `b` against `a` (see the module docstring)."""
    keys = sorted(set(a) & set(b), key=lambda k: (str(k[0]), k[1]))
    diffs = [b[k] - a[k] for k in keys]
    wins = sum(d > 0 for d in diffs)
    losses = sum(d < 0 for d in diffs)
    low, high = bootstrap_interval(diffs, confidence=confidence, resamples=resamples, seed=seed)
    n = len(keys)
    result = Paired(
        a=a_label,
        b=b_label,
        n=n,
        mean_a=math.fsum(a[k] for k in keys) / n if n else math.nan,
        mean_b=math.fsum(b[k] for k in keys) / n if n else math.nan,
        diff=math.fsum(diffs) / n if n else math.nan,
        low=low,
        high=high,
        confidence=confidence,
        wins=wins,
        losses=losses,
        ties=n - wins - losses,
        p_value=sign_test(wins, losses),
        only_a=len(set(a) - set(b)),
        only_b=len(set(b) - set(a)),
        metric=metric,
        tasks=[(k, a[k], b[k]) for k in keys],
    )
    envs = sorted({str(env) for env, _ in keys})
    if per_env and len(envs) > 1:
        for env in envs:
            result.by_env[env] = compare(
                {k: v for k, v in a.items() if str(k[0]) == env},
                {k: v for k, v in b.items() if str(k[0]) == env},
                a_label=a_label,
                b_label=b_label,
                confidence=confidence,
                resamples=resamples,
                seed=seed,
                metric=metric,
                per_env=False,
            )
    return result


def task_scores(
    rows: Iterable[Mapping[str, Any]],
    *,
    variant: str | None = None,
    metric: Literal["reward", "pass"] = "reward",
    success_threshold: float = 1.0,
    any_variant: bool = False,
) -> dict[TaskKey, float]:
    """Per (environment, task id): the mean reward of its ok rollouts, or the share of
    them that pass (`metric="pass"`). Only rows of `variant` (None: rows without one)
    unless `any_variant`; the last row per key wins."""
    if metric not in ("reward", "pass"):
        raise ConfigError(f"metric must be 'reward' or 'pass', got {metric!r}")
    last: dict[tuple[Any, ...], float | None] = {}
    for row in rows:
        metadata = row.get("metadata")
        row_variant = metadata.get("variant") if isinstance(metadata, Mapping) else None
        if not any_variant and row_variant != variant:
            continue
        key = (row.get("env"), row_variant, row.get("task_id"), row.get("repeat"))
        score: float | None = None
        rewards = row.get("rewards")
        if row.get("status") == "ok" and isinstance(rewards, Mapping):
            reward = rewards.get("reward")
            if isinstance(reward, int | float) and not isinstance(reward, bool):
                score = float(reward >= success_threshold) if metric == "pass" else float(reward)
        last[key] = score
    sums: dict[TaskKey, list[float]] = {}
    for (env, _, task_id, _), score in last.items():
        if score is None:
            continue
        entry = sums.setdefault((env, str(task_id)), [0.0, 0.0])
        entry[0] += score
        entry[1] += 1
    return {key: total / count for key, (total, count) in sums.items()}
