"""`gym env check NAME [--hacks]`: `check_env` from the command line."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(commands: Any) -> None:
    """Register `check` under `gym env`."""
    check = commands.add_parser(
        "check",
        help="check an environment (check_env); --hacks runs the reward-hacking suite",
        description=(
            "Run check_env on a registered environment: tasks, ids, splits, episodes, "
            "tools, the oracle and a wrong reply, determinism. With --hacks, also every "
            "reward-hack class that applies (nemo_gym.testing.hacks): the check fails when "
            "one scores above what a wrong reply scores. Exit status 1 when a check fails."
        ),
    )
    check.add_argument("name", help="a registered environment name (gym list)")
    check.add_argument(
        "--env-option", action="append", default=[], metavar="KEY=VALUE", help="env option"
    )
    check.add_argument("--hacks", action="store_true", help="run the reward-hacking suite")
    check.add_argument(
        "--hack-tasks", type=int, default=2, metavar="N", help="tasks the hacks run on (2)"
    )
    check.add_argument(
        "--provider", default="local", help="sandbox provider for hack agents (local)"
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=env_check)


def env_check(args: argparse.Namespace) -> int:
    from nemo_gym.catalog import make
    from nemo_gym.checker import check_env
    from nemo_gym.cli.main import parse_options

    env = make(args.name, **parse_options(args.env_option))
    report = check_env(
        env,
        raise_on_error=False,
        hacks=args.hacks,
        hack_tasks=args.hack_tasks,
        provider=args.provider,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "env": report.env,
                    "ok": report.ok,
                    "passed": report.passed,
                    "notes": report.notes,
                    "problems": [vars(p) for p in report.problems],
                    "hacks": [
                        {
                            "hack": h.hack,
                            "score": h.score,
                            "baseline": h.baseline,
                            "tasks": h.tasks,
                            "beats_baseline": h.beats_baseline,
                            "example": h.example,
                        }
                        for h in report.hacks
                    ],
                },
                indent=1,
            )
        )
    else:
        print(report)
        for hack in report.hacks:
            verdict = "BEATS the wrong reply" if hack.beats_baseline else "ok"
            print(
                f"  hack {hack.hack}: {hack.score:g} (wrong reply {hack.baseline:g}, "
                f"{hack.tasks} task(s)) {verdict}"
            )
    return 0 if report.ok else 1
