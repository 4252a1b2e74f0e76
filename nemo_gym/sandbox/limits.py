"""Resource limits: the provider defaults and their translation into worker rlimits.

`ResourceLimits` (records.py) says what a sandbox should enforce per exec; a field left
`None` takes the provider default below. `worker_limits` turns the result into the
plain dict the in-sandbox worker applies with `setrlimit` in each forked child.
"""

from __future__ import annotations

import math
from typing import Any

from nemo_gym.errors import ConfigError
from nemo_gym.records import ResourceLimits, SandboxSpec

DEFAULT_LIMITS = ResourceLimits()
"""What a `None` field of `ResourceLimits` means for the `local` and `process` providers:
the record's own defaults, so one place holds the numbers."""

DEFAULT_TIMEOUT_S = 60.0
"""Wall-clock deadline of one exec when the caller passes no `timeout`."""

DEFAULT_DISK_BYTES = 256 << 20
"""Size of the `local` sandbox's workdir (a tmpfs) and of its /tmp; `options["disk_bytes"]`."""

_FIELDS = (
    "cpu_seconds",
    "memory_bytes",
    "file_size_bytes",
    "open_files",
    "processes",
    "output_bytes",
)


def resolve(limits: ResourceLimits | None) -> ResourceLimits:
    """Fill every `None` field from `DEFAULT_LIMITS` and check the values are positive."""
    limits = limits or DEFAULT_LIMITS
    values: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(limits, name)
        if value is None:
            value = getattr(DEFAULT_LIMITS, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"ResourceLimits.{name} must be a positive number, got {value!r}")
        values[name] = value
    return ResourceLimits(**values)


def worker_limits(limits: ResourceLimits) -> dict[str, int]:
    """The rlimits (and output cap) the worker applies to each child, from resolved limits.

    RLIMIT_CPU gets a hard limit one second above the soft one, so a process first sees
    SIGXCPU (it may print why it dies) and is killed outright a second later.
    """
    limits = resolve(limits)
    assert limits.cpu_seconds is not None  # resolve() filled every field
    return {
        "cpu": max(1, math.ceil(limits.cpu_seconds)),
        "as": int(limits.memory_bytes or 0),
        "fsize": int(limits.file_size_bytes or 0),
        "nofile": int(limits.open_files or 0),
        "nproc": int(limits.processes or 0),
        "output": int(limits.output_bytes or 0),
    }


def disk_bytes(spec: SandboxSpec) -> int:
    """The workdir size of a `local` sandbox: `spec.options["disk_bytes"]` or the default."""
    value = spec.options.get("disk_bytes", DEFAULT_DISK_BYTES)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(
            f"SandboxSpec.options['disk_bytes'] must be a positive int, got {value!r}"
        )
    return value


def check_timeout(timeout: float | None) -> float:
    """The exec deadline in seconds: `timeout`, or the default; rejects non-positive values."""
    if timeout is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)
