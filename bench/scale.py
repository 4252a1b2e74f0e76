"""Scale-out, side by side in one run: the plain runner vs 1 and 2 Ray actors on the same
work. Rollouts/s, and the per-rollout cost Ray adds.

    python bench/scale.py                      # 2,000 rollouts per case, 3 rounds
    python bench/scale.py --rollouts 500 --rounds 1

Work: `Echo` tasks, single turn, an I/O-bound model (`EchoModel`, 50 ms per call) and
a CPU-bound verifier (`--verify-cpu-ms` of CPU per rollout, on the event loop, as many
real verifiers are); `--concurrency` rollouts in flight in every case (split over the
actors). Rounds are interleaved (plain, ray-1, ray-2, plain, ...) so machine noise hits
every case alike; best and median are shown. A second, empty workload (no latency, no
verifier work) isolates the overhead: wall time and driver CPU per rollout, plain vs
one actor. Actors start before the clock starts (their start-up is shown apart). A
local Ray session on 127.0.0.1 is started for the run and shut down at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import nemo_gym as gym
from nemo_gym.integrations import ray as gym_ray
from nemo_gym.testing.synthetic import Echo, EchoModel


def _cpu_s(pids: list[int | None]) -> float:
    """User + system CPU seconds of these (local) processes so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        if pid is None:
            continue
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


async def _drain(
    stream: AsyncIterator[gym.Rollout], n: int, actors: list[int | None]
) -> tuple[float, float, float]:
    """(wall s, this process's CPU s, the actors' CPU s) to consume `n` ok rollouts."""
    wall, cpu, actor_cpu = time.perf_counter(), time.process_time(), _cpu_s(actors)
    count = 0
    async with aclosing(stream):
        async for rollout in stream:
            assert rollout.ok, rollout.failure
            count += 1
    assert count == n, f"{count} rollouts for {n}"
    return time.perf_counter() - wall, time.process_time() - cpu, _cpu_s(actors) - actor_cpu


async def _case(
    name: str, env: Echo, model: EchoModel, n: int, concurrency: int, pools: dict[str, Any]
) -> tuple[float, float, float]:
    if name == "plain":
        stream = gym.rollouts(env, model, limit=n, concurrency=concurrency, keep_open=True)
        return await _drain(stream, n, [])
    return await _drain(pools[name].rollouts(limit=n), n, pools[name].pids())


def _row(label: str, rates: list[float]) -> str:
    return f"  {label:<10} {max(rates):8.0f} /s   (median {statistics.median(rates):.0f})"


async def main(args: argparse.Namespace) -> None:
    n, concurrency = args.rollouts, args.concurrency
    cases = ["plain", "ray-1", "ray-2"]
    work = (
        Echo(n=n, verify_cpu_s=args.verify_cpu_ms / 1000),
        EchoModel(latency_s=args.latency_ms / 1000),
    )
    empty = (Echo(n=n), EchoModel())
    print(
        f"{n:,} rollouts per case, concurrency {concurrency}, {args.rounds} round(s); "
        f"model {args.latency_ms:.0f} ms per call, verifier {args.verify_cpu_ms:.1f} ms CPU; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    results: dict[str, dict[str, list[tuple[float, float, float]]]] = {"work": {}, "empty": {}}
    with gym_ray.session(num_cpus=max(2, os.cpu_count() or 2)):
        for label, (env, model) in (("work", work), ("empty", empty)):
            pools: dict[str, Any] = {}
            started = time.perf_counter()
            for workers in (1, 2):
                pool = gym_ray.RayPool(env, model, workers=workers, concurrency=concurrency)
                pools[f"ray-{workers}"] = await pool.start()
            startup = time.perf_counter() - started
            try:
                for name in cases:  # warm-up: imports, JIT-free but cache-warm
                    await _case(name, env, model, min(200, n), concurrency, pools)
                for _ in range(args.rounds):
                    for name in cases:
                        got = await _case(name, env, model, n, concurrency, pools)
                        results[label].setdefault(name, []).append(got)
            finally:
                for pool in pools.values():
                    await pool.aclose()
            print(f"({label}: 3 actors started in {startup:.1f}s, before the clock)")

    work_rates = {k: [n / got[0] for got in v] for k, v in results["work"].items()}
    print("I/O-bound model + CPU-bound verifier: rollouts/s, best of rounds")
    for name in cases:
        print(_row(name, work_rates[name]))
    plain, one, two = (max(work_rates[c]) for c in cases)
    print(f"  ray-2 / plain {two / plain:.2f}x, ray-2 / ray-1 {two / one:.2f}x")

    def per_rollout(name: str) -> tuple[float, float, float]:
        best = min(results["empty"][name])  # the round with the least wall time
        return best[0] / n * 1e6, best[1] / n * 1e6, best[2] / n * 1e6

    print("Empty rollouts (no latency, no verifier work), µs per rollout, best round:")
    print(f"  {'':<10} {'wall':>8} {'driver CPU':>11} {'actors CPU':>11} {'all CPU':>9}")
    for name in cases:
        wall, driver, actors = per_rollout(name)
        print(f"  {name:<10} {wall:8.0f} {driver:11.0f} {actors:11.0f} {driver + actors:9.0f}")
    plain_cpu = sum(per_rollout("plain")[1:])
    ray_cpu = sum(per_rollout("ray-1")[1:])
    print(
        f"  Ray adds {ray_cpu - plain_cpu:+.0f} µs of CPU per rollout (driver + actor, one "
        f"actor vs plain: dispatch, pickling, the stream back); with work on the "
        f"rollouts above, ray-1 vs plain costs {(1 / one - 1 / plain) * 1e6:+.0f} µs of wall "
        "time per rollout"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--verify-cpu-ms", type=float, default=2.0)
    asyncio.run(main(parser.parse_args()))
