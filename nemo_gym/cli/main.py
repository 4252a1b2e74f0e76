"""The `gym` command: list and search the registry, run, look at and compare evaluations.

`gym --help` lists the commands; `docs/cli.md` is generated from this parser
(`python -m nemo_gym.cli.reference`). Bad input exits with status 2 and a message naming
the file, line and field (or the flag).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nemo_gym.cli import check as env_check
from nemo_gym.cli.sandbox import add_sandbox_commands
from nemo_gym.errors import ConfigError, NemoGymError
from nemo_gym.protocols import Model
from nemo_gym.records import RunMetrics, Sampling
from nemo_gym.runner import DEFAULT_CONCURRENCY

MODEL_HELP = (
    "local (the embedded SmolLM2-135M-Instruct, CPU), local:PATH_OR_ID, "
    "openai:MODEL, openai-responses:MODEL, openai-completions:MODEL, anthropic:MODEL, "
    "or any registered model name"
)


_HTTP_KINDS = ("openai", "openai-responses", "openai-completions", "anthropic")


def model_table(
    spec: str,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    threads: int | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """The `ModelTable` a `--model kind[:name]` flag (and its companions) describe."""
    from nemo_gym import registry
    from nemo_gym.config import ModelTable

    kind, _, name = spec.partition(":")
    given: dict[str, Any] = dict(options or {})
    if kind == "local":
        given.setdefault("model", name or None)
        if threads is not None:
            given["threads"] = threads
    elif kind in _HTTP_KINDS:
        if not name:
            raise ConfigError(f"--model {spec!r}: {kind} needs a model name, as in {kind}:NAME")
        given.setdefault("model", name)
    elif kind in registry.names("model"):
        if name:
            given.setdefault("model", name)
    else:
        raise ConfigError(f"--model {spec!r}: unknown kind {kind!r}; use {MODEL_HELP}")
    if base_url is not None:
        given["base_url"] = base_url
    if "api_key" in given:
        raise ConfigError("--model-option api_key: pass the key in a variable, --api-key-env VAR")
    return ModelTable(name=kind, options=given, api_key_env=api_key_env)


def parse_model(
    spec: str,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    threads: int | None = None,
    options: dict[str, Any] | None = None,
) -> Model:
    """Build a model adapter from a `kind[:name]` spec, through the registry; the API key
    comes from the environment variable `api_key_env` (never from a flag or a file)."""
    from nemo_gym.config import Source, build_model

    table = model_table(
        spec, base_url=base_url, api_key_env=api_key_env, threads=threads, options=options
    )
    return build_model(table, Source(flags=_MODEL_FLAGS))


# What each in-process adapter imports when it runs, and the extra that brings it.
_IN_PROCESS_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "LivePolicy": (("torch", "local"), ("transformers", "local")),
    "VLLM": (("vllm", "vllm"),),
}


def check_model_dependencies(model: Any) -> None:
    """Raise `MissingDependency` naming the extra an in-process model still needs.

    Checked before a run starts, so that a missing extra is one line at once rather than
    a failed row per task; looked up without importing (torch takes seconds).
    """
    import importlib.util

    from nemo_gym.errors import MissingDependency

    for kind in type(model).__mro__:
        for module, extra in _IN_PROCESS_NEEDS.get(kind.__name__, ()):
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                raise MissingDependency(module, extra)


_MODEL_FLAGS = {
    "model": "--model",
    "model.api_key_env": "--api-key-env",
    "model.options": "--model-option",
    "model.options.base_url": "--base-url",
    "model.options.threads": "--threads",
}


def parse_options(pairs: Sequence[str], flag: str = "--env-option") -> dict[str, Any]:
    """`key=value` pairs; values are read as JSON when they parse, else kept as text."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    index, sep, count = text.partition("/")
    if not sep or not index.isdigit() or not count.isdigit():
        raise ConfigError(f"--shard {text!r}: expected INDEX/COUNT, as in 0/4")
    if not 0 <= int(index) < int(count):
        raise ConfigError(f"--shard {text!r}: needs 0 <= INDEX < COUNT")
    return int(index), int(count)


def _line(name: str, metrics: RunMetrics) -> str:
    reward = metrics.rewards.get("reward")
    mean = f"reward {reward.mean:.4f}" if reward else "reward -"
    passes = "  ".join(f"pass@{k} {v:.4f}" for k, v in metrics.pass_at_k.items())
    return (
        f"  {name:<20} rollouts {metrics.n_rollouts}  ok {metrics.n_ok}  failed "
        f"{metrics.n_failed}  tasks {metrics.n_tasks}  {mean}  {passes}"
    ).rstrip()


def summary(metrics: RunMetrics, output: Path | None) -> str:
    """The text a run ends with: overall metrics, then per environment and variant."""
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
    if metrics.no_answer_rate is not None:
        lines.append(f"  no answer {metrics.n_no_answer} ({100 * metrics.no_answer_rate:.1f}%)")
    for kind, count in sorted(metrics.failures_by_kind.items()):
        lines.append(f"  failed ({kind}): {count}")
    if len(metrics.by_env) > 1:
        lines.append("per environment:")
        lines += [_line(env, m) for env, m in metrics.by_env.items()]
    if metrics.by_variant:
        lines.append("per variant:")
        lines += [_line(variant, m) for variant, m in metrics.by_variant.items()]
    if output is not None:
        lines.append(f"written to {output}/ (rollouts.jsonl, failures.jsonl, metrics.json)")
        lines.append(f"look at it: gym eval profile {output}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- eval run

# Flags that override a config file's fields, and the field each one sets.
_RUN_FLAGS = {
    "limit": "--limit",
    "repeats": "--repeats",
    "seed": "--seed",
    "split": "--split",
    "concurrency": "--concurrency",
    "timeout": "--timeout",
    "output": "--output",
    "success_threshold": "--success-threshold",
}


def _sampling_flags(args: argparse.Namespace, base: Sampling | None) -> Sampling | None:
    update = {
        name: value
        for name, value in (("temperature", args.temperature), ("max_tokens", args.max_tokens))
        if value is not None
    }
    if not update:
        return base
    return (base or Sampling()).model_copy(update=update)


def run_config(args: argparse.Namespace) -> tuple[Any, Any]:
    """The `RunConfig` (and its `Source`) of `gym eval run`: from `--config` with the
    flags given over it, or from the flags alone."""
    from nemo_gym.config import ModelTable, Source, load_config, validate_config

    given: set[str] = getattr(args, "given", set())
    overrides = {
        field: (flag, getattr(args, field))
        for field, flag in _RUN_FLAGS.items()
        if getattr(args, field) is not None and (field != "concurrency" or field in given)
    }
    if args.config is None:
        overrides["concurrency"] = ("--concurrency", args.concurrency)
    if args.config is not None:
        for given, flag in (
            (args.envs, "ENV"),
            (args.env_option, "--env-option"),
            (args.tasks, "--tasks"),
        ):
            if given:
                raise ConfigError(
                    f"{flag}: the environments are in {args.config}; give them there or on "
                    "the command line, not both"
                )
        config, source = load_config(args.config, overrides)
        source.flags = {**(source.flags or {}), **_MODEL_FLAGS}
    else:
        if not args.envs:
            raise ConfigError("gym eval run: name an environment (gym list) or give --config FILE")
        if args.tasks and len(args.envs) > 1:
            raise ConfigError("--tasks: one task file is for one environment")
        options = parse_options(args.env_option)
        envs = [
            {"name": name, "options": options, **({"tasks": args.tasks} if args.tasks else {})}
            for name in args.envs
        ]
        data = {"envs": envs, **{k: v for k, (_, v) in overrides.items()}}
        flags = {k: flag for k, (flag, _) in overrides.items()} | _MODEL_FLAGS
        for index in range(len(envs)):
            flags |= {
                f"envs[{index}].name": "ENV",
                f"envs[{index}].options": "--env-option",
                f"envs[{index}].tasks": "--tasks",
            }
        source = Source(flags=flags)
        config = validate_config(data, source)
    sampling = _sampling_flags(args, config.sampling)
    update: dict[str, Any] = {"sampling": sampling}
    model_given = any(
        v is not None for v in (args.base_url, args.api_key_env, args.threads)
    ) or bool(args.model_option)
    if args.model is None and args.config is not None and model_given:
        table = config.model
        options = {**table.options, **parse_options(args.model_option, "--model-option")}
        if args.base_url is not None:
            options["base_url"] = args.base_url
        if args.threads is not None:
            options["threads"] = args.threads
        update["model"] = ModelTable(
            name=table.name,
            version=table.version,
            options=options,
            target=table.target,
            api_key_env=args.api_key_env or table.api_key_env,
        )
    return config.model_copy(update=update), source


def _planned(parts: Sequence[Any], repeats: int, shard: tuple[int, int] | None) -> int | None:
    total = 0
    for part in parts:
        if part.limit is None:
            return None
        count = part.limit
        if shard is not None:
            count = len(range(shard[0], part.limit, shard[1]))
        total += count * repeats
    return total


def _existing_rows(output: Path, retry_failed: bool) -> Any:
    """The rows a resumed run starts from, for its progress (a `Tally`); rows that are
    not whole lines or not rollouts are the resume's business, not counted here."""
    from nemo_gym.cli.progress import Tally

    path = output / "rollouts.jsonl"
    if not path.exists():
        return Tally()
    done = ok = 0
    reward_sum = 0.0
    with path.open("rb") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict):
                continue
            passed = row.get("status") == "ok"
            if retry_failed and not passed:
                continue  # it runs again
            done += 1
            if passed:
                ok += 1
                reward = row.get("reward")
                reward_sum += float(reward) if isinstance(reward, int | float) else 0.0
    return Tally(done=done, ok=ok, reward_sum=reward_sum)


def _model_activity(model: Any) -> Any:
    """The model's `activity()` (what it is busy with now), when it has one."""
    activity = getattr(model, "activity", None)
    return activity if callable(activity) else None


def _eval_run(args: argparse.Namespace) -> int:
    from nemo_gym.cli.progress import Progress
    from nemo_gym.collect import collect
    from nemo_gym.config import build_model, build_parts
    from nemo_gym.lifecycle import close_all

    config, source = run_config(args)
    shard = parse_shard(args.shard)
    parts = build_parts(config, source)
    if args.model is not None or args.config is None:
        model = parse_model(
            args.model or "local",
            base_url=args.base_url,
            api_key_env=args.api_key_env,
            threads=args.threads,
            options=parse_options(args.model_option, "--model-option"),
        )
    else:
        model = build_model(config.model, source)
    check_model_dependencies(model)
    names = list(dict.fromkeys(part.env.name for part in parts))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    label = "+".join(names[:3]) + ("+more" if len(names) > 3 else "")
    output = Path(config.output or f"runs/{label}-{stamp}")
    planned = _planned(parts, config.repeats, shard)
    progress = None
    if not args.no_progress:
        already = _existing_rows(output, args.retry_failed)
        total = None if planned is None else max(planned, already.done)
        progress = Progress(total, already=already, status=_model_activity(model))
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
                parts,
                model,
                output=output,
                split=config.split,
                repeats=config.repeats,
                concurrency=config.concurrency,
                seed=config.seed,
                timeout=config.timeout,
                retry_failed=args.retry_failed,
                success_threshold=config.success_threshold,
                on_rollout=progress.update if progress else None,
                shard=shard,
                **backend,
            )
        finally:
            await close_all(model)

    try:
        with ray_session:
            result = asyncio.run(run())
    except KeyboardInterrupt:
        result = None
    finally:
        if progress is not None:
            progress.close()
    if result is None:
        print(f"gym: interrupted; resume with: {resume_command(args, output)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(summary(result.metrics, result.output))
    if args.report:
        from nemo_gym.analysis import profile, write_report

        path = write_report(profile(result.output), result.output / "report.html")
        print(f"report: {path}")
    verdict = failure_verdict(result.metrics, args.max_failure_rate)
    if verdict is not None:
        print(f"gym: {verdict}", file=sys.stderr)
        return EXIT_FAILURES
    return EXIT_OK


def failure_verdict(metrics: RunMetrics, max_failure_rate: float | None) -> str | None:
    """Why the run's failures make `gym eval run` exit 1, or None.

    Without `max_failure_rate`, only a run whose every rollout failed; with it, a run
    whose failed share is above it. Counted over the whole run directory (a resumed
    run's earlier rows too), as the summary is.
    """
    if metrics.n_rollouts == 0 or metrics.n_failed == 0:
        return None
    share = metrics.n_failed / metrics.n_rollouts
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(metrics.failures_by_kind.items()))
    counted = f"{metrics.n_failed} of {metrics.n_rollouts} rollouts failed ({kinds})"
    if max_failure_rate is None:
        return f"{counted}; exit status {EXIT_FAILURES}" if metrics.n_ok == 0 else None
    if share > max_failure_rate:
        return (
            f"{counted}: {100 * share:.1f}% is above --max-failure-rate {max_failure_rate:g}; "
            f"exit status {EXIT_FAILURES}"
        )
    return None


def resume_command(args: argparse.Namespace, output: Path) -> str:
    """The command that resumes this run: the one given, with `--output DIR` added when
    the directory was a default (a new timestamp each time)."""
    import shlex

    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    if args.output is None and not _config_names_output(args):
        argv += ["--output", str(output)]
    return shlex.join(["gym", *argv])


def _config_names_output(args: argparse.Namespace) -> bool:
    if args.config is None:
        return False
    try:
        config, _ = run_config(args)
    except (NemoGymError, ValueError):
        return False
    return config.output is not None


# --------------------------------------------------------------------------- list, search


def _list(args: argparse.Namespace) -> int:
    from nemo_gym.catalog import catalog_markdown, list_envs

    infos = list_envs(domain=args.domain, search_dirs=args.search_dir)
    if args.markdown:
        print(catalog_markdown(infos), end="")
        return 0
    width = max((len(info.name) for info in infos), default=4)
    domain_width = max((len(info.domain) for info in infos), default=6)
    for info in infos:
        version = f"v{info.version}" if info.version else "-"
        name, domain = f"{info.name:<{width}}", f"{info.domain:<{domain_width}}"
        print(f"{name}  {version:<3}  {domain}  {info.description}")
    domains = sorted({info.domain for info in infos})
    print(
        f"{plural(len(infos), 'environment')} in {plural(len(domains), 'domain')}: "
        f"{', '.join(domains)}"
    )
    return 0


def plural(count: int, noun: str) -> str:
    """`1 domain`, `7 domains`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _search(args: argparse.Namespace) -> int:
    from nemo_gym.cli.commands import search

    found = search(" ".join(args.query))
    if not found:
        print(f"nothing matches {' '.join(args.query)!r}", file=sys.stderr)
        return 1
    width = max(len(name) for _, name, _ in found)
    for kind, name, description in found:
        print(f"{kind:<16}  {name:<{width}}  {description}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from nemo_gym.records import rollout_json_schema

    print(json.dumps(rollout_json_schema(), indent=2, sort_keys=True))
    return 0


def _run(name: str) -> Any:
    """A handler in `nemo_gym.cli.commands`, imported when the command runs."""

    def handler(args: argparse.Namespace) -> int:
        from nemo_gym.cli import commands

        return int(getattr(commands, name)(args))

    return handler


# --------------------------------------------------------------------------- parser


class _Given(argparse.Action):
    """Stores the value and notes that the flag was given (a default is not an override
    of a config file's value)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.__dict__.setdefault("given", set()).add(self.dest)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value:g}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _add_run(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="run an evaluation (flags or a config file)",
        description=(
            "Run an evaluation into a run directory (rollouts.jsonl, failures.jsonl, "
            "metrics.json, run.json); running it again with the same --output resumes it (Ctrl-C "
            "prints that command). Several environments make "
            "a mixed run; a config file (TOML or YAML) adds weights, per-environment "
            "limits and variants. Flags given with --config override its values."
        ),
    )
    run.add_argument("envs", nargs="*", metavar="ENV", help="environment names (gym list)")
    run.add_argument("--config", metavar="FILE", help="a run config, .toml or .yaml")
    run.add_argument("--model", help=MODEL_HELP + " (default: local)")
    run.add_argument("--base-url", help="endpoint of an OpenAI/Anthropic-compatible server")
    run.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the API key (default: the SDK's own, e.g. "
        "OPENAI_API_KEY); the key is never written to disk",
    )
    run.add_argument(
        "--model-option", action="append", default=[], metavar="KEY=VALUE", help="model option"
    )
    run.add_argument(
        "--threads",
        type=_positive_int,
        help="torch threads for --model local (default: chosen by Local)",
    )
    run.add_argument("--temperature", type=float, help="sampling temperature (default 0: greedy)")
    run.add_argument("--max-tokens", type=_positive_int, help="tokens per model reply")
    run.add_argument("--limit", type=_count, help="tasks per environment")
    run.add_argument("--repeats", type=_positive_int, help="rollouts per task (default 1)")
    run.add_argument(
        "--concurrency",
        type=_positive_int,
        default=DEFAULT_CONCURRENCY,
        action=_Given,
        help=f"rollouts in flight (default {DEFAULT_CONCURRENCY})",
    )
    run.add_argument("--output", help="run directory (default runs/ENV-TIMESTAMP)")
    run.add_argument("--split", help="task split (default test)")
    run.add_argument("--seed", type=int, help="run seed; repeats derive theirs (default 0)")
    run.add_argument("--timeout", type=float, help="seconds per rollout")
    run.add_argument(
        "--success-threshold", type=float, help="reward at which a rollout passes (default 1)"
    )
    run.add_argument("--retry-failed", action="store_true", help="on resume, rerun failed rows")
    run.add_argument(
        "--max-failure-rate",
        type=_share,
        metavar="RATE",
        help="exit 1 when more than this share (0-1) of the rollouts failed (default: exit 1 "
        "only when all failed)",
    )
    run.add_argument(
        "--env-option", action="append", default=[], metavar="KEY=VALUE", help="env option"
    )
    run.add_argument("--tasks", metavar="FILE", help="task rows to run (gym dataset prepare)")
    run.add_argument(
        "--shard", metavar="INDEX/COUNT", help="run every COUNT-th task from INDEX (gym aggregate)"
    )
    run.add_argument("--report", action="store_true", help="write RUN_DIR/report.html at the end")
    run.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    run.add_argument(
        "--ray", action="store_true", help="run on Ray actors (pip install 'nemo-gym[ray]')"
    )
    run.add_argument("--workers", type=int, help="Ray actors (with --ray; default 2)")
    run.add_argument(
        "--address",
        help="Ray cluster to join (with --ray; default RAY_ADDRESS, else a local one on 127.0.0.1)",
    )
    run.set_defaults(func=_eval_run)


class _Commands:
    """Subcommands that never accept abbreviated flags (`--api-key` is not `--api-key-env`)."""

    def __init__(self, action: Any) -> None:
        self._action = action

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return self._action.add_parser(name, allow_abbrev=False, **kwargs)


def _subparsers(parser: argparse.ArgumentParser, dest: str) -> Any:
    return _Commands(parser.add_subparsers(dest=dest, required=True, metavar="COMMAND"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gym",
        description="nemo_gym: RL environments for language models, and their evaluation.",
        allow_abbrev=False,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO")
    commands = _subparsers(parser, "command")

    listing = commands.add_parser("list", help="list environments")
    listing.add_argument("--domain", help="only this domain (math, tools, code, ...)")
    listing.add_argument(
        "--search-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="also list one-file environments (NAME.py) in DIR (as NEMO_GYM_ENV_PATH does)",
    )
    listing.add_argument(
        "--markdown", action="store_true", help="print the catalog page (docs/catalog.md)"
    )
    listing.set_defaults(func=_list)

    found = commands.add_parser(
        "search",
        help="search environments, models, harnesses, verifiers and sandbox providers",
        description="Every registered name whose name or description has all the words.",
    )
    found.add_argument("query", nargs="+", help="words to look for")
    found.set_defaults(func=_search)

    commands.add_parser(
        "schema", help="print the JSON Schema of a rollouts.jsonl line"
    ).set_defaults(func=_schema)

    env = commands.add_parser("env", help="environment tools")
    env_commands = _subparsers(env, "env_command")
    validate = env_commands.add_parser(
        "validate",
        help="check a run config, a task-rows or rollouts file, or a run directory",
        description=(
            "Check a config file (.toml/.yaml: fields, names, options, the API key "
            "variable), a JSONL file of task rows or rollouts, or a run directory. Every "
            "error names the file, line and field."
        ),
    )
    validate.add_argument("path", metavar="CONFIG_OR_DATA")
    validate.set_defaults(func=_run("env_validate"))
    env_check.add_parser(env_commands)

    evaluation = commands.add_parser("eval", help="run, re-score, look at and compare evaluations")
    eval_commands = _subparsers(evaluation, "eval_command")
    _add_run(eval_commands)

    again = eval_commands.add_parser("reverify", help="re-score a run without inference")
    again.add_argument("run_dir")
    again.add_argument("--output", help="where to write (default RUN_DIR/reverified)")
    again.add_argument(
        "--judge-failed-only", action="store_true", help="re-score only judge_failed rows"
    )
    again.add_argument(
        "--trust-run-code",
        action="store_true",
        help="let run.json's import paths (`target`) be imported: only for a run you trust",
    )
    again.set_defaults(func=_run("eval_reverify"))

    for name, helptext in (
        ("profile", "per-task rates, pass@k, majority@k, distributions, and the HTML report"),
        ("diagnose", "why rollouts lose reward, per environment, with example rows"),
    ):
        sub = eval_commands.add_parser(name, help=helptext)
        sub.add_argument("run_dir")
        if name == "profile":
            sub.add_argument("--output", metavar="HTML", help="report path (RUN_DIR/report.html)")
            sub.add_argument("--no-report", action="store_true", help="print only")
        sub.add_argument(
            "--success-threshold",
            type=float,
            help="reward at which a rollout passes (default: the run's)",
        )
        sub.add_argument("--ceiling", type=float, default=1.0, help="the best reward (default 1.0)")
        sub.add_argument("--examples", type=_count, default=3, help="example rows per class")
        sub.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
        sub.add_argument("--json", action="store_true", help="print JSON")
        sub.set_defaults(func=_run(f"eval_{name}"))

    versus = eval_commands.add_parser(
        "compare",
        help="paired per-task comparison of two runs (or two variants of one)",
        description=(
            "B against A over the tasks both scored: the mean per-task difference with a "
            "percentile bootstrap interval, and the exact sign test. Deterministic given "
            "--seed."
        ),
    )
    versus.add_argument("run_a")
    versus.add_argument("run_b")
    versus.add_argument("--a-variant", help="the variant of RUN_A to compare")
    versus.add_argument("--b-variant", help="the variant of RUN_B to compare")
    versus.add_argument(
        "--metric",
        choices=("reward", "pass"),
        default="reward",
        help="per-task mean reward, or pass rate (default reward)",
    )
    versus.add_argument(
        "--success-threshold", type=float, default=1.0, help="for --metric pass (default 1)"
    )
    versus.add_argument("--confidence", type=float, default=0.95, help="interval level (0.95)")
    versus.add_argument(
        "--resamples", type=_positive_int, default=10_000, help="bootstrap resamples (10000)"
    )
    versus.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    versus.add_argument("--json", action="store_true", help="print JSON")
    versus.set_defaults(func=_run("eval_compare"))

    merge = commands.add_parser(
        "aggregate",
        help="merge shards (run directories of one run) into one run directory",
        description=(
            "Merge run directories of the same run (gym eval run --shard, or overlapping "
            "runs): each (environment, variant, task, repeat) once, metrics recomputed "
            "from the merged rows; a shard of another run is refused."
        ),
    )
    merge.add_argument("shards", nargs="+", metavar="SHARD_DIR")
    merge.add_argument("--output", required=True, metavar="DIR", help="the merged run directory")
    merge.add_argument(
        "--success-threshold", type=float, default=1.0, help="for pass@k (default 1)"
    )
    merge.set_defaults(func=_run("aggregate"))

    data = commands.add_parser("dataset", help="task rows: prepare, show, validate")
    data_commands = _subparsers(data, "dataset_command")
    prepare = data_commands.add_parser(
        "prepare",
        help="convert a Hugging Face dataset or a JSONL/JSON/CSV/Parquet file into task rows",
    )
    prepare.add_argument("source", help="a file, a datasets.save_to_disk directory, or a Hub id")
    prepare.add_argument("--output", required=True, metavar="FILE", help="task-rows JSONL")
    prepare.add_argument("--split", help="dataset split (Hub default: test)")
    prepare.add_argument("--config", dest="subset", help="dataset configuration (Hub)")
    prepare.add_argument("--prompt-field", help="field holding the prompt (default: guessed)")
    prepare.add_argument("--template", help="prompt template, as in 'Q: {question}'")
    prepare.add_argument("--messages-field", help="field holding a chat instead of a prompt")
    prepare.add_argument("--system", help="a system message for every task")
    prepare.add_argument("--answer-field", help="field holding the gold answer (guessed)")
    prepare.add_argument("--id-field", help="field holding the task id (guessed; else derived)")
    prepare.add_argument(
        "--metadata-field",
        action="append",
        default=None,
        metavar="FIELD",
        help="keep this field as metadata (repeatable; default: every other field)",
    )
    prepare.add_argument("--limit", type=_count, help="at most this many rows")
    prepare.set_defaults(func=_run("dataset_prepare"))
    show = data_commands.add_parser("show", help="print the first task rows")
    show.add_argument("path")
    show.add_argument("-n", type=_count, default=3, help="how many (default 3)")
    show.add_argument("--json", action="store_true", help="print the rows as JSON")
    show.set_defaults(func=_run("dataset_show"))
    check = data_commands.add_parser("validate", help="check task rows, naming line and field")
    check.add_argument("path")
    check.set_defaults(func=_run("dataset_validate"))
    add_sandbox_commands(commands)
    return parser


EXIT_OK = 0
"""The command did what it was asked (a run: finished, failures within bounds)."""
EXIT_FAILURES = 1
"""`gym eval run` finished, but every rollout failed (or more than --max-failure-rate)."""
EXIT_USAGE = 2
"""Bad input: a flag, a file, a name (the message names it); nothing ran."""
EXIT_INTERRUPTED = 130
"""Ctrl-C; `gym eval run` prints the command that resumes the run."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad flag (2, argparse said why)
        return int(exc.code or 0)
    args.argv = argv
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except (NemoGymError, ValueError) as exc:
        message = str(exc) if isinstance(exc, NemoGymError) else f"{type(exc).__name__}: {exc}"
        print(f"gym: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("gym: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `gym ... | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # no flush error at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
