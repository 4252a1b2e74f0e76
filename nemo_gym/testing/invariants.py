"""An invariant suite any environment runs against itself: every rollout accounted for
exactly once, every failure classified, memory flat — under every fault at once.

From pytest, subclass `InvariantSuite`:

```python
from nemo_gym.testing.invariants import InvariantSuite

class TestMyEnvInvariants(InvariantSuite):
    env = "my_package.envs:MyEnv"     # "module:attr" or a registered name
    options = {"difficulty": 2}       # its keyword arguments
```

or, from a script or notebook, `report = await check_invariants(make_env)` and
`report.raise_for_violations()`. For a soak at scale:
`python -m nemo_gym.testing.invariants --rollouts 1000000` (`--env module:attr`).

The environment is wrapped in `faults.FaultyEnv` and the model (default `EchoModel`,
which calls every tool once, then answers, 0.5-1.5 s per call) in `faults.FaultyModel`,
with the `MIXED` rates, and run through `collect` at high concurrency with a rollout
timeout. Checked:

- each (task, repeat) exactly once in the stream and exactly once in the file;
- every failure carries a kind, code, phase and error type, and is the one the fault
  injected into that rollout must produce (`faults.FAULTS`); no failure without a
  fault (unless `allow_unexplained`);
- an ok rollout has a finite reward, a failed one none;
- `metrics.json` and the returned metrics equal a count made here from the rows, and
  `failures.jsonl` holds exactly the failed rows;
- episodes opened == closed (sandboxes too, where the faulty provider counts them);
- no asyncio task, child process or file descriptor left behind;
- RSS bounded: growth per rollout after the first quarter, and in total;
- a slow consumer: rollouts started but not yet consumed never exceed `concurrency`;
- a consumer that stops early: every episode opened is closed.

The environment's tasks must be the same each time it is built; the suite runs
`ceil(rollouts / tasks)` repeats of up to `rollouts` of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import math
import os
import tempfile
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, get_args

from nemo_gym.errors import ConfigError, FailureKind
from nemo_gym.lifecycle import close_all
from nemo_gym.protocols import Environment, Model
from nemo_gym.records import Rollout
from nemo_gym.spec import Kind
from nemo_gym.testing import faults

__all__ = ["InvariantReport", "InvariantSuite", "Violation", "check_invariants"]

_KINDS = frozenset(get_args(FailureKind))
_PHASES = frozenset({"open", "harness", "verify", "close"})
_MIX = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1
_EXAMPLES = 5


def _task_hash(task_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(task_id.encode(), digest_size=8).digest(), "big")


def _key_hash(task_hash: int, repeat: int) -> int:
    """A 64-bit hash of (task, repeat) (splitmix64 finaliser), as a signed int for array('q')."""
    z = (task_hash + (repeat + 1) * _MIX) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return z - (1 << 64) if z >= 1 << 63 else z


def key_hash(task_id: str, repeat: int) -> int:
    """The suite's 64-bit key for one rollout."""
    return _key_hash(_task_hash(task_id), repeat)


@dataclass
class Violation:
    """One invariant broken: which, how often, and a few examples."""

    check: str
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        shown = "".join(f"\n      {e}" for e in self.examples)
        return f"{self.check}: {self.count}{shown}"


@dataclass
class InvariantReport:
    """What a run of the suite saw: sizes, timings, memory, faults, and violations."""

    rollouts: int = 0
    tasks: int = 0
    repeats: int = 0
    concurrency: int = 0
    seconds: float = 0.0
    rss_start_mb: float = 0.0
    rss_stream_peak_mb: float = 0.0
    rss_quarter_mb: float = 0.0
    rss_end_mb: float = 0.0
    rss_peak_mb: float = 0.0
    max_in_flight: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    violations: dict[str, Violation] = field(default_factory=dict)
    output: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    def violate(self, check: str, example: str) -> None:
        found = self.violations.setdefault(check, Violation(check))
        found.count += 1
        if len(found.examples) < _EXAMPLES:
            found.examples.append(example)

    def raise_for_violations(self) -> None:
        """Raise `AssertionError` listing every violation (nothing when there is none)."""
        if self.violations:
            raise AssertionError(str(self))

    @property
    def growth_per_rollout_bytes(self) -> float:
        """RSS growth per rollout from the first quarter of the run to its end."""
        later = self.rollouts - self.rollouts // 4
        return (self.rss_end_mb - self.rss_quarter_mb) * 2**20 / max(1, later)

    def __str__(self) -> str:
        failed = sum(v for k, v in self.outcomes.items() if k != "ok")
        lines = [
            f"{self.rollouts:,} rollouts ({self.tasks:,} tasks x {self.repeats}) at "
            f"concurrency {self.concurrency} in {self.seconds:.1f}s "
            f"({self.rollouts / max(self.seconds, 1e-9):,.0f}/s); {failed:,} failed; "
            f"{sum(self.injected.values()):,} faults injected",
            f"RSS {self.rss_start_mb:.0f} MB -> {self.rss_stream_peak_mb:.0f} MB at most while "
            f"streaming (+{self.rss_stream_peak_mb - self.rss_start_mb:.0f} MB; "
            f"{self.growth_per_rollout_bytes:.0f} B per rollout after the first quarter), "
            f"{self.rss_peak_mb:.0f} MB at most with the metrics pass and the checks; "
            f"at most {self.max_in_flight} episodes open at once",
        ]
        if self.violations:
            lines.append(f"{len(self.violations)} invariant(s) broken:")
            lines.extend(f"  {v}" for v in self.violations.values())
        else:
            lines.append("every invariant held")
        return "\n".join(lines)


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _PeakRss:
    """The highest RSS seen while the block runs (a thread samples it every 20 ms)."""

    def __init__(self) -> None:
        self.peak = _rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="nemo_gym-rss", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss_mb())

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, _rss_mb())


def _children() -> dict[int, str]:
    """Live child processes of this process: pid -> command line."""
    me = os.getpid()
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if int(fields[1]) != me:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                found[int(entry)] = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
    return found


def _fds() -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
    return found


@contextlib.contextmanager
def _quiet(quiet: bool) -> Iterator[None]:
    """Silence the retry warnings the faults cause (thousands of lines), then restore."""
    logger = logging.getLogger("nemo_gym.models.base")
    runner = logging.getLogger("nemo_gym.runner")
    before = (logger.level, runner.level)
    if quiet:
        logger.setLevel(logging.ERROR)
        runner.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(before[0])
        runner.setLevel(before[1])


def _sorted(values: array[int]) -> list[int]:
    return sorted(values)


def _compare_keys(report: InvariantReport, check: str, expected: list[int], got: list[int]) -> None:
    if got == expected:
        return
    duplicates = sum(1 for a, b in itertools.pairwise(got) if a == b)
    want, have = Counter(expected), Counter(got)
    missing = sum((want - have).values())
    extra = sum((have - want).values())
    report.violate(
        check,
        f"{len(got):,} rollouts for {len(expected):,} (task, repeat) pairs: "
        f"{duplicates:,} duplicated, {missing:,} missing, {extra:,} not asked for",
    )


def _check_rollout(report: InvariantReport, where: str, rollout: Rollout) -> None:
    name = f"{where} {rollout.task_id}#{rollout.repeat}"
    if rollout.ok:
        rewards = rollout.rewards
        if rewards is None or rollout.failure is not None:
            report.violate("ok rollouts have a finite reward", f"{name}: no rewards")
            return
        values = [rewards.reward, *rewards.components.values()]
        if not all(isinstance(v, float | int) and math.isfinite(v) for v in values):
            report.violate("ok rollouts have a finite reward", f"{name}: {rewards!r}")
        return
    failure = rollout.failure
    if rollout.rewards is not None or rollout.reward is not None:
        report.violate("failed rollouts have no reward", f"{name}: {rollout.rewards!r}")
    if failure is None:
        report.violate("failures are classified", f"{name}: failed with no Failure")
        return
    if (
        failure.kind not in _KINDS
        or not failure.code
        or failure.where not in _PHASES
        or not failure.error_type
    ):
        report.violate("failures are classified", f"{name}: {failure!r}")


def _check_row(report: InvariantReport, where: str, row: Mapping[str, Any]) -> None:
    name = f"{where} {row.get('task_id')}#{row.get('repeat')}"
    rewards = row.get("rewards")
    if row.get("status") == "ok":
        reward = rewards.get("reward") if isinstance(rewards, Mapping) else None
        if not isinstance(reward, float | int) or not math.isfinite(reward):
            report.violate("ok rows have a finite reward", f"{name}: rewards {rewards!r}")
    elif rewards is not None or not isinstance(row.get("failure"), Mapping):
        report.violate("failed rows have a failure and no reward", f"{name}")


class _Counts:
    """The numbers metrics must show, counted here from the rows (no code shared with
    `nemo_gym.metrics`), in a few bytes per row."""

    def __init__(self) -> None:
        self.by_kind: Counter[str] = Counter()
        self.by_code: Counter[str] = Counter()
        self.rewards = array("d")
        self.tasks = array("q")
        self.n = 0

    def add(self, row: Mapping[str, Any]) -> None:
        self.n += 1
        self.tasks.append(_task_hash(str(row.get("task_id"))) - (1 << 63))
        try:
            if row["status"] == "ok":
                self.rewards.append(float(row["rewards"]["reward"]))
            else:
                self.by_kind[row["failure"]["kind"]] += 1
                self.by_code[row["failure"]["code"]] += 1
        except (KeyError, TypeError, ValueError):
            pass  # a malformed row: _check_row reports it

    def result(self) -> dict[str, Any]:
        n_ok = len(self.rewards)
        return {
            "n_rollouts": self.n,
            "n_ok": n_ok,
            "n_failed": self.n - n_ok,
            "n_tasks": len(set(self.tasks)),
            "failures_by_kind": dict(self.by_kind),
            "failures_by_code": dict(self.by_code),
            "reward_mean": math.fsum(self.rewards) / n_ok if n_ok else None,
        }


def _compare_metrics(report: InvariantReport, what: str, counted: dict[str, Any], got: Any) -> None:
    for name in ("n_rollouts", "n_ok", "n_failed", "n_tasks"):
        if getattr(got, name) != counted[name]:
            report.violate(
                "metrics equal the rows",
                f"{what}.{name} = {getattr(got, name)}, rows say {counted[name]}",
            )
    for name in ("failures_by_kind", "failures_by_code"):
        if dict(getattr(got, name)) != counted[name]:
            report.violate(
                "metrics equal the rows",
                f"{what}.{name} = {getattr(got, name)}, rows say {counted[name]}",
            )
    stats = got.rewards.get("reward")
    mean = stats.mean if stats is not None else None
    expected = counted["reward_mean"]
    if (mean is None) != (expected is None) or (
        mean is not None and not math.isclose(mean, expected, rel_tol=1e-9, abs_tol=1e-12)
    ):
        report.violate("metrics equal the rows", f"{what} reward mean {mean}, rows say {expected}")


def _iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise AssertionError(f"{path}:{number}: not JSON ({exc})") from exc


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


EnvFactory = Callable[[], Environment] | Callable[[faults.FaultPlan], Environment]


def _build_env(make_env: EnvFactory, plan: faults.FaultPlan) -> Environment:
    """`make_env()`, or `make_env(plan)` when it takes an argument (to wrap the sandbox
    providers it builds with `plan.wrap_provider`); then wrapped in the plan's faults."""
    import inspect

    try:
        takes_plan = bool(inspect.signature(make_env).parameters)
    except (TypeError, ValueError):
        takes_plan = False
    env = make_env(plan) if takes_plan else make_env()  # type: ignore[call-arg]
    return plan.wrap_env(env)


def _default_model() -> Model:
    from nemo_gym.testing.synthetic import EchoModel

    # Slow enough that thousands of rollouts are in flight at once, jittered so they
    # finish in another order than they started.
    return EchoModel(latency_s=0.5, jitter_s=1.0)


async def check_invariants(
    make_env: EnvFactory,
    make_model: Callable[[], Model] | None = None,
    *,
    rollouts: int = 20_000,
    concurrency: int = 2048,
    seed: int = 0,
    rates: Mapping[str, float] | None = None,
    timeout: float = 30.0,
    slow_s: float = 0.05,
    split: str = "test",
    output: str | os.PathLike[str] | None = None,
    allow_unexplained: bool = False,
    max_growth_per_rollout_bytes: float = 1024.0,
    max_rss_growth_mb: float | None = None,
    slow_consumer_rollouts: int = 600,
    quiet: bool = True,
) -> InvariantReport:
    """Run the suite (see the module doc) and return what it found.

    `make_env()` builds a fresh environment (`make_env(plan)` when it takes an
    argument: the `FaultPlan`, to wrap the sandbox providers it builds), `make_model()`
    a model (default `EchoModel`); `rates` default to `faults.MIXED`; `timeout` is the
    rollout deadline that ends the hangs (keep it well above `slow_s`). RSS may grow by at most
    `max_growth_per_rollout_bytes` per rollout after the first quarter, and in total by
    `max_rss_growth_mb` (default: 256 MB + 64 KB per rollout in flight + 512 B per
    rollout, which the metrics pass at the end keeps per (task, repeat) key).
    """
    from nemo_gym.collect import collect

    if rollouts < 1 or concurrency < 1:
        raise ConfigError("rollouts and concurrency must be >= 1")
    make_model = make_model or _default_model
    report = InvariantReport(concurrency=concurrency)
    with (
        _quiet(quiet),
        tempfile.TemporaryDirectory(prefix="nemo_gym-invariants-") as scratch,
        contextlib.ExitStack() as stack,
    ):
        base = Path(output) if output is not None else Path(scratch)
        base.mkdir(parents=True, exist_ok=True)

        def plan_for() -> faults.FaultPlan:
            return faults.FaultPlan(seed=seed, rates=rates, slow_s=slow_s)

        # A small run first: imports, pools and caches settle before the baselines.
        warm = plan_for()
        await collect(
            _build_env(make_env, warm),
            warm.wrap_model(make_model()),
            output=base / "warm-up",
            limit=50,
            concurrency=min(concurrency, 64),
            timeout=timeout,
            seed=seed,
        )
        await _settle()
        tasks_before = asyncio.all_tasks()
        children_before = _children()
        fds_before = _fds()

        # Size the run from the environment's tasks (hashed, never held).
        probe = _build_env(make_env, plan_for())
        task_hashes = array("q")
        for task in probe.tasks(split=split, limit=rollouts):
            task_hashes.append(_task_hash(task.id) - (1 << 63))
            if len(task_hashes) >= rollouts:
                break
        await close_all(probe, probe.verifier)
        if not task_hashes:
            raise ConfigError("the environment has no tasks in split {split!r}")
        n_tasks = len(task_hashes)
        repeats = -(-rollouts // n_tasks)
        report.tasks, report.repeats = n_tasks, repeats
        expected = sorted(_key_hash(h + (1 << 63), r) for h in task_hashes for r in range(repeats))
        del task_hashes
        report.rollouts = len(expected)

        plan = plan_for()
        ledger = plan.ledger
        env, model = _build_env(make_env, plan), plan.wrap_model(make_model())
        streamed = array("q")
        rss_start = report.rss_stream_peak_mb = _rss_mb()
        report.rss_start_mb = rss_start
        sampler = stack.enter_context(_PeakRss())
        quarter = max(1, report.rollouts // 4)
        classified = "failures are the ones the faults must produce"

        def on_rollout(rollout: Rollout) -> None:
            streamed.append(key_hash(rollout.task_id, rollout.repeat))
            count = len(streamed)
            report.outcomes[
                "ok"
                if rollout.ok
                else f"{rollout.failure.kind}/{rollout.failure.code}@{rollout.failure.where}"
                if rollout.failure
                else "failed/unclassified"
            ] += 1
            _check_rollout(report, "stream", rollout)
            injected = ledger.take(rollout.task_id, rollout.repeat)
            if injected is not None:
                fault, outcome = injected
                if not outcome.matches(rollout.failure):
                    got = rollout.failure
                    seen = (
                        f"{got.kind}/{got.code} at {got.where}: {got.message[:160]}"
                        if got
                        else "ok"
                    )
                    report.violate(
                        classified,
                        f"{rollout.task_id}#{rollout.repeat}: {fault} must give {outcome}, "
                        f"got {seen}",
                    )
            elif not rollout.ok and not allow_unexplained:
                got = rollout.failure
                report.violate(
                    classified,
                    f"{rollout.task_id}#{rollout.repeat}: failed with no fault injected: "
                    + (
                        f"{got.kind}/{got.code} at {got.where}: {got.message[:160]}" if got else "?"
                    ),
                )
            in_flight = ledger.episodes_opened - ledger.episodes_closed
            report.max_in_flight = max(report.max_in_flight, in_flight)
            if count % 1000 == 0 or count == quarter:
                rss = _rss_mb()
                report.rss_stream_peak_mb = max(report.rss_stream_peak_mb, rss)
                if count == quarter:
                    report.rss_quarter_mb = rss

        out = base / "run"
        started = time.perf_counter()
        result = await collect(
            env,
            model,
            output=out,
            split=split,
            limit=n_tasks,
            repeats=repeats,
            concurrency=concurrency,
            timeout=timeout,
            seed=seed,
            on_rollout=on_rollout,
        )
        report.seconds = time.perf_counter() - started
        report.rss_end_mb = _rss_mb()
        report.rss_stream_peak_mb = max(report.rss_stream_peak_mb, report.rss_end_mb)
        report.rss_quarter_mb = report.rss_quarter_mb or report.rss_end_mb
        report.injected = Counter(ledger.injected)
        report.output = str(out) if output is not None else None
        await close_all(model)

        # Exactly once: in the stream, and in the file.
        _compare_keys(
            report, "each (task, repeat) exactly once in the stream", expected, _sorted(streamed)
        )
        del streamed[:]
        in_file = array("q")
        failed_keys = array("q")
        counts = _Counts()
        for row in _iter_jsonl(out / "rollouts.jsonl"):  # one pass over the file
            h = key_hash(row["task_id"], row["repeat"])
            in_file.append(h)
            if row.get("status") != "ok":
                failed_keys.append(h)
            _check_row(report, "file", row)
            counts.add(row)
        _compare_keys(
            report, "each (task, repeat) exactly once in the file", expected, _sorted(in_file)
        )
        del in_file, expected
        sidecar = array(
            "q", (key_hash(r["task_id"], r["repeat"]) for r in _iter_jsonl(out / "failures.jsonl"))
        )
        _compare_keys(
            report,
            "failures.jsonl holds exactly the failed rows",
            _sorted(failed_keys),
            _sorted(sidecar),
        )
        del failed_keys, sidecar

        # Metrics: returned, on disk, and counted here.
        counted = counts.result()
        del counts
        from nemo_gym.records import RunMetrics

        on_disk = RunMetrics.model_validate_json((out / "metrics.json").read_text())
        _compare_metrics(report, "RunResult.metrics", counted, result.metrics)
        _compare_metrics(report, "metrics.json", counted, on_disk)

        # Resources.
        if ledger.pending:
            report.violate(
                classified, f"{ledger.pending} rollouts had a fault recorded but never came out"
            )
        if ledger.episodes_opened != ledger.episodes_closed:
            report.violate(
                "episodes opened == closed",
                f"opened {ledger.episodes_opened}, closed {ledger.episodes_closed}",
            )
        if ledger.sandboxes_started != ledger.sandboxes_closed:
            report.violate(
                "sandboxes started == closed",
                f"started {ledger.sandboxes_started}, closed {ledger.sandboxes_closed}",
            )
        if report.max_in_flight > concurrency:
            report.violate(
                "at most `concurrency` episodes open",
                f"{report.max_in_flight} open at once, concurrency {concurrency}",
            )
        sampler.__exit__()
        report.rss_peak_mb = sampler.peak
        budget = max_rss_growth_mb
        if budget is None:
            budget = 256 + concurrency * 64 / 1024 + report.rollouts * 512 / 2**20
        if report.rss_peak_mb - rss_start > budget:
            report.violate(
                "RSS bounded",
                f"grew {report.rss_peak_mb - rss_start:.0f} MB (> {budget:.0f} MB)",
            )
        if (
            report.rollouts >= 4000
            and report.growth_per_rollout_bytes > max_growth_per_rollout_bytes
        ):
            report.violate(
                "RSS flat",
                f"{report.growth_per_rollout_bytes:.0f} B per rollout after the first quarter "
                f"(> {max_growth_per_rollout_bytes:.0f})",
            )

        await _slow_consumer(
            report,
            make_env,
            make_model,
            plan_for,
            slow_consumer_rollouts,
            min(concurrency, 256),
            timeout,
            seed,
            split,
        )
        await _early_stop(
            report, make_env, make_model, plan_for, min(concurrency, 256), timeout, seed, split
        )

        await _settle()
        left = {t for t in asyncio.all_tasks() - tasks_before if not t.done()}
        left.discard(asyncio.current_task())
        for leftover in left:
            report.violate("no asyncio task left behind", repr(leftover)[:200])
        for pid, cmdline in _children().items():
            if pid not in children_before:
                report.violate("no child process left behind", f"{pid}: {cmdline[:200]}")
        opened = _fds() - fds_before
        for target in sorted(opened):
            report.violate("no file descriptor left open", target)
    return report


async def _slow_consumer(
    report: InvariantReport,
    make_env: EnvFactory,
    make_model: Callable[[], Model],
    plan_for: Callable[[], faults.FaultPlan],
    n: int,
    concurrency: int,
    timeout: float,
    seed: int,
    split: str,
) -> None:
    """A consumer slower than the rollouts: the runner must not run ahead of it."""
    from nemo_gym.runner import rollouts

    plan = plan_for()
    env, model = _build_env(make_env, plan), plan.wrap_model(make_model())
    pulled = consumed = worst = 0

    def counted() -> Iterator[Any]:
        nonlocal pulled
        for task in env.tasks(split=split, limit=n):
            pulled += 1
            yield task

    async with aclosing(
        rollouts(env, model, tasks=counted(), concurrency=concurrency, timeout=timeout, seed=seed)
    ) as stream:
        async for rollout in stream:
            consumed += 1
            plan.ledger.take(rollout.task_id, rollout.repeat)
            worst = max(worst, pulled - consumed)
            await asyncio.sleep(0.001)
    if worst > concurrency:
        report.violate(
            "a slow consumer does not make the runner buffer",
            f"{worst} rollouts started and not consumed (concurrency {concurrency})",
        )
    if plan.ledger.episodes_opened != plan.ledger.episodes_closed:
        report.violate(
            "episodes opened == closed",
            f"slow consumer: opened {plan.ledger.episodes_opened}, "
            f"closed {plan.ledger.episodes_closed}",
        )
    await close_all(model)


async def _early_stop(
    report: InvariantReport,
    make_env: EnvFactory,
    make_model: Callable[[], Model],
    plan_for: Callable[[], faults.FaultPlan],
    concurrency: int,
    timeout: float,
    seed: int,
    split: str,
) -> None:
    """A consumer that stops after a few rollouts: every episode opened is closed."""
    from nemo_gym.runner import rollouts

    plan = plan_for()
    env, model = _build_env(make_env, plan), plan.wrap_model(make_model())
    taken = 0
    async with aclosing(
        rollouts(
            env,
            model,
            limit=4 * concurrency,
            concurrency=concurrency,
            timeout=timeout,
            seed=seed,
            split=split,
        )
    ) as stream:
        async for _ in stream:
            taken += 1
            if taken >= concurrency // 4 + 1:
                break
    if plan.ledger.episodes_opened != plan.ledger.episodes_closed:
        report.violate(
            "episodes opened == closed",
            f"after the consumer stopped: opened {plan.ledger.episodes_opened}, "
            f"closed {plan.ledger.episodes_closed}",
        )
    await close_all(model)


def synthetic_env(plan: faults.FaultPlan, **options: Any) -> Environment:
    """The suite's own environment: `Echo` with tools and a sandbox (faulted by `plan`)
    in every episode and in every verification."""
    from nemo_gym.testing.synthetic import Echo, MemoryProvider

    options.setdefault("tools", True)
    return Echo(provider=plan.wrap_provider(MemoryProvider()), **options)


# --------------------------------------------------------------------------- pytest


def _load(ref: str, kind: Kind, options: Mapping[str, Any]) -> Any:
    from nemo_gym import registry

    if ":" in ref:
        module, _, attr = ref.partition(":")
        import importlib

        factory: Any = importlib.import_module(module)
        for part in attr.split("."):
            factory = getattr(factory, part)
        return factory(**options)
    return registry.build(kind, ref, **options)


class InvariantSuite:
    """Subclass as `TestSomething(InvariantSuite)` to run the suite as one pytest test.

    Set `env` (`"module:attr"` or a registered name) and `options`, or override
    `make_env()`; likewise `model`/`model_options` or `make_model()` (default
    `EchoModel`). `rollouts`, `concurrency` and `settings` (more `check_invariants`
    keyword arguments) size it; the environment variables `NEMO_GYM_INVARIANT_ROLLOUTS`
    and `NEMO_GYM_INVARIANT_CONCURRENCY` override the first two (a soak in CI).
    """

    env: ClassVar[str | None] = None
    options: ClassVar[dict[str, Any]] = {}
    model: ClassVar[str | None] = None
    model_options: ClassVar[dict[str, Any]] = {}
    rollouts: ClassVar[int] = 20_000
    concurrency: ClassVar[int] = 2048
    settings: ClassVar[dict[str, Any]] = {}

    def make_env(self) -> Environment:
        if self.env is None:
            raise ConfigError(f"{type(self).__name__}: set `env` or override make_env()")
        return _load(self.env, "env", self.options)

    def make_model(self) -> Model:
        if self.model is None:
            return _default_model()
        return _load(self.model, "model", self.model_options)

    def test_invariants(self) -> None:
        import pytest

        rollouts = int(os.environ.get("NEMO_GYM_INVARIANT_ROLLOUTS", self.rollouts))
        concurrency = int(os.environ.get("NEMO_GYM_INVARIANT_CONCURRENCY", self.concurrency))
        report = asyncio.run(
            check_invariants(
                self.make_env,
                self.make_model,
                rollouts=rollouts,
                concurrency=concurrency,
                **self.settings,
            )
        )
        print(report)
        if not report.ok:
            pytest.fail(str(report), pytrace=False)


# --------------------------------------------------------------------------- soak


def main(argv: list[str] | None = None) -> int:
    """`python -m nemo_gym.testing.invariants`: run the suite at any size, print the report."""
    parser = argparse.ArgumentParser(prog="python -m nemo_gym.testing.invariants")
    parser.add_argument("--env", help="module:attr or a registered name (default: Echo)")
    parser.add_argument("--env-option", action="append", default=[], metavar="KEY=JSON")
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--output", help="keep the run directory here")
    args = parser.parse_args(argv)
    options = {}
    for pair in args.env_option:
        key, _, value = pair.partition("=")
        options[key] = json.loads(value)

    def make_env(plan: faults.FaultPlan) -> Environment:
        if args.env:
            return _load(args.env, "env", options)
        return synthetic_env(plan, n=args.rollouts, **options)

    report = asyncio.run(
        check_invariants(
            make_env,
            rollouts=args.rollouts,
            concurrency=args.concurrency,
            seed=args.seed,
            timeout=args.timeout,
            output=args.output,
        )
    )
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
