"""NeMo Gym's gene and molecule servers (see `servers.py` for how a `Server` maps rows to
tasks), each with the environment that runs it. `servers.SERVERS` includes these."""

from __future__ import annotations

from nemo_gym.envs.rows import Row
from nemo_gym.interop.nemo_gym.servers import Server, row_task
from nemo_gym.records import Task

__all__ = ["SCIENCE_SERVERS"]


def _assaybench(row: Row, server: str) -> Task:
    from nemo_gym.envs.knowledge.gene_ranking import assay_fields

    return row_task(row, server, **assay_fields(row))


SCIENCE_SERVERS: list[Server] = [
    Server("assaybench", "gene_ranking", _assaybench),
]
