"""NeMo Gym servers ported in the fourth round that need no judge (see `servers.py` for
how a `Server` maps rows to tasks). `servers.SERVERS` includes these."""

from __future__ import annotations

from nemo_gym.envs.rows import Row
from nemo_gym.interop.nemo_gym.servers import Server, row_task
from nemo_gym.records import Task

__all__ = ["PJ5_SERVERS"]


def _swe_pivot(row: Row, server: str) -> Task:
    from nemo_gym.envs.tools.swe_pivot import pivot_action

    return row_task(row, server, expected_action=pivot_action(row))


PJ5_SERVERS: list[Server] = [
    # Its config: reward_mode binary and every level on (the class defaults).
    Server("swe_pivot", "next_action", _swe_pivot, lambda rows: {"match": "swe_pivot"}),
]
