"""The HTML report of a run: one self-contained file (inline CSS and SVG, no script, no
network at view time), generated from the rows alone (`analysis.profile`)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path

from nemo_gym.analysis import svg
from nemo_gym.analysis.diagnose import DESCRIPTIONS, Diagnosis
from nemo_gym.analysis.profile import Distribution, Profile
from nemo_gym.records import RunMetrics
from nemo_gym.spec import Spec

__all__ = ["CLASS_COLORS", "COLORS", "PLOTS", "render", "write_report"]

COLORS = {
    "reward": "#4c72b0",
    "pass_rate": "#55a868",
    "failures": "#c44e52",
    "length_reward": "#8172b2",
    "tokens": "#64b5cd",
    "latency": "#ccb974",
    "variants": "#dd8452",
}
"""The colour each plot draws its marks in (a rendered report can be checked for them)."""

PLOTS = {
    "reward": "reward distribution",
    "pass_rate": "per-task pass rate",
    "failures": "failures by kind",
    "length_reward": "response length vs reward",
    "tokens": "response length distribution",
    "latency": "latency distribution",
}
"""The plots every report has, by `data-plot` id (plus `diagnostics` and `variants`)."""

CLASS_COLORS = {
    "timeout": "#8c564b",
    "infrastructure": "#c44e52",
    "truncated": "#e377c2",
    "tool_misuse": "#ff9f1c",
    "no_answer": "#7f7f7f",
    "format": "#bcbd22",
    "wrong": "#1f77b4",
}

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
  color: #222; background: #fafafa; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 60px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 34px 0 10px;
  border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 15px; margin: 18px 0 6px; }
.sub { color: #666; font-size: 13px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 16px 0; }
.card { background: #fff; border: 1px solid #e3e3e3; border-radius: 8px; padding: 10px 14px;
  min-width: 120px; } .card b { display: block; font-size: 20px; } .card span { color: #666;
  font-size: 12px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 14px; }
.panel { background: #fff; border: 1px solid #e3e3e3; border-radius: 8px; padding: 8px; }
table { border-collapse: collapse; background: #fff; font-size: 13px; margin: 6px 0 12px; }
th, td { border: 1px solid #e3e3e3; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
details { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px; margin: 6px 0;
  padding: 6px 10px; } summary { cursor: pointer; font-weight: 600; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f6f6; padding: 6px;
  margin: 4px 0; font-size: 12px; max-height: 220px; overflow: auto; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 5px; }
.muted { color: #777; }
"""


def _f(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _table(
    head: Sequence[str], rows: Iterable[Sequence[str]], numeric: set[int] | None = None
) -> str:
    numeric = numeric or set()
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{''.join(f'<th>{escape(h)}</th>' for h in head)}</tr>{body}</table>"


def _cards(metrics: RunMetrics) -> str:
    reward = metrics.rewards.get("reward")
    items = [
        ("rollouts", str(metrics.n_rollouts)),
        ("tasks", str(metrics.n_tasks)),
        ("ok", str(metrics.n_ok)),
        ("failed", str(metrics.n_failed)),
        ("mean reward", _f(reward.mean if reward else None)),
        ("pass@1", _f(metrics.pass_at_k.get(1))),
        ("no answer", _pct(metrics.no_answer_rate)),
    ]
    return (
        '<div class="cards">'
        + "".join(
            f"<div class='card'><b>{escape(v)}</b><span>{escape(k)}</span></div>" for k, v in items
        )
        + "</div>"
    )


def _metrics_rows(name: str, m: RunMetrics, majority: dict[int, float] | None) -> list[str]:
    reward = m.rewards.get("reward")
    passes = "  ".join(f"pass@{k} {_f(v)}" for k, v in m.pass_at_k.items())
    majors = "  ".join(f"maj@{k} {_f(v)}" for k, v in (majority or {}).items())
    return [
        escape(name),
        str(m.n_rollouts),
        str(m.n_tasks),
        str(m.n_failed),
        _f(reward.mean if reward else None),
        _f(reward.std if reward else None),
        escape(passes),
        escape(majors) or "–",
        _pct(m.no_answer_rate),
    ]


def _distribution_row(name: str, d: Distribution | None, unit: str) -> list[str]:
    if d is None:
        return [escape(name), "–", "–", "–", "–", "–", "–"]
    return [
        escape(name),
        str(d.n),
        _f(d.mean, 2),
        _f(d.p50, 2),
        _f(d.p90, 2),
        _f(d.p99, 2),
        f"{_f(d.max, 2)} {escape(unit)}",
    ]


def _diagnosis_table(d: Diagnosis) -> str:
    rows = []
    for name, entry in d.classes.items():
        details = ", ".join(
            f"{k} {v}" for k, v in sorted(entry.details.items(), key=lambda x: -x[1])
        )
        rows.append(
            [
                f'<span class="swatch" style="background:{CLASS_COLORS[name]}"></span>'
                + escape(name),
                escape(DESCRIPTIONS[name]),
                str(entry.count),
                _pct(entry.share),
                f"{100 * entry.points:.1f}",
                escape(details),
            ]
        )
    if not rows:
        return "<p class='muted'>No reward was lost.</p>"
    return _table(
        ["class", "what", "rollouts", "share of loss", "points lost", "detail"], rows, {2, 3, 4}
    )


def _examples(d: Diagnosis) -> str:
    out = []
    for name, entry in d.classes.items():
        if not entry.examples:
            continue
        blocks = []
        for ex in entry.examples:
            variant = f" · variant {escape(ex.variant)}" if ex.variant else ""
            blocks.append(
                f"<p><b>{escape(ex.task_id)}</b> repeat {ex.repeat}{variant} · line {ex.line} · "
                f"reward {_f(ex.reward)} · {escape(ex.detail)}</p>"
                f"<p class='sub'>prompt</p><pre>{escape(ex.prompt)}</pre>"
                f"<p class='sub'>response</p><pre>{escape(ex.response) or '(none)'}</pre>"
                f"<p class='sub'>gold answer: <code>{escape(ex.answer)}</code>"
                + (f" · extracted: <code>{escape(ex.extracted)}</code>" if ex.extracted else "")
                + "</p>"
                + (f"<pre>{escape(ex.note)}</pre>" if ex.note else "")
            )
        out.append(
            f"<details><summary>{escape(name)}: {entry.count} rollouts, "
            f"{len(entry.examples)} shown</summary>{''.join(blocks)}</details>"
        )
    return "".join(out)


def model_label(model: Spec | None) -> str:
    """A model spec as the report's header names it: `local`, `openai (model=m, ...)`;
    `?` for a run that recorded none (version 1).

    Options left at None (`local`'s `model`: the embedded checkpoint) say nothing.
    """
    if model is None:
        return "?"
    options = {k: v for k, v in sorted(model.options.items()) if v is not None}
    shown = ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v, sort_keys=True)}"
        for k, v in options.items()
    )
    return f"{model.name} ({shown})" if shown else model.name


def render(result: Profile) -> str:
    """The report of a profiled run, as one HTML document."""
    metrics = result.metrics
    manifest = result.manifest
    first = manifest.parts[0].spec if manifest is not None else None
    model_name = model_label(first.model if first is not None else None)
    envs = sorted(metrics.by_env) or ["?"]
    header = (
        f"<h1>Run report: {escape(result.run_dir.name)}</h1>"
        f"<div class='sub'>run {escape(manifest.run_id if manifest is not None else '?')} · model "
        f"{escape(model_name)} · environments {escape(', '.join(envs))} · success threshold "
        f"{result.success_threshold:g} · generated {time.strftime('%Y-%m-%d %H:%M')} from "
        f"{escape(str(result.run_dir))}/rollouts.jsonl</div>"
    )
    sections = [header, _cards(metrics)]

    # Metrics, overall and per environment / variant.
    rows = [_metrics_rows("all", metrics, result.majority.get("*"))]
    if len(metrics.by_env) > 1:
        rows += [
            _metrics_rows(env, m, result.majority.get(env)) for env, m in metrics.by_env.items()
        ]
    for variant, m in metrics.by_variant.items():
        rows.append(_metrics_rows(f"variant {variant}", m, None))
    sections.append("<h2>Metrics</h2>")
    sections.append(
        _table(
            [
                "",
                "rollouts",
                "tasks",
                "failed",
                "mean reward",
                "std",
                "pass@k",
                "majority@k",
                "no answer",
            ],
            rows,
            {1, 2, 3, 4, 5},
        )
    )

    # Variants side by side.
    if result.variants:
        base = result.variants[0]
        items = [(v.name, v.mean, v.low, v.high) for v in result.variants]
        vrows = []
        for v in result.variants:
            vs = v.versus
            vrows.append(
                [
                    escape(v.name),
                    str(v.tasks),
                    _f(v.mean),
                    f"[{_f(v.low)}, {_f(v.high)}]",
                    "baseline" if vs is None else f"{vs.diff:+.3f} [{vs.low:+.3f}, {vs.high:+.3f}]",
                    "–" if vs is None else f"{vs.wins}/{vs.losses}/{vs.ties}",
                    "–" if vs is None else f"{vs.p_value:.3g}",
                ]
            )
        sections.append("<h2>Variants</h2>")
        sections.append(
            "<p class='sub'>Mean per-task reward with a 95% bootstrap interval over tasks; "
            f"each variant paired with the baseline <b>{escape(base.name)}</b> on the tasks "
            "both scored (difference, its interval, wins/losses/ties, sign-test p).</p>"
        )
        sections.append(
            "<div class='panel'>"
            + svg.interval_chart(
                items,
                plot_id="variants",
                title="mean reward by variant (95% interval)",
                ylabel="mean reward",
                color=COLORS["variants"],
            )
            + "</div>"
        )
        sections.append(
            _table(
                ["variant", "tasks", "mean", "95% interval", "vs baseline", "W/L/T", "p"],
                vrows,
                {1, 2},
            )
        )

    # The plots.
    pass_rates = [t.pass_rate for t in result.tasks if t.pass_rate is not None]
    failures = sorted(metrics.failures_by_kind.items(), key=lambda kv: -kv[1])
    token_dist = result.tokens or result.chars
    unit = "completion tokens" if result.tokens else "response characters"
    plots = [
        svg.histogram(
            result.rewards,
            plot_id="reward",
            title=PLOTS["reward"].capitalize() + " (ok rollouts)",
            xlabel="reward",
            color=COLORS["reward"],
            bins=20,
        ),
        svg.sorted_bars(
            pass_rates,
            plot_id="pass_rate",
            title=f"{PLOTS['pass_rate'].capitalize()} ({len(pass_rates)} tasks, sorted)",
            xlabel="tasks, hardest first",
            ylabel="pass rate",
            color=COLORS["pass_rate"],
        ),
        svg.bar_chart(
            failures,
            plot_id="failures",
            title=f"{PLOTS['failures'].capitalize()} ({metrics.n_failed} failed)",
            ylabel="rollouts",
            counts=True,
            color=COLORS["failures"],
            y_max=max(1.0, max((v for _, v in failures), default=1)),
            empty="no rollout failed",
        ),
        svg.scatter(
            result.length_vs_reward,
            plot_id="length_reward",
            title=PLOTS["length_reward"].capitalize(),
            xlabel=result.length_unit,
            ylabel="reward",
            color=COLORS["length_reward"],
            jitter=0.03,
        ),
        svg.histogram(
            token_dist.values if token_dist else [],
            plot_id="tokens",
            title=f"Response length ({unit})",
            xlabel=unit,
            color=COLORS["tokens"],
        ),
        svg.histogram(
            result.latency.values if result.latency else [],
            plot_id="latency",
            title=PLOTS["latency"].capitalize() + " (seconds per rollout)",
            xlabel="seconds",
            color=COLORS["latency"],
        ),
    ]
    sections.append("<h2>Plots</h2><div class='grid'>")
    sections += [f"<div class='panel'>{p}</div>" for p in plots]
    sections.append("</div>")
    sections.append("<h3>Distributions</h3>")
    sections.append(
        _table(
            ["", "n", "mean", "p50", "p90", "p99", "max"],
            [
                _distribution_row("completion tokens", result.tokens, "tokens"),
                _distribution_row("response characters", result.chars, "chars"),
                _distribution_row("latency (s)", result.latency, "s"),
                _distribution_row("model calls per rollout", result.turns, "calls"),
            ],
            {1, 2, 3, 4, 5, 6},
        )
    )

    # Diagnostics.
    sections.append("<h2>Why reward is lost</h2>")
    sections.append(
        "<p class='sub'>Each rollout that does not pass is put in one class, its most "
        "upstream cause; <i>share</i> is the class's part of all reward lost, <i>points</i> "
        "the mean reward it costs (out of 100). Failed rollouts count as losing everything "
        "here (the metrics mask them).</p>"
    )
    diag_envs = [e for e in result.diagnoses if e != "*"]
    bar_rows = []
    for name in (["*"] if len(diag_envs) > 1 else []) + diag_envs:
        d = result.diagnoses[name]
        bar_rows.append(
            ("all" if name == "*" else name, [(c, e.points) for c, e in d.classes.items()])
        )
    for name, d in result.variant_diagnoses.items():
        bar_rows.append((f"variant {name}", [(c, e.points) for c, e in d.classes.items()]))
    sections.append(
        "<div class='panel'>"
        + svg.stacked_bars(
            bar_rows,
            plot_id="diagnostics",
            title="Reward lost, by cause (points of the mean reward)",
            colors=CLASS_COLORS,
            xlabel="share of the best possible mean reward",
        )
        + "</div>"
    )
    for name in diag_envs:
        d = result.diagnoses[name]
        sections.append(
            f"<h3>{escape(name)}: {d.rollouts} rollouts, {d.passed} passed, "
            f"{100 * d.lost / (d.rollouts * d.ceiling) if d.rollouts else 0:.1f} points lost</h3>"
        )
        sections.append(_diagnosis_table(d))
        sections.append(_examples(d))

    # Failures by kind and code.
    if result.failures:
        sections.append("<h2>Failures</h2>")
        rows_f = [
            [escape(code), str(n), escape(result.failure_examples.get(code, ""))]
            for code, n in result.failures.items()
        ]
        sections.append(_table(["kind/code", "rollouts", "first message"], rows_f, {1}))

    # Tasks, hardest first.
    hardest = sorted(
        (t for t in result.tasks if t.ok),
        key=lambda t: (t.pass_rate or 0.0, t.mean_reward or 0.0, t.task_id),
    )[:30]
    sections.append("<h2>Hardest tasks</h2>")
    sections.append(
        _table(
            ["env", "variant", "task", "ok/rollouts", "pass rate", "mean reward"],
            [
                [
                    escape(str(t.env)),
                    escape(t.variant or ""),
                    escape(t.task_id),
                    f"{t.ok}/{t.rollouts}",
                    _f(t.pass_rate),
                    _f(t.mean_reward),
                ]
                for t in hardest
            ],
            {3, 4, 5},
        )
    )
    body = "".join(sections)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>nemo_gym report: {escape(result.run_dir.name)}</title>"
        f"<style>{_CSS}</style></head><body><main>{body}</main></body></html>"
    )


def write_report(result: Profile, path: str | os.PathLike[str]) -> Path:
    """Write the report of `result` to `path` (atomically) and return the path."""
    from nemo_gym.rundir.files import write_atomic

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, render(result))
    return out
