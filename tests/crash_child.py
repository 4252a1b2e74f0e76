"""The process tests/test_crash_resume.py SIGKILLs: `collect` over a faulty synthetic env.

    python tests/crash_child.py RUN_DIR PHASE_FILE ROLLOUTS

Writes the phase it is in (startup, scan, run, metrics, done) to PHASE_FILE, so the
test knows where each kill landed.
"""

from __future__ import annotations

import os
import sys

run_dir, phase_file, rollouts = sys.argv[1], sys.argv[2], int(sys.argv[3])
_fd = os.open(phase_file, os.O_WRONLY | os.O_CREAT, 0o644)


def mark(phase: str) -> None:
    os.pwrite(_fd, phase.ljust(16).encode(), 0)


mark("startup")

import asyncio  # noqa: E402
import importlib  # noqa: E402

from nemo_gym.testing import faults  # noqa: E402
from nemo_gym.testing.synthetic import Echo, EchoModel, MemoryProvider  # noqa: E402

collect_module = importlib.import_module("nemo_gym.collect")
real_scan, real_finish = collect_module._scan, collect_module.write_metrics


def scan(*args, **kwargs):  # type: ignore[no-untyped-def]
    mark("scan")
    done = real_scan(*args, **kwargs)
    mark("run")
    return done


def finish(*args, **kwargs):  # type: ignore[no-untyped-def]
    mark("metrics")
    return real_finish(*args, **kwargs)


collect_module._scan, collect_module.write_metrics = scan, finish

RATES = {name: rate for name, rate in faults.MIXED.items() if not name.endswith(".hang")}


async def main() -> None:
    plan = faults.FaultPlan(seed=11, rates=RATES, slow_s=0.01)
    provider = plan.wrap_provider(MemoryProvider())
    # 2 KB of prompt: rows of ~5 KB, so a file of thousands takes a while to scan.
    env = plan.wrap_env(Echo(n=rollouts // 2, tools=True, provider=provider, prompt_bytes=2048))
    model = plan.wrap_model(EchoModel(latency_s=0.01, jitter_s=0.02))
    await collect_module.collect(env, model, output=run_dir, repeats=2, concurrency=64, timeout=5)


asyncio.run(main())
mark("done")
