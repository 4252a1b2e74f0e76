"""Tests for the text-to-SQL verifier."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Message, Task, Trajectory
from nemo_gym.verify.sql import SQLVerifier, extract_sql, has_top_level_order_by

SETUP = """
CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
INSERT INTO singer VALUES (1, 'Ada', 'France', 31), (2, 'Bo', 'Japan', 25),
  (3, 'Cy', 'France', 40), (4, 'Di', 'Peru', 25);
"""


def reply(text: str) -> Trajectory:
    return Trajectory(messages=[Message.user("q"), Message.assistant(text)])


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    path = tmp_path / "concert.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SETUP)
    conn.commit()
    conn.close()
    return path


def test_extract_sql() -> None:
    assert extract_sql("Here:\n```sql\nSELECT 1;\n```\nand\n```sql\nSELECT 2\n```") == "SELECT 2"
    assert extract_sql("```\nSELECT 3\n```") == "SELECT 3"
    assert extract_sql("SQL: SELECT 4") == "SELECT 4"
    assert extract_sql("`SELECT 5`") == "SELECT 5"
    assert extract_sql("  SELECT 6  ") == "SELECT 6"


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT name FROM singer ORDER BY age", True),
        ("select name from singer order  by age desc limit 2", True),
        ("SELECT * FROM (SELECT name FROM singer ORDER BY age)", False),
        ("SELECT name, rank() OVER (ORDER BY age) FROM singer", False),
        ("SELECT 'order by' FROM singer", False),
        ("SELECT name FROM singer -- ORDER BY age", False),
        ('SELECT "order by" FROM singer /* order by */', False),
        ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
    ],
)
def test_top_level_order_by(sql: str, ordered: bool) -> None:
    assert has_top_level_order_by(sql) is ordered


async def test_setup_script_multiset_comparison() -> None:
    task = Task(
        prompt="French singers?",
        answer="SELECT name FROM singer WHERE country = 'France'",
        metadata={"db_setup": SETUP},
    )
    verifier = SQLVerifier()
    ok = await verifier.verify(
        task,
        reply("```sql\nSELECT name FROM singer WHERE country='France' ORDER BY name DESC\n```"),
    )
    assert ok.reward == 1.0 and ok.components == {"accuracy": 1.0, "executable": 1.0}
    assert ok.metadata["ordered"] is False
    dup = await verifier.verify(task, reply("SELECT 'Ada' UNION ALL SELECT 'Ada'"))
    assert dup.reward == 0.0 and "result differs" in dup.metadata["reason"]


async def test_order_sensitive_when_gold_orders(db_file: Path) -> None:
    task = Task(
        prompt="q",
        answer="SELECT name FROM singer ORDER BY age, name",
        metadata={"db_path": str(db_file)},
    )
    verifier = SQLVerifier()
    right = await verifier.verify(task, reply("SELECT name FROM singer ORDER BY age ASC, name ASC"))
    assert right.reward == 1.0
    wrong = await verifier.verify(task, reply("SELECT name FROM singer ORDER BY name"))
    assert wrong.reward == 0.0 and wrong.components["executable"] == 1.0


async def test_float_noise_and_types() -> None:
    task = Task(prompt="q", answer="SELECT AVG(age) FROM singer", metadata={"db_setup": SETUP})
    noisy = await SQLVerifier().verify(task, reply("SELECT SUM(age) * 1.0 / COUNT(*) FROM singer"))
    assert noisy.reward == 1.0
    assert (await SQLVerifier().verify(task, reply("SELECT 30"))).reward == 0.0


async def test_bad_sql_is_zero_with_error() -> None:
    task = Task(prompt="q", answer="SELECT 1", metadata={"db_setup": SETUP})
    verifier = SQLVerifier()
    result = await verifier.verify(task, reply("SELEC nonsense"))
    assert result.reward == 0.0 and result.components["executable"] == 0.0
    assert "syntax error" in result.metadata["error"]
    missing = await verifier.verify(task, reply("SELECT nope FROM singer"))
    assert "no such column" in missing.metadata["error"]
    two = await verifier.verify(task, reply("SELECT 1; SELECT 2"))
    assert two.reward == 0.0 and "one statement" in two.metadata["error"]
    empty = await verifier.verify(task, reply("```sql\n```"))
    assert empty.metadata["error"] == "empty query"


@pytest.mark.parametrize(
    "attack",
    [
        "DROP TABLE singer",
        "DELETE FROM singer",
        "UPDATE singer SET age = 0",
        "INSERT INTO singer VALUES (9, 'x', 'y', 1)",
        "CREATE TABLE pwned (x)",
        "PRAGMA query_only = OFF",
        "ATTACH DATABASE 'evil.sqlite' AS evil",
        "SELECT 1; DROP TABLE singer",
        "VACUUM",
    ],
)
async def test_prediction_cannot_modify_the_database(db_file: Path, attack: str) -> None:
    before = db_file.read_bytes()
    task = Task(
        prompt="q", answer="SELECT COUNT(*) FROM singer", metadata={"db_path": str(db_file)}
    )
    result = await SQLVerifier().verify(task, reply(attack))
    assert result.reward == 0.0 and result.metadata["error"]
    assert db_file.read_bytes() == before
    conn = sqlite3.connect(db_file)
    assert conn.execute("SELECT COUNT(*) FROM singer").fetchone() == (4,)
    conn.close()
    assert not (db_file.parent / "evil.sqlite").exists()


async def test_timeout_is_hard_and_off_the_event_loop() -> None:
    task = Task(prompt="q", answer="SELECT 1", metadata={"db_setup": SETUP})
    runaway = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    )
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    start = time.monotonic()
    result = await SQLVerifier(timeout=0.3).verify(task, reply(runaway))
    elapsed = time.monotonic() - start
    tick_task.cancel()
    assert result.reward == 0.0 and result.metadata["timed_out"] is True
    assert "timed out" in result.metadata["error"]
    assert elapsed < 5.0
    assert ticks >= 5  # the loop kept running while the query spun


async def test_too_many_rows() -> None:
    task = Task(prompt="q", answer="SELECT 1", metadata={"db_setup": SETUP})
    big = "SELECT a.id FROM singer a, singer b, singer c"
    result = await SQLVerifier(max_rows=10).verify(task, reply(big))
    assert result.reward == 0.0 and "more than 10 rows" in result.metadata["error"]


async def test_task_errors_raise(tmp_path: Path) -> None:
    verifier = SQLVerifier()
    with pytest.raises(VerifierError, match="db_path"):
        await verifier.verify(Task(prompt="q", answer="SELECT 1"), reply("SELECT 1"))
    with pytest.raises(VerifierError, match="not a file"):
        task = Task(prompt="q", answer="SELECT 1", metadata={"db_path": str(tmp_path / "x")})
        await verifier.verify(task, reply("SELECT 1"))
    with pytest.raises(VerifierError, match="gold query failed"):
        task = Task(prompt="q", answer="SELECT nope", metadata={"db_setup": SETUP})
        await verifier.verify(task, reply("SELECT 1"))
    with pytest.raises(VerifierError, match="db_setup failed"):
        task = Task(prompt="q", answer="SELECT 1", metadata={"db_setup": "CREATE oops"})
        await verifier.verify(task, reply("SELECT 1"))
    with pytest.raises(ConfigError):
        SQLVerifier(timeout=0)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_sql_helpers_never_crash(text: str) -> None:
    extract_sql(text)
    has_top_level_order_by(text)


def test_sql_helpers_on_megabyte_inputs() -> None:
    for text in ("(" * 1_000_000, "'" * 1_000_000, "order by " * 100_000, "/*" * 500_000):
        start = time.perf_counter()
        extract_sql(text)
        has_top_level_order_by(text)
        assert time.perf_counter() - start < 3.0


# ---------------------------------------------------------------- hostile tasks and replies


@pytest.mark.parametrize(
    "setup",
    [
        "ATTACH DATABASE '{path}' AS evil; CREATE TABLE evil.t(x);",
        "CREATE TABLE t(x); ATTACH DATABASE '{path}' AS evil;",
        "PRAGMA query_only = OFF; CREATE TABLE t(x);",
    ],
)
async def test_a_task_setup_runs_under_the_authorizer(tmp_path: Path, setup: str) -> None:
    target = tmp_path / "created-by-the-task.sqlite"
    task = Task(prompt="q", answer="SELECT 1", metadata={"db_setup": setup.format(path=target)})
    with pytest.raises(VerifierError, match=r"db_setup failed.*not authorized"):
        await SQLVerifier().verify(task, reply("SELECT 1"))
    assert not target.exists()


async def test_a_setup_that_never_ends_times_out() -> None:
    forever = (
        "CREATE TABLE t(x); WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
        "INSERT INTO t SELECT x FROM c;"
    )
    task = Task(prompt="q", answer="SELECT 1", metadata={"db_setup": forever})
    start = time.monotonic()
    with pytest.raises(VerifierError, match="db_setup failed"):
        await SQLVerifier(timeout=0.3).verify(task, reply("SELECT 1"))
    assert time.monotonic() - start < 5.0


async def test_results_are_bounded_in_bytes() -> None:
    task = Task(prompt="q", answer="SELECT 1", metadata={"db_setup": SETUP})
    one_huge = "SELECT zeroblob(1000000000)"
    result = await SQLVerifier().verify(task, reply(one_huge))
    assert result.reward == 0.0 and "too big" in result.metadata["error"]
    many = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000) "
        "SELECT zeroblob(1000000) FROM c"
    )  # 5 GB of rows, each under the value limit
    start = time.monotonic()
    result = await SQLVerifier(max_bytes=8 << 20).verify(task, reply(many))
    assert result.reward == 0.0 and "over 8388608 bytes" in result.metadata["error"]
    assert time.monotonic() - start < 10.0


async def test_the_deadline_holds_inside_one_long_sqlite_step() -> None:
    # One replace() call builds 1 GB: no progress-handler tick until it returns, about 2 s
    # on an idle core, more under load, always past the 0.65 s a 0.2 s deadline allows.
    # Allowed by a large max_bytes, it must still be cut at the deadline.
    task = Task(prompt="q", answer="SELECT 1", metadata={"db_setup": SETUP})
    slow = "SELECT length(replace(printf('%.*c', 10000000, 'a'), 'a', printf('%.*c', 100, 'b')))"
    start = time.monotonic()
    result = await SQLVerifier(timeout=0.2, max_bytes=1 << 30).verify(task, reply(slow))
    elapsed = time.monotonic() - start
    assert result.reward == 0.0 and result.metadata["timed_out"] is True, result.metadata
    assert elapsed < 2.8


async def test_queries_never_run_on_the_default_executor() -> None:
    from concurrent.futures import ThreadPoolExecutor

    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(executor)
    task = Task(prompt="q", answer="SELECT 1", metadata={"db_setup": SETUP})
    runaway = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    )
    verifying = asyncio.create_task(SQLVerifier(timeout=1.5).verify(task, reply(runaway)))
    await asyncio.sleep(0.3)  # the query is spinning by now
    start = time.monotonic()
    assert await asyncio.to_thread(lambda: 42) == 42
    assert time.monotonic() - start < 0.5  # the only executor thread was free
    assert (await verifying).metadata["timed_out"] is True
