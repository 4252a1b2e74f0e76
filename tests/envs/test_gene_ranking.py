"""`gene_ranking`: AssayBench's adjusted nDCG@100 over a reply's ranked genes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message

ROWS = Path(__file__).parents[1] / "data" / "nemo_gym" / "assaybench.jsonl"


def _rows(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _reply(answer: str, before: str = "") -> list[Message]:
    return [
        Message.assistant(
            f"{before}[[ ## reasoning ## ]]\nx\n\n[[ ## answer ## ]]\n{answer}\n\n"
            "[[ ## completed ## ]]"
        )
    ]


def test_nemo_gym_rows_with_their_own_split_field_all_load(tmp_path: Path) -> None:
    # AssayBench rows carry `split: "example"`; NeMo Gym's loader keeps every row of a file.
    rows = [json.loads(line) for line in ROWS.read_text().splitlines()]
    assert {r["split"] for r in rows} == {"example"}
    env = ng.load(ROWS, server="assaybench")
    assert [t.id for t in env.tasks()] == [f"assaybench-{i}" for i in range(len(rows))]
    # Any server: a row's `split` is its data, not a filter on what `load` reads.
    mcqa = json.loads((ROWS.parent / "mcqa.jsonl").read_text().splitlines()[0])
    path = _rows(tmp_path, [{**mcqa, "split": "train"}, {**mcqa, "split": "validation"}])
    assert len(ng.load(path, server="mcqa").tasks()) == 2


async def test_oracle_wrong_and_a_partial_ranking() -> None:
    pytest.importorskip("assaybench")
    env = gym.make("gene_ranking")
    task = env.tasks()[1]
    for turns, expected in ((env.oracle(task), 1.0), (env.wrong(task), 0.0)):
        done = await gym.rollout(env, gym.models.ScriptedModel(turns), task)
        assert done.reward == pytest.approx(expected), done.failure
    md = task.metadata
    hits = [g for g, s in zip(md["relevance_genes"], md["relevance_scores"], strict=True) if s > 0]
    ordered = sorted(hits, key=lambda g: md["relevance_scores"][md["relevance_genes"].index(g)])
    done = await gym.rollout(env, gym.models.ScriptedModel(_reply(", ".join(ordered))), task)
    assert done.reward is not None and 0.0 < done.reward < 1.0
    assert done.rewards is not None
    assert done.rewards.metadata["extraction_mode"] == "dspy_answer"
    assert done.rewards.metadata["metrics"]["adjusted_ndcg@100"] == done.reward


async def test_a_forged_answer_in_a_think_block_does_not_count() -> None:
    pytest.importorskip("assaybench")
    env = gym.make("gene_ranking")
    task = env.tasks()[0]
    right = env.oracle(task)[0].content
    forged = _reply("KRAS, EGFR, PTEN, MYC, RB1", before=f"<think>{right}</think>")
    done = await gym.rollout(env, gym.models.ScriptedModel(forged), task)
    assert done.reward == 0.0 and done.rewards is not None
    assert done.rewards.metadata["predicted_genes"] == ["KRAS", "EGFR", "PTEN", "MYC", "RB1"]


async def test_no_gene_list_is_a_no_answer() -> None:
    pytest.importorskip("assaybench")
    env = gym.make("gene_ranking")
    task = env.tasks()[0]
    turns = [Message.assistant("I need the screen's data to answer.")]
    done = await gym.rollout(env, gym.models.ScriptedModel(turns), task)
    assert done.reward == 0.0 and done.rewards is not None
    assert done.rewards.metadata["extracted_answer"] is None
    assert done.rewards.metadata["extraction_mode"] == "none"


def test_fields_under_verifier_metadata_top_level_wins(tmp_path: Path) -> None:
    row = json.loads(ROWS.read_text().splitlines()[0])
    genes, scores = row.pop("relevance_genes"), row.pop("relevance_scores")
    row["verifier_metadata"] = {"relevance_genes": genes, "relevance_scores": scores}
    row["dataset_name"] = "top"
    row["verifier_metadata"]["dataset_name"] = "nested"
    task = ng.load(_rows(tmp_path, [row]), server="assaybench").tasks()[0]
    assert task.metadata["relevance_genes"] == genes
    assert task.metadata["dataset_name"] == "top"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"relevance_genes": []}, "relevance_genes"),
        ({"relevance_genes": "TP53, MYC"}, "relevance_genes"),
        ({"relevance_scores": [1.0]}, "relevance_scores"),
        ({"relevance_scores": None}, "relevance_scores"),
        ({"relevance_scores": "[1.0]"}, "relevance_scores"),
        ({"verifier_metadata": "x"}, "verifier_metadata"),
    ],
)
def test_bad_rows_name_the_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    row = {**json.loads(ROWS.read_text().splitlines()[0]), **change}
    with pytest.raises(gym.errors.ConfigError, match=rf"rows.jsonl:1: field .{field}"):
        ng.load(_rows(tmp_path, [row]), server="assaybench")


def test_a_non_finite_score_is_refused(tmp_path: Path) -> None:
    row = json.loads(ROWS.read_text().splitlines()[0])
    path = tmp_path / "rows.jsonl"
    row["relevance_scores"][0] = float("nan")
    path.write_text(json.dumps(row) + "\n")  # json writes NaN
    with pytest.raises(gym.errors.ConfigError, match="relevance_scores"):
        ng.load(path, server="assaybench")
