"""The `gym` subcommands besides `eval run` (imported only when one of them runs)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nemo_gym.errors import ConfigError

__all__ = [
    "aggregate",
    "dataset_prepare",
    "dataset_show",
    "dataset_validate",
    "env_validate",
    "eval_compare",
    "eval_diagnose",
    "eval_profile",
    "eval_reverify",
    "search",
]


def _f(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


# --------------------------------------------------------------------------- search


def _describe(entry: Any) -> str:
    description = entry.info.get("description") if entry.info else None
    if description:
        return str(description)
    try:
        factory = entry.load()
    except ConfigError as exc:
        return f"(cannot be imported here: {exc})"
    doc = (getattr(factory, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def search(query: str) -> list[tuple[str, str, str]]:
    """(kind, name, description) of every registered name matching all words of
    `query` (case-insensitive) in its name, kind, description or, for environments,
    domain and verification."""
    from nemo_gym import registry
    from nemo_gym.catalog import list_envs

    words = query.lower().split()
    found: list[tuple[str, str, str]] = []

    def keep(kind: str, name: str, description: str, *extra: str) -> None:
        text = " ".join((kind, name, description, *extra)).lower()
        if all(word in text for word in words):
            found.append((kind, name, description))

    for info in list_envs():
        keep("environment", info.name, info.description, info.domain, info.verification)
    for kind in ("model", "harness", "verifier", "sandbox"):
        for entry in registry.entries(kind):
            keep(registry.LABELS[kind], entry.id, _describe(entry))
    return found


# --------------------------------------------------------------------------- validate


def _looks_like_rollout(path: Path) -> bool | None:
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    return None
                return isinstance(row, dict) and "status" in row and "trajectory" in row
    return None


def env_validate(args: argparse.Namespace) -> int:
    from nemo_gym.collect import ROLLOUTS, compute_metrics, iter_rows, read_rollouts
    from nemo_gym.config import build_parts, check_model, load_config
    from nemo_gym.dataset import validate_tasks

    path = Path(args.path)
    if path.is_dir():
        count = sum(1 for _ in read_rollouts(path))
        metrics = compute_metrics(iter_rows(path / ROLLOUTS))
        print(f"{path}: ok, a run directory of {count} rollouts ({metrics.n_tasks} tasks)")
        return 0
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory")
    if path.suffix.lower() in (".toml", ".yaml", ".yml"):
        config, source = load_config(path)
        check_model(config.model, source)
        parts = build_parts(config, source)
        for table in config.envs:
            if table.tasks is not None:
                tasks = Path(table.tasks)
                tasks = tasks if tasks.is_absolute() else path.parent / tasks
                _, errors = validate_tasks(tasks)
                if errors:
                    raise ConfigError("\n".join(errors))
        labels = ", ".join(
            p.env.name if p.variant is None else f"{p.env.name}[{p.variant}]" for p in parts
        )
        print(f"{path}: ok, {len(parts)} part(s): {labels}; model {config.model.name}")
        return 0
    kind = _looks_like_rollout(path)
    if kind:
        count = sum(1 for _ in read_rollouts(path))
        print(f"{path}: ok, {count} rollouts")
        return 0
    valid, errors = validate_tasks(path)
    if errors:
        for error in errors:
            print(f"gym: error: {error}", file=sys.stderr)
        return 2
    print(f"{path}: ok, {valid} task rows")
    return 0


# --------------------------------------------------------------------------- eval


def eval_reverify(args: argparse.Namespace) -> int:
    from nemo_gym.cli.main import summary
    from nemo_gym.collect import reverify

    result = asyncio.run(
        reverify(
            args.run_dir,
            output=args.output,
            judge_failed_only=args.judge_failed_only,
            trust_code=args.trust_run_code,
        )
    )
    print(summary(result.metrics, result.output))
    return 0


def _profile(args: argparse.Namespace) -> Any:
    from nemo_gym.analysis import profile

    return profile(
        args.run_dir,
        success_threshold=args.success_threshold,
        ceiling=args.ceiling,
        examples=args.examples,
        seed=args.seed,
    )


def _diagnosis_lines(result: Any, *, examples: bool) -> list[str]:
    lines = []
    for env, diagnosis in result.diagnoses.items():
        if env == "*" and len(result.diagnoses) == 2:
            continue
        lost = 100 * diagnosis.lost / (diagnosis.rollouts * diagnosis.ceiling or 1)
        lines.append(
            f"{'all environments' if env == '*' else env}: {diagnosis.rollouts} rollouts, "
            f"{diagnosis.passed} passed, {lost:.1f} points of reward lost"
        )
        for name, entry in diagnosis.classes.items():
            details = ", ".join(f"{k} {v}" for k, v in sorted(entry.details.items()))
            lines.append(
                f"  {name:<15} {entry.count:>6} rollouts  {100 * entry.share:5.1f}% of the loss"
                f"  {100 * entry.points:5.1f} points  ({details})"
            )
            if examples and env != "*":
                for ex in entry.examples:
                    variant = f" [{ex.variant}]" if ex.variant else ""
                    reply = ex.response.replace("\n", " ")
                    lines.append(
                        f"      e.g. {ex.task_id}#{ex.repeat}{variant} (line {ex.line}): "
                        f"{reply[:100]!r}" + (f" {ex.note[:100]}" if ex.note else "")
                    )
    return lines


def _profile_json(result: Any) -> dict[str, Any]:
    def dist(d: Any) -> Any:
        return None if d is None else {k: v for k, v in asdict(d).items() if k != "values"}

    return {
        "run_dir": str(result.run_dir),
        "metrics": json.loads(result.metrics.model_dump_json()),
        "majority_at_k": result.majority,
        "tokens": dist(result.tokens),
        "chars": dist(result.chars),
        "latency_s": dist(result.latency),
        "model_calls": dist(result.turns),
        "failures": result.failures,
        "tasks": [
            {
                "env": t.env,
                "variant": t.variant,
                "task_id": t.task_id,
                "rollouts": t.rollouts,
                "ok": t.ok,
                "passed": t.passed,
                "pass_rate": t.pass_rate,
                "mean_reward": t.mean_reward,
            }
            for t in result.tasks
        ],
        "diagnoses": {name: asdict(d) for name, d in result.diagnoses.items()},
        "variants": [
            {
                **{k: v for k, v in asdict(s).items() if k != "versus"},
                "versus": s.versus.to_json() if s.versus else None,
            }
            for s in result.variants
        ],
    }


def eval_profile(args: argparse.Namespace) -> int:
    from nemo_gym.analysis import write_report

    result = _profile(args)
    report = None
    if not args.no_report:
        report = write_report(result, args.output or Path(args.run_dir) / "report.html")
    if args.json:
        data = _profile_json(result)
        data["report"] = str(report) if report else None
        print(json.dumps(data, indent=2, default=str))
        return 0
    from nemo_gym.cli.main import summary

    print(summary(result.metrics, None))
    if result.majority:
        for env, values in result.majority.items():
            shown = "  ".join(f"maj@{k} {_f(v)}" for k, v in values.items())
            print(f"  majority ({'all' if env == '*' else env}): {shown}")
    for code, count in result.failures.items():
        print(f"  failed {code}: {count}  {result.failure_examples.get(code, '')[:80]}")
    for name, d in (
        ("completion tokens", result.tokens),
        ("response chars", result.chars),
        ("latency s", result.latency),
    ):
        if d is not None:
            print(
                f"  {name:<18} mean {d.mean:.1f}  p50 {d.p50:.1f}  p90 {d.p90:.1f}  "
                f"p99 {d.p99:.1f}  max {d.max:.1f}"
            )
    hardest = sorted(
        (t for t in result.tasks if t.ok), key=lambda t: (t.pass_rate or 0.0, t.task_id)
    )[:10]
    if hardest:
        print("hardest tasks (pass rate, mean reward, ok/rollouts):")
        for t in hardest:
            variant = f"[{t.variant}]" if t.variant else ""
            print(
                f"  {t.env}{variant} {t.task_id}: {_f(t.pass_rate, 2)}  "
                f"{_f(t.mean_reward, 3)}  {t.ok}/{t.rollouts}"
            )
    if result.variants:
        print("variants (mean per-task reward, 95% interval; vs the first):")
        for v in result.variants:
            vs = v.versus
            versus = (
                ""
                if vs is None
                else f"  diff {vs.diff:+.4f} [{vs.low:+.4f}, {vs.high:+.4f}]  sign test "
                f"p={vs.p_value:.3g}"
            )
            print(f"  {v.name:<16} {_f(v.mean)} [{_f(v.low)}, {_f(v.high)}]{versus}")
    print("\n".join(_diagnosis_lines(result, examples=False)))
    if report is not None:
        print(f"report: {report}")
    return 0


def eval_diagnose(args: argparse.Namespace) -> int:
    result = _profile(args)
    if args.json:
        print(json.dumps({n: asdict(d) for n, d in result.diagnoses.items()}, indent=2))
        return 0
    print("\n".join(_diagnosis_lines(result, examples=True)))
    return 0


def _scores(run_dir: str, variant: str | None, args: argparse.Namespace, side: str) -> Any:
    from nemo_gym.analysis import task_scores
    from nemo_gym.collect import ROLLOUTS, iter_rows

    path = Path(run_dir)
    rows_path = path / ROLLOUTS if path.is_dir() else path
    if not rows_path.exists():
        raise ConfigError(f"{path}: no {ROLLOUTS} here (not a run directory)")
    variants = sorted(
        {
            str(row["metadata"]["variant"])
            for row in iter_rows(rows_path)
            if isinstance(row.get("metadata"), dict) and row["metadata"].get("variant")
        }
    )
    if variant is None and variants:
        raise ConfigError(
            f"{path} has variants {', '.join(variants)}; choose one with --{side}-variant"
        )
    if variant is not None and variant not in variants:
        raise ConfigError(
            f"--{side}-variant {variant!r}: {path} has "
            + (f"variants {', '.join(variants)}" if variants else "no variants")
        )
    return task_scores(
        iter_rows(rows_path),
        variant=variant,
        metric=args.metric,
        success_threshold=args.success_threshold,
    )


FEW_TASKS = 30
"""Below this many paired tasks, `gym eval compare` warns that its interval is unreliable."""


def eval_compare(args: argparse.Namespace) -> int:
    from nemo_gym.analysis import compare

    a = _scores(args.run_a, args.a_variant, args, "a")
    b = _scores(args.run_b, args.b_variant, args, "b")
    a_label = args.run_a + (f"[{args.a_variant}]" if args.a_variant else "")
    b_label = args.run_b + (f"[{args.b_variant}]" if args.b_variant else "")
    result = compare(
        a,
        b,
        a_label=a_label,
        b_label=b_label,
        confidence=args.confidence,
        resamples=args.resamples,
        seed=args.seed,
        metric=args.metric,
    )
    if result.n == 0:
        raise ConfigError(f"{a_label} and {b_label} share no scored task; nothing to compare")
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    level = f"{100 * args.confidence:g}%"

    def lines(p: Any, name: str) -> list[str]:
        out = [
            f"{name}: {p.n} paired tasks; mean {p.metric} A {p.mean_a:.4f}, B {p.mean_b:.4f}",
            f"  B - A = {p.diff:+.4f}  {level} bootstrap interval [{p.low:+.4f}, {p.high:+.4f}]",
            f"  B better on {p.wins}, worse on {p.losses}, tied on {p.ties}; "
            f"sign test p = {p.p_value:.4g}",
        ]
        if p.n < FEW_TASKS:
            out.append(
                f"  only {p.n} tasks: a percentile bootstrap over so few is too narrow (it can "
                "exclude 0 where the exact sign test finds nothing); read the sign test, and "
                "compare on more tasks before drawing a conclusion"
            )
        return out

    print(f"A = {a_label}\nB = {b_label}")
    out = lines(result, "all")
    for env, sub in result.by_env.items():
        out += lines(sub, env)
    if result.only_a or result.only_b:
        out.append(f"left out: {result.only_a} tasks scored only in A, {result.only_b} only in B")
    out.append(f"(bootstrap: {args.resamples} resamples of tasks, seed {args.seed})")
    print("\n".join(out))
    return 0


def aggregate(args: argparse.Namespace) -> int:
    from nemo_gym.cli.main import summary
    from nemo_gym.collect import aggregate as merge

    result = merge(args.shards, output=args.output, success_threshold=args.success_threshold)
    print(f"merged {len(args.shards)} run directories: {result.new} rollouts")
    print(summary(result.metrics, result.output))
    return 0


# --------------------------------------------------------------------------- dataset


def dataset_prepare(args: argparse.Namespace) -> int:
    from nemo_gym.dataset import prepare

    done = prepare(
        args.source,
        args.output,
        split=args.split,
        config=args.subset,
        prompt_field=args.prompt_field,
        template=args.template,
        messages_field=args.messages_field,
        system=args.system,
        answer_field=args.answer_field,
        id_field=args.id_field,
        metadata=args.metadata_field,
        limit=args.limit,
    )
    shown = "template" if args.template else (done.prompt or done.messages)
    print(
        f"{done.output}: {done.rows} task rows (prompt from {shown!r}, answer from "
        f"{done.answer!r}, id from {done.id or 'the content'!r}, metadata "
        f"{', '.join(done.metadata) or 'none'})"
    )
    return 0


def dataset_show(args: argparse.Namespace) -> int:
    from nemo_gym.dataset import read_tasks

    for index, task in enumerate(read_tasks(args.path)):
        if index >= args.n:
            break
        if args.json:
            print(task.model_dump_json())
            continue
        print(f"--- {task.id}")
        for message in task.messages:
            text = message.content or ""
            print(f"[{message.role}] {text if len(text) <= 500 else text[:499] + '…'}")
        print(f"[answer] {json.dumps(task.answer, ensure_ascii=False, default=str)}")
        if task.metadata:
            keys = ", ".join(task.metadata)
            print(f"[metadata] {keys}")
    return 0


def dataset_validate(args: argparse.Namespace) -> int:
    from nemo_gym.dataset import validate_tasks

    valid, errors = validate_tasks(args.path)
    for error in errors:
        print(f"gym: error: {error}", file=sys.stderr)
    if errors:
        return 2
    print(f"{args.path}: ok, {valid} task rows")
    return 0
