"""Fault injection: seeded, composable wrappers that make a model, a verifier, a tool, an
environment's open or close, or a sandbox fail — and the failure each fault must produce.

```python
from nemo_gym.testing import faults

plan = faults.FaultPlan(seed=7, rates={"model.server_error": 0.02, "verifier.nan": 0.01,
                                       "env.open": 0.01, "tool.tool_error": 0.01})
env, model = plan.wrap_env(gym.make("arithmetic")), plan.wrap_model(my_model)
async for rollout in gym.rollouts(env, model, timeout=10):
    expected = plan.ledger.take(rollout.task_id, rollout.repeat)   # None: no fault ended it
    assert expected is None or expected.matches(rollout.failure)
```

Every fault is named `site.fault` (`FAULTS` lists them with the `Outcome` — kind, code,
phase — that the rollout must end with, or None where the rollout goes on: a retry may
succeed, the model is shown the error). Whether a call gets a fault is a pure function
of the seed, the site, the rollout (`runner.current_rollout()`) and the call's place in
it (turn, attempt, tool-call ordinal), so a run injects the same faults whatever the
concurrency or the order things finish in, in one process or many. A site's rates sum to
at most 1; one uniform draw per call picks at most one fault.

Wrappers stack (`plan.wrap_model(other.wrap_model(m))`), and `FaultyModel`, `FaultyEnv`
and `FaultyProvider` are rebuildable from their spec (their options are JSON), so the
same faults run in a subprocess or on a Ray actor; the ledger stays in the process
that made the plan (`ledger=` is never part of a spec).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

from nemo_gym.errors import ConfigError, ModelError, SandboxError, ToolError
from nemo_gym.lifecycle import aclose
from nemo_gym.models.base import ModelAdapter, RetryPolicy
from nemo_gym.protocols import Environment, Model, Sandbox, SandboxProvider, Verifier, as_verifier
from nemo_gym.records import (
    ExecResult,
    Failure,
    Message,
    ModelRequest,
    ModelResponse,
    Rewards,
    SandboxSpec,
    Task,
    ToolCall,
    Trajectory,
)
from nemo_gym.registry import Described, Spec, jsonable_options
from nemo_gym.runner import current_rollout
from nemo_gym.tools import Tool

__all__ = [
    "FAULTS",
    "MIXED",
    "Fault",
    "FaultPlan",
    "FaultyEnv",
    "FaultyModel",
    "FaultyProvider",
    "FaultySandbox",
    "FaultyTool",
    "FaultyVerifier",
    "InjectedBaseException",
    "InjectedFault",
    "Ledger",
    "Outcome",
    "WireFaults",
]


class InjectedFault(Exception):
    """An ordinary exception raised by an injected fault (`fault` names it)."""

    def __init__(self, fault: str, detail: str = "") -> None:
        super().__init__(f"injected fault {fault}" + (f": {detail}" if detail else ""))
        self.fault = fault


class InjectedBaseException(BaseException):
    """A `BaseException` that is not an interrupt (user code does raise these)."""

    def __init__(self, fault: str) -> None:
        super().__init__(f"injected fault {fault}")
        self.fault = fault


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a rollout a fault ended must be recorded: `Failure.kind`, `code`, `where`."""

    kind: str
    code: str
    where: str

    def matches(self, failure: Failure | None) -> bool:
        return failure is not None and (failure.kind, failure.code, failure.where) == (
            self.kind,
            self.code,
            self.where,
        )

    def __str__(self) -> str:
        return f"{self.kind}/{self.code} at {self.where}"


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault a site can inject, and what it must do to the rollout."""

    name: str
    outcome: Outcome | None
    doc: str


def _o(kind: str, code: str, where: str) -> Outcome:
    return Outcome(kind, code, where)


_TIMEOUT = _o("timeout", "timeout", "harness")
FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        # The model: transient errors go through the wrapper's retry policy, so the
        # rollout fails only when every attempt got one (the outcome says how then).
        Fault("model.server_error", _o("model", "server_error", "harness"), "HTTP 503"),
        Fault(
            "model.rate_limited",
            _o("model", "rate_limited", "harness"),
            "HTTP 429 with Retry-After (honoured by the retry loop)",
        ),
        Fault("model.timeout", _o("model", "timeout", "harness"), "the request timed out"),
        Fault(
            "model.connection_reset",
            _o("model", "connection_error", "harness"),
            "the connection was reset",
        ),
        Fault(
            "model.truncated_body",
            _o("model", "bad_response", "harness"),
            "the response body was cut off mid-JSON",
        ),
        Fault(
            "model.malformed_tool_call",
            None,
            "a tool call whose arguments are not JSON (the tool loop shows the model)",
        ),
        Fault("model.empty_content", _o("model", "empty_response", "harness"), "content ''"),
        Fault("model.slow", None, "the reply comes `slow_s` late (a slow tail)"),
        Fault("model.hang", _TIMEOUT, "no reply for `hang_s` (needs a rollout timeout)"),
        Fault("model.base_exception", _o("model", "model", "harness"), "InjectedBaseException"),
        # The verifier.
        Fault("verifier.error", _o("verifier", "verifier", "verify"), "raises InjectedFault"),
        Fault("verifier.hang", _o("verifier", "timeout", "verify"), "never returns"),
        Fault("verifier.nan", _o("verifier", "non_finite_reward", "verify"), "returns NaN"),
        Fault("verifier.inf", _o("verifier", "non_finite_reward", "verify"), "returns inf"),
        Fault("verifier.wrong_type", _o("verifier", "invalid_reward", "verify"), "returns a str"),
        Fault(
            "verifier.base_exception",
            _o("verifier", "verifier", "verify"),
            "raises InjectedBaseException",
        ),
        Fault(
            "verifier.cancelled",
            _o("cancelled", "cancelled", "verify"),
            "raises CancelledError nobody asked for",
        ),
        Fault("verifier.slow", None, "returns `slow_s` late"),
        # Tools (outcomes for ToolLoop's defaults; see FaultyTool).
        Fault("tool.error", None, "raises an ordinary exception (shown to the model)"),
        Fault("tool.tool_error", _o("tool", "tool", "harness"), "raises ToolError"),
        Fault("tool.hang", _TIMEOUT, "never returns (a timeout unless the harness bounds tools)"),
        Fault("tool.base_exception", _o("tool", "tool", "harness"), "InjectedBaseException"),
        Fault("tool.slow", None, "returns `slow_s` late"),
        # The environment.
        Fault("env.open", _o("environment", "environment", "open"), "open(task) raises"),
        Fault(
            "env.close",
            _o("environment", "environment", "close"),
            "closing the episode raises (after its resources were released)",
        ),
        # Sandboxes (the outcome depends on who was using it: see FaultySandbox).
        Fault(
            "sandbox.die",
            _o("sandbox", "sandbox", "harness"),
            "dies mid-exec: SandboxError now and on every later call",
        ),
    )
}
"""Every fault by `site.fault` name."""

SITES = ("model", "verifier", "tool", "env", "sandbox")

MIXED: dict[str, float] = {
    "model.server_error": 0.02,
    "model.rate_limited": 0.02,
    "model.timeout": 0.01,
    "model.connection_reset": 0.01,
    "model.truncated_body": 0.01,
    "model.malformed_tool_call": 0.02,
    "model.empty_content": 0.01,
    "model.slow": 0.02,
    "model.hang": 0.002,
    "model.base_exception": 0.005,
    "verifier.error": 0.01,
    "verifier.hang": 0.002,
    "verifier.nan": 0.01,
    "verifier.inf": 0.005,
    "verifier.wrong_type": 0.005,
    "verifier.base_exception": 0.005,
    "verifier.cancelled": 0.005,
    "verifier.slow": 0.01,
    "tool.error": 0.02,
    "tool.tool_error": 0.01,
    "tool.hang": 0.002,
    "tool.base_exception": 0.005,
    "tool.slow": 0.01,
    "env.open": 0.01,
    "env.close": 0.01,
    "sandbox.die": 0.01,
}
"""Every fault at once, at rates that leave most rollouts ok (the invariant suite's mix)."""


def check_rates(rates: Mapping[str, float], sites: Sequence[str] = SITES) -> dict[str, float]:
    """Validate `site.fault -> probability`: known names, 0 <= p, each site's sum <= 1."""
    out: dict[str, float] = {}
    totals: dict[str, float] = dict.fromkeys(sites, 0.0)
    for name, rate in rates.items():
        if name not in FAULTS:
            raise ConfigError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
        site = name.partition(".")[0]
        if site not in sites:
            raise ConfigError(f"fault {name!r} does not apply here (sites: {', '.join(sites)})")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ConfigError(f"fault {name!r}: rate must be a number in [0, 1], got {rate!r}")
        out[name] = float(rate)
        totals[site] += float(rate)
    for site, total in totals.items():
        if total > 1 + 1e-9:
            raise ConfigError(f"the {site} faults' rates sum to {total:.3f} > 1")
    return out


def _draw(seed: int, site: str, key: str) -> float:
    digest = hashlib.blake2b(f"{seed}|{site}|{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _pick(rates: Mapping[str, float], seed: int, site: str, key: str) -> str | None:
    """The fault (if any) this call gets: one uniform draw against the cumulative rates."""
    if not rates:
        return None
    u = _draw(seed, site, key)
    total = 0.0
    for name in sorted(rates):
        if not name.startswith(site + "."):
            continue
        total += rates[name]
        if u < total:
            return name
    return None


def _rollout_key() -> str:
    current = current_rollout()
    return "-" if current is None else f"{current.task_id}\x1f{current.repeat}"


# Which kind of code is running a sandbox call: "open", "tool" or "verify".
_USER: contextvars.ContextVar[str] = contextvars.ContextVar("nemo_gym.faults.user", default="")
# The attempt numbers of the model calls in progress, outermost first (each retry loop
# calls _generate again; a stacked wrapper's attempts are part of an inner one's key).
_ATTEMPT: contextvars.ContextVar[tuple[list[int], ...]] = contextvars.ContextVar(
    "nemo_gym.faults.attempt", default=()
)


class Ledger:
    """What a plan injected: counts by fault, episodes and sandboxes opened and closed,
    and — per rollout, until taken — the faults that must end it.

    `take(task_id, repeat)` pops what a finished rollout was given; a consumer that takes
    every rollout it receives keeps the ledger as small as the rollouts in flight.
    """

    def __init__(self) -> None:
        self.injected: Counter[str] = Counter()
        self.episodes_opened = 0
        self.episodes_closed = 0
        self.sandboxes_started = 0
        self.sandboxes_closed = 0
        self._ending: dict[tuple[str, int], list[tuple[str, Outcome]]] = {}

    def note(self, fault: str) -> None:
        self.injected[fault] += 1

    def ends(self, fault: str, outcome: Outcome) -> None:
        """Record that `fault` must end the current rollout with `outcome`."""
        current = current_rollout()
        if current is None:
            return
        self._ending.setdefault((current.task_id, current.repeat), []).append((fault, outcome))

    def retract(self, fault: str) -> None:
        """Take back the current rollout's last record of `fault` (it was retried)."""
        current = current_rollout()
        if current is None:
            return
        key = (current.task_id, current.repeat)
        found = self._ending.get(key, [])
        for index in range(len(found) - 1, -1, -1):
            if found[index][0] == fault:
                del found[index]
                break
        if not found:
            self._ending.pop(key, None)

    def take(self, task_id: str, repeat: int) -> tuple[str, Outcome] | None:
        """The first fault that must have ended this rollout, and how; None if none did.

        Later ones do not count: once a rollout failed, a close fault after it (say) must
        not replace its failure.
        """
        found = self._ending.pop((task_id, repeat), None)
        return found[0] if found else None

    @property
    def pending(self) -> int:
        """Rollouts with a recorded fault not yet taken."""
        return len(self._ending)

    def __repr__(self) -> str:
        return (
            f"Ledger({sum(self.injected.values())} injected, episodes "
            f"{self.episodes_opened}/{self.episodes_closed}, sandboxes "
            f"{self.sandboxes_started}/{self.sandboxes_closed})"
        )


class _Injector:
    """What every wrapper shares: the seed, the rates for its site, the ledger."""

    def _setup(
        self,
        seed: int,
        rates: Mapping[str, float] | None,
        ledger: Ledger | None,
        slow_s: float,
        hang_s: float,
    ) -> None:
        self.seed = seed
        self.rates = check_rates(rates or {})
        self.ledger = ledger if ledger is not None else Ledger()
        self.slow_s = slow_s
        self.hang_s = hang_s

    def _fault(self, site: str, key: str) -> str | None:
        """The fault (if any) of this call at `site` (one draw over the site's rates)."""
        fault = _pick(self.rates, self.seed, site, key)
        if fault is not None:
            self.ledger.note(fault)
        return fault

    def _happens(self, fault: str, key: str) -> bool:
        """Whether the one fault `fault` hits this call (its own draw)."""
        hit = _draw(self.seed, fault, key) < self.rates.get(fault, 0.0)
        if hit:
            self.ledger.note(fault)
        return hit


# --------------------------------------------------------------------------- model


def _fingerprint(request: ModelRequest) -> str:
    """Where a call is within its rollout: the turn (messages so far) and the seed."""
    seed = request.sampling.seed
    if current_rollout() is not None:
        return f"{len(request.messages)}|{seed}"
    text = "\x1e".join(f"{m.role}:{m.content}" for m in request.messages)
    return hashlib.blake2b(f"{text}|{seed}".encode(), digest_size=8).hexdigest()


class FaultyModel(ModelAdapter, _Injector):
    """A model that fails the way model servers do, and calls `inner` when it does not.

    Transient faults (`server_error`, `rate_limited` with `retry_after_s`, `timeout`,
    `connection_reset`, `truncated_body`) raise retryable `ModelError`s with the codes
    the built-in adapters use, through this adapter's own retry loop (`max_attempts`,
    fast backoff): a call fails only when every attempt drew one. The rest replace the
    reply (`malformed_tool_call`, `empty_content`), delay it (`slow`: `slow_s`; `hang`:
    `hang_s`) or raise `InjectedBaseException`. Stacked, an outer wrapper retrying an
    inner one's transient error takes it off the ledger again.
    """

    spec_exclude = frozenset({"api_key", "ledger"})

    def __init__(
        self,
        inner: Model,
        *,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        ledger: Ledger | None = None,
        slow_s: float = 0.05,
        hang_s: float = 3600.0,
        retry_after_s: float = 0.01,
        max_attempts: int = 3,
    ) -> None:
        super().__init__(
            retry=RetryPolicy(
                max_attempts=max_attempts,
                initial_backoff_s=0.001,
                max_backoff_s=0.01,
                max_retry_after_s=max(1.0, retry_after_s),
            )
        )
        self.inner = inner
        self.retry_after_s = retry_after_s
        self._setup(seed, rates, ledger, slow_s, hang_s)
        check_rates(self.rates, ("model",))

    async def generate(self, request: ModelRequest) -> ModelResponse:
        token = _ATTEMPT.set((*_ATTEMPT.get(), [0]))
        try:
            return await super().generate(request)
        except BaseException as exc:
            fault = getattr(exc, "fault", None)
            if fault in FAULTS and getattr(exc, "fault_ledger", None) is None:
                self.ledger.ends(fault, FAULTS[fault].outcome)  # type: ignore[arg-type]
                exc.fault_ledger = self.ledger  # type: ignore[attr-defined]
            raise
        finally:
            _ATTEMPT.reset(token)

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        path = _ATTEMPT.get()
        if path:
            path[-1][0] += 1
        attempt = ".".join(str(level[0]) for level in path)
        fault = self._fault("model", f"{_rollout_key()}|{_fingerprint(request)}|{attempt}")
        if fault is None:
            return await self._inner(request)
        name = fault.partition(".")[2]
        if name in _TRANSIENT:
            code, status, retry_after = _TRANSIENT[name]
            error = ModelError(
                f"injected fault {fault}",
                retryable=True,
                status_code=status,
                code=code,
                retry_after_s=self.retry_after_s if retry_after else None,
            )
            error.fault = fault  # type: ignore[attr-defined]
            raise error
        if name == "base_exception":
            raise InjectedBaseException(fault)
        if name == "empty_content":
            self.ledger.ends(fault, FAULTS[fault].outcome)  # type: ignore[arg-type]
            return ModelResponse(
                message=Message.assistant(""), finish_reason="stop", metadata={"fault": fault}
            )
        if name == "malformed_tool_call":
            tool = request.tools[0].name if request.tools else "no_such_tool"
            call = ToolCall(id="fault-call", name=tool, arguments='{"broken": ')
            return ModelResponse(
                message=Message.assistant(tool_calls=(call,)),
                finish_reason="tool_calls",
                metadata={"fault": fault},
            )
        if name == "hang":
            self.ledger.ends(fault, FAULTS[fault].outcome)  # type: ignore[arg-type]
            await asyncio.sleep(self.hang_s)
        else:  # slow
            await asyncio.sleep(self.slow_s)
        return await self._inner(request)

    async def _inner(self, request: ModelRequest) -> ModelResponse:
        try:
            return await self.inner.generate(request)
        except ModelError as exc:
            # A wrapped FaultyModel gave up on a transient fault: this one may retry it,
            # so it is not (yet) the rollout's end.
            ledger = getattr(exc, "fault_ledger", None)
            if ledger is not None and exc.retryable:
                ledger.retract(exc.fault)  # type: ignore[attr-defined]
                exc.fault_ledger = None  # type: ignore[attr-defined]
            raise

    async def aclose(self) -> None:
        """Close the wrapped model (the wrapper holds nothing of its own)."""
        await aclose(self.inner)

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("inner")
        if name.startswith("_") or inner is None:
            raise AttributeError(name)
        return getattr(inner, name)


_TRANSIENT: dict[str, tuple[str, int | None, bool]] = {
    "server_error": ("server_error", 503, False),
    "rate_limited": ("rate_limited", 429, True),
    "timeout": ("timeout", None, False),
    "connection_reset": ("connection_error", None, False),
    "truncated_body": ("bad_response", 200, False),
}


WIRE_FAULTS = (
    "server_error",
    "rate_limited",
    "timeout",
    "connection_reset",
    "truncated_body",
    "malformed_tool_call",
    "empty_content",
)
"""The model faults `WireFaults` makes on the wire (`model.<name>` outcomes apply)."""


class WireFaults:
    """The same model faults one layer down: a `FakeOpenAI` reply function that answers
    with real HTTP failures, for testing an adapter's own mapping and retries.

    ```python
    fake = FakeOpenAI(WireFaults(lambda body: "4", seed=1, rates={"server_error": 0.1}))
    model = OpenAIChat("m", client=fake.client)
    ```

    `server_error` is a 503, `rate_limited` a 429 with `Retry-After: retry_after_s`,
    `timeout` and `connection_reset` raise `httpx2.ReadTimeout` / `httpx2.ReadError` in
    the transport, `truncated_body` is a 200 whose JSON is cut off, `malformed_tool_call`
    a tool call with arguments that are not JSON, `empty_content` content "". A retry
    of the same request gets a fresh draw (the key counts how often a body was seen).
    """

    def __init__(
        self,
        reply: Any,
        *,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        retry_after_s: float = 0.01,
    ) -> None:
        unknown = set(rates or {}) - set(WIRE_FAULTS)
        if unknown:
            raise ConfigError(f"unknown wire faults {sorted(unknown)}; known: {WIRE_FAULTS}")
        self.reply = reply
        self.seed = seed
        self.rates = {f"model.{k}": float(v) for k, v in (rates or {}).items()}
        check_rates(self.rates, ("model",))
        self.retry_after_s = retry_after_s
        self.injected: Counter[str] = Counter()
        self._seen: Counter[str] = Counter()

    async def __call__(self, body: dict[str, Any]) -> Any:
        import json

        import httpx2

        from nemo_gym.testing.fakes import completion_body

        text = json.dumps(body.get("messages"), sort_keys=True) + f"|{body.get('seed')}"
        digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        self._seen[digest] += 1
        fault = _pick(self.rates, self.seed, "model", f"{digest}|{self._seen[digest]}")
        if fault is None:
            reply = self.reply(body)
            return await reply if asyncio.iscoroutine(reply) else reply
        name = fault.partition(".")[2]
        self.injected[name] += 1
        error = {"error": {"message": f"injected fault {fault}", "type": "fault"}}
        if name == "server_error":
            return httpx2.Response(503, json=error)
        if name == "rate_limited":
            headers = {"retry-after": str(self.retry_after_s)}
            return httpx2.Response(429, json=error, headers=headers)
        if name == "timeout":
            raise httpx2.ReadTimeout(f"injected fault {fault}")
        if name == "connection_reset":
            raise httpx2.ReadError(f"injected fault {fault}: connection reset by peer")
        model = body.get("model") or "fake-model"
        if name == "truncated_body":
            whole = json.dumps(completion_body("cut off", model=model, index=0)).encode()
            headers = {"content-type": "application/json"}
            return httpx2.Response(200, content=whole[: len(whole) // 2], headers=headers)
        if name == "empty_content":
            return completion_body("", model=model, index=0)
        tools = body.get("tools") or [{"function": {"name": "no_such_tool"}}]
        call = ToolCall(id="fault-call", name=tools[0]["function"]["name"], arguments='{"x": ')
        return completion_body(Message.assistant(tool_calls=(call,)), model=model, index=0)


# --------------------------------------------------------------------------- verifier


class FaultyVerifier(_Injector):
    """A verifier that raises, hangs, returns NaN/inf or a str, or raises a
    `BaseException` / spurious `CancelledError`, and otherwise asks `inner`."""

    def __init__(
        self,
        inner: Verifier | Any,
        *,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        ledger: Ledger | None = None,
        slow_s: float = 0.05,
        hang_s: float = 3600.0,
    ) -> None:
        self.inner = as_verifier(inner)
        self._setup(seed, rates, ledger, slow_s, hang_s)
        check_rates(self.rates, ("verifier",))

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards | float | Any:
        fault = self._fault("verifier", _rollout_key())
        token = _USER.set("verify")
        try:
            if fault is None:
                return await self.inner.verify(task, trajectory)
            outcome = FAULTS[fault].outcome
            if outcome is not None:
                self.ledger.ends(fault, outcome)
            name = fault.partition(".")[2]
            if name == "error":
                raise InjectedFault(fault)
            if name == "base_exception":
                raise InjectedBaseException(fault)
            if name == "cancelled":
                raise asyncio.CancelledError(f"injected fault {fault}")
            if name == "nan":
                return float("nan")
            if name == "inf":
                return float("inf")
            if name == "wrong_type":
                return "high"
            await asyncio.sleep(self.hang_s if name == "hang" else self.slow_s)
            return await self.inner.verify(task, trajectory)
        finally:
            _USER.reset(token)

    async def aclose(self) -> None:
        await aclose(self.inner)

    def __repr__(self) -> str:
        return f"FaultyVerifier({self.inner!r})"


# --------------------------------------------------------------------------- tools


class FaultyTool(_Injector):
    """A tool that raises (an ordinary exception, `ToolError`, `InjectedBaseException`),
    hangs or is slow, else calls `inner`. Same `spec`, so the model sees the same tool.

    `shows_errors` (ToolLoop's default `tool_errors="model"`) and `bounded` (the harness
    has a `tool_timeout`) say what its harness does, which decides the outcome: an
    ordinary error and a bounded hang are shown to the model, not failures.
    """

    def __init__(
        self,
        inner: Tool,
        *,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        ledger: Ledger | None = None,
        slow_s: float = 0.05,
        hang_s: float = 3600.0,
        shows_errors: bool = True,
        bounded: bool = False,
    ) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.shows_errors = shows_errors
        self.bounded = bounded
        self._setup(seed, rates, ledger, slow_s, hang_s)
        check_rates(self.rates, ("tool",))
        self._calls = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def fn(self) -> Any:
        return self.inner.fn

    def _outcome(self, name: str) -> Outcome | None:
        if name == "error":
            return None if self.shows_errors else _o("tool", "tool", "harness")
        if name == "hang":
            return None if self.bounded else _TIMEOUT
        return FAULTS[f"tool.{name}"].outcome

    async def __call__(self, **arguments: Any) -> Any:
        ordinal = self._calls
        self._calls += 1
        fault = self._fault("tool", f"{_rollout_key()}|{self.spec.name}|{ordinal}")
        token = _USER.set("tool")
        try:
            if fault is None:
                return await self.inner(**arguments)
            name = fault.partition(".")[2]
            outcome = self._outcome(name)
            if outcome is not None:
                self.ledger.ends(fault, outcome)
            if name == "error":
                raise InjectedFault(fault)
            if name == "tool_error":
                error = ToolError(f"injected fault {fault}")
                error.fault = fault  # type: ignore[attr-defined]
                raise error
            if name == "base_exception":
                raise InjectedBaseException(fault)
            await asyncio.sleep(self.hang_s if name == "hang" else self.slow_s)
            return await self.inner(**arguments)
        finally:
            _USER.reset(token)


# --------------------------------------------------------------------------- sandboxes

_SANDBOX_OUTCOME = {
    "verify": _o("verifier", "sandbox", "verify"),
    "open": _o("sandbox", "sandbox", "open"),
    "tool": _o("sandbox", "sandbox", "harness"),
    "": _o("sandbox", "sandbox", "harness"),
}


class FaultySandbox(_Injector):
    """A sandbox that dies mid-exec: the exec starts, then `SandboxError`, and every later
    call raises too. The outcome depends on who was using it: the verifier (a verifier
    failure with code `sandbox`), `open` (a `sandbox` failure at open) or a tool (a
    `sandbox` failure: the documented contract for a broken sandbox)."""

    def __init__(
        self,
        inner: Sandbox,
        *,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        ledger: Ledger | None = None,
        slow_s: float = 0.05,
        hang_s: float = 3600.0,
    ) -> None:
        self.inner = inner
        self._setup(seed, rates, ledger, slow_s, hang_s)
        check_rates(self.rates, ("sandbox",))
        self._execs = 0
        self.dead = False

    def _check_alive(self) -> None:
        if self.dead:
            raise SandboxError("injected fault sandbox.die: the sandbox is dead")

    async def exec(self, cmd: str | Sequence[str], **options: Any) -> ExecResult:
        self._check_alive()
        ordinal = self._execs
        self._execs += 1
        fault = self._fault("sandbox", f"{_rollout_key()}|{_USER.get()}|{ordinal}")
        if fault is None:
            return await self.inner.exec(cmd, **options)
        self.ledger.ends(fault, _SANDBOX_OUTCOME.get(_USER.get(), _SANDBOX_OUTCOME[""]))
        self.dead = True
        await asyncio.sleep(0)  # the command started; then the sandbox went away
        error = SandboxError(f"injected fault {fault}: the sandbox died mid-exec")
        error.fault = fault  # type: ignore[attr-defined]
        raise error

    async def write_file(self, path: str, data: str | bytes) -> None:
        self._check_alive()
        await self.inner.write_file(path, data)

    async def read_file(self, path: str) -> bytes:
        self._check_alive()
        return await self.inner.read_file(path)

    async def aclose(self) -> None:
        await self.inner.aclose()


class FaultyProvider(Described, _Injector):
    """A sandbox provider whose sandboxes are `FaultySandbox`es (and counted: started and
    closed, in the ledger). Rebuildable from its spec when `inner` is."""

    spec_kind = "sandbox"
    spec_exclude = frozenset({"ledger"})
    name = "faulty"

    def __init__(
        self,
        inner: SandboxProvider,
        *,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.inner = inner
        self._setup(seed, rates, ledger, 0.0, 0.0)
        check_rates(self.rates, ("sandbox",))

    @asynccontextmanager
    async def start(self, spec: SandboxSpec | None = None) -> AsyncIterator[Sandbox]:
        async with self.inner.start(spec) as sandbox:
            self.ledger.sandboxes_started += 1
            try:
                yield FaultySandbox(sandbox, seed=self.seed, rates=self.rates, ledger=self.ledger)
            finally:
                self.ledger.sandboxes_closed += 1

    async def aclose(self) -> None:
        await aclose(self.inner)


# --------------------------------------------------------------------------- environment


class _FaultyEpisode:
    """The inner episode with its tools and sandbox wrapped; closing it may fail."""

    def __init__(self, env: FaultyEnv, inner: Any) -> None:
        self._env = env
        self._inner = inner
        tool_rates = {k: v for k, v in env.rates.items() if k.startswith("tool.")}
        harness = env.harness
        bounded = getattr(harness, "tool_timeout", None) is not None
        shows = getattr(harness, "tool_errors", "model") == "model"
        # A FaultyTool serves what a harness uses of a Tool (spec, name, fn, awaited
        # call) but Tool is a concrete class, not a protocol: the cast says so once, so
        # this wrapper is an Episode wherever the inner one is.
        self.tools = cast(
            Sequence[Tool],
            tuple(
                FaultyTool(
                    t,
                    seed=env.seed,
                    rates=tool_rates,
                    ledger=env.ledger,
                    slow_s=env.slow_s,
                    hang_s=env.hang_s,
                    shows_errors=shows,
                    bounded=bounded,
                )
                for t in getattr(inner, "tools", ())
            ),
        )
        sandbox = getattr(inner, "sandbox", None)
        sandbox_rates = {k: v for k, v in env.rates.items() if k.startswith("sandbox.")}
        self.sandbox = (
            FaultySandbox(sandbox, seed=env.seed, rates=sandbox_rates, ledger=env.ledger)
            if sandbox is not None and sandbox_rates
            else sandbox
        )

    @property
    def state(self) -> Any:
        return getattr(self._inner, "state", None)

    def final_state(self) -> Any:
        return self._inner.final_state()

    def __getattr__(self, name: str) -> Any:  # step() and whatever else the harness uses
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    async def __aenter__(self) -> _FaultyEpisode:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        ledger = self._env.ledger
        try:
            result = await self._inner.__aexit__(*exc_info)
        finally:
            ledger.episodes_closed += 1
        if self._env._happens("env.close", _rollout_key()):
            ledger.ends("env.close", FAULTS["env.close"].outcome)  # type: ignore[arg-type]
            raise InjectedFault("env.close")
        return result


class FaultyEnv(Described, _Injector):
    """`inner` with faults in `open` and close (`env.*`), its verifier (`verifier.*`), its
    episodes' tools (`tool.*`) and sandbox (`sandbox.*`); rows keep `inner`'s name.

    The ledger counts episodes opened and closed. An `open` fault is raised before
    `inner.open` is called (nothing to release); a `close` fault after the inner
    episode closed. Rebuildable from its spec when `inner` is.
    """

    spec_kind = "env"
    spec_exclude = frozenset({"ledger"})

    def __init__(
        self,
        inner: Environment,
        *,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        ledger: Ledger | None = None,
        slow_s: float = 0.05,
        hang_s: float = 3600.0,
    ) -> None:
        self.inner = inner
        self._setup(seed, rates, ledger, slow_s, hang_s)
        self.name = inner.name
        self.version = getattr(inner, "version", None)
        self.harness = getattr(inner, "harness", None)
        verifier_rates = {k: v for k, v in self.rates.items() if k.startswith("verifier.")}
        self.verifier: Verifier = FaultyVerifier(
            inner.verifier,
            seed=seed,
            rates=verifier_rates,
            ledger=self.ledger,
            slow_s=slow_s,
            hang_s=hang_s,
        )

    def tasks(self, split: str = "test", limit: int | None = None) -> Any:
        return self.inner.tasks(split=split, limit=limit)

    async def open(self, task: Task) -> _FaultyEpisode:
        if self._happens("env.open", _rollout_key()):
            self.ledger.ends("env.open", FAULTS["env.open"].outcome)  # type: ignore[arg-type]
            raise InjectedFault("env.open")
        token = _USER.set("open")
        try:
            episode = await self.inner.open(task)
        finally:
            _USER.reset(token)
        self.ledger.episodes_opened += 1
        return _FaultyEpisode(self, episode)

    async def aclose(self) -> None:
        await aclose(self.inner)

    def to_spec(self) -> Spec:
        # Named by its type: the inner env's registry name would rebuild the inner env.
        return Spec(
            kind="env",
            name="FaultyEnv",
            version=self.version,
            options=jsonable_options(self.__dict__.get("_spec_options", {})),
            target=f"{__name__}:FaultyEnv",
        )


# --------------------------------------------------------------------------- the plan


class FaultPlan:
    """A seed and fault rates, and the wrappers that inject them into one shared ledger.

    `rates` maps `site.fault` (see `FAULTS`) to a probability per call; `slow_s` is a
    slow fault's delay, `hang_s` a hang's (keep it above the run's `timeout`, which
    ends it). `retry_after_s` is the rate limit's Retry-After, `max_attempts` the
    faulty model's retry budget.
    """

    def __init__(
        self,
        seed: int = 0,
        rates: Mapping[str, float] | None = None,
        *,
        slow_s: float = 0.05,
        hang_s: float = 3600.0,
        retry_after_s: float = 0.01,
        max_attempts: int = 3,
    ) -> None:
        self.seed = seed
        self.rates = check_rates(MIXED if rates is None else rates)
        self.slow_s = slow_s
        self.hang_s = hang_s
        self.retry_after_s = retry_after_s
        self.max_attempts = max_attempts
        self.ledger = Ledger()

    def _site(self, *sites: str) -> dict[str, float]:
        return {k: v for k, v in self.rates.items() if k.partition(".")[0] in sites}

    def wrap_model(self, model: Model) -> FaultyModel:
        return FaultyModel(
            model,
            seed=self.seed,
            rates=self._site("model"),
            ledger=self.ledger,
            slow_s=self.slow_s,
            hang_s=self.hang_s,
            retry_after_s=self.retry_after_s,
            max_attempts=self.max_attempts,
        )

    def wrap_env(self, env: Environment) -> FaultyEnv:
        return FaultyEnv(
            env,
            seed=self.seed,
            rates=self._site("env", "verifier", "tool", "sandbox"),
            ledger=self.ledger,
            slow_s=self.slow_s,
            hang_s=self.hang_s,
        )

    def wrap_verifier(self, verifier: Verifier | Any) -> FaultyVerifier:
        return FaultyVerifier(
            verifier,
            seed=self.seed,
            rates=self._site("verifier"),
            ledger=self.ledger,
            slow_s=self.slow_s,
            hang_s=self.hang_s,
        )

    def wrap_tool(self, tool: Tool, *, shows_errors: bool = True, bounded: bool = False) -> Any:
        return FaultyTool(
            tool,
            seed=self.seed,
            rates=self._site("tool"),
            ledger=self.ledger,
            slow_s=self.slow_s,
            hang_s=self.hang_s,
            shows_errors=shows_errors,
            bounded=bounded,
        )

    def wrap_sandbox(self, sandbox: Sandbox) -> FaultySandbox:
        return FaultySandbox(
            sandbox, seed=self.seed, rates=self._site("sandbox"), ledger=self.ledger
        )

    def wrap_provider(self, provider: SandboxProvider) -> FaultyProvider:
        return FaultyProvider(
            provider, seed=self.seed, rates=self._site("sandbox"), ledger=self.ledger
        )

    def __repr__(self) -> str:
        return f"FaultPlan(seed={self.seed}, {len(self.rates)} faults, {self.ledger!r})"
