"""The `gym` command: `gym list`, `gym eval run`, `gym eval reverify`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from nemo_gym.errors import ConfigError, NemoGymError
from nemo_gym.protocols import Model
from nemo_gym.records import Rollout, RunMetrics, Sampling
from nemo_gym.runner import DEFAULT_CONCURRENCY

MODEL_HELP = (
    "local (the embedded SmolLM2-135M-Instruct, CPU), local:PATH_OR_ID, "
    "openai:MODEL, openai-responses:MODEL, openai-completions:MODEL, anthropic:MODEL"
)


_HTTP_KINDS = ("openai", "openai-responses", "openai-completions", "anthropic")


def parse_model(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    threads: int | None = None,
) -> Model:
    """Build a model adapter from a `kind[:name]` spec, through the registry."""
    from nemo_gym import registry

    kind, _, name = spec.partition(":")
    if kind == "local":
        options: dict[str, Any] = {"model": name or None}
        if threads is not None:
            options["threads"] = threads
        return registry.build("model", "local", **options)
    if kind not in _HTTP_KINDS:
        known = [n for n in registry.names("model") if n not in ("local", "scripted")]
        if kind in known:
            return registry.build("model", kind, **({"model": name} if name else {}))
        raise ConfigError(f"--model {spec!r}: unknown kind {kind!r}; use {MODEL_HELP}")
    if not name:
        raise ConfigError(f"--model {spec!r}: {kind} needs a model name, as in {kind}:NAME")
    return registry.build("model", kind, model=name, base_url=base_url, api_key=api_key)


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs; values are read as JSON when they parse, else kept as text."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--env-option {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


class Progress:
    """A one-line progress bar on stderr (only when it is a terminal, else a line per 10%)."""

    def __init__(self, total: int | None, stream: TextIO = sys.stderr) -> None:
        self.total, self.stream = total, stream
        self.done = self.failed = 0
        self.reward = 0.0
        self.started = time.monotonic()
        self.tty = stream.isatty()
        self._last_decile = -1

    def update(self, rollout: Rollout) -> None:
        self.done += 1
        if rollout.ok:
            self.reward += rollout.reward or 0.0
        else:
            self.failed += 1
        ok = self.done - self.failed
        mean = self.reward / ok if ok else 0.0
        rate = self.done / max(1e-9, time.monotonic() - self.started)
        total = f"/{self.total}" if self.total else ""
        line = f"{self.done}{total} rollouts  failed {self.failed}  reward {mean:.3f}  {rate:.1f}/s"
        if self.tty:
            width = 24
            filled = int(width * self.done / self.total) if self.total else 0
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {line}")
            self.stream.flush()
        elif self.total:
            decile = 10 * self.done // self.total
            if decile != self._last_decile:
                self._last_decile = decile
                print(line, file=self.stream)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def summary(metrics: RunMetrics, output: Path | None) -> str:
    lines = [
        f"rollouts {metrics.n_rollouts}  ok {metrics.n_ok}  failed {metrics.n_failed}  "
        f"tasks {metrics.n_tasks}"
    ]
    for name, stats in metrics.rewards.items():
        lines.append(
            f"  {name:<16} mean {stats.mean:.4f}  std {stats.std:.4f}  "
            f"min {stats.min:.4f}  max {stats.max:.4f}  (n={stats.n})"
        )
    if metrics.pass_at_k:
        lines.append("  " + "  ".join(f"pass@{k} {v:.4f}" for k, v in metrics.pass_at_k.items()))
    for kind, count in sorted(metrics.failures_by_kind.items()):
        lines.append(f"  failed ({kind}): {count}")
    if output is not None:
        lines.append(f"written to {output}/ (rollouts.jsonl, failures.jsonl, metrics.json)")
    return "\n".join(lines)


def _eval_run(args: argparse.Namespace) -> int:
    from nemo_gym.catalog import make
    from nemo_gym.collect import collect
    from nemo_gym.lifecycle import close_all

    env = make(args.env, **parse_options(args.env_option))
    model = parse_model(
        args.model, base_url=args.base_url, api_key=args.api_key, threads=args.threads
    )
    output = Path(args.output or f"runs/{args.env}-{time.strftime('%Y%m%d-%H%M%S')}")
    # Greedy unless asked: an evaluation should be reproducible and score the model's
    # best guess, not a sample of it.
    temperature = 0.0 if args.temperature is None else args.temperature
    sampling = Sampling(temperature=temperature, max_tokens=args.max_tokens)
    total = args.limit * args.repeats if args.limit is not None else None
    progress = Progress(total)
    # --ray: the same run on Ray actors, in a session this command opens (or joins).
    if (args.workers is not None or args.address is not None) and not args.ray:
        raise ConfigError("--workers and --address need --ray")
    backend: dict[str, Any] = {"backend": "ray", "workers": args.workers} if args.ray else {}
    ray_session: Any = contextlib.nullcontext()
    if args.ray:
        from nemo_gym.integrations.ray import session

        ray_session = session(args.address)

    async def run() -> Any:
        try:
            return await collect(
                env,
                model,
                output=output,
                split=args.split,
                limit=args.limit,
                repeats=args.repeats,
                concurrency=args.concurrency,
                seed=args.seed,
                sampling=sampling,
                timeout=args.timeout,
                retry_failed=args.retry_failed,
                on_rollout=progress.update,
                **backend,
            )
        finally:
            await close_all(model)

    try:
        with ray_session:
            result = asyncio.run(run())
    finally:
        progress.close()
    print(summary(result.metrics, result.output))
    return 0


def _eval_reverify(args: argparse.Namespace) -> int:
    from nemo_gym.collect import reverify

    result = asyncio.run(
        reverify(args.run_dir, output=args.output, judge_failed_only=args.judge_failed_only)
    )
    print(summary(result.metrics, result.output))
    return 0


def _list(args: argparse.Namespace) -> int:
    from nemo_gym.catalog import list_envs

    infos = list_envs()
    width = max((len(info.name) for info in infos), default=4)
    for info in infos:
        print(f"{info.name:<{width}}  {info.domain:<12}  {info.description}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from nemo_gym.records import rollout_json_schema

    print(json.dumps(rollout_json_schema(), indent=2, sort_keys=True))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gym", description="nemo_gym: RL environments for LLMs")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list environments").set_defaults(func=_list)
    commands.add_parser(
        "schema", help="print the JSON Schema of a rollouts.jsonl line"
    ).set_defaults(func=_schema)

    evaluation = commands.add_parser("eval", help="evaluate a model on an environment")
    eval_commands = evaluation.add_subparsers(dest="eval_command", required=True)
    run = eval_commands.add_parser("run", help="run an evaluation")
    run.add_argument("env", help="environment name (gym list)")
    run.add_argument("--model", default="local", help=MODEL_HELP + " (default: local)")
    run.add_argument("--base-url", help="endpoint of an OpenAI/Anthropic-compatible server")
    run.add_argument("--api-key", help="API key (default: the SDK's environment variable)")
    run.add_argument("--limit", type=int, help="number of tasks")
    run.add_argument("--repeats", type=int, default=1, help="rollouts per task")
    run.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"rollouts in flight (default {DEFAULT_CONCURRENCY})",
    )
    run.add_argument("--output", help="run directory (default runs/ENV-TIMESTAMP)")
    run.add_argument("--split", default="test")
    run.add_argument("--seed", type=int, default=0, help="run seed (repeats derive theirs)")
    run.add_argument("--temperature", type=float, help="sampling temperature (default 0: greedy)")
    run.add_argument(
        "--threads", type=int, help="torch threads for --model local (default: chosen by Local)"
    )
    run.add_argument("--max-tokens", type=int)
    run.add_argument("--timeout", type=float, help="seconds per rollout")
    run.add_argument("--retry-failed", action="store_true", help="on resume, rerun failed rows")
    run.add_argument(
        "--env-option", action="append", default=[], metavar="KEY=VALUE", help="env option"
    )
    run.add_argument(
        "--ray", action="store_true", help="run on Ray actors (pip install 'nemo-gym[ray]')"
    )
    run.add_argument("--workers", type=int, help="Ray actors (with --ray; default 2)")
    run.add_argument(
        "--address",
        help="Ray cluster to join (with --ray; default RAY_ADDRESS, else a local one on 127.0.0.1)",
    )
    run.set_defaults(func=_eval_run)

    again = eval_commands.add_parser("reverify", help="re-score a run without inference")
    again.add_argument("run_dir")
    again.add_argument("--output", help="where to write (default RUN_DIR/reverified)")
    again.add_argument("--judge-failed-only", action="store_true")
    again.set_defaults(func=_eval_reverify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except NemoGymError as exc:
        print(f"gym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gym: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
