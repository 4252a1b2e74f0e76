"""Run metrics, computed from persisted rollout rows (never from in-memory state).

The same code serves `collect`, `reverify` and `gym aggregate`, so the numbers a run
reports are always the numbers its files give. One streaming pass: memory is bounded by
the number of distinct (environment, variant, task, repeat) keys times a few numbers,
never by row size.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from typing import Any

from nemo_gym.errors import ConfigError
from nemo_gym.records import REWARD_LIMIT, RunMetrics, Stats

__all__ = ["Group", "MetricsAccumulator", "compute_metrics", "pass_at_k", "row_group"]

_NAN = float("nan")


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


def _number(value: Any, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: field {field!r} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or abs(number) > REWARD_LIMIT:
        raise ConfigError(f"{where}: field {field!r} is {value!r}, not a finite reward")
    return number


Group = tuple[str | None, str | None]
"""(environment, variant) of a row: the part of a run it belongs to."""


def row_group(row: Mapping[str, Any], where: str = "row") -> Group:
    """The (env, variant) a row belongs to; the variant is `metadata["variant"]`."""
    env = row.get("env")
    if env is not None and not isinstance(env, str):
        raise ConfigError(f"{where}: field 'env' must be a string, got {env!r}")
    metadata = row.get("metadata")
    variant = metadata.get("variant") if isinstance(metadata, Mapping) else None
    if variant is not None and not isinstance(variant, str):
        raise ConfigError(f"{where}: field 'metadata.variant' must be a string, got {variant!r}")
    return env, variant


class MetricsAccumulator:
    """Folds rows into metrics one at a time; the last row of each key wins.

    A key is (environment, variant, task id, repeat): a run that mixes environments or
    variants keeps them apart. Per key it keeps a slot: the outcome (ok, or an index into
    the failure kinds seen), the reward, each component, and whether the verifier
    reported no answer.
    """

    def __init__(self, *, success_threshold: float = 1.0) -> None:
        self.success_threshold = success_threshold
        self._groups: dict[Group, int] = {}
        self._slots: dict[tuple[int, str, int], int] = {}
        self._outcome = array("i")  # -1 ok, else index into _failures
        self._reward = array("d")
        self._no_answer = bytearray()  # 0 answered, 1 no answer, 2 not reported
        self._components: dict[str, array[float]] = {}
        self._sandbox: dict[str, array[float]] = {}
        self._failures: list[tuple[str, str]] = []
        self._failure_index: dict[tuple[str, str], int] = {}

    def add(self, row: Mapping[str, Any], where: str = "row") -> None:
        """Fold one row (a dict as written to `rollouts.jsonl`); `where` names it in errors."""
        task_id = row.get("task_id")
        repeat = row.get("repeat")
        status = row.get("status")
        if not isinstance(task_id, str):
            raise ConfigError(f"{where}: field 'task_id' must be a string, got {task_id!r}")
        if isinstance(repeat, bool) or not isinstance(repeat, int):
            raise ConfigError(f"{where}: field 'repeat' must be an integer, got {repeat!r}")
        if status not in ("ok", "failed"):
            raise ConfigError(f"{where}: field 'status' must be 'ok' or 'failed', got {status!r}")
        group_key = row_group(row, where)
        group = self._groups.get(group_key)
        if group is None:
            group = self._groups[group_key] = len(self._groups)
        key = (group, task_id, repeat)
        slot = self._slots.get(key)
        if slot is None:
            slot = len(self._outcome)
            self._slots[key] = slot
            self._outcome.append(-1)
            self._reward.append(_NAN)
            self._no_answer.append(2)
            for values in (*self._components.values(), *self._sandbox.values()):
                values.append(_NAN)
        else:
            for values in (*self._components.values(), *self._sandbox.values()):
                values[slot] = _NAN
        self._add_sandbox(slot, row, where)
        if status == "ok":
            self._add_ok(slot, row, where)
        else:
            self._add_failed(slot, row, where)

    def _add_ok(self, slot: int, row: Mapping[str, Any], where: str) -> None:
        rewards = row.get("rewards")
        if not isinstance(rewards, Mapping):
            raise ConfigError(f"{where}: an ok row needs field 'rewards', got {rewards!r}")
        self._outcome[slot] = -1
        self._reward[slot] = _number(rewards.get("reward"), where, "rewards.reward")
        components = rewards.get("components") or {}
        if not isinstance(components, Mapping):
            raise ConfigError(f"{where}: field 'rewards.components' must be an object")
        for name, value in components.items():
            values = self._components.get(name)
            if values is None:
                values = self._components[name] = array("d", [_NAN]) * len(self._outcome)
            values[slot] = _number(value, where, f"rewards.components.{name}")
        metadata = rewards.get("metadata") or {}
        if isinstance(metadata, Mapping) and "extracted_answer" in metadata:
            self._no_answer[slot] = 1 if metadata["extracted_answer"] is None else 0
        else:
            self._no_answer[slot] = 2

    def _add_sandbox(self, slot: int, row: Mapping[str, Any], where: str) -> None:
        metadata = row.get("metadata")
        times = metadata.get("sandbox") if isinstance(metadata, Mapping) else None
        if times is None:
            return
        if not isinstance(times, Mapping):
            raise ConfigError(f"{where}: field 'metadata.sandbox' must be an object, got {times!r}")
        for name, value in times.items():
            field = f"metadata.sandbox.{name}"
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{where}: field {field!r} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"{where}: field {field!r} is {value!r}, not a finite amount")
            values = self._sandbox.get(name)
            if values is None:
                values = self._sandbox[name] = array("d", [_NAN]) * len(self._outcome)
            values[slot] = float(value)

    def _add_failed(self, slot: int, row: Mapping[str, Any], where: str) -> None:
        failure = row.get("failure")
        if not isinstance(failure, Mapping):
            raise ConfigError(f"{where}: a failed row needs field 'failure', got {failure!r}")
        kind, code = failure.get("kind"), failure.get("code")
        if not isinstance(kind, str) or not isinstance(code, str):
            raise ConfigError(f"{where}: fields 'failure.kind' and 'failure.code' must be strings")
        index = self._failure_index.get((kind, code))
        if index is None:
            index = self._failure_index[(kind, code)] = len(self._failures)
            self._failures.append((kind, code))
        self._outcome[slot] = index
        self._reward[slot] = _NAN
        self._no_answer[slot] = 2

    def result(self) -> RunMetrics:
        """The metrics of every row folded so far: overall, per environment, per variant.

        `by_env` has an entry per environment; `by_variant` one per variant (when rows
        carry one), each with its own `by_env` when the run mixes environments. One
        pass over the keys; a breakdown that covers the same rows as another (the one
        environment of a single run) is computed once.
        """
        partials = self._partials()
        envs = sorted({env for env, _ in self._groups if env is not None})
        variants = sorted({variant for _, variant in self._groups if variant is not None})
        cache: dict[frozenset[int], RunMetrics] = {}

        def summary(env: str | None = None, variant: str | None = None) -> RunMetrics:
            groups = frozenset(
                index
                for (e, v), index in self._groups.items()
                if (env is None or e == env) and (variant is None or v == variant)
            )
            if groups not in cache:
                cache[groups] = self._summary([partials[g] for g in sorted(groups)])
            return cache[groups]

        by_env = {env: summary(env=env) for env in envs}
        by_variant = {}
        for variant in variants:
            inner = (
                {env: summary(env, variant) for env in envs if (env, variant) in self._groups}
                if len(envs) > 1
                else {}
            )
            by_variant[variant] = summary(variant=variant).model_copy(update={"by_env": inner})
        return summary().model_copy(update={"by_env": by_env, "by_variant": by_variant})

    def _partials(self) -> list[_Partial]:
        """Per group, in one pass over the keys: what its metrics are made of."""
        threshold = self.success_threshold
        partials = [_Partial(group) for group in range(len(self._groups))]
        for (group, task_id, _), slot in self._slots.items():
            part = partials[group]
            part.n_rollouts += 1
            part.tasks.add(task_id)
            part.slots.append(slot)
            outcome = self._outcome[slot]
            if outcome >= 0:
                kind, code = self._failures[outcome]
                part.by_kind[kind] = part.by_kind.get(kind, 0) + 1
                part.by_code[code] = part.by_code.get(code, 0) + 1
                continue
            part.ok_slots.append(slot)
            reward = self._reward[slot]
            part.rewards.append(reward)
            counts = part.per_task.setdefault(task_id, [0, 0])
            counts[0] += 1
            counts[1] += reward >= threshold
            flag = self._no_answer[slot]
            if flag != 2:
                part.reported += 1
                part.no_answer += flag
        return partials

    def _summary(self, parts: list[_Partial]) -> RunMetrics:
        by_kind: dict[str, int] = {}
        by_code: dict[str, int] = {}
        for part in parts:
            for kind, n in part.by_kind.items():
                by_kind[kind] = by_kind.get(kind, 0) + n
            for code, n in part.by_code.items():
                by_code[code] = by_code.get(code, 0) + n
        if len(parts) == 1:  # the common case: no copies
            rewards, ok_slots = parts[0].rewards, parts[0].ok_slots
        else:
            rewards = [r for part in parts for r in part.rewards]
            ok_slots = [s for part in parts for s in part.ok_slots]
        # A group is one (environment, variant): its tasks are its own for pass@k; the
        # same task id under two variants is one task of its environment for n_tasks.
        envs = {index: env for (env, _), index in self._groups.items()}
        if len({envs[part.group] for part in parts}) == 1:
            n_tasks = len(set().union(*(part.tasks for part in parts)))
        else:
            n_tasks = len({(envs[part.group], t) for part in parts for t in part.tasks})
        counts = [c for part in parts for c in part.per_task.values()]
        stats: dict[str, Stats] = {}
        if rewards:
            stats["reward"] = _stats(rewards)
        for name, values in self._components.items():
            present = [values[s] for s in ok_slots if not math.isnan(values[s])]
            if present:
                stats[name] = _stats(present)
        sandbox: dict[str, Stats] = {}
        for name, values in sorted(self._sandbox.items()):
            present = [values[s] for part in parts for s in part.slots if not math.isnan(values[s])]
            if present:
                sandbox[name] = _stats(present)
        pass_k: dict[int, float] = {}
        if counts:
            smallest = min(n for n, _ in counts)
            k = 1
            while k <= smallest:
                total = math.fsum(pass_at_k(n, c, k) for n, c in counts)
                pass_k[k] = total / len(counts)
                k *= 2
        n_rollouts = sum(part.n_rollouts for part in parts)
        n_failed = sum(by_kind.values())
        reported = sum(part.reported for part in parts)
        no_answer = sum(part.no_answer for part in parts)
        return RunMetrics(
            n_rollouts=n_rollouts,
            n_ok=n_rollouts - n_failed,
            n_failed=n_failed,
            n_tasks=n_tasks,
            failures_by_kind=by_kind,
            failures_by_code=by_code,
            rewards=stats,
            pass_at_k=pass_k,
            success_threshold=self.success_threshold,
            n_no_answer=no_answer,
            no_answer_rate=no_answer / reported if reported else None,
            sandbox=sandbox,
        )


class _Partial:
    """What one group's metrics are made of (see `MetricsAccumulator._partials`)."""

    __slots__ = (
        "by_code",
        "by_kind",
        "group",
        "n_rollouts",
        "no_answer",
        "ok_slots",
        "per_task",
        "reported",
        "rewards",
        "slots",
        "tasks",
    )

    def __init__(self, group: int) -> None:
        self.group = group
        self.n_rollouts = self.reported = self.no_answer = 0
        self.by_kind: dict[str, int] = {}
        self.by_code: dict[str, int] = {}
        self.tasks: set[str] = set()
        self.per_task: dict[str, list[int]] = {}  # task id -> [ok samples, passing]
        self.rewards: list[float] = []
        self.ok_slots: list[int] = []
        self.slots: list[int] = []  # every key's, failed ones too


def compute_metrics(
    rows: Iterable[Mapping[str, Any]], *, success_threshold: float = 1.0
) -> RunMetrics:
    """Metrics over rollout rows (dicts as written to `rollouts.jsonl`).

    The last row of each (environment, variant, task id, repeat) wins, so a resumed run
    that retried a failure counts it once. Failed rollouts are excluded from reward
    statistics and pass@k (masked, never scored 0) and counted by kind and code. pass@k
    is reported for k = 1, 2, 4, ... up to the smallest number of ok samples per task,
    averaged over tasks (an (environment, variant, task) each); a sample passes when
    its reward >= `success_threshold`. `n_tasks` counts distinct (environment, task id)
    pairs. The no-answer rate is the share of ok rollouts whose verifier reported
    `extracted_answer` as None, among those whose verifier reports it at all. Every
    number is also given per environment (`by_env`) and per variant (`by_variant`). A
    malformed row raises `ConfigError`. `sandbox` holds, over every rollout that used
    a sandbox (failed ones too), a `Stats` of each number in its `metadata["sandbox"]`.
    """
    accumulator = MetricsAccumulator(success_threshold=success_threshold)
    for number, row in enumerate(rows, 1):
        accumulator.add(row, f"row {number}")
    return accumulator.result()
