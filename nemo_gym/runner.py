"""The runner: `rollout` (one), `rollouts` (a stream), `groups` (GRPO), `collect` (to disk).

Rollouts stream out in completion order the moment each finishes; tasks are pulled
lazily and at most `concurrency` rollouts are in flight, so memory stays flat however
many tasks there are. Nothing a rollout does raises into the caller: a failure is a
`Rollout` with `status="failed"` and a `Failure` saying its kind and where it happened.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import aclosing
from typing import Any

from nemo_gym.errors import HarnessError, ModelError, NemoGymError, RolloutTimeout
from nemo_gym.protocols import Environment, Harness, Model, as_verifier
from nemo_gym.records import (
    Failure,
    Message,
    ModelCall,
    ModelRequest,
    ModelResponse,
    Observation,
    Rewards,
    Rollout,
    Sampling,
    Task,
    Timings,
    ToolResult,
    Trajectory,
    replace,
)

__all__ = ["derive_seed", "groups", "rollout", "rollouts"]

_PHASE_KIND = {"open": "environment", "close": "environment", "harness": "harness"}


def derive_seed(run_seed: int, task_id: str, repeat: int) -> int:
    """The seed of one repeat: a stable 31-bit hash of (run seed, task id, repeat)."""
    digest = hashlib.blake2b(f"{run_seed}:{task_id}:{repeat}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


class RecordingModel:
    """Wraps the policy for one rollout: applies run-level sampling and the repeat's seed,
    and records every call (request, response or error, latency) on the trajectory."""

    __slots__ = ("_given", "_merged", "calls", "model", "model_s", "sampling", "seed")

    def __init__(
        self, model: Model, calls: list[ModelCall], sampling: Sampling | None, seed: int | None
    ):
        self.model = model
        self.calls = calls
        self.sampling = sampling
        self.seed = seed
        self.model_s = 0.0
        self._given: Sampling | None = None
        self._merged: Sampling | None = None

    def _sampling(self, given: Sampling) -> Sampling:
        # A harness sends the same Sampling object every turn: merge it once.
        if given is not self._given:
            merged = given if self.sampling is None else given.merged_over(self.sampling)
            if self.seed is not None and merged.seed is None:
                merged = merged.model_copy(update={"seed": self.seed})
            self._given, self._merged = given, merged
        return self._merged  # type: ignore[return-value]

    async def generate(self, request: ModelRequest) -> ModelResponse:
        sampling = self._sampling(request.sampling)
        if sampling is not request.sampling:
            request = replace(request, sampling=sampling)
        started = time.perf_counter()
        try:
            response = await self.model.generate(request)
        except Exception as exc:
            elapsed = time.perf_counter() - started
            self.model_s += elapsed
            self.calls.append(
                ModelCall(
                    request=request,
                    response=None,
                    error=f"{type(exc).__name__}: {exc}",
                    latency_s=elapsed,
                )
            )
            if isinstance(exc, NemoGymError):
                raise
            raise ModelError(f"{type(exc).__name__}: {exc}") from exc
        elapsed = time.perf_counter() - started
        self.model_s += elapsed
        self.calls.append(
            ModelCall(request=request, response=response, error=None, latency_s=elapsed)
        )
        return response

    def __getattr__(self, name: str) -> Any:
        # Harnesses may ask the policy for adapter attributes (a tokenizer, a name).
        return getattr(self.model, name)


def _failure(exc: BaseException, where: str) -> Failure:
    if where == "verify":
        kind = "verifier"
        code = exc.code if isinstance(exc, NemoGymError) else "verifier"
    elif isinstance(exc, NemoGymError):
        kind, code = exc.kind, exc.code
    else:
        kind = _PHASE_KIND.get(where, "harness")
        code = kind
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))
    return Failure(
        kind=kind,  # type: ignore[arg-type]
        code=code,
        message=str(exc) or type(exc).__name__,
        error_type=type(exc).__name__,
        where=where,  # type: ignore[arg-type]
        traceback=tb[-4000:],
    )


class _Tracked(Exception):
    """Carries a failure classified where it happened out through the timeout scope."""

    def __init__(self, failure: Failure) -> None:
        self.failure = failure


async def _run_episode(
    env: Environment,
    task: Task,
    harness: Harness,
    policy: RecordingModel,
    trajectory: Trajectory,
    phase: list[str],
) -> None:
    """Open the episode and run the harness into `trajectory`; `phase[0]` tracks where."""
    try:
        episode = await env.open(task)
        async with episode:
            phase[0] = "harness"
            messages = trajectory.messages
            tool_results = trajectory.tool_results
            observations = trajectory.observations
            events = harness.run(task, episode, policy)
            async with aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    if isinstance(event, Message):
                        messages.append(event)
                    elif isinstance(event, ToolResult):
                        tool_results.append(event)
                    elif isinstance(event, Observation):
                        observations.append(event)
                    else:
                        raise HarnessError(
                            f"harness yielded {type(event).__name__}; expected Message, "
                            "ToolResult or Observation"
                        )
            trajectory.final_state = episode.final_state()
            phase[0] = "close"
    except Exception as exc:
        # A TimeoutError raised by a tool lands here too: only the rollout's own
        # deadline (a cancellation turned into TimeoutError by asyncio.timeout) is a
        # `timeout` failure.
        raise _Tracked(_failure(exc, phase[0])) from exc


async def rollout(
    env: Environment,
    model: Model,
    task: Task,
    *,
    harness: Harness | None = None,
    repeat: int = 0,
    seed: int | None = None,
    sampling: Sampling | None = None,
    timeout: float | None = None,
    run_id: str = "",
) -> Rollout:
    """Run one rollout of `task` to the end and return its record.

    Never raises for what the rollout did; only cancellation propagates. `timeout`
    bounds the whole rollout, verification included.
    """
    harness = harness or default_harness(env)
    started_at = time.time()
    t0 = time.perf_counter()
    trajectory = Trajectory()
    policy = RecordingModel(model, trajectory.model_calls, sampling, seed)
    rewards: Rewards | None = None
    failure: Failure | None = None
    phase = ["open"]
    verify_s = 0.0
    try:
        if timeout is None:
            await _run_episode(env, task, harness, policy, trajectory, phase)
        else:
            async with asyncio.timeout(timeout):
                await _run_episode(env, task, harness, policy, trajectory, phase)
        phase[0] = "verify"
        verify_started = time.perf_counter()
        try:
            pending = as_verifier(env.verifier).verify(task, trajectory)
            if timeout is not None:
                pending = asyncio.wait_for(pending, max(0.0, timeout - (verify_started - t0)))
            rewards = Rewards.of(await pending)
        finally:
            verify_s = time.perf_counter() - verify_started
    except _Tracked as tracked:
        failure = tracked.failure
    except TimeoutError as exc:
        error: BaseException = exc
        if timeout is not None and time.perf_counter() - t0 >= timeout:
            error = RolloutTimeout(f"rollout exceeded its {timeout}s deadline during {phase[0]}")
        failure = _failure(error, phase[0])
    except Exception as exc:
        failure = _failure(exc, phase[0])
    return Rollout(
        run_id=run_id,
        env=env.name,
        task_id=task.id,
        repeat=repeat,
        seed=seed,
        task=task,
        trajectory=trajectory,
        rewards=rewards,
        status="ok" if failure is None else "failed",
        failure=failure,
        timings=Timings(
            started_at=started_at,
            duration_s=time.perf_counter() - t0,
            model_s=policy.model_s,
            tool_s=sum(r.latency_s for r in trajectory.tool_results),
            verify_s=verify_s,
        ),
        metadata={},
    )


def default_harness(env: Environment) -> Harness:
    """The environment's own harness, else `SingleTurn`."""
    harness = getattr(env, "harness", None)
    if harness is not None:
        return harness
    from nemo_gym.harnesses import SingleTurn

    return SingleTurn()


def _work(
    env: Environment,
    tasks: Iterable[Task] | None,
    split: str,
    limit: int | None,
    repeats: int,
    skip: frozenset[tuple[str, int]] | set[tuple[str, int]] | None,
) -> Iterator[tuple[Task, int]]:
    source = env.tasks(split=split, limit=limit) if tasks is None else tasks
    if tasks is not None and limit is not None:
        source = itertools.islice(source, limit)
    for task in source:
        for repeat in range(repeats):
            if skip is None or (task.id, repeat) not in skip:
                yield task, repeat


async def rollouts(
    env: Environment,
    model: Model,
    *,
    harness: Harness | None = None,
    tasks: Iterable[Task] | None = None,
    split: str = "test",
    limit: int | None = None,
    repeats: int = 1,
    concurrency: int = 32,
    seed: int | None = 0,
    sampling: Sampling | None = None,
    timeout: float | None = None,
    run_id: str | None = None,
    skip: set[tuple[str, int]] | frozenset[tuple[str, int]] | None = None,
) -> AsyncIterator[Rollout]:
    """Run every (task, repeat) and yield each `Rollout` the moment it finishes.

    Tasks come from `tasks` or `env.tasks(split, limit)`, pulled lazily; at most
    `concurrency` rollouts run at once. Each repeat gets the seed
    `derive_seed(seed, task.id, repeat)` (none when `seed` is None). `skip` holds
    (task id, repeat) pairs already done. Closing the generator early (break, aclose,
    cancellation) cancels the rollouts in flight and waits until their episodes closed.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    harness = harness or default_harness(env)
    as_verifier(env.verifier)  # a bad verifier is a setup error, raised before any rollout
    run_id = run_id or uuid.uuid4().hex[:12]
    work = _work(env, tasks, split, limit, repeats, skip)
    finished: asyncio.Queue[asyncio.Task[Rollout]] = asyncio.Queue()
    running: set[asyncio.Task[Rollout]] = set()
    exhausted = False
    try:
        while True:
            while not exhausted and len(running) < concurrency:
                item = next(work, None)
                if item is None:
                    exhausted = True
                    break
                task, repeat = item
                job = asyncio.create_task(
                    rollout(
                        env,
                        model,
                        task,
                        harness=harness,
                        repeat=repeat,
                        seed=None if seed is None else derive_seed(seed, task.id, repeat),
                        sampling=sampling,
                        timeout=timeout,
                        run_id=run_id,
                    )
                )
                running.add(job)
                job.add_done_callback(finished.put_nowait)
            if not running:
                return
            done = await finished.get()
            running.discard(done)
            yield done.result()
    finally:
        for job in running:
            job.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)


async def groups(
    env: Environment,
    model: Model,
    *,
    repeats: int,
    **options: Any,
) -> AsyncIterator[list[Rollout]]:
    """Like `rollouts`, but yields the `repeats` rollouts of one task together (GRPO),
    ordered by repeat, as soon as the last of them finishes. Task ids must be unique."""
    pending: dict[str, list[Rollout]] = {}
    async with aclosing(rollouts(env, model, repeats=repeats, **options)) as stream:
        async for item in stream:
            bucket = pending.setdefault(item.task_id, [])
            bucket.append(item)
            if len(bucket) == repeats:
                del pending[item.task_id]
                bucket.sort(key=lambda r: r.repeat)
                yield bucket
