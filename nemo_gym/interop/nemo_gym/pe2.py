"""NeMo Gym's execution-based servers ported in the third round (see `servers.py` for how
a `Server` maps rows to tasks); `servers.SERVERS` includes these."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nemo_gym.envs.rows import Row
from nemo_gym.interop.nemo_gym.servers import Server, row_task
from nemo_gym.records import Task

__all__ = ["PE2_SERVERS"]


def _math_with_code(row: Row, server: str) -> Task:
    return row_task(row, server, answer=row.require("expected_result", str))


def _math_with_code_options(rows: Sequence[Row]) -> dict[str, Any]:
    # Its configs/math_with_code.yaml: the simple agent's `max_steps: 3`.
    return {"max_turns": 3}


PE2_SERVERS: list[Server] = [
    Server(
        "math_with_code",
        "math_with_code",
        _math_with_code,
        _math_with_code_options,
        requires=("sandbox",),
    ),
]
"""The execution-based servers of this round, registered into `SERVERS`."""
