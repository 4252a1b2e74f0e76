"""More NeMo Gym servers (see `servers.py` for how a `Server` maps rows to tasks): rule-based
scoring ported in the third round. `servers.SERVERS` includes these."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nemo_gym.envs.rows import Row
from nemo_gym.interop.nemo_gym.servers import Server, row_task
from nemo_gym.records import Task

__all__ = ["PR4_SERVERS"]


def _litmus(row: Row, server: str) -> Task:
    from nemo_gym.envs.knowledge.litmus import litmus_check

    check = litmus_check(row)
    return row_task(row, server, answer=str(check["expected"]), litmus=check)


def _iheval(row: Row, server: str) -> Task:
    from nemo_gym.envs.instructions.iheval import iheval_check

    return row_task(row, server, iheval=iheval_check(row))


def _litmus_options(rows: Sequence[Row]) -> dict[str, Any]:
    # NeMo Gym's configs/litmus_agent.yaml: float_rel_tol and float_abs_tol, 1e-6 each.
    return {"rel_tol": 1e-6, "abs_tol": 1e-6}


PR4_SERVERS: list[Server] = [
    Server("litmus_agent", "litmus", _litmus, _litmus_options),
    Server("iheval", "iheval", _iheval),
]
