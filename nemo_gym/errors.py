"""One exception hierarchy; every failure carries the kind it is recorded under.

A rollout that fails is recorded with a `Failure` (see `records.py`) whose `kind` comes
from the exception raised: `ModelError` -> "model", `VerifierError` -> "verifier", and
so on. Exceptions that are not `NemoGymError` are classified by where they happened.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

FailureKind = Literal[
    "model",
    "tool",
    "verifier",
    "sandbox",
    "harness",
    "environment",
    "timeout",
    "cancelled",
]


class NemoGymError(Exception):
    """Base of every error nemo_gym raises.

    `code` is a finer label than `kind` (for example "judge_failed" for a verifier
    failure caused by an unusable judge reply); it defaults to the kind.
    """

    kind: ClassVar[FailureKind] = "harness"
    # Set when this error wraps another exception (a user's model raising ValueError):
    # the recorded `Failure.error_type` names that exception's type, not ours.
    error_type: str | None = None

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.kind


class ConfigError(NemoGymError, ValueError):
    """Bad input from the user: a file, an option, a name. The message says where."""

    kind = "environment"


class ModelError(NemoGymError):
    """A model call failed. `retryable` marks transient errors (rate limits, 5xx, timeouts).

    `retry_after_s` is the server's `Retry-After` (seconds) when it sent one; `attempts`
    is how many attempts were made before giving up (set by the retry loop).
    """

    kind = "model"

    def __init__(
        self,
        message: str = "",
        *,
        retryable: bool = False,
        status_code: int | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.attempts = 1


class ToolError(NemoGymError):
    """A tool failed in a way the rollout cannot recover from.

    An ordinary exception raised by a tool is shown to the model as the tool's result;
    raise `ToolError` when the episode itself is broken (a dead sandbox, a lost
    connection) and the rollout must end as failed.
    """

    kind = "tool"


class VerifierError(NemoGymError):
    """A verifier could not score a trajectory (crash, timeout, unusable judge reply)."""

    kind = "verifier"


class SandboxError(NemoGymError):
    """A sandbox could not be started, used or stopped."""

    kind = "sandbox"


class HarnessError(NemoGymError):
    """The agent loop broke its own contract (not the model's or a tool's fault)."""

    kind = "harness"


class EpisodeError(NemoGymError):
    """An environment could not open or close an episode."""

    kind = "environment"


class RolloutTimeout(NemoGymError, TimeoutError):
    """A rollout ran past its deadline."""

    kind = "timeout"


class MissingDependency(NemoGymError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    kind = "environment"

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package!r} is not installed; install it with: pip install 'nemo-gym[{extra}]'"
        )
        self.package = package
        self.extra = extra


def require(module: str, extra: str) -> Any:
    """Import an optional dependency or raise `MissingDependency` naming its extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(module.split(".")[0], extra) from exc
