"""A run, profiled from its rows: per-task rates, pass@k and majority@k, distributions,
diagnostics with examples, variants side by side. What `gym eval profile` prints and
the report draws.

Two streaming passes over `rollouts.jsonl`: the first keeps a few numbers per (env,
variant, task, repeat) key (the last row of a key wins, as in the metrics), the second
reads back only the lines shown as examples.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemo_gym.analysis.compare import Paired, bootstrap_interval, compare
from nemo_gym.analysis.diagnose import Diagnosis, Example, classify
from nemo_gym.errors import ConfigError
from nemo_gym.metrics import MetricsAccumulator, row_group
from nemo_gym.records import RunMetrics
from nemo_gym.rundir.files import (
    MANIFEST,
    METRICS,
    ROLLOUTS,
    check_version,
    lines,
    parse_row,
)
from nemo_gym.rundir.manifest import Manifest, read_manifest

__all__ = ["Distribution", "Facts", "Profile", "TaskStats", "VariantStats", "profile"]


@dataclass(slots=True)
class Facts:
    """What the profile keeps of one rollout."""

    env: str | None
    variant: str | None
    task_id: str
    repeat: int
    line: int
    ok: bool
    reward: float | None
    kind: str | None
    code: str | None
    answer: str | None  # a hash of the extracted answer (None: none, or not reported)
    reported: bool  # the verifier reports `extracted_answer`
    tokens: int | None
    chars: int
    duration_s: float
    turns: int
    cls: str
    detail: str


@dataclass
class TaskStats:
    """One task of one environment (and variant)."""

    env: str | None
    variant: str | None
    task_id: str
    rollouts: int = 0
    ok: int = 0
    passed: int = 0
    reward_sum: float = 0.0

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.ok if self.ok else None

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.ok if self.ok else None


@dataclass
class Distribution:
    """Summary statistics of a set of values (and the values, to plot)."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float
    values: list[float]

    @classmethod
    def of(cls, values: list[float]) -> Distribution | None:
        if not values:
            return None
        ordered = sorted(values)

        def quantile(q: float) -> float:
            position = q * (len(ordered) - 1)
            low = math.floor(position)
            high = min(len(ordered) - 1, low + 1)
            return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

        return cls(
            n=len(ordered),
            mean=math.fsum(ordered) / len(ordered),
            p50=quantile(0.5),
            p90=quantile(0.9),
            p99=quantile(0.99),
            max=ordered[-1],
            values=values,
        )


@dataclass
class VariantStats:
    """One variant: its mean task score with an interval, and its paired comparison
    with the baseline variant."""

    name: str
    tasks: int
    mean: float
    low: float
    high: float
    versus: Paired | None = None


@dataclass
class Profile:
    """Everything `gym eval profile` reports about a run."""

    run_dir: Path
    manifest: Manifest | None
    metrics: RunMetrics
    success_threshold: float
    ceiling: float
    tasks: list[TaskStats]
    majority: dict[str, dict[int, float]]
    rewards: list[float]
    tokens: Distribution | None
    chars: Distribution | None
    latency: Distribution | None
    turns: Distribution | None
    length_vs_reward: list[tuple[float, float]]
    length_unit: str
    diagnoses: dict[str, Diagnosis]  # per environment, and "*" for the whole run
    variant_diagnoses: dict[str, Diagnosis]  # per variant (every environment)
    failures: dict[str, int]  # "kind/code" -> rollouts
    failure_examples: dict[str, str]  # "kind/code" -> its first message
    variants: list[VariantStats] = field(default_factory=list)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _facts(row: Mapping[str, Any], line: int, where: str, threshold: float) -> Facts:
    env, variant = row_group(row, where)
    ok = row.get("status") == "ok"
    rewards = _mapping(row.get("rewards"))
    reward = rewards.get("reward") if ok else None
    failure = _mapping(row.get("failure"))
    metadata = _mapping(rewards.get("metadata"))
    reported = "extracted_answer" in metadata
    answer = None
    if ok and reported and metadata["extracted_answer"] is not None:
        text = json.dumps(metadata["extracted_answer"], sort_keys=True, default=str)
        answer = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    trajectory = _mapping(row.get("trajectory"))
    found_calls = trajectory.get("model_calls")
    calls: list[Any] = found_calls if isinstance(found_calls, list) else []
    tokens = 0
    counted = False
    for call in calls:
        response = _mapping(_mapping(call).get("response"))
        usage = _mapping(response.get("usage"))
        value = usage.get("completion_tokens")
        ids = response.get("completion_token_ids")
        if isinstance(value, int) and value > 0:
            tokens += value
            counted = True
        elif isinstance(ids, list):
            tokens += len(ids)
            counted = True
    chars = 0
    found_messages = trajectory.get("messages")
    messages: list[Any] = found_messages if isinstance(found_messages, list) else []
    for message in reversed(messages):
        if _mapping(message).get("role") == "assistant":
            chars = len(str(_mapping(message).get("content") or ""))
            break
    timings = _mapping(row.get("timings"))
    duration = timings.get("duration_s")
    cls, detail = classify(row, threshold)
    return Facts(
        env=env,
        variant=variant,
        task_id=str(row.get("task_id")),
        repeat=int(row.get("repeat") or 0),
        line=line,
        ok=ok,
        reward=float(reward) if isinstance(reward, int | float) else None,
        kind=None if ok else str(failure.get("kind")),
        code=None if ok else str(failure.get("code")),
        answer=answer,
        reported=reported,
        tokens=tokens if counted else None,
        chars=chars,
        duration_s=float(duration) if isinstance(duration, int | float) else 0.0,
        turns=len(calls),
        cls=cls,
        detail=detail,
    )


def _majority(facts: list[Facts], threshold: float, ks: list[int]) -> dict[int, float]:
    """majority@k: per task, the most common extracted answer among its first k ok
    samples (by repeat; a tie goes to the answer seen first) is right when a sample
    giving it passes; averaged over tasks."""
    by_task: dict[tuple[Any, ...], list[Facts]] = {}
    for item in facts:
        if item.ok:
            by_task.setdefault((item.env, item.variant, item.task_id), []).append(item)
    out: dict[int, float] = {}
    for k in ks:
        scores = []
        for samples in by_task.values():
            if len(samples) < k:
                continue
            first = sorted(samples, key=lambda f: f.repeat)[:k]
            votes: dict[str, list[Facts]] = {}
            for sample in first:
                if sample.answer is not None:
                    votes.setdefault(sample.answer, []).append(sample)
            if not votes:
                scores.append(0.0)
                continue
            best = max(votes.values(), key=len)  # max keeps the first of equal counts
            scores.append(float((best[0].reward or 0.0) >= threshold))
        if scores:
            out[k] = math.fsum(scores) / len(scores)
    return out


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _example(row: Mapping[str, Any], facts: Facts) -> Example:
    task = _mapping(row.get("task"))
    prompt = task.get("prompt")
    if prompt is None:
        for message in reversed(task.get("messages") or []):
            if _mapping(message).get("role") == "user":
                prompt = _mapping(message).get("content")
                break
    trajectory = _mapping(row.get("trajectory"))
    response = ""
    for message in reversed(trajectory.get("messages") or []):
        message = _mapping(message)
        if message.get("role") == "assistant":
            response = str(message.get("content") or "")
            if not response and message.get("tool_calls"):
                response = json.dumps(message["tool_calls"], default=str)
            break
    note = ""
    failure = _mapping(row.get("failure"))
    if failure:
        note = f"{failure.get('kind')}/{failure.get('code')}: {failure.get('message')}"
    else:
        errors = [_mapping(r).get("error") for r in trajectory.get("tool_results") or []]
        errors = [e for e in errors if e]
        if errors:
            note = f"tool error: {errors[0]}"
    metadata = _mapping(_mapping(row.get("rewards")).get("metadata"))
    return Example(
        env=facts.env,
        variant=facts.variant,
        task_id=facts.task_id,
        repeat=facts.repeat,
        line=facts.line,
        reward=facts.reward,
        detail=facts.detail,
        prompt=_text(prompt or "", 600),
        response=_text(response, 900),
        answer=_text(task.get("answer"), 200),
        extracted=_text(metadata["extracted_answer"], 200)
        if "extracted_answer" in metadata
        else "",
        note=_text(note, 400),
    )


def _sample(items: list[Any], limit: int) -> list[Any]:
    """At most `limit` items, evenly spaced (deterministic)."""
    if len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def profile(
    run_dir: str | os.PathLike[str],
    *,
    success_threshold: float | None = None,
    ceiling: float = 1.0,
    examples: int = 3,
    seed: int = 0,
    resamples: int = 2000,
) -> Profile:
    """Profile the run in `run_dir` (see the module docstring). `success_threshold`
    defaults to the one its `metrics.json` was computed with (else 1.0)."""
    source = Path(run_dir)
    path = source / ROLLOUTS
    if not path.exists():
        raise ConfigError(f"{source}: no {ROLLOUTS} here (not a run directory)")
    manifest = read_manifest(source / MANIFEST)
    if success_threshold is None:
        success_threshold = 1.0
        saved = source / METRICS
        if saved.exists():
            try:
                success_threshold = float(json.loads(saved.read_text())["success_threshold"])
            except (ValueError, KeyError, TypeError):
                pass
    accumulator = MetricsAccumulator(success_threshold=success_threshold)
    final: dict[tuple[Any, ...], Facts] = {}
    for number, line in lines(path):
        where = f"{path}:{number}"
        row = parse_row(path, number, line)
        check_version(path, number, row)
        accumulator.add(row, where)
        facts = _facts(row, number, where, success_threshold)
        final[(facts.env, facts.variant, facts.task_id, facts.repeat)] = facts
    metrics = accumulator.result()
    items = sorted(final.values(), key=lambda f: f.line)

    tasks: dict[tuple[Any, ...], TaskStats] = {}
    diagnoses: dict[str, Diagnosis] = {"*": Diagnosis("*", ceiling=ceiling)}
    wanted: dict[int, list[tuple[str, str]]] = {}  # line -> (env, class) it illustrates
    picked: dict[tuple[str, str], int] = {}
    failure_counts: dict[str, int] = {}
    variant_diagnoses: dict[str, Diagnosis] = {}
    failure_lines: dict[str, int] = {}
    for item in items:
        stats = tasks.setdefault(
            (item.env, item.variant, item.task_id),
            TaskStats(item.env, item.variant, item.task_id),
        )
        stats.rollouts += 1
        if item.ok:
            stats.ok += 1
            stats.reward_sum += item.reward or 0.0
            stats.passed += (item.reward or 0.0) >= success_threshold
        else:
            code = f"{item.kind}/{item.code}"
            failure_lines.setdefault(code, item.line)
            failure_counts[code] = failure_counts.get(code, 0) + 1
        env = str(item.env)
        for name in ("*", env):
            diagnosis = diagnoses.setdefault(name, Diagnosis(name, ceiling=ceiling))
            diagnosis.add(item.cls, item.detail, item.reward)
        if item.variant is not None:
            by_variant = variant_diagnoses.setdefault(
                item.variant, Diagnosis(item.variant, ceiling=ceiling)
            )
            by_variant.add(item.cls, item.detail, item.reward)
        if item.cls != "passed" and picked.get((env, item.cls), 0) < examples:
            picked[(env, item.cls)] = picked.get((env, item.cls), 0) + 1
            wanted.setdefault(item.line, []).append((env, item.cls))
    for diagnosis in (*diagnoses.values(), *variant_diagnoses.values()):
        diagnosis.finish()

    # Second pass: the example rows, and one message per failure code.
    by_line = {item.line: item for item in items}
    failure_examples: dict[str, str] = {}
    needed = set(wanted) | set(failure_lines.values())
    if needed:
        codes = {line: code for code, line in failure_lines.items()}
        for number, line in lines(path):
            if number not in needed:
                continue
            row = parse_row(path, number, line)
            if number in wanted:
                example = _example(row, by_line[number])
                for env, cls in wanted[number]:
                    diagnoses[env].classes[cls].examples.append(example)
                    star = diagnoses["*"].classes[cls]
                    if len(star.examples) < examples:
                        star.examples.append(example)
            if number in codes:
                failure_examples[codes[number]] = _text(
                    _mapping(row.get("failure")).get("message") or "", 300
                )

    ks = sorted(metrics.pass_at_k)
    majority: dict[str, dict[int, float]] = {}
    if any(item.reported for item in items):
        majority["*"] = _majority(items, success_threshold, ks)
        for env, env_metrics in metrics.by_env.items():
            majority[env] = _majority(
                [i for i in items if i.env == env], success_threshold, sorted(env_metrics.pass_at_k)
            )

    ok_items = [i for i in items if i.ok]
    token_values = [float(i.tokens) for i in items if i.tokens is not None]
    use_tokens = bool(ok_items) and all(i.tokens is not None for i in ok_items)
    length_unit = "completion tokens" if use_tokens else "response characters"
    points = [
        (float(i.tokens if use_tokens and i.tokens is not None else i.chars), i.reward or 0.0)
        for i in ok_items
    ]
    result = Profile(
        run_dir=source,
        manifest=manifest,
        metrics=metrics,
        success_threshold=success_threshold,
        ceiling=ceiling,
        tasks=sorted(tasks.values(), key=lambda t: (str(t.env), str(t.variant), t.task_id)),
        majority=majority,
        rewards=[i.reward or 0.0 for i in ok_items],
        tokens=Distribution.of(token_values),
        chars=Distribution.of([float(i.chars) for i in items]),
        latency=Distribution.of([i.duration_s for i in items]),
        turns=Distribution.of([float(i.turns) for i in items]),
        length_vs_reward=_sample(points, 2000),
        length_unit=length_unit,
        diagnoses=diagnoses,
        variant_diagnoses={
            name: variant_diagnoses[name]
            for name in variant_order(manifest, list(variant_diagnoses))
        },
        failures=dict(sorted(failure_counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        failure_examples=failure_examples,
    )
    result.variants = _variants(result, manifest, seed=seed, resamples=resamples)
    return result


def variant_order(manifest: Manifest | None, names: list[str]) -> list[str]:
    """The variants in the order the run lists them (its first is the baseline)."""
    listed: list[str] = []
    for part in manifest.parts if manifest is not None else ():
        name = part.variant
        if name is not None and name in names and name not in listed:
            listed.append(name)
    return listed + sorted(n for n in names if n not in listed)


def _variants(
    result: Profile, manifest: Manifest | None, *, seed: int, resamples: int
) -> list[VariantStats]:
    names = variant_order(manifest, list(result.metrics.by_variant))
    if not names:
        return []
    scores: dict[str, dict[tuple[str | None, str], float]] = {}
    for name in names:
        scores[name] = {
            (t.env, t.task_id): t.mean_reward
            for t in result.tasks
            if t.variant == name and t.mean_reward is not None
        }
    baseline = names[0]
    out = []
    for index, name in enumerate(names):
        values = list(scores[name].values())
        low, high = bootstrap_interval(values, resamples=resamples, seed=seed)
        versus = None
        if index:
            versus = compare(
                scores[baseline],
                scores[name],
                a_label=baseline,
                b_label=name,
                resamples=resamples,
                seed=seed,
            )
        out.append(
            VariantStats(
                name=name,
                tasks=len(values),
                mean=math.fsum(values) / len(values) if values else math.nan,
                low=low,
                high=high,
                versus=versus,
            )
        )
    return out
