"""Spider 2.0-Lite's execution match, as NeMo Gym's `spider2_lite` server scores it.

Ported from NeMo Gym 0.7.0 (`resources_servers/spider2_lite/app.py` and `eval_utils.py`,
Apache-2.0, which mirror Spider 2.0's official evaluation). Kept rule for rule so a row
scores as it does there:

- the query is the last ```sql block, else the last plain fenced block that starts with
  a statement keyword, else the text from the first SELECT/INSERT/UPDATE/DELETE/WITH up
  to the last semicolon (`extract_spider2_sql`);
- results match column by column: each gold column (or each of `condition_cols`) must
  equal some predicted column, values coerced from strings to numbers, NULL and NaN read
  as 0, numbers within 0.01, rows sorted first when `ignore_order` (extra predicted
  columns are allowed); with several gold result sets, any one may match.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["extract_spider2_sql", "spider2_match"]

_SQL_BLOCK = re.compile(r"```sql\s*([\s\S]*?)\s*```", re.IGNORECASE)
_ANY_BLOCK = re.compile(r"```\s*([\s\S]*?)\s*```")
_STATEMENT = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP)\s", re.IGNORECASE
)
_RAW_START = re.compile(r"(?:SELECT|INSERT|UPDATE|DELETE|WITH)\s", re.IGNORECASE)

Row = Sequence[Any]


def extract_spider2_sql(text: str) -> str:
    """The query NeMo Gym's `extract_sql_from_response` reads from a reply; "" for none."""
    if not text:
        return ""
    blocks = _SQL_BLOCK.findall(text)
    if blocks:
        return str(blocks[-1]).strip()
    for block in reversed(_ANY_BLOCK.findall(text)):
        content = str(block).strip()
        if _STATEMENT.match(content):
            return content
    start = _RAW_START.search(text)
    if start is None:
        return ""
    last_semicolon = text.rfind(";")
    end = last_semicolon + 1 if last_semicolon >= start.start() else len(text)
    return text[start.start() : end].strip().rstrip(";") + ";"


def _coerce(value: Any) -> Any:
    # Gold result sets read from CSV files are all strings; SQLite returns typed values.
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _normalize(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 0
    return value


def _column(rows: Sequence[Row], index: int) -> list[Any]:
    return [_normalize(_coerce(row[index])) for row in rows]


def _sort_key(value: Any) -> tuple[bool, str, bool]:
    return (value is None, str(value), isinstance(value, int | float))


def _columns_match(gold: list[Any], pred: list[Any], ignore_order: bool) -> bool:
    if len(gold) != len(pred):
        return False
    if ignore_order:
        gold, pred = sorted(gold, key=_sort_key), sorted(pred, key=_sort_key)
    for x, y in zip(gold, pred, strict=True):
        if isinstance(x, int | float) and isinstance(y, int | float):
            if not math.isclose(float(x), float(y), abs_tol=1e-2):
                return False
        elif x != y:
            return False
    return True


def _one_match(
    gold: Sequence[Row], pred: Sequence[Row], condition_cols: list[int], ignore_order: bool
) -> bool:
    if not gold and not pred:
        return True
    if not gold or not pred:
        return False
    wanted = [i for i in condition_cols if i < len(gold[0])] or list(range(len(gold[0])))
    pred_columns = [_column(pred, j) for j in range(len(pred[0]))]
    return all(
        any(_columns_match(_column(gold, i), p, ignore_order) for p in pred_columns) for i in wanted
    )


def spider2_match(
    gold_sets: Sequence[Sequence[Row]],
    pred: Sequence[Row],
    condition_cols: Sequence[Any] | None = None,
    ignore_order: bool = True,
) -> bool:
    """Whether `pred` matches any of `gold_sets` (NeMo Gym's `compare_multi_result_sets`).

    `condition_cols` is one list of column indices for every set, or one list per set.
    """
    if not gold_sets:
        return False
    if not condition_cols:
        per_set: list[list[int]] = [[] for _ in gold_sets]
    elif not all(isinstance(c, list) for c in condition_cols):
        per_set = [list(condition_cols)] * len(gold_sets)
    else:
        per_set = [list(c) for c in condition_cols]
    return any(
        _one_match(gold, pred, cols, ignore_order)
        for gold, cols in zip(gold_sets, per_set, strict=False)
    )
