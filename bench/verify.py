"""Benchmark the verifiers: `python bench/verify.py` prints one table.

1. Math, on both labelled corpora (tests/verify/data/math_pairs.jsonl, 320 pairs, and
   math_adversarial.jsonl, the classes where graders go wrong): our verifier (fast path
   + math-verify in the pool) against math-verify's documented parse + verify for every
   pair in a worker of the same kind of pool: accuracy and pairs/s for each.
2. Worst-case latency on pathological inputs: how far past its deadline a call returns.
3. Multiple choice, on both labelled corpora (mcqa_outputs.jsonl, mcqa_adversarial.jsonl):
   extraction accuracy of `nemo_gym.verify.extract.extract_choice` against the usual
   regex chain (the "answer is (X)" / "Answer: X" / last capital letter fallbacks of
   common eval harnesses), and microseconds per call (the best of 5 rounds), on the
   replies and on long ones.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nemo_gym.verify.extract import extract_choice  # noqa: E402
from nemo_gym.verify.math import verify_math  # noqa: E402
from nemo_gym.verify.pool import VerifierError, WorkerPool  # noqa: E402

DATA = ROOT / "tests" / "verify" / "data"
MATH_CORPORA = ("math_pairs.jsonl", "math_adversarial.jsonl")
MCQ_CORPORA = ("mcqa_outputs.jsonl", "mcqa_adversarial.jsonl")
WORKERS = 2
DEADLINE = 1.0
BASELINE_MODULE = Path(__file__).stem

Line = tuple[str, str, str]


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


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


async def bench_math(name: str, rows: list[dict]) -> tuple[list[Line], float]:
    slow = 0

    async def ours(pool: WorkerPool, row: dict) -> bool:
        nonlocal slow
        result = await verify_math(row["prediction"], row["gold"], pool=pool, timeout=30)
        slow += result.path == "math_verify"
        return result.correct

    async def theirs(pool: WorkerPool, row: dict) -> bool:
        try:
            return await pool.call(
                f"{BASELINE_MODULE}:baseline_check", row["gold"], row["prediction"], timeout=30
            )
        except VerifierError:
            return False

    lines = []
    rates = []
    for label, judge in (("math-verify in a worker", theirs), ("nemo_gym MathVerifier", ours)):
        # A fresh pool each, so that neither profits from the other's warm sympy caches.
        # This script's directory is on the workers' path: they import it as `verify`.
        pool = WorkerPool(size=WORKERS, preload=("nemo_gym.verify._math_worker", BASELINE_MODULE))
        try:
            # Start every worker before the clock (the same for both sides): a pair that
            # never leaves the fast path would otherwise leave the start-up in the timing.
            await asyncio.gather(*(pool.call("os:getpid", timeout=60) for _ in range(WORKERS)))
            warm = [{"prediction": "\\boxed{\\sin x}", "gold": "\\sin x"}] * WORKERS
            await asyncio.gather(*(judge(pool, r) for r in warm))
            slow = 0
            started = time.perf_counter()
            verdicts = await asyncio.gather(*(judge(pool, r) for r in rows))
            elapsed = time.perf_counter() - started
        finally:
            pool.close()
        right = sum(v == r["expected"] for v, r in zip(verdicts, rows, strict=True))
        rates.append(len(rows) / elapsed)
        note = f"accuracy {right}/{len(rows)} ({100 * right / len(rows):.1f}%)"
        if judge is ours:
            note += f"; {slow} pairs ({100 * slow / len(rows):.1f}%) reached math-verify"
        lines.append((f"math {name}: {label}", f"{len(rows) / elapsed:,.0f} pairs/s", note))
    return lines, rates[1] / rates[0]


PATHOLOGICAL = [
    ("power tower", "\\boxed{9^{9^{9^{9}}}}", "\\sqrt{2}"),
    ("huge factorial", "\\boxed{(10^{8})!}", "\\sqrt{3}"),
    ("nested radicals", "\\boxed{" + "\\sqrt{2+" * 60 + "2" + "}" * 60 + "}", "\\pi"),
]


async def bench_deadline() -> list[Line]:
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


# The usual regex chain of eval harnesses: "answer is (X)", then "Answer: X", then the
# last standalone capital letter among the options.
_ANSWER_IS = re.compile(r"(?i)answer is:?\s*\(?\**([A-Z])\b")
_ANSWER_COLON = re.compile(r"(?i)answer\s*:\s*\**\s*\(?([A-Z])\b")


def usual_regex_choice(text: str, letters: str) -> str | None:
    for pattern in (_ANSWER_IS, _ANSWER_COLON):
        found = [m.group(1).upper() for m in pattern.finditer(text)]
        found = [f for f in found if f in letters]
        if found:
            return found[-1]
    capitals = re.findall(rf"\b([{letters}])\b", text)
    return capitals[-1] if capitals else None


_PREFIX = (
    "Let's analyze each option carefully. Option A ignores friction, which matters here; "
    "option B double counts the normal force, and the remaining options need the energy "
    "balance. Writing it out: the work done equals the change in kinetic energy. "
) * 8


def bench_mcqa() -> list[Line]:
    lines = []
    for name in MCQ_CORPORA:
        rows = load(name)
        ours = sum(
            extract_choice(r["text"], letters=r["letters"], options=r.get("options"))
            == r["expected"]
            for r in rows
        )
        usual = sum(usual_regex_choice(r["text"], r["letters"]) == r["expected"] for r in rows)
        lines.append(
            (
                f"mcqa {name}: extract_choice",
                f"{100 * ours / len(rows):.1f}%",
                f"{ours}/{len(rows)} replies; the usual regexes {usual}/{len(rows)} "
                f"({100 * usual / len(rows):.1f}%)",
            )
        )
    rows = load(MCQ_CORPORA[0]) + load(MCQ_CORPORA[1])
    for label, texts in (
        ("replies as written", [(r["text"], r["letters"]) for r in rows]),
        ("long replies (~2 KB)", [(_PREFIX + r["text"], r["letters"]) for r in rows]),
    ):
        # The best of 5 rounds over every reply (timeit's rule): on a shared machine the
        # mean measures the neighbours as much as the extractor.
        rounds = []
        for _ in range(5):
            started = time.perf_counter()
            for text, letters in texts:
                extract_choice(text, letters=letters)
            rounds.append((time.perf_counter() - started) / len(texts))
        per_call = min(rounds) * 1e6
        size = sum(len(t) for t, _ in texts) // len(texts)
        note = f"best of 5 rounds of {len(texts)} replies, mean {size} chars, target < 50 us"
        lines.append((f"mcqa extract_choice: {label}", f"{per_call:.1f} us/call", note))
    return lines


def main() -> None:
    lines: list[Line] = []
    speedups = []
    for name in MATH_CORPORA:
        found, speedup = asyncio.run(bench_math(name, load(name)))
        lines += found
        speedups.append(f"{name} {speedup:.1f}x")
    lines += asyncio.run(bench_deadline())
    lines += bench_mcqa()
    width = max(len(a) for a, _, _ in lines)
    print(f"{'measure'.ljust(width)}  {'value':>16}  notes")
    for a, b, c in lines:
        print(f"{a.ljust(width)}  {b:>16}  {c}")
    print(f"speed-up over math-verify: {', '.join(speedups)} (workers: {WORKERS})")


if __name__ == "__main__":
    main()
