"""Text-to-SQL: run the predicted and the gold query on SQLite and compare the results.

The task carries the gold query in `task.answer` and the database in `task.metadata`:

- ``{"db_path": "/data/concert_singer.sqlite"}``: an SQLite file, opened read-only
  (URI ``mode=ro``) and never modified; or
- ``{"db_setup": "CREATE TABLE t(x); INSERT INTO t VALUES (1);"}``: a script run into
  a fresh in-memory database for each verification.

The predicted query is the last ```sql fenced block of the reply (else the last fenced
block, else the whole reply). It runs on a connection that cannot write: the file is
opened read-only, ``PRAGMA query_only`` is on and an authorizer denies everything but
reading (no DROP, no ATTACH, no PRAGMA). A task's ``db_setup`` (a row's SQL context, so
hostile input too) runs under an authorizer as well: it may build the in-memory
database, never ATTACH a file, DETACH or run a PRAGMA, and the database may not grow
past `max_db_bytes`.

Every query runs in a process of the verification pool (`nemo_gym.verify.pool`), never
on a thread of the trainer: an SQLite progress handler stops it at its deadline, and a
call stuck inside one long SQLite step (a pathological ``LIKE``, a huge sort) is killed
with its worker, which the pool replaces. A string or blob value may not exceed
`max_bytes` (SQLite's length limit, so ``zeroblob(1e9)`` fails at once) and neither may
a whole result: rows are fetched in chunks and counted in bytes.

Results are compared as multisets of rows, or as ordered lists when the gold query has
an ``ORDER BY`` at its top level. Floats are compared after rounding to
`float_digits` significant digits, so ``AVG`` noise does not decide a match.

With ``match="spider2"`` the query is read and the results compared as Spider 2.0-Lite
(and NeMo Gym's `spider2_lite` server) do (`nemo_gym.verify.spider2`): column vectors,
the task's ``ignore_order`` and ``condition_cols``, and, for a task with no gold query,
its ``gold_result`` (a list of acceptable result sets).
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import GoldFn, get_gold, response_text
from nemo_gym.verify.extract import fenced_blocks
from nemo_gym.verify.spider2 import extract_spider2_sql, spider2_match

if TYPE_CHECKING:
    from nemo_gym.verify.pool import WorkerPool

log = logging.getLogger(__name__)

__all__ = ["QueryResult", "SQLVerifier", "extract_sql", "has_top_level_order_by", "run_query"]

_SQL_LANGS = ("sql", "sqlite", "postgresql", "mysql")

_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
# What a setup script may not do: reach a file or change how the connection behaves.
_SETUP_DENIED = frozenset({sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA})
_FETCH_CHUNK = 256
_PAGE_BYTES = 4096


def extract_sql(text: str) -> str:
    """The SQL in a reply: the last ```sql block, else the last fenced block, else all.

    A one-line ``` `SELECT ...` ``` in backticks and a leading ``SQL:`` are unwrapped.
    """
    blocks = fenced_blocks(text)
    tagged = [b for b in blocks if b.lang in _SQL_LANGS]
    if tagged or blocks:
        sql = (tagged or blocks)[-1].body
    else:
        sql = text
    sql = sql.strip()
    if sql.startswith("`") and sql.endswith("`"):
        sql = sql.strip("`").strip()
    if sql[:4].lower() == "sql:":
        sql = sql[4:].strip()
    return sql


# String literals, quoted names and comments; an unclosed one runs to the end. The
# possessive quantifiers (*+) make a run of quotes cost linear time, not quadratic.
_LITERAL = re.compile(
    r"'(?:[^']|'')*+(?:'|\Z)"
    r'|"(?:[^"]|"")*+(?:"|\Z)'
    r"|`[^`]*+(?:`|\Z)|\[[^\]]*+(?:\]|\Z)"
    r"|--[^\n]*+"
    r"|/\*(?:[^*]|\*(?!/))*+(?:\*/|\Z)"
)
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)
_ORDER_OR_PAREN = re.compile(r"[()]|\border\s+by\b", re.IGNORECASE)


def _strip_literals(sql: str) -> str:
    """`sql` with string literals, quoted names and comments blanked (offsets kept)."""
    return _LITERAL.sub(lambda m: " " * len(m.group()), sql)


def has_top_level_order_by(sql: str) -> bool:
    """Whether `sql` sorts its final result: an ORDER BY outside every parenthesis.

    ``OVER (ORDER BY ...)`` and an ORDER BY inside a subquery do not count.
    """
    if _ORDER_BY.search(sql) is None:
        return False
    depth = 0
    for m in _ORDER_OR_PAREN.finditer(_strip_literals(sql)):
        token = m.group()
        if token == "(":
            depth += 1
        elif token == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            return True
    return False


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Rows of one query, or the error it raised (`timed_out` on the deadline)."""

    rows: list[tuple[Any, ...]] | None
    error: str | None = None
    timed_out: bool = False
    seconds: float = 0.0


def _deny_writes(action: int, *args: object) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


def _setup_authorizer(action: int, *args: object) -> int:
    return sqlite3.SQLITE_DENY if action in _SETUP_DENIED else sqlite3.SQLITE_OK


def _value_bytes(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes) else 8


def _run(
    conn: sqlite3.Connection, sql: str, timeout: float, max_rows: int, max_bytes: int
) -> QueryResult:
    """Run one statement with a deadline checked every 1000 SQLite VM steps."""
    start = time.monotonic()
    deadline = start + timeout
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    try:
        cursor = conn.execute(sql)
        rows: list[tuple[Any, ...]] = []
        size = 0
        while chunk := cursor.fetchmany(_FETCH_CHUNK):
            rows += chunk
            size += sum(8 + sum(_value_bytes(v) for v in row) for row in chunk)
            elapsed = time.monotonic() - start
            if len(rows) > max_rows:
                return QueryResult(None, f"more than {max_rows} rows", seconds=elapsed)
            if size > max_bytes:
                return QueryResult(None, f"a result over {max_bytes} bytes", seconds=elapsed)
        return QueryResult(rows, seconds=time.monotonic() - start)
    except sqlite3.Error as exc:
        elapsed = time.monotonic() - start
        timed_out = elapsed >= timeout and "interrupt" in str(exc).lower()
        message = f"timed out after {timeout:g}s" if timed_out else f"{type(exc).__name__}: {exc}"
        return QueryResult(None, message, timed_out=timed_out, seconds=elapsed)
    except (ValueError, OverflowError, MemoryError) as exc:  # e.g. a NUL in the text
        return QueryResult(None, f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - start)
    finally:
        conn.set_progress_handler(None, 0)


def _connect(db: dict[str, Any], timeout: float, max_bytes: int, max_db_bytes: int) -> Any:
    """The task's database, read-only from here on; a str (the error) when it cannot be."""
    if "db_path" in db:
        uri = f"file:{urllib.parse.quote(db['db_path'])}?mode=ro"
        conn = sqlite3.connect(uri, uri=True)
    else:
        conn = sqlite3.connect(":memory:")
        conn.execute(f"PRAGMA max_page_count = {max(1, max_db_bytes // _PAGE_BYTES)}")
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_bytes)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    if "db_setup" in db:
        conn.set_authorizer(_setup_authorizer)
        deadline = time.monotonic() + timeout
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        try:
            conn.executescript(db["db_setup"])
        except (sqlite3.Error, TypeError, ValueError, OverflowError, MemoryError) as exc:
            conn.close()
            return f"db_setup failed: {type(exc).__name__}: {exc}"
        conn.set_progress_handler(None, 0)
        conn.set_authorizer(None)
    conn.execute("PRAGMA query_only = ON")
    conn.set_authorizer(_deny_writes)
    return conn


def run_query(
    db: dict[str, Any], sql: str, timeout: float, max_rows: int, max_bytes: int, max_db_bytes: int
) -> QueryResult:
    """Open the task's database (`{"db_path": ...}` or `{"db_setup": ...}`), run `sql`.

    Runs in a pool worker (see the module doc). A setup that fails comes back as a
    `QueryResult` whose error starts with "db_setup failed".
    """
    conn = _connect(db, timeout, max_bytes, max_db_bytes)
    if isinstance(conn, str):
        return QueryResult(None, conn)
    try:
        return _run(conn, sql, timeout, max_rows, max_bytes)
    finally:
        conn.close()


def _normalize_row(row: tuple[Any, ...], digits: int) -> tuple[Any, ...]:
    return tuple(float(f"{v:.{digits}g}") if isinstance(v, float) else v for v in row)


def _same(
    gold: list[tuple[Any, ...]], pred: list[tuple[Any, ...]], ordered: bool, digits: int
) -> bool:
    g = [_normalize_row(r, digits) for r in gold]
    p = [_normalize_row(r, digits) for r in pred]
    return g == p if ordered else Counter(g) == Counter(p)


class SQLVerifier:
    """Execution accuracy for text-to-SQL on SQLite (see the module docstring).

    Reward 1.0 when the predicted query returns the gold query's rows. A predicted
    query that fails, times out or returns more than `max_rows` rows scores 0, with the
    error in ``metadata["error"]``. A gold query that fails, or a missing database,
    raises `VerifierError`. Components: ``accuracy`` and ``executable`` (1.0 when the
    predicted query ran).
    """

    def __init__(
        self,
        timeout: float = 5.0,
        *,
        max_rows: int = 100_000,
        max_bytes: int = 16 << 20,
        max_db_bytes: int = 256 << 20,
        float_digits: int = 9,
        gold: GoldFn | None = None,
        extract: Callable[[str], str] | None = None,
        pool: WorkerPool | None = None,
        match: Literal["rows", "spider2"] = "rows",
    ) -> None:
        if timeout <= 0:
            raise ConfigError("SQLVerifier: timeout must be > 0")
        if max_rows < 1:
            raise ConfigError("SQLVerifier: max_rows must be >= 1")
        if max_bytes < 1 or max_db_bytes < _PAGE_BYTES:
            raise ConfigError("SQLVerifier: max_bytes must be >= 1 and max_db_bytes >= 4096")
        if match not in ("rows", "spider2"):
            raise ConfigError(f"SQLVerifier: match is {match!r}; 'rows' or 'spider2'")
        self.timeout = timeout
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.max_db_bytes = max_db_bytes
        self.float_digits = float_digits
        self.gold = gold
        self.match = match
        self.extract = extract or (extract_spider2_sql if match == "spider2" else extract_sql)
        self.pool = pool

    def _database(self, task: Task) -> dict[str, Any]:
        meta = task.metadata
        if "db_path" in meta:
            path = Path(meta["db_path"])
            if not path.is_file():
                raise VerifierError(f"task {task.id}: db_path {str(path)!r} is not a file")
            return {"db_path": str(path.resolve())}
        if "db_setup" in meta:
            if not isinstance(meta["db_setup"], str):
                raise VerifierError(f"task {task.id}: db_setup must be a string of SQL")
            return {"db_setup": meta["db_setup"]}
        raise VerifierError(f"task {task.id}: metadata needs 'db_path' or 'db_setup'")

    async def _query(self, db: dict[str, Any], sql: str) -> QueryResult:
        """`run_query` in a pool worker; a worker killed at the deadline is a time-out."""
        from nemo_gym.verify.pool import WorkerTimeout, shared_pool

        pool = self.pool or shared_pool()
        # setup and query each get `timeout`; the pool kills a call stuck in C past both
        # (its clock starts once the worker runs the call, so little slack is needed)
        budget = 2 * self.timeout + 0.25
        args = (db, sql, self.timeout, self.max_rows, self.max_bytes, self.max_db_bytes)
        try:
            result = await pool.call(run_query, *args, timeout=budget)
        except WorkerTimeout:
            message = f"timed out after {self.timeout:g}s (stuck inside SQLite, killed)"
            return QueryResult(None, message, timed_out=True, seconds=budget)
        assert isinstance(result, QueryResult)
        return result

    def _score(
        self,
        task: Task,
        gold_sql: str | None,
        gold: QueryResult,
        pred: QueryResult,
        pred_sql: str,
    ) -> Rewards:
        assert gold.rows is not None
        metadata: dict[str, Any] = {"extracted_answer": pred_sql, "seconds": pred.seconds}
        if pred.rows is None:
            metadata["error"] = pred.error
            metadata["timed_out"] = pred.timed_out
            return Rewards(
                reward=0.0, components={"accuracy": 0.0, "executable": 0.0}, metadata=metadata
            )
        if self.match == "spider2":
            meta = task.metadata
            gold_sets = [gold.rows] if gold_sql is not None else meta["gold_result"]
            score = float(
                spider2_match(
                    gold_sets,
                    pred.rows,
                    meta.get("condition_cols"),
                    bool(meta.get("ignore_order", True)),
                )
            )
        else:
            assert gold_sql is not None
            ordered = has_top_level_order_by(gold_sql)
            score = float(_same(gold.rows, pred.rows, ordered, self.float_digits))
            metadata["ordered"] = ordered
        if not score:
            metadata["reason"] = (
                f"result differs: {len(pred.rows)} row(s), gold has {len(gold.rows)}"
            )
        return Rewards(
            reward=score, components={"accuracy": score, "executable": 1.0}, metadata=metadata
        )

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Run both queries in pool workers and compare their rows."""
        gold_sql: str | None = None
        # Spider 2.0-Lite's validation rows carry acceptable result sets, not a query.
        by_result = self.match == "spider2" and task.answer is None and self.gold is None
        if not (by_result and isinstance(task.metadata.get("gold_result"), list)):
            gold_sql = get_gold(task, self.gold)
            if not isinstance(gold_sql, str):
                raise VerifierError(f"task {task.id}: the gold query must be a string")
        pred_sql = self.extract(response_text(trajectory))
        if not pred_sql.strip():
            return Rewards(
                reward=0.0,
                components={"accuracy": 0.0, "executable": 0.0},
                metadata={"extracted_answer": None, "error": "empty query"},
            )
        db = self._database(task)
        gold = QueryResult([]) if gold_sql is None else await self._query(db, gold_sql)
        if gold.rows is None:
            raise VerifierError(f"task {task.id}: the gold query failed: {gold.error}")
        pred = await self._query(db, pred_sql)
        return self._score(task, gold_sql, gold, pred, pred_sql)
