"""The worker pool: results, both deadlines, crashes, cancellation, loops, closing."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from nemo_gym.errors import VerifierError
from nemo_gym.verify.pool import (
    PoolClosed,
    WorkerCrashed,
    WorkerError,
    WorkerPool,
    WorkerTimeout,
    shared_pool,
)

# The deadline is what we test; the margin absorbs a loaded 2-core CI machine.
MARGIN = 0.5


def stuck(seconds: float) -> None:
    """Run in a worker: deaf to its timer, like a long computation inside C code."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        time.sleep(seconds)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})


@pytest.fixture
async def pool():
    p = WorkerPool(size=2)
    yield p
    await p.aclose()


async def test_call_returns_the_result_and_accepts_a_callable(pool: WorkerPool) -> None:
    import operator

    assert await pool.call("operator:add", 2, 3, timeout=30) == 5
    assert await pool.call(operator.mul, 4, 5, timeout=30) == 20


async def test_no_worker_starts_before_the_first_call() -> None:
    p = WorkerPool(size=3)
    assert p.worker_pids == []
    p.close()


async def test_soft_deadline_keeps_the_worker(pool: WorkerPool) -> None:
    await pool.call("os:getpid", timeout=30)  # warm
    pids = pool.worker_pids
    started = time.monotonic()
    with pytest.raises(WorkerTimeout) as info:
        await pool.call("time:sleep", 30, timeout=0.2)
    assert time.monotonic() - started <= 0.2 + MARGIN
    assert isinstance(info.value, VerifierError) and info.value.code == "verifier_timeout"
    assert pool.worker_pids == pids  # answered "timed out" itself: not killed
    assert await pool.call("operator:add", 1, 1, timeout=30) == 2


async def test_hard_deadline_kills_a_worker_stuck_in_c_code(pool: WorkerPool) -> None:
    pid = await pool.call("os:getpid", timeout=30)
    await pool.call(stuck, 0, timeout=30)  # the import of this module is not timed
    started = time.monotonic()
    with pytest.raises(WorkerTimeout):
        await pool.call(stuck, 30, timeout=0.3)
    assert time.monotonic() - started <= 0.3 + MARGIN
    assert pool.stats["killed"] == 1
    assert pid not in pool.worker_pids
    assert await pool.call("operator:add", 1, 2, timeout=30) == 3  # replaced


async def test_a_segfault_is_reported_and_the_worker_replaced(pool: WorkerPool) -> None:
    pid = await pool.call("os:getpid", timeout=30)
    with pytest.raises(WorkerCrashed, match="died"):
        await pool.call("ctypes:string_at", 0, timeout=30)
    assert pid not in pool.worker_pids
    assert await pool.call("operator:add", 2, 2, timeout=30) == 4


async def test_an_exception_in_the_function_is_a_worker_error(pool: WorkerPool) -> None:
    with pytest.raises(WorkerError) as info:
        await pool.call("math:factorial", -1, timeout=30)
    assert info.value.remote_type == "ValueError"
    assert "factorial" in info.value.remote_traceback
    with pytest.raises(WorkerError) as info:
        await pool.call("builtins:bytearray", 1 << 62, timeout=30)
    assert info.value.remote_type in ("MemoryError", "OverflowError")
    with pytest.raises(WorkerError, match="ModuleNotFoundError"):
        await pool.call("no_such_module_xyz:f", timeout=30)
    assert await pool.call("operator:add", 1, 1, timeout=30) == 2


async def test_bad_arguments_are_rejected_before_any_work(pool: WorkerPool) -> None:
    with pytest.raises(ValueError, match="module-level"):
        await pool.call(lambda: 1, timeout=1)
    with pytest.raises(ValueError, match="module:name"):
        await pool.call("operator.add", 1, 2, timeout=1)
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="timeout"):
            await pool.call("operator:add", 1, 2, timeout=bad)
    with pytest.raises(ValueError):
        WorkerPool(size=0)


async def test_calls_run_in_parallel_up_to_size(pool: WorkerPool) -> None:
    await asyncio.gather(*(pool.call("os:getpid", timeout=30) for _ in range(2)))
    started = time.monotonic()
    await asyncio.gather(*(pool.call("time:sleep", 0.3, timeout=30) for _ in range(4)))
    elapsed = time.monotonic() - started
    assert 0.55 <= elapsed <= 0.6 + MARGIN
    assert len(pool.worker_pids) == 2


async def test_cancelling_a_call_replaces_its_worker(pool: WorkerPool) -> None:
    pid = await pool.call("os:getpid", timeout=30)
    task = asyncio.ensure_future(pool.call("time:sleep", 30, timeout=60))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pid not in pool.worker_pids
    assert await pool.call("operator:add", 3, 3, timeout=30) == 6


def test_one_pool_serves_successive_event_loops() -> None:
    p = WorkerPool(size=1)
    try:
        first = asyncio.run(p.call("os:getpid", timeout=30))
        second = asyncio.run(p.call("os:getpid", timeout=30))
        assert first == second  # the same persistent worker, across two closed loops
    finally:
        p.close()


async def test_close_fails_pending_and_later_calls() -> None:
    p = WorkerPool(size=1)
    await p.call("os:getpid", timeout=30)
    running = asyncio.ensure_future(p.call("time:sleep", 30, timeout=60))
    waiting = asyncio.ensure_future(p.call("time:sleep", 30, timeout=60))
    await asyncio.sleep(0.2)
    await p.aclose()
    for task in (running, waiting):
        with pytest.raises(PoolClosed):
            await task
    with pytest.raises(PoolClosed):
        await p.call("os:getpid", timeout=1)
    assert p.worker_pids == []
    p.close()  # idempotent


def test_shared_pool_is_one_lazy_instance() -> None:
    assert shared_pool() is shared_pool()
    assert shared_pool().worker_pids == [] or shared_pool().size >= 1
