"""`litmus`: NeMo Gym's litmus_agent scoring (compared with its own verify, reply for reply,
in tests/interop/test_nemo_gym_servers.py); here the shipped rows, the rules' edges, the
yes/no reading and row errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.envs.knowledge.litmus import extract, score
from nemo_gym.errors import ConfigError

PROMPT = {"input": [{"role": "user", "content": "How many?"}]}


def _row(**fields: Any) -> dict[str, Any]:
    return {"responses_create_params": PROMPT, "expected_answer": "3", **fields}


def _env(tmp_path: Path, *rows: dict[str, Any]) -> Any:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return gym.make("litmus", path=str(path))


async def _reward(env: Any, text: str) -> float:
    task = env.tasks()[0]
    done = await gym.rollout(env, gym.models.ScriptedModel([gym.Message.assistant(text)]), task)
    assert done.reward is not None
    return done.reward


def test_the_sample_runs() -> None:
    assert gym.check_env(gym.make("litmus")).ok


@pytest.mark.parametrize(
    ("fields", "reply", "reward"),
    [
        ({"answer_type": "float", "match": {"rule": "exact"}}, "((3.4))", 1.0),
        ({"answer_type": "float", "match": {"rule": "exact"}}, "((3.6))", 0.0),
        # one answer: candidates are a hedge (NeMo Gym scores the last, here 1)
        ({"answer_type": "float", "match": {"rule": "exact"}}, "((5)) no: ((3))", 0.0),
        ({"answer_type": "float", "match": {"rule": "exact"}}, "((5 or 3))", 0.0),
        ({"answer_type": "float"}, "Format: \\boxed{...}. So \\boxed{3}", 0.0),
        (
            {"answer_type": "float", "answer_format": "fmt_07"},
            "Form: \\boxed{...}. \\boxed{3}",
            1.0,
        ),
        ({"answer_type": "float"}, "((3)), and again ((3.0))", 1.0),
        # isclose by default, at the env's 1e-6
        ({"answer_type": "float"}, "((3.0000001))", 1.0),
        ({"answer_type": "float"}, "((3.001))", 0.0),
        (
            {"answer_type": "float", "match": {"rule": "rel_window", "rel_tol": 0.1}},
            "((3.29))",
            1.0,
        ),
        (
            {"answer_type": "float", "match": {"rule": "rel_window", "rel_tol": 0.1}},
            "((3.31))",
            0.0,
        ),
        # legacy rows: a count is read as a number and compared rounded
        ({"property_type": "count"}, "State it: ((about 3 atoms))", 1.0),
        ({"property_type": "presence", "expected_answer": "1"}, "((yes))", 0.0),
        (
            {"answer_type": "string", "expected_answer": "Ester", "answer_format": "fmt_18"},
            "**Answer:  ester **",
            1.0,
        ),
        ({"answer_type": "float", "output_regex": r"VALUE=(\S+)"}, "VALUE=3", 1.0),
    ],
)
async def test_rules_read_the_last_answer(
    tmp_path: Path, fields: dict[str, Any], reply: str, reward: float
) -> None:
    assert await _reward(_env(tmp_path, _row(**fields)), reply) == reward


@pytest.mark.parametrize(
    ("capture", "reward"), [("yes", 1.0), ("2", 1.0), ("nan", 0.0), ("inf", 0.0)]
)
async def test_a_yes_no_answer_is_a_word_or_a_finite_number(
    tmp_path: Path, capture: str, reward: float
) -> None:
    # NeMo Gym reads "nan" and "inf" as yes (any number but 0); they are no answer here.
    env = _env(tmp_path, _row(expected_answer="true", answer_type="bool", answer_format="fmt_15"))
    assert await _reward(env, f"<final_answer>{capture}</final_answer>") == reward


def test_a_string_capture_under_a_numeric_rule_is_no_number() -> None:
    check = {"expected": "3", "type": "string", "parse": "string", "rule": "exact", "params": {}}
    check["format"] = "fmt_00"
    assert extract("((three))", check) == "three"
    assert score("three", check) == 0.0


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"answer_type": "integer"}, "'answer_type'"),
        ({"property_type": "mass"}, "'answer_type'"),
        ({"answer_type": "float", "answer_format": "fmt_99"}, "'answer_format'"),
        ({"answer_type": "float", "output_regex": r"(\d+) of (\d+)"}, "'output_regex'"),
        ({"answer_type": "float", "output_regex": "(unclosed"}, "'output_regex'"),
        ({"answer_type": "float", "match": {"rule": "fuzzy"}}, "'match'"),
        ({"answer_type": "float", "match": {"abs_tol": 0.1}}, "'match'"),
        # a misspelt tolerance: NeMo Gym would ignore it and compare within 1e-6
        (
            {"answer_type": "float", "match": {"rule": "abs_window", "abs_tolerance": 0.1}},
            "'match'",
        ),
        (
            {"answer_type": "float", "match": {"rule": "abs_window", "abs_tol": "0.1"}},
            "'match.abs_tol'",
        ),
        ({"answer_type": "float", "expected_answer": "three"}, "'expected_answer'"),
        ({"answer_type": "bool", "expected_answer": "maybe"}, "'expected_answer'"),
        (
            {
                "answer_type": "float",
                "responses_create_params": {
                    **PROMPT,
                    "tools": [{"type": "function", "name": "stateful_python_code_exec"}],
                },
            },
            "'responses_create_params.tools'",
        ),
    ],
)
def test_a_row_it_cannot_score_is_a_load_error_naming_the_field(
    tmp_path: Path, fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=rf"rows\.jsonl:1: field {named}"):
        _env(tmp_path, _row(**fields)).tasks()
