"""NeMo Gym's widesearch: judge requests that depend on earlier judge replies, unreadable
judge replies, and rows its verifier would fail on (the comparison with NeMo Gym's own
verify is in test_nemo_gym_servers.py)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.errors import ConfigError
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.models import ScriptedModel
from nemo_gym.protocols import ModelRequest

pytest.importorskip("pandas")
pytest.importorskip("dateparser")

DATA = Path(__file__).resolve().parents[1] / "data" / "nemo_gym" / "widesearch.jsonl"


def _rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines()]


def _judge(asked: list[str]) -> ScriptedModel:
    """Maps "<name> (as asked)" back to the gold column, and passes every judged cell."""

    def answer(request: ModelRequest) -> str:
        prompt = request.messages[-1].content or ""
        asked.append(prompt)
        if prompt.startswith("Your task is to align two vocabularies"):
            # the names as NeMo Gym normalises them: lower case, no spaces
            names = re.findall(r"'([^']*)\(asasked\)'", prompt)
            found = {f"{n}(asasked)": n for n in names}
            return "```json\n" + json.dumps(found) + "\n```"
        indices = re.findall(r"'(idx_\d+)'", prompt)
        return "```json\n" + json.dumps(dict.fromkeys(indices, 1)) + "\n```"

    return ScriptedModel(answer)


def test_each_judge_request_is_built_from_the_replies_before_it() -> None:
    """The column names are aligned first; only then do the judged columns exist to ask
    about (before `JudgeProtocol.follow`, only the alignment was asked: judge_failed)."""
    asked: list[str] = []
    env = ng.load(DATA, server="widesearch", judge=_judge(asked))
    task = env.tasks()[0]  # 2 judged columns, keys that are gold values
    table = env.oracle(task)[0].content.split("\n")
    header = "|".join(f" {c.strip()} (as asked) " if c.strip() else c for c in table[1].split("|"))
    reply = "\n".join([table[0], header, *table[2:]])
    done = asyncio.run(gym.rollout(env, ScriptedModel([reply]), task))
    assert done.failure is None and done.reward == 1.0
    assert done.rewards.metadata["judge_calls"] == 3 == len(asked)
    assert asked[0].startswith("Your task is to align")
    assert all(p.startswith("You are an expert in grading") for p in asked[1:])
    assert done.rewards.components["recall_by_item"] == 1.0


def test_a_judge_reply_without_json_fails_the_rollout_after_it() -> None:
    """NeMo Gym reads it as {} (the column's cells all 0); here the rollout is a
    judge_failed failure, and no further request is sent."""
    env = ng.load(DATA, server="widesearch", judge=ScriptedModel(["They all look right."] * 5))
    task = env.tasks()[0]
    done = asyncio.run(gym.rollout(env, ScriptedModel(env.oracle(task)), task))
    assert done.reward is None and done.failure is not None
    assert (done.failure.kind, done.failure.code) == ("verifier", "judge_failed")
    assert ng.to_row(done)["mask_sample"] is True


def test_a_reply_without_a_table_scores_0_without_a_judge() -> None:
    env = ng.load(DATA, server="widesearch", judge=ScriptedModel([]))
    task = env.tasks()[0]
    done = asyncio.run(gym.rollout(env, ScriptedModel(["Harvard, Oxford, Cambridge."]), task))
    assert done.failure is None and done.reward == 0.0
    assert done.rewards.metadata["judge_calls"] == 0


def _set(row: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        row = row[key]
    row[last] = value


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (
            "evaluation.eval_pipeline.applicationfee.metric",
            ["fuzzy"],
            "evaluation.eval_pipeline.applicationfee.metric",
        ),
        (
            "evaluation.eval_pipeline.homepage.preprocess",
            ["norm_url"],
            "evaluation.eval_pipeline.homepage.preprocess",
        ),
        ("evaluation.unique_columns", ["country"], "evaluation.unique_columns"),
        ("evaluation.eval_pipeline.applicationfee", None, "evaluation.eval_pipeline"),
        ("gold_answer", [{"Subject": "Arts & Humanities"}], "gold_answer[0]"),
    ],
)
def test_rows_nemo_gym_cannot_verify_are_refused_at_load(
    tmp_path: Path, path: str, value: Any, field: str
) -> None:
    row = _rows()[0]
    if value is None:
        del row["evaluation"]["eval_pipeline"][path.rsplit(".", 1)[1]]
    else:
        _set(row, path, value)
    source = tmp_path / "rows.jsonl"
    source.write_text(json.dumps(row) + "\n")
    with pytest.raises(ConfigError) as raised:
        ng.load(source, server="widesearch", judge=ScriptedModel([]))
    assert "rows.jsonl:1" in str(raised.value) and repr(field) in str(raised.value)


def test_a_missing_table_reader_is_named_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "dateparser" else real(name)
    )
    with pytest.raises(ConfigError, match=r"\['dateparser'\] missing.*nemo-gym\[widesearch\]"):
        ng.load(DATA, server="widesearch", judge=ScriptedModel([]))
