"""What every model adapter shares: bounded retries with backoff, a concurrency cap.

An adapter subclasses `ModelAdapter` and implements `_generate(request)`, raising
`ModelError(retryable=True)` for transient failures (rate limits, 5xx, connection
errors, timeouts) and `ModelError(retryable=False)` for the rest. `generate()` adds the
retries, the cap and the latency.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass

from nemo_gym.errors import ModelError
from nemo_gym.records import ModelRequest, ModelResponse

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter, for retryable errors only."""

    max_attempts: int = 4
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 20.0

    def backoff(self, attempt: int) -> float:
        """Seconds to sleep after failed attempt number `attempt` (1-based)."""
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * 2 ** (attempt - 1))
        return random.uniform(0.0, ceiling)


class ModelAdapter:
    """Base of the built-in adapters. Subclasses implement `_generate`."""

    def __init__(
        self,
        *,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.max_concurrency = max_concurrency
        self._semaphore = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        raise NotImplementedError

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the backend, retrying retryable errors; records latency on the response."""
        if self._semaphore is None:
            return await self._generate_with_retries(request)
        async with self._semaphore:
            return await self._generate_with_retries(request)

    async def _generate_with_retries(self, request: ModelRequest) -> ModelResponse:
        attempt = 0
        while True:
            attempt += 1
            started = time.perf_counter()
            try:
                response = await self._generate(request)
            except ModelError as exc:
                if not exc.retryable or attempt >= self.retry.max_attempts:
                    if attempt > 1:
                        exc.args = (f"{exc} (after {attempt} attempts)",)
                    raise
                delay = self.retry.backoff(attempt)
                log.warning("model call failed (%s); retry %d in %.2fs", exc, attempt, delay)
                await asyncio.sleep(delay)
                continue
            if response.latency_s == 0.0:
                response = response.model_copy(update={"latency_s": time.perf_counter() - started})
            return response
