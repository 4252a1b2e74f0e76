"""Small SQLite databases in Spider 2.0-Lite's layout (`<dir>/sqlite/<db_id>.sqlite`) for
NeMo Gym's spider2_lite example rows. Not Spider 2.0's data: each database has the
tables of its row's prompt (the `<DATABASE_SCHEMA>` NeMo Gym's rows carry) and a few rows
we wrote, chosen so every example row's gold query returns a non-empty result."""

from __future__ import annotations

import atexit
import json
import re
import shutil
import sqlite3
import tempfile
from functools import cache
from pathlib import Path

DATA = Path(__file__).parent.parent / "data" / "nemo_gym"

_ROWS = {
    "IPL": """
INSERT INTO player (player_id, player_name) VALUES (1, 'Alice'), (2, 'Bob'), (3, 'Cara');
INSERT INTO match (match_id, team_1, team_2, season_id, match_winner)
    VALUES (1, 10, 20, 5, 10), (2, 10, 20, 5, 20), (3, 10, 20, 4, 10);
INSERT INTO player_match (match_id, player_id, role, team_id)
    VALUES (1, 1, 'Player', 20), (1, 2, 'Player', 10), (2, 3, 'Player', 10),
           (2, 1, 'Player', 20), (3, 2, 'Player', 10);
INSERT INTO ball_by_ball (match_id, over_id, ball_id, innings_no, striker)
    VALUES (1, 1, 1, 1, 1), (1, 1, 2, 1, 2), (2, 1, 1, 1, 3), (2, 1, 2, 1, 1), (3, 1, 1, 1, 2);
INSERT INTO batsman_scored (match_id, over_id, ball_id, runs_scored, innings_no)
    VALUES (1, 1, 1, 120, 1), (1, 1, 2, 40, 1), (2, 1, 1, 101, 1), (2, 1, 2, 7, 1),
           (3, 1, 1, 150, 1);
""",
    "Pagila": """
INSERT INTO actor (actor_id, first_name, last_name) VALUES (1, 'ANNA', 'LEE'), (2, 'BEN', 'ROE');
INSERT INTO language (language_id, name) VALUES (1, 'English'), (2, 'French');
INSERT INTO category (category_id, name) VALUES (1, 'Children'), (2, 'Horror');
INSERT INTO film (film_id, title, release_year, language_id, length, rating)
    VALUES (1, 'A', 2005, 1, 90, 'G'), (2, 'B', 2006, 1, 100, 'PG'),
           (3, 'C', 2007, 1, 80, 'G'), (4, 'D', 2001, 1, 95, 'R');
INSERT INTO film_category (film_id, category_id) VALUES (1, 1), (2, 1), (3, 1), (4, 2);
INSERT INTO film_actor (actor_id, film_id) VALUES (1, 1), (1, 2), (2, 3), (2, 4);
INSERT INTO city (city_id, city) VALUES (1, 'Abu Dhabi'), (2, 'Baton-Rouge'), (3, 'Zagreb');
INSERT INTO address (address_id, city_id) VALUES (1, 1), (2, 2), (3, 3);
INSERT INTO customer (customer_id, address_id) VALUES (1, 1), (2, 2), (3, 3);
INSERT INTO inventory (inventory_id, film_id) VALUES (1, 1), (2, 4), (3, 2);
INSERT INTO rental (rental_id, rental_date, inventory_id, customer_id, return_date)
    VALUES (1, '2005-05-01 10:00:00', 1, 1, '2005-05-03 10:00:00'),
           (2, '2005-05-01 10:00:00', 2, 2, '2005-05-02 10:00:00'),
           (3, '2005-05-01 10:00:00', 3, 3, '2005-05-09 10:00:00');
""",
    "California_Traffic_Collision": "\n".join(
        f"INSERT INTO collisions (case_id, collision_date, pcf_violation_category) "
        f"VALUES ({i}, '{year}-03-0{1 + i % 9}', '{cause}');"
        for i, (year, cause) in enumerate(
            [(2001, "speeding")] * 3
            + [(2001, "dui")] * 2
            + [(2001, "lane")]
            + [(2002, "speeding")] * 3
            + [(2002, "dui")] * 2
            + [(2003, "lane")] * 3
            + [(2003, "speeding")] * 2
            + [(2003, "dui")]
        )
    ),
}


def _schema(row: dict) -> str:
    user = row["responses_create_params"]["input"][1]["content"]
    found = re.search(r"<DATABASE_SCHEMA>(.*?)</DATABASE_SCHEMA>", user, re.DOTALL)
    assert found, "a spider2_lite row's prompt carries its schema"
    return found.group(1)


@cache
def spider2_lite_dir() -> Path:
    """NeMo Gym's `spider2_lite_dir`: its `sqlite/` holds one file per example db_id."""
    root = Path(tempfile.mkdtemp(prefix="pe3-spider2-"))
    atexit.register(shutil.rmtree, root, True)
    (root / "sqlite").mkdir()
    rows = [json.loads(line) for line in (DATA / "spider2_lite.jsonl").read_text().splitlines()]
    for db_id in dict.fromkeys(r["db_id"] for r in rows):
        schema = _schema(next(r for r in rows if r["db_id"] == db_id))
        with sqlite3.connect(root / "sqlite" / f"{db_id}.sqlite") as conn:
            conn.executescript(schema)
            conn.executescript(_ROWS[db_id])
        conn.close()
    return root
