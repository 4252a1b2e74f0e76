"""Benchmark the verifiers: `python bench/verify.py` prints one table.

1. Math throughput on the labelled corpus (tests/verify/data/math_pairs.jsonl): our
   verifier (fast path + math-verify in the pool) against math-verify's parse + verify
   for every pair in a worker of the same kind of pool, and the accuracy of each.
2. Worst-case latency on pathological inputs: how far past its deadline a call returns.
3. Multiple-choice extraction time per call (`nemo_gym.verify.mcqa.extract_choice`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nemo_gym.verify.math import verify_math  # noqa: E402
from nemo_gym.verify.pool import VerifierError, WorkerPool  # noqa: E402

CORPUS = ROOT / "tests" / "verify" / "data" / "math_pairs.jsonl"
WORKERS = 2
DEADLINE = 1.0
BASELINE_MODULE = Path(__file__).stem


def baseline_check(gold: str, prediction: str) -> bool:
    """math-verify as documented: parse both, verify (runs inside a pool worker)."""
    from math_verify import parse, verify

    return bool(
        verify(
            parse(f"\\boxed{{{gold}}}", parsing_timeout=None),
            parse(prediction, parsing_timeout=None),
            timeout_seconds=None,
        )
    )


async def bench_math(rows: list[dict]) -> list[tuple[str, str, str]]:
    async def ours(pool: WorkerPool, row: dict) -> bool:
        result = await verify_math(row["prediction"], row["gold"], pool=pool, timeout=30)
        return result.correct

    async def theirs(pool: WorkerPool, row: dict) -> bool:
        try:
            return await pool.call(
                f"{BASELINE_MODULE}:baseline_check", row["gold"], row["prediction"], timeout=30
            )
        except VerifierError:
            return False

    lines = []
    for name, judge in (("math_verify in a worker", theirs), ("nemo_gym MathVerifier", ours)):
        # A fresh pool each, so that neither profits from the other's warm sympy caches.
        # This script's directory is on the workers' path: they import it as `verify`.
        pool = WorkerPool(size=WORKERS, preload=("nemo_gym.verify._math_worker", BASELINE_MODULE))
        try:
            # Start every worker before the clock (the same for both sides): a pair that
            # never leaves the fast path would otherwise leave the start-up in the timing.
            await asyncio.gather(*(pool.call("os:getpid", timeout=60) for _ in range(WORKERS)))
            warm = [{"prediction": "\\boxed{\\sin x}", "gold": "\\sin x"}] * WORKERS
            await asyncio.gather(*(judge(pool, r) for r in warm))
            started = time.perf_counter()
            verdicts = await asyncio.gather(*(judge(pool, r) for r in rows))
            elapsed = time.perf_counter() - started
        finally:
            pool.close()
        right = sum(v == r["expected"] for v, r in zip(verdicts, rows, strict=True))
        lines.append(
            (
                f"math throughput: {name}",
                f"{len(rows) / elapsed:,.0f} pairs/s",
                f"accuracy {right}/{len(rows)} ({100 * right / len(rows):.1f}%)",
            )
        )
    return lines


PATHOLOGICAL = [
    ("power tower", "\\boxed{9^{9^{9^{9}}}}", "\\sqrt{2}"),
    ("huge factorial", "\\boxed{(10^{8})!}", "\\sqrt{3}"),
    ("nested radicals", "\\boxed{" + "\\sqrt{2+" * 60 + "2" + "}" * 60 + "}", "\\pi"),
]


async def bench_deadline() -> list[tuple[str, str, str]]:
    pool = WorkerPool(size=1, preload=("nemo_gym.verify._math_worker",))
    lines = []
    try:
        await pool.call("os:getpid", timeout=60)
        for name, prediction, gold in PATHOLOGICAL:
            started = time.perf_counter()
            outcome = "answered"
            try:
                await verify_math(prediction, gold, pool=pool, timeout=DEADLINE)
            except VerifierError as exc:
                outcome = exc.code
            over = (time.perf_counter() - started - DEADLINE) * 1000
            lines.append((f"deadline {DEADLINE:g}s: {name}", f"{over:+.1f} ms", outcome))
            await asyncio.sleep(0.2)  # let a replacement worker come up
    finally:
        pool.close()
    return lines


def bench_mcqa() -> list[tuple[str, str, str]]:
    try:
        from nemo_gym.verify.mcqa import extract_choice
    except ImportError as exc:
        return [("mcqa extract_choice", "skipped", f"not available: {exc}")]
    texts = [
        "Let me think. Option B is wrong because... so the answer is (C).",
        "**Answer: D**",
        "The correct choice is A." + " Some reasoning." * 50,
        "I am not sure.",
    ]
    calls = 20_000
    started = time.perf_counter()
    for i in range(calls):
        extract_choice(texts[i % len(texts)])
    per_call = (time.perf_counter() - started) / calls * 1e6
    return [("mcqa extract_choice", f"{per_call:.1f} us/call", f"{calls} calls, target < 50 us")]


def main() -> None:
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    lines = asyncio.run(bench_math(rows))
    lines += asyncio.run(bench_deadline())
    lines += bench_mcqa()
    width = max(len(a) for a, _, _ in lines)
    print(f"{'measure'.ljust(width)}  {'value':>16}  notes")
    for a, b, c in lines:
        print(f"{a.ljust(width)}  {b:>16}  {c}")
    theirs, ours = (float(lines[i][1].split()[0].replace(",", "")) for i in (0, 1))
    print(f"speed-up: {ours / theirs:.1f}x  (pairs: {len(rows)}, workers: {WORKERS})")


if __name__ == "__main__":
    main()
