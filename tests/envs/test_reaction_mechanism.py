"""`reaction_mechanism`: FukuyamaBench's ordered checkpoints over canonical SMILES."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.envs.knowledge.reaction_mechanism import score_reply
from nemo_gym.interop import nemo_gym as ng

ROWS = Path(__file__).parents[1] / "data" / "nemo_gym" / "fukuyamabench.jsonl"
GOLD = [{"step_id": "1", "products": ["CCO", "[Br-]"]}]  # row S002: ethyl bromide + OH-


@pytest.mark.parametrize(
    ("steps", "status", "match"),
    [
        ('[{"step_id": 1, "product_smiles": "[CH3:1][CH2:2][OH:4].[Br-:3]"}]', "scored", True),
        ('[{"step_id": 1, "product_smiles": "OCC"}]', "scored", True),  # a subset, lenient
        ('[{"step_id": 1, "product_smiles": "CCO.[Br-].C"}]', "scored", False),  # superset
        ('[{"step_id": 1, "product_smiles": "CCO.Xx"}]', "scored", False),  # unparseable
        ('[{"step_id": 1, "smiles": "CCO"}]', "no_pathway", None),
    ],
)
def test_the_scorer(steps: str, status: str, match: bool | None) -> None:
    found = score_reply(f"```json\n{steps}\n```", GOLD, [[1]], True)
    assert found["status"] == status and found.get("exact_match") is match


def test_strict_rows_need_every_product() -> None:
    reply = '```json\n[{"step_id": 1, "product_smiles": "OCC"}]\n```'
    assert score_reply(reply, GOLD, [[1]], False)["exact_match"] is False


async def test_the_sample_scores_in_a_pool_worker() -> None:
    env = gym.make("reaction_mechanism")
    task = env.tasks()[1]
    done = await gym.rollout(env, gym.models.ScriptedModel(env.oracle(task)), task)
    assert done.reward == 1.0 and done.rewards is not None
    assert done.rewards.metadata["checkpoints_correct"] == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gt_pathway": []}, "verifier_metadata.gt_pathway"),
        ({"checkpoints": [["1"]]}, "verifier_metadata.checkpoints"),
        ({"lenient": "yes"}, "verifier_metadata.lenient"),
    ],
)
def test_bad_rows_name_the_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    row = json.loads(ROWS.read_text().splitlines()[0])
    row["verifier_metadata"] = {**row["verifier_metadata"], **change}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(gym.errors.ConfigError, match=rf"rows.jsonl:1: field .{field}"):
        ng.load(path, server="fukuyamabench").tasks()
