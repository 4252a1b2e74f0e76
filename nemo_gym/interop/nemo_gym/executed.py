"""NeMo Gym's execution-based servers: the reply's code runs against the row's own tests
in our sandbox (`CodeVerifier`), with NeMo Gym's pass rule for each server.

- `scicodepile`: the row's `verifier_metadata` carries `setup_code`, the `test` source
  (a `def check(candidate)`) and the `entry_point`. NeMo Gym runs setup, then the reply's
  code, then the test in one module namespace and passes the task when
  `check(<entry_point>)` returns; reward 1 or 0, 120 s per task. Here the same three run
  in a fresh sandboxed process, the test (with its `check(<entry_point>)` call) as
  assertion code after the reply's code, and it passes only when that call ran to its
  end, proved with a nonce the reply cannot read: a reply that exits early or writes a
  forged verdict onto the runner's result descriptor scores 0 (NeMo Gym's runner says in
  its own docstring that its verdict is not tamper-proof, and it gives such a reply 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nemo_gym.envs.rows import Row
from nemo_gym.interop.nemo_gym.servers import Server, row_task
from nemo_gym.records import Task

__all__ = ["EXECUTED"]

# NeMo Gym's scicodepile `subprocess_timeout`: one bound for the whole task.
_SCICODEPILE_TIMEOUT_S = 120.0
# Its runner caps the address space at 30 GiB to stop a runaway allocation, not to
# measure the model; our sandbox's default 1 GiB would fail numpy-heavy solutions
# NeMo Gym passes. 8 GiB still bounds a runaway on a shared node.
_SCICODEPILE_MEMORY = 8 << 30


def _scicodepile(row: Row, server: str) -> Task:
    meta = row.require("verifier_metadata", dict)
    test, entry = meta.get("test"), meta.get("entry_point")
    # NeMo Gym scores such a row 0 with `failure_reason: malformed_task` at verify time;
    # a row that cannot be scored is a load error here, naming the row and field.
    if not isinstance(test, str) or not test.strip():
        raise row.bad("verifier_metadata.test", "must be the test source with a def check")
    if not isinstance(entry, str) or not entry.isidentifier():
        raise row.bad("verifier_metadata.entry_point", f"is {entry!r}; a Python identifier")
    setup = meta.get("setup_code") or ""
    if not isinstance(setup, str):
        raise row.bad("verifier_metadata.setup_code", "must be Python source")
    return row_task(
        row,
        server,
        asserts=[f"{test}\n\ncheck({entry})\n"],
        test_setup=setup,
        entry_point=entry,
    )


def _scicodepile_options(rows: Sequence[Row]) -> dict[str, Any]:
    from nemo_gym.records import ResourceLimits

    return {
        "timeout_per_test": _SCICODEPILE_TIMEOUT_S,
        "timeout_total": _SCICODEPILE_TIMEOUT_S,
        "limits": ResourceLimits(
            cpu_seconds=_SCICODEPILE_TIMEOUT_S, memory_bytes=_SCICODEPILE_MEMORY
        ),
    }


EXECUTED: list[Server] = [
    Server("scicodepile", "code", _scicodepile, _scicodepile_options, requires=("sandbox",)),
]
"""The execution-based servers, registered into `SERVERS`."""
