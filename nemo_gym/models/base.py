"""What every model adapter shares: sampling defaults, bounded retries, a concurrency cap.

An adapter subclasses `ModelAdapter` and implements `_generate(request)`, raising
`ModelError(retryable=True)` for transient failures (rate limits, 5xx, connection
errors, timeouts, unreadable bodies) and `ModelError(retryable=False)` for the rest.
`generate()` merges the adapter's `default_sampling` under the request's (so
`_generate` sees the sampling it must send), adds the retries (honouring a server's
`Retry-After`, bounded), the cap and the latency, and reports on the response the
sampling sent and the number of attempts.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass

from nemo_gym.errors import ModelError
from nemo_gym.records import ModelRequest, ModelResponse, Sampling, replace
from nemo_gym.registry import Described

log = logging.getLogger(__name__)

# Seeded from the OS, never from `random`: trainers seed the global RNG identically on
# every rank, which would make every rank retry in lockstep (and shift their draws).
_JITTER = random.Random()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter, for retryable errors only.

    A server's `Retry-After` replaces the backoff, capped at `max_retry_after_s`.
    """

    max_attempts: int = 4
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 20.0
    max_retry_after_s: float = 60.0

    def backoff(self, attempt: int) -> float:
        """Seconds to sleep after failed attempt number `attempt` (1-based)."""
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * 2 ** (attempt - 1))
        return _JITTER.uniform(0.0, ceiling)

    def delay(self, attempt: int, retry_after_s: float | None) -> float:
        """The sleep before the next attempt: the server's wish (bounded), else backoff."""
        if retry_after_s is not None and retry_after_s >= 0:
            return min(retry_after_s, self.max_retry_after_s)
        return self.backoff(attempt)


_NO_SAMPLING = Sampling()


class ModelAdapter(Described):
    """Base of the built-in adapters. Subclasses implement `_generate`.

    The keyword arguments an adapter is built with are its spec (`to_spec()`: the model
    id a run records), except secrets (`api_key`), which are never recorded.
    """

    spec_kind = "model"
    spec_exclude = frozenset({"api_key"})

    def __init__(
        self,
        *,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
        default_sampling: Sampling | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.max_concurrency = max_concurrency
        self.default_sampling = default_sampling or _NO_SAMPLING
        # Bound to an event loop on first use, so an adapter built before the loop runs
        # (or used from several loops in turn) works: one semaphore per loop.
        self._semaphore: asyncio.Semaphore | None = None
        self._semaphore_loop: asyncio.AbstractEventLoop | None = None

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release what the adapter opened (idempotent; it stays usable)."""

    async def __aenter__(self) -> ModelAdapter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _cap(self) -> asyncio.Semaphore | None:
        if not self.max_concurrency:
            return None
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore_loop is not loop:
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
            self._semaphore_loop = loop
        return self._semaphore

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the backend, retrying retryable errors; records latency on the response."""
        sampling = request.sampling.merged_over(self.default_sampling)
        if sampling is not request.sampling:
            request = replace(request, sampling=sampling)
        cap = self._cap()
        if cap is None:
            return await self._generate_with_retries(request)
        async with cap:
            return await self._generate_with_retries(request)

    async def _generate_with_retries(self, request: ModelRequest) -> ModelResponse:
        attempt = 0
        while True:
            attempt += 1
            started = time.perf_counter()
            try:
                response = await self._generate(request)
            except ModelError as exc:
                exc.attempts = attempt
                if not exc.retryable or attempt >= self.retry.max_attempts:
                    if attempt > 1:
                        exc.args = (f"{exc} (after {attempt} attempts)",)
                    raise
                delay = self.retry.delay(attempt, exc.retry_after_s)
                log.warning("model call failed (%s); retry %d in %.2fs", exc, attempt, delay)
                await asyncio.sleep(delay)
                continue
            changes: dict[str, object] = {"attempts": attempt}
            if response.latency_s == 0.0:
                changes["latency_s"] = time.perf_counter() - started
            if response.sampling is None:
                changes["sampling"] = request.sampling
            return replace(response, **changes)
