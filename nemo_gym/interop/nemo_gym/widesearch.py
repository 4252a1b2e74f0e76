"""NeMo Gym's `widesearch` verifier, ported: a Markdown table graded against the gold rows.

The judge is asked up to 2 + (columns) times, and each request depends on the replies
before it (column names aligned, then the key columns' values, then the matched rows of
each `llm_judge` column). So the verifier is a replay: `_run(fields, replies)` scores
with the judge replies given so far and stops at the first request it has no reply for;
the judge protocol (`judged.PROTOCOLS["widesearch"]`) asks it, then replays with one more.

The table is read with pandas and dates with dateparser, exactly as NeMo Gym reads them
(both imported when a reply is scored). A judge reply without a readable ```json block
is `judge_failed` (NeMo Gym reads it as an empty mapping, so every cell it judges scores 0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from io import StringIO
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    import pandas as pd

    from nemo_gym.envs.rows import Row
    from nemo_gym.interop.nemo_gym.judged import Prompt, Verdict

PREPROCESS = ("norm_str", "extract_number", "norm_date")
METRICS = ("exact_match", "url_match", "number_near", "date_near", "llm_judge")
_MEASURES: tuple[str, ...] = ("precision_by_row", "recall_by_row", "f1_by_row")
_MEASURES += ("precision_by_item", "recall_by_item", "f1_by_item")


class _Pending(Exception):
    """The replay needs a judge reply it does not have yet: `prompt` is the request."""

    def __init__(self, prompt: Prompt) -> None:
        super().__init__("a judge reply is pending")
        self.prompt = prompt


class _Unreadable(Exception):
    """A judge reply holds no ```json object."""


def _markdown_json(text: str) -> dict[str, Any]:
    """NeMo Gym's `parse_markdown_json`, except that a reply without one is unreadable."""
    matches = re.findall(r"```json\s*(\{.*?\})\s*```", text, re.DOTALL)
    if not matches:
        raise _Unreadable
    try:
        result = json.loads(matches[-1])
    except json.JSONDecodeError as exc:
        raise _Unreadable from exc
    if not isinstance(result, dict):
        raise _Unreadable
    return result


def _norm_column(value: str) -> str:
    return value.strip().lower().replace(" ", "")


def extract_table(text: str) -> pd.DataFrame | None:
    """NeMo Gym's `extract_dataframe`: the last Markdown table (fenced, else bare) pandas reads."""
    import pandas as pd

    matches = re.findall(r"```markdown(.*?)```", text, re.DOTALL)
    if not matches:
        matches = re.findall(r"((?:^\s*\|.*\|\s*$\n?)+)", text, re.MULTILINE)
    for match in reversed(matches):
        lines = [
            "|".join(part.strip() for part in line.split("|"))
            for line in match.strip().splitlines()
            if "|" in line and not set(line.strip()).issubset(set("|- :"))
        ]
        if lines:
            try:
                frame = pd.read_csv(StringIO("\n".join(lines)), sep="|", dtype=str)
            except (pd.errors.EmptyDataError, pd.errors.ParserError):
                continue
            return frame.loc[:, ~frame.columns.str.startswith("Unnamed")]
    return None


def _preprocess(value: Any, name: str) -> str:
    value = str(value)
    if name == "norm_str":
        return value.lower().strip().replace(" ", "").replace("*", "")
    if name == "extract_number":
        numbers = re.findall(r"[-+]?\d*\.\d+%?|[-+]?\d+\.?\d*%?", value.replace(",", ""))
        return numbers[0] if numbers else "NULL"
    import dateparser  # name == "norm_date" (rows are checked at load)

    parsed = dateparser.parse(value, settings={"PREFER_DAY_OF_MONTH": "first"})
    return parsed.strftime("%Y-%m-%d") if parsed else value


def _metric(response: str, target: str, name: str, criterion: Any) -> float:
    if name == "exact_match":
        return float(response.lower() == target.lower())
    if name == "url_match":
        pattern = re.compile(r"https?://[^\s]+")
        response_hosts = {urlparse(url).netloc for url in pattern.findall(response)}
        target_hosts = {urlparse(url).netloc for url in pattern.findall(target)}
        return float(response_hosts == target_hosts)
    if name == "number_near":
        try:
            response_number = float(response.rstrip("%")) / (100 if "%" in response else 1)
            target_number = float(target.rstrip("%")) / (100 if "%" in target else 1)
            tolerance = float(criterion or 0)
        except (TypeError, ValueError):
            return float(response == target)
        return float(abs(response_number - target_number) <= abs(target_number) * tolerance)
    import dateparser  # name == "date_near"

    try:
        response_date, target_date = dateparser.parse(response), dateparser.parse(target)
    except (TypeError, ValueError, OverflowError):
        response_date, target_date = None, None
    if response_date is None or target_date is None:
        return float(response_date is None and target_date is None)
    return float(abs((response_date - target_date).days) <= 31)


class _Judge:
    """The judge replies so far, handed out in the order the verifier asks."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies, self.asked = replies, 0

    def ask(self, prompt: str) -> dict[str, Any]:
        if self.asked == len(self.replies):
            raise _Pending([("user", prompt)])
        reply = self.replies[self.asked]
        self.asked += 1
        return _markdown_json(reply)

    def align(self, values: list[str], references: list[str]) -> dict[str, str]:
        from nemo_gym.interop.nemo_gym.judged import template

        if not values or not references:
            return {}
        if set(values).issubset(references):
            return {value: value for value in values}
        prompt = template("widesearch.alignment").format(response=values, reference=references)
        return {str(key): str(value) for key, value in self.ask(prompt).items()}

    def scores(self, responses: list[str], targets: list[str], criterion: str) -> list[float]:
        from nemo_gym.interop.nemo_gym.judged import template

        pairs = {
            f"idx_{index}": {"response": response, "target": target}
            for index, (response, target) in enumerate(zip(responses, targets, strict=True))
        }
        prompt = template("widesearch.column_judge").format(criterion=criterion, response=pairs)
        result = self.ask(prompt)
        return [float(result.get(f"idx_{index}", 0) == 1) for index in range(len(responses))]


def _scored(found: Mapping[str, float], message: str) -> Verdict:
    from nemo_gym.interop.nemo_gym.judged import Verdict

    strict = float(bool(found) and all(v == 1.0 for v in found.values()))
    return Verdict(reward=strict, verdict=message, components=dict(found))


def _run(fields: Mapping[str, Any], text: str, replies: Sequence[str]) -> Verdict:
    """NeMo Gym's `verify`, replayed with `replies`; raises `_Pending` or `_Unreadable`."""
    import pandas as pd

    zeros = dict.fromkeys(_MEASURES, 0.0)
    judge = _Judge(replies)
    response_frame = extract_table(text)
    if response_frame is None:
        return _scored(zeros, "response contains no Markdown table")
    evaluation = fields["evaluation"]
    required, unique = evaluation["required"], evaluation["unique_columns"]
    gold = pd.DataFrame(fields["gold_answer"])
    gold.columns = [_norm_column(column) for column in gold.columns]
    response_frame.columns = [_norm_column(column) for column in response_frame.columns]
    if set(response_frame.columns) != set(required):
        mapping = judge.align(response_frame.columns.tolist(), required)
        response_frame = response_frame.rename(columns=mapping)
    if set(response_frame.columns) != set(required):
        found = response_frame.columns.tolist()
        return _scored(zeros, f"required columns {required} do not match {found}")

    gold = gold[required].astype(str)
    response_frame = response_frame[required].astype(str)
    for column in unique:
        pipeline = evaluation["eval_pipeline"].get(column, {})
        if {"exact_match", "llm_judge"}.intersection(pipeline.get("metric", [])):
            mapping = judge.align(response_frame[column].tolist(), gold[column].tolist())
            response_frame[column] = response_frame[column].map(lambda v, m=mapping: m.get(v, v))
    for column, pipeline in evaluation["eval_pipeline"].items():
        for name in pipeline.get("preprocess", []):
            gold[column] = gold[column].map(lambda v, name=name: _preprocess(v, name))
            response_frame[column] = response_frame[column].map(
                lambda v, name=name: _preprocess(v, name)
            )
    gold = gold.drop_duplicates(subset=unique)
    response_frame = response_frame.drop_duplicates(subset=unique)

    gold_rows = {tuple(row[c] for c in unique): row for _, row in gold.iterrows()}
    response_rows = {tuple(row[c] for c in unique): row for _, row in response_frame.iterrows()}
    # NeMo Gym iterates a set here; the judge sees the matched rows in its order, so the
    # rows are taken in gold order (the same set, a deterministic prompt).
    matched_keys = [key for key in gold_rows if key in response_rows]
    scores = {key: dict.fromkeys(unique, 1.0) for key in matched_keys}
    for column in required:
        if column in unique:
            continue
        pipeline = evaluation["eval_pipeline"][column]
        responses = [response_rows[key][column] for key in matched_keys]
        targets = [gold_rows[key][column] for key in matched_keys]
        column_scores = [1.0] * len(matched_keys)
        for metric in pipeline.get("metric", []):
            if metric == "llm_judge":
                found = judge.scores(responses, targets, pipeline.get("criterion", ""))
            else:
                criterion = pipeline.get("criterion")
                pairs = zip(responses, targets, strict=True)
                found = [_metric(r, t, metric, criterion) for r, t in pairs]
            column_scores = [min(old, new) for old, new in zip(column_scores, found, strict=True)]
        for key, score in zip(matched_keys, column_scores, strict=True):
            scores[key][column] = score

    true_rows = sum(min(row.values()) for row in scores.values())
    true_items = sum(sum(row.values()) for row in scores.values())
    predicted_rows, gold_row_count = len(response_frame), len(gold)
    predicted_items, gold_items = predicted_rows * len(required), gold_row_count * len(required)
    p_row = true_rows / predicted_rows if predicted_rows else 0.0
    r_row = true_rows / gold_row_count if gold_row_count else 0.0
    p_item = true_items / predicted_items if predicted_items else 0.0
    r_item = true_items / gold_items if gold_items else 0.0
    found = {
        "precision_by_row": p_row,
        "recall_by_row": r_row,
        "f1_by_row": 2 * p_row * r_row / (p_row + r_row) if p_row + r_row else 0.0,
        "precision_by_item": p_item,
        "recall_by_item": r_item,
        "f1_by_item": 2 * p_item * r_item / (p_item + r_item) if p_item + r_item else 0.0,
    }
    perfect = all(v == 1.0 for v in found.values())
    return _scored(
        found,
        "All items match perfectly." if perfect else "Table is incomplete or contains mismatches.",
    )


def skip(fields: Mapping[str, Any], text: str) -> Verdict | None:
    """The verdict when no judge is needed (no table, or nothing to judge)."""
    try:
        return _run(fields, text, ())
    except _Pending:
        return None


def prompts(fields: Mapping[str, Any], text: str) -> list[Prompt]:
    """The first judge request."""
    return follow(fields, ())


def follow(fields: Mapping[str, Any], replies: Sequence[str]) -> list[Prompt]:
    """The next judge request after `replies`, or none (done, or a reply unreadable)."""
    from nemo_gym.interop.nemo_gym.judged import TEXT

    try:
        _run(fields, fields[TEXT], replies)
    except _Pending as pending:
        return [pending.prompt]
    except _Unreadable:
        return []
    return []


def parse(replies: Sequence[str], fields: Mapping[str, Any]) -> Verdict | None:
    """The verdict after every judge reply; None when one holds no readable JSON."""
    from nemo_gym.interop.nemo_gym.judged import TEXT

    try:
        return _run(fields, fields[TEXT], replies)
    except (_Pending, _Unreadable):
        return None


def oracle(fields: Mapping[str, Any]) -> str | None:
    """The gold rows as the asked Markdown table (the required columns, gold's names)."""
    required = list(fields["evaluation"]["required"])
    rows = fields["gold_answer"]
    names = {_norm_column(name): name for name in rows[0]} if rows else {}
    header = [names.get(column, column) for column in required]

    def cell(value: Any) -> str:  # one table line per row: no newline, no pipe in a cell
        return " ".join(str(value).split()).replace("|", "/")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    for row in rows:
        lines.append("| " + " | ".join(cell(row.get(h, "")) for h in header) + " |")
    return "```markdown\n" + "\n".join(lines) + "\n```"


def _installed() -> None:
    import importlib.util

    from nemo_gym.errors import ConfigError

    missing = [m for m in ("pandas", "dateparser") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"widesearch reads tables with pandas and dates with dateparser ({missing} "
            "missing): pip install 'nemo-gym[widesearch]'"
        )


def check(row: Row) -> None:
    """Rows NeMo Gym fails on at verify time (a KeyError or ValueError there) are refused."""
    _installed()
    evaluation = row.data.get("evaluation")
    if not isinstance(evaluation, dict):
        raise row.bad("evaluation", "must be an object")
    for key in ("required", "unique_columns"):
        value = evaluation.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or not value:
            raise row.bad(f"evaluation.{key}", "must be a non-empty list of column names")
    required, pipelines = evaluation["required"], evaluation.get("eval_pipeline")
    if not isinstance(pipelines, dict):
        raise row.bad("evaluation.eval_pipeline", "must be an object")
    for column in evaluation["unique_columns"]:
        if column not in required:
            raise row.bad("evaluation.unique_columns", f"{column!r} is not a required column")
    for column in required:
        if column not in evaluation["unique_columns"] and column not in pipelines:
            raise row.bad("evaluation.eval_pipeline", f"has no entry for column {column!r}")
    for column, pipeline in pipelines.items():
        where = f"evaluation.eval_pipeline.{column}"
        if not isinstance(pipeline, dict):
            raise row.bad(where, "must be an object")
        for name in pipeline.get("preprocess", []):
            if name not in PREPROCESS:
                raise row.bad(f"{where}.preprocess", f"{name!r} is not one of {PREPROCESS}")
        for name in pipeline.get("metric", []):
            if name not in METRICS:
                raise row.bad(f"{where}.metric", f"{name!r} is not one of {METRICS}")
    gold = row.data.get("gold_answer")
    if not isinstance(gold, list) or not gold or not all(isinstance(g, dict) for g in gold):
        raise row.bad("gold_answer", "must be a non-empty list of rows (objects)")
    for index, entry in enumerate(gold):
        have = {_norm_column(str(name)) for name in entry}
        missing = [c for c in required if c not in have]
        if missing:
            raise row.bad(f"gold_answer[{index}]", f"has no column for {missing}")
