"""NeMo Gym's execution-based servers ported in the fourth round (see `servers.py` for how
a `Server` maps rows to tasks); `servers.SERVERS` includes these.

- `spider2_lite`: rows name a Spider 2.0-Lite SQLite database by `db_id` and carry a
  `gold_sql` (or `gold_result`, acceptable result sets). NeMo Gym downloads the databases
  at start-up; here `db_dir=` names the user's folder of `<db_id>.sqlite` files (NeMo
  Gym's `<spider2_lite_dir>/sqlite`, or that directory's parent), and a row whose database
  is not there is refused at load. The query runs read-only in a verification-pool
  process (`SQLVerifier`), and is read and compared by Spider 2.0-Lite's own rules
  (`nemo_gym.verify.spider2`), 30 s per query as in NeMo Gym.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nemo_gym.envs.rows import Row
from nemo_gym.interop.nemo_gym.servers import Server, row_task
from nemo_gym.records import Task

__all__ = ["PE3_SERVERS"]

# NeMo Gym's Spider2LiteResourcesServerConfig.sql_execution_timeout_s.
_SPIDER2_TIMEOUT_S = 30.0


def _spider2_lite(row: Row, server: str) -> Task:
    db_id = row.require("db_id", str)
    row.require("question", str)  # NeMo Gym's request model requires it too
    gold_sql, gold_result = row.get("gold_sql"), row.get("gold_result")
    if gold_sql is not None and (not isinstance(gold_sql, str) or not gold_sql.strip()):
        raise row.bad("gold_sql", "must be the gold SQL query")
    if not gold_sql:
        # NeMo Gym raises at verify time for such a row; it can never be scored.
        if not isinstance(gold_result, list) or not all(
            isinstance(s, list) and all(isinstance(r, list) for r in s) for s in gold_result
        ):
            raise row.bad("gold_sql", "is missing; a row needs gold_sql or gold_result")
    condition_cols = row.get("condition_cols") or []
    if not isinstance(condition_cols, list):
        raise row.bad("condition_cols", "must be a list of column indices (or of lists)")
    ignore_order = row.get("ignore_order", True)
    if not isinstance(ignore_order, bool):
        raise row.bad("ignore_order", "must be true or false")
    extra = {} if gold_sql else {"gold_result": gold_result}
    return row_task(
        row,
        server,
        answer=gold_sql or None,
        db_id=db_id,
        ignore_order=ignore_order,
        condition_cols=condition_cols,
        **extra,
    )


def _spider2_lite_options(rows: Sequence[Row]) -> dict[str, Any]:
    return {"match": "spider2", "timeout": _SPIDER2_TIMEOUT_S}


PE3_SERVERS: list[Server] = [
    Server("spider2_lite", "text_to_sql", _spider2_lite, _spider2_lite_options),
]
"""The execution-based servers of this round, registered into `SERVERS`."""
