"""`gene_ranking`: rank the genes most likely to be hits of a described CRISPR screen.

NeMo Gym's `assaybench` (AssayBench, arXiv:2605.10876). The reply's ranked gene list is read
as NeMo Gym reads it (the `[[ ## answer ## ]]` field of DSPy's chat format, split on commas
with an HGNC-shaped filter; a reply DSPy could not parse is scanned raw; a closed
`<think>` block is dropped first) and scored with the authors' own `RankingMetrics` from
the `assaybench==0.2.0` package, with its HGNC gene mapper: reward = adjusted nDCG@100 in
[0, 1] (0 at or below a random ranking). Duplicates count once (after alias mapping);
genes the screen did not test, and symbols HGNC does not know, are skipped (the package's
condensed list), so only the screen's genes among the first 100 count.
`rewards.metadata` has the extraction mode, the parsed list, every scalar metric and
whether the turn hit its token limit (still scored, as NeMo Gym does).

Needs the `genes` extra (`assaybench==0.2.0`, whose HGNC tables ship in its wheel).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence
from functools import cache
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Rewards, Task, Trajectory

__all__ = ["GeneRanking", "assay_fields", "ranking_metrics"]

# NeMo Gym's config: `RankingMetrics(k_values=...)` and the metric that becomes the reward.
K_VALUES = (5, 10, 20, 50, 100)
REWARD_METRIC = "adjusted_ndcg@100"

_CONTEXT = (
    "dataset_name",
    "split",
    "cleaned_phenotype",
    "screen_category",
    "author",
    "source_id",
    "num_genes",
)
_lock = threading.Lock()


def assay_fields(row: Row) -> dict[str, Any]:
    """The screen's relevance vector (top-level, or under `verifier_metadata`: top-level
    wins, as in NeMo Gym) and its context fields, checked."""
    nested = row.get("verifier_metadata")
    if nested is not None and not isinstance(nested, dict):
        raise row.bad("verifier_metadata", "must be an object")
    data = {**(nested or {}), **{k: v for k, v in row.data.items() if v is not None}}
    genes, scores = data.get("relevance_genes"), data.get("relevance_scores")
    if not (isinstance(genes, list) and genes and all(isinstance(g, str) for g in genes)):
        raise row.bad("relevance_genes", "must be a non-empty list of gene symbols")
    if not (
        isinstance(scores, list)
        and all(
            isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)
            for s in scores
        )
    ):
        raise row.bad("relevance_scores", "must be a list of finite numbers")
    if len(scores) != len(genes):
        raise row.bad(
            "relevance_scores", f"has {len(scores)} scores for {len(genes)} relevance_genes"
        )
    return {
        "relevance_genes": genes,
        "relevance_scores": [float(s) for s in scores],
        **{k: data.get(k) for k in _CONTEXT},
    }


@cache
def ranking_metrics() -> Any:
    """The package's `RankingMetrics`, built once per process (its HGNC tables take seconds)."""
    from nemo_gym.errors import require

    metrics = require("assaybench.benchmark.metrics", "genes").RankingMetrics(
        k_values=list(K_VALUES), use_gene_mapper=True
    )
    # The mapper builds its lookup tables on first use: build them here, once, so the
    # threads that score replies only read them.
    metrics.gene_mapper.map_gene("TP53")
    return metrics


def _evaluate(predicted: list[str], genes: list[str], scores: list[float]) -> dict[str, float]:
    from nemo_gym.envs.knowledge.assaybench.gene_parsing import scalar_metrics

    with _lock:
        metrics = ranking_metrics()
    return scalar_metrics(
        metrics.evaluate(
            predicted_genes=predicted, ground_truth_genes=genes, relevance_scores=scores
        )
    )


async def verify_ranking(task: Task, trajectory: Trajectory) -> Rewards:
    """Adjusted nDCG@100 of the reply's ranked genes against the screen's relevance vector."""
    from nemo_gym.envs.knowledge.assaybench.gene_parsing import (
        THINK_BLOCK_PATTERN,
        extract_predicted_genes,
    )

    md = task.metadata
    added = [m for m in trajectory.messages[len(task.messages) :] if m.role == "assistant"]
    # NeMo Gym reads the response's `output_text`: every assistant text, joined.
    text = "".join(m.content for m in added if m.content)
    text = THINK_BLOCK_PATTERN.sub("", text)
    genes, mode, dspy_failed = extract_predicted_genes(text)
    calls = trajectory.model_calls
    last = calls[-1].response if calls else None
    # Pure CPU work over the HGNC tables; kept off the event loop.
    metrics = await asyncio.to_thread(
        _evaluate, genes, md["relevance_genes"], md["relevance_scores"]
    )
    return Rewards(
        reward=metrics.get(REWARD_METRIC, 0.0),
        metadata={
            "extracted_answer": ", ".join(genes) if genes else None,
            "predicted_genes": genes,
            "extraction_mode": mode,
            "dspy_parse_failed": dspy_failed,
            "truncated": last is not None and last.finish_reason == "length",
            "metrics": metrics,
            **{k: md.get(k) for k in _CONTEXT},
        },
    )


class GeneRanking(DatasetEnv):
    """Rank a CRISPR screen's likely hit genes; scored by AssayBench's adjusted nDCG@100
    (`verify_ranking`).

    Rows are NeMo Gym's `assaybench` layout: `responses_create_params`, `relevance_genes`,
    `relevance_scores` and the screen's context fields (`dataset_name`, `cleaned_phenotype`,
    `screen_category`, ...), top-level or under `verifier_metadata`.
    """

    name = "gene_ranking"
    version = "1"
    domain = "knowledge"
    verification = "adjusted nDCG@100 of the ranked genes (the authors' assaybench package)"
    source = "NeMo Gym's assaybench example rows (AssayBench, synthetic screens)"
    license = "Apache-2.0"
    sample = "knowledge/data/gene_ranking.jsonl"
    requires = ("extra:genes",)

    def __init__(self, *, path: str | None = None, tasks: Sequence[Task] | None = None) -> None:
        super().__init__(verify_ranking, path=path, tasks=tasks, harness=SingleTurn())

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, _ = prompt_of(row)
        return Task(
            id=self.task_id(row, split, "dataset_name"),
            messages=messages,
            metadata=assay_fields(row),
        )

    def oracle(self, task: Task) -> Turns:
        md = task.metadata
        pairs = sorted(
            zip(md["relevance_scores"], md["relevance_genes"], strict=True), key=lambda p: -p[0]
        )
        return [Message.assistant(_dspy_reply([g for s, g in pairs if s > 0]))]

    def wrong(self, task: Task) -> Turns:
        # The screen's genes that are not hits: a ranking no better than random.
        scores = dict(
            zip(task.metadata["relevance_genes"], task.metadata["relevance_scores"], strict=True)
        )
        return [Message.assistant(_dspy_reply([g for g, s in scores.items() if s <= 0]))]


def _dspy_reply(genes: list[str]) -> str:
    return (
        "[[ ## reasoning ## ]]\nFrom the screen's biology.\n\n"
        f"[[ ## answer ## ]]\n{', '.join(genes)}\n\n[[ ## completed ## ]]"
    )
