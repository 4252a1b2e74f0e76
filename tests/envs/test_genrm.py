"""`genrm`: NeMo Gym's generative_reward_model scoring (compared with its own verify in
tests/interop/test_nemo_gym_servers.py); here the parser's edges, label-only-overall rows
and row errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.envs.knowledge.genrm import PARSE_FAILURE, parse_verdict, score_verdict
from nemo_gym.errors import ConfigError

VERDICT = {
    "rubric_evaluations": [{"rubric_id": 1, "score_1": 5, "score_2": 2, "ranking": 1}],
    "overall": {"score_1": 4, "score_2": 2, "ranking": 2},
}


def test_the_sample_runs() -> None:
    assert gym.check_env(gym.make("genrm")).ok


def test_the_reward_is_minus_the_weighted_distance() -> None:
    verdict = parse_verdict(json.dumps(VERDICT))
    overall = {"score_1": 5, "score_2": 2, "ranking": 1}  # 1 + 0 + 2 x 1
    rubrics = [{"rubric_id": 1, "score_1": 5, "score_2": 1, "ranking": None}]  # 0.5 x 1
    assert score_verdict(verdict, overall, rubrics) == (-3.5, None)
    assert score_verdict(verdict, overall, None) == (-3.0, None)


@pytest.mark.parametrize(
    "text",
    [
        "no verdict",
        json.dumps(VERDICT) + json.dumps(VERDICT),  # a repeated verdict
        json.dumps({**VERDICT, "overall": {"score_1": 4, "score_2": 2}}),
        json.dumps({**VERDICT, "rubric_evaluations": []}),
        json.dumps({**VERDICT, "overall": {"score_1": "four", "score_2": 2, "ranking": 2}}),
    ],
)
def test_unreadable_verdicts_are_the_parse_failure_penalty(text: str) -> None:
    reward, why = score_verdict(parse_verdict(text), {"score_1": 4}, None)
    assert reward == PARSE_FAILURE and why


def test_braces_inside_strings_and_latex_escapes_are_read() -> None:
    text = json.dumps({**VERDICT, "overall": {**VERDICT["overall"], "note": "a } brace"}})
    assert parse_verdict("Verdict: " + text.replace("a } brace", "\\\\Delta } x")) is not None


def test_rubric_ids_must_match_the_labels() -> None:
    verdict = parse_verdict(json.dumps(VERDICT))
    labels = [{"rubric_id": 2, "score_1": 5}]
    assert score_verdict(verdict, None, labels)[0] == PARSE_FAILURE


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({}, "ground_truth_overall"),
        ({"ground_truth_overall": [4, 2, 1]}, "ground_truth_overall"),
        ({"ground_truth_rubric_scores": [{"score_1": 4}]}, "ground_truth_rubric_scores"),
    ],
)
def test_bad_rows_name_the_field(tmp_path: Path, row: dict[str, Any], field: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"responses_create_params": {"input": "Judge."}, **row}) + "\n")
    with pytest.raises(ConfigError, match=f"rows.jsonl:1: field '{field}'"):
        gym.make("genrm", path=str(path)).tasks()
