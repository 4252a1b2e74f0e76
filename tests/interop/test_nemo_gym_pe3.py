"""NeMo Gym's `spider2_lite` on its own example rows, over small databases in Spider
2.0-Lite's layout (tests/interop/spider2_databases.py): the replies of
`spider2_lite_variants` in test_nemo_gym_servers.py score what Spider 2.0-Lite's rules
give, and what NeMo Gym's own `verify` gives on the same responses and databases
(through the reference venv; without it that test skips). Rows whose database is not
in `db_dir=`, or that name none safely, are refused at load.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import nemo_gym as gym
from interop.spider2_databases import spider2_lite_dir
from interop.test_nemo_gym_servers import DATA, PYTHON, Case, _cases, run_reference
from nemo_gym.errors import ConfigError
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message
from nemo_gym.verify.spider2 import extract_spider2_sql, spider2_match

# Our reward for each reply to every row (row 1 adds the numeric ones).
EXPECTED = {
    "oracle": 1.0,
    "wrong": 0.0,
    "plain_fence": 1.0,
    "unfenced": 1.0,
    "sqlite_fence": 0.0,  # the reader takes "ite" as the query's first word
    "right_then_wrong": 0.0,
    "wrong_then_right": 1.0,
    "no_sql": 0.0,
    "empty_block": 0.0,
    "empty_result": 0.0,
    "delete": 0.0,
    "two_statements": 0.0,
    "every_table": 0.0,
    "echo_question": 0.0,
    "wrapped": 1.0,
    "extra_column": 1.0,  # Spider 2.0-Lite allows extra predicted columns
    "doubled": 0.0,
    "near": 1.0,
    "far": 0.0,
    "names_only": 0.0,
    "reversed": 1.0,  # its rows carry ignore_order: true
    "as_text": 1.0,  # text coerced to a number
    "nulls": 0.0,
}

EXCEPTIONS = {
    # Its gold has no closing semicolon, so the unfenced reader runs to the reply's end
    # and takes the trailing sentence as SQL.
    ("spider2_lite-4", "unfenced"): 0.0,
}


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return asyncio.run(_cases("spider2_lite"))


def test_spider2_lite_rows_score_as_its_rules_say(cases: list[Case]) -> None:
    rows = (DATA / "spider2_lite.jsonl").read_text().splitlines()
    assert {c.task_id for c in cases} == {f"spider2_lite-{i}" for i in range(len(rows))}
    wrong = [
        (c.task_id, c.reply, c.ours)
        for c in cases
        if c.ours != EXCEPTIONS.get((c.task_id, c.reply), EXPECTED[c.reply])
    ]
    assert not wrong
    assert {c.reply for c in cases} == set(EXPECTED)


def test_spider2_lite_rewards_equal_nemo_gyms_own(cases: list[Case]) -> None:
    if not Path(PYTHON).is_file():
        pytest.skip("no NeMo Gym reference venv (set NEMO_GYM_REFERENCE_PYTHON)")
    theirs = run_reference([(c.server, c.row, c.response) for c in cases])
    for case, found in zip(cases, theirs, strict=True):
        assert "error" not in found, (case.task_id, case.reply, found)
        assert case.ours == found["reward"], (case.task_id, case.reply, found)


def _rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / "spider2_lite.jsonl").read_text().splitlines()]


def test_a_row_whose_database_is_missing_is_refused_at_load(tmp_path: Path) -> None:
    shutil.copy(spider2_lite_dir() / "sqlite" / "IPL.sqlite", tmp_path / "IPL.sqlite")
    with pytest.raises(ConfigError, match=r"spider2_lite-2: db_id 'Pagila' has no database"):
        ng.load(_rows(), server="spider2_lite", db_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="pass db_dir="):
        ng.load(_rows(), server="spider2_lite")
    # The NeMo Gym directory itself (its databases under sqlite/) is accepted too.
    env = ng.load(_rows(), server="spider2_lite", db_dir=str(spider2_lite_dir()))
    assert len(env.tasks()) == 5


def test_a_db_id_cannot_point_outside_db_dir(tmp_path: Path) -> None:
    inner = tmp_path / "dbs"
    inner.mkdir()
    shutil.copy(spider2_lite_dir() / "sqlite" / "IPL.sqlite", tmp_path / "IPL.sqlite")
    row = {**_rows()[0], "db_id": "../IPL"}
    with pytest.raises(ConfigError, match=r"db_id '\.\./IPL' has no database"):
        ng.load([row], server="spider2_lite", db_dir=str(inner))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gold_sql": None}, "gold_sql"),
        ({"gold_sql": ""}, "gold_sql"),
        ({"db_id": 3}, "db_id"),
        ({"condition_cols": "0"}, "condition_cols"),
        ({"ignore_order": "yes"}, "ignore_order"),
    ],
)
def test_a_row_that_cannot_be_scored_is_a_load_error(change: dict[str, Any], field: str) -> None:
    row = {**_rows()[0], **change}
    with pytest.raises(ConfigError, match=field):
        ng.load([row], server="spider2_lite", db_dir=str(spider2_lite_dir()))


def test_gold_result_rows_score_against_their_result_sets() -> None:
    # Spider 2.0-Lite's validation rows: acceptable result sets (strings, as from its CSVs),
    # here with condition columns per set.
    row = {**_rows()[1], "gold_result": [[["Nobody", "1"]], [["Cara", "101"]]]}
    row.pop("gold_sql")
    row["condition_cols"] = [[0, 1], [0]]
    env = ng.load([row], server="spider2_lite", db_dir=str(spider2_lite_dir()))
    task = env.tasks()[0]
    replies = {
        "SELECT player_name, 7 FROM player WHERE player_id = 3": 1.0,
        "SELECT player_name FROM player WHERE player_id = 1": 0.0,
        "SELECT 'Nobody', '1.001'": 1.0,
        "SELECT 'Nobody', 2": 0.0,
    }

    async def run() -> list[tuple[float | None, dict[str, Any]]]:
        found = []
        for sql in replies:
            reply = [Message.assistant(f"```sql\n{sql}\n```")]
            done = await gym.rollout(env, gym.models.ScriptedModel(reply), task)
            found.append((done.reward, ng.to_row(done)["response"]))
        return found

    done = asyncio.run(run())
    assert [ours for ours, _ in done] == list(replies.values())
    if Path(PYTHON).is_file():  # NeMo Gym's own verify on the same row and responses
        theirs = run_reference([("spider2_lite", row, response) for _, response in done])
        assert [t.get("reward", t) for t in theirs] == list(replies.values())


def test_a_failing_gold_query_is_a_failed_rollout_not_a_zero() -> None:
    row = {**_rows()[0], "gold_sql": "SELECT missing_column FROM player"}
    env = ng.load([row], server="spider2_lite", db_dir=str(spider2_lite_dir()))
    task = env.tasks()[0]
    reply = [Message.assistant("```sql\nSELECT 1\n```")]
    done = asyncio.run(gym.rollout(env, gym.models.ScriptedModel(reply), task))
    assert done.reward is None and done.failure is not None
    assert "gold query failed" in done.failure.message


def test_the_reader_takes_the_last_sql_block_else_a_statement() -> None:
    assert extract_spider2_sql("```sql\nSELECT 1\n```\n```sql\nSELECT 2\n```") == "SELECT 2"
    assert extract_spider2_sql("```\nnot sql\n```\n```\nWITH a AS (SELECT 1) SELECT 1\n```") == (
        "WITH a AS (SELECT 1) SELECT 1"
    )
    assert extract_spider2_sql("So: select x from t; then done") == "select x from t;"
    assert extract_spider2_sql("nothing here") == ""


@given(
    st.lists(
        st.tuples(st.integers(-5, 5), st.sampled_from(["a", "b", None])), min_size=1, max_size=6
    ),
    st.permutations(range(6)),
)
def test_a_permutation_of_the_rows_matches_when_order_is_ignored(
    rows: list[tuple[Any, ...]], order: list[int]
) -> None:
    shuffled = [rows[i] for i in order if i < len(rows)]
    assert spider2_match([rows], shuffled, ignore_order=True)
    assert not spider2_match([rows], shuffled[:-1], ignore_order=True)
