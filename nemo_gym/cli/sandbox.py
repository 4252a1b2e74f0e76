"""`gym sandbox ...`: check a provider against the conformance suite, reap orphans.

    gym sandbox check PROVIDER [--option KEY=VALUE ...] [--image IMAGE] [--checks a,b]
    gym sandbox reap PROVIDER [--team T --user U --workload W] [--run R] [--dead-owners-only]

`check` runs `nemo_gym.sandbox.conformance` against the real provider (for a remote
service: with the user's credentials, starting real sandboxes). `reap` deletes the
sandboxes of a remote provider labelled with this team, user and workload (and run)
that no process here holds: what a killed trainer left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from nemo_gym.errors import ConfigError

__all__ = ["add_sandbox_commands", "sandbox_check", "sandbox_reap"]


def add_sandbox_commands(commands: Any) -> None:
    """Add `sandbox check` and `sandbox reap` to the `gym` parser's subcommands."""
    sandbox = commands.add_parser("sandbox", help="sandbox providers: conformance check, reap")
    sub = sandbox.add_subparsers(dest="sandbox_command", required=True, metavar="COMMAND")

    check = sub.add_parser(
        "check",
        allow_abbrev=False,
        help="run the conformance suite against a provider (real sandboxes)",
    )
    _common(check)
    check.add_argument("--image", help="the image of every sandbox (SandboxSpec.image)")
    check.add_argument(
        "--checks",
        help="comma-separated checks to run (default: all); see docs/sandbox-providers.md",
    )
    check.set_defaults(func=sandbox_check)

    reap = sub.add_parser(
        "reap",
        allow_abbrev=False,
        help="delete a remote provider's sandboxes left by killed trainers (found by label)",
    )
    _common(reap)
    for key in ("team", "user", "workload"):
        reap.add_argument(f"--{key}", help=f"the {key} label (default: NEMO_GYM_{key.upper()})")
    reap.add_argument("--run", help="only this run's sandboxes (default: every run)")
    reap.add_argument(
        "--dead-owners-only",
        action="store_true",
        help="only those whose owner process on this host is gone (what a start does)",
    )
    reap.set_defaults(func=sandbox_reap)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", help="a registered sandbox provider name (gym search sandbox)")
    parser.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a provider option (VALUE read as JSON, else as a string); repeatable",
    )


def _options(pairs: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--option {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


def sandbox_check(args: argparse.Namespace) -> int:
    import nemo_gym.sandbox
    from nemo_gym.records import SandboxSpec
    from nemo_gym.sandbox.conformance import self_check

    options = _options(args.option)
    provider = nemo_gym.sandbox.get(args.provider, **options)
    checks = [c.strip() for c in args.checks.split(",") if c.strip()] if args.checks else None

    async def main() -> list[Any]:
        try:
            return await self_check(
                provider,
                SandboxSpec(image=args.image),
                checks=checks,
                provider_ref=args.provider,
                options=options,
            )
        finally:
            aclose = getattr(provider, "aclose", None)
            if aclose is not None:
                await aclose()

    outcomes = asyncio.run(main())
    for outcome in outcomes:
        note = f"  {outcome.message}" if outcome.message else ""
        print(f"{outcome.status:8} {outcome.name:18} {outcome.duration_s:6.1f}s{note}")
    failed = [o.name for o in outcomes if o.status == "failed"]
    print(f"{args.provider}: {len(outcomes) - len(failed)} of {len(outcomes)} checks not failed")
    return 1 if failed else 0


def sandbox_reap(args: argparse.Namespace) -> int:
    import nemo_gym.sandbox

    options = _options(args.option)
    labels = {k: getattr(args, k) for k in ("team", "user", "workload") if getattr(args, k)}
    if labels:
        options["labels"] = {**options.get("labels", {}), **labels}
    provider = nemo_gym.sandbox.get(args.provider, **options)
    reap = getattr(provider, "reap", None)
    if reap is None:
        raise ConfigError(
            f"sandbox provider {args.provider!r} keeps no labelled sandboxes to reap "
            "(only remote providers do)"
        )
    reaped = asyncio.run(reap(dead_owners_only=args.dead_owners_only, run=args.run))
    for sandbox_id in reaped:
        print(sandbox_id)
    print(f"{args.provider}: reaped {len(reaped)} sandboxes")
    return 0
