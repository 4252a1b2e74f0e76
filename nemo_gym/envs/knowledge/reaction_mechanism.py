"""`reaction_mechanism`: predict an organic reaction's mechanism, step by step, as SMILES.

NeMo Gym's `fukuyamabench` (FukuyamaBench). The reply's pathway (the last fenced JSON
array of steps, else a balanced array after `## Result`, else loose step objects, as
NeMo Gym reads it) is scored by NeMo Gym's own scorer: the gold checkpoints are matched
in order against the predicted steps by canonical-SMILES product sets (atom maps
dropped, dotted species split; under `lenient`, the row's default, a non-empty subset of
a gold step's products counts), and a prediction with any unparseable SMILES fails its
step. Reward 1 when every checkpoint is matched, else 0; `rewards.metadata` has the
status (`scored`, `empty_output`, `no_pathway`) and checkpoint counts.

The scoring runs in a pool worker with a deadline (the pathway reading scans brackets
quadratically on hostile text). Needs the `chemistry` extra (`rdkit==2025.9.6`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Rewards, Task, Trajectory

__all__ = ["ReactionMechanism", "mechanism_fields", "score_reply"]


def mechanism_fields(row: Row) -> dict[str, Any]:
    """The row's `verifier_metadata`: the gold pathway and checkpoints, checked."""
    meta = row.require("verifier_metadata", dict)
    gold = meta.get("gt_pathway")
    if not (isinstance(gold, list) and gold and all(isinstance(s, dict) for s in gold)):
        raise row.bad("verifier_metadata.gt_pathway", "must be a non-empty list of steps")
    checkpoints = meta.get("checkpoints")
    if not (
        isinstance(checkpoints, list)
        and checkpoints
        and all(isinstance(c, list) and all(isinstance(i, int) for i in c) for c in checkpoints)
    ):
        raise row.bad("verifier_metadata.checkpoints", "must be a non-empty list of step-id lists")
    lenient = meta.get("lenient", True)
    if lenient is None:
        lenient = True  # NeMo Gym's default when absent
    if not isinstance(lenient, bool):
        raise row.bad("verifier_metadata.lenient", "must be true or false")
    return {
        "gt_pathway": gold,
        "checkpoints": checkpoints,
        "lenient": lenient,
        "case_id": meta.get("case_id"),
        "case_set": meta.get("case_set"),
    }


def score_reply(
    text: str, gold: list[dict[str, Any]], checkpoints: list[list[int]], lenient: bool
) -> dict[str, Any]:
    """NeMo Gym's verify on the reply's text (run in a pool worker)."""
    from nemo_gym.envs.knowledge.mechanism import extract_pathway
    from nemo_gym.envs.knowledge.mechanism.metrics import score_pathway

    if not text:
        return {"status": "empty_output"}
    pathway = extract_pathway(text)
    if pathway is None:
        return {"status": "no_pathway"}
    scores = score_pathway(pathway, gold, checkpoints, lenient=lenient)
    scores.pop("checkpoint_matches", None)
    return {"status": "scored", **scores}


async def verify_mechanism(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when every gold checkpoint is matched by the reply's pathway, in order."""
    from nemo_gym.verify.pool import shared_pool

    md = task.metadata
    added = trajectory.messages[len(task.messages) :]
    # NeMo Gym joins every assistant message of the response, then strips.
    text = "\n".join(m.content for m in added if m.role == "assistant" and m.content).strip()
    found = await shared_pool().call(
        score_reply, text, md["gt_pathway"], md["checkpoints"], md["lenient"], timeout=30.0
    )
    return Rewards(
        reward=1.0 if found.get("exact_match") else 0.0,
        metadata={**found, "case_id": md.get("case_id"), "case_set": md.get("case_set")},
    )


class ReactionMechanism(DatasetEnv):
    """Predict a reaction mechanism's steps as SMILES; scored by FukuyamaBench's ordered
    checkpoints over canonical product sets (`verify_mechanism`).

    Rows are NeMo Gym's `fukuyamabench` layout: `responses_create_params` and
    `verifier_metadata` (`gt_pathway`, `checkpoints`, `lenient`, `case_id`, `case_set`).
    """

    name = "reaction_mechanism"
    version = "1"
    domain = "knowledge"
    verification = "canonical-SMILES products per gold checkpoint, in order (RDKit)"
    source = "NeMo Gym's fukuyamabench example rows (FukuyamaBench)"
    license = "Apache-2.0"
    sample = "knowledge/data/reaction_mechanism.jsonl"
    requires = ("extra:chemistry",)

    def __init__(self, *, path: str | None = None, tasks: Sequence[Task] | None = None) -> None:
        super().__init__(verify_mechanism, path=path, tasks=tasks, harness=SingleTurn())

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, _ = prompt_of(row)
        fields = mechanism_fields(row)
        return Task(id=self.task_id(row, split, "id"), messages=messages, metadata=fields)

    def oracle(self, task: Task) -> Turns:
        import json

        gold = task.metadata["gt_pathway"]
        steps = [
            {"step_id": i + 1, "product_smiles": ".".join(s.get("products", []))}
            for i, s in enumerate(gold)
        ]
        return [Message.assistant("## Result\n```json\n" + json.dumps(steps) + "\n```")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant('```json\n[{"step_id": 1, "product_smiles": "C"}]\n```')]
