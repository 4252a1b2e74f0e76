"""`text_to_sql`: answer questions with SQL over SQLite databases; results must match."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Self

from nemo_gym.envs.base import Turns
from nemo_gym.envs.prompts import join
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task, replace
from nemo_gym.verify.sql import SQLVerifier

ASK = "Write one SQLite query that answers the question. Give it in a ```sql code block."


@cache
def shipped_script(db_id: str) -> str:
    """The SQL script that builds one of our shipped databases."""
    return resources.files("nemo_gym.envs").joinpath(f"sql/data/{db_id}.sql").read_text("utf-8")


def _schema_of(path: Path) -> str:
    uri = f"file:{path.resolve()}?mode=ro"
    with sqlite3.connect(uri, uri=True) as conn:
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL"
        )
        return ";\n".join(r[0] for r in rows) + ";"


def database_file(folder: Path, db_id: str) -> Path | None:
    """The SQLite file of `db_id` under `folder`, in Spider's `<db_id>/<db_id>.sqlite`
    layout, Spider 2.0-Lite's flat `<db_id>.sqlite` (also under its `sqlite/`), or `.db`;
    None when there is none. A `db_id` that is not a plain file name finds nothing, so a
    hostile row cannot point outside `folder`."""
    if not db_id or db_id.startswith(".") or Path(db_id).name != db_id:
        return None
    for candidate in (
        folder / db_id / f"{db_id}.sqlite",
        folder / f"{db_id}.sqlite",
        folder / "sqlite" / f"{db_id}.sqlite",
        folder / f"{db_id}.db",
    ):
        if candidate.is_file():
            return candidate
    return None


class TextToSQL(DatasetEnv):
    """Text-to-SQL scored by execution: the predicted query must return the gold query's
    rows (as a multiset; in order when the gold has ORDER BY) on a read-only database.

    Ships two small databases we wrote (shop, school) with 14 questions. Spider rows
    (db_id, question, query) and BIRD rows (db_id, question, evidence, SQL) read through
    `path=` / `dataset=` with `db_dir=` holding `<db_id>/<db_id>.sqlite`.
    `match="spider2"` reads the query and compares results as Spider 2.0-Lite does
    (`nemo_gym.verify.spider2`).
    """

    name = "text_to_sql"
    version = "1"
    domain = "sql"
    verification = "execution match of the query's result rows (SQLVerifier, read-only)"
    source = "2 SQLite databases and 14 questions written by us; Spider / BIRD layouts via db_dir="
    license = "Apache-2.0 (sample); Spider is CC BY-SA 4.0, BIRD CC BY-SA 4.0"
    sample = "sql/data/text_to_sql.jsonl"

    def __init__(
        self,
        *,
        db_dir: str | None = None,
        timeout: float = 5.0,
        match: Literal["rows", "spider2"] = "rows",
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        if (path or dataset) and not db_dir:
            raise ConfigError("text_to_sql: path=/dataset= rows need db_dir= (their databases)")
        super().__init__(
            SQLVerifier(timeout=timeout, match=match),
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=SingleTurn(),
        )
        self.db_dir, self.timeout = db_dir, timeout

    def _database(self, row: Row, db_id: str) -> tuple[dict[str, Any], str]:
        if self.db_dir is None:
            script = shipped_script(db_id)
            schema = "\n".join(line for line in script.splitlines() if line.startswith("CREATE"))
            return {"db_setup": script}, schema
        folder = Path(self.db_dir).expanduser()
        found = database_file(folder, db_id)
        if found is None:
            raise row.bad("db_id", f"{db_id!r} has no database under {folder}")
        return {"db_path": str(found)}, _schema_of(found)

    def with_tasks(self, tasks: Iterable[Task], *, split: str = "test") -> Self:
        """Tasks that name only a `db_id` (NeMo Gym's spider2_lite rows) get its file
        under `db_dir=`; one whose database is not there is refused here, not at verify."""
        resolved = []
        for task in tasks:
            meta = task.metadata
            if "db_path" not in meta and "db_setup" not in meta and "db_id" in meta:
                db_id = str(meta["db_id"])
                if self.db_dir is None:
                    raise ConfigError(
                        f"{task.id}: db_id {db_id!r} names a database; pass db_dir= (the "
                        "folder of <db_id>.sqlite files)"
                    )
                folder = Path(self.db_dir).expanduser()
                found = database_file(folder, db_id)
                if found is None:
                    raise ConfigError(
                        f"{task.id}: db_id {db_id!r} has no database under {folder} "
                        f"(looked for {db_id}.sqlite, {db_id}/{db_id}.sqlite, "
                        f"sqlite/{db_id}.sqlite)"
                    )
                task = replace(task, metadata={**meta, "db_path": str(found.resolve())})
            resolved.append(task)
        return super().with_tasks(resolved, split=split)

    def task_from_row(self, row: Row, split: str) -> Task:
        db_id = row.require("db_id", str)
        database, schema = self._database(row, db_id)
        evidence = row.get("evidence", "")
        prompt = join(
            f"Database schema:\n```sql\n{schema}\n```",
            f"Question: {row.require('question', str)}",
            f"Hint: {evidence}" if evidence else "",
            ASK,
        )
        return Task(
            id=self.task_id(row, split, "id", "question_id"),
            prompt=prompt,
            answer=str(row.first("query", "SQL", "gt_sql")),
            metadata={"db_id": db_id, **database},
        )

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(f"```sql\n{task.answer}\n```")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("```sql\nSELECT 'no idea' AS answer\n```")]
