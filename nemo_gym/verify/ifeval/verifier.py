"""`IFEvalVerifier`: score a trajectory's final answer against the task's IFEval instructions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from nemo_gym.errors import VerifierError
from nemo_gym.records import Rewards, Rollout, Task, Trajectory
from nemo_gym.verify.ifeval.scoring import build_instructions, score_instructions
from nemo_gym.verify.long_context import without_copies

ECHO_SPAN = 8
"""A reply made only of runs of this many words copied from the prompt scores 0."""

Mode = Literal["strict", "loose"]
RewardLevel = Literal["prompt", "instruction"]


class IFEvalVerifier:
    """Checks the final assistant message against `task.metadata`'s IFEval instructions.

    The task carries the dataset row's fields in `metadata`: `instruction_id_list` (a list
    of ids such as "punctuation:no_comma") and `kwargs` (one object per id, with IFEval's
    argument names; may be omitted when no instruction takes arguments). `ifeval_task`
    builds such a task from a row.

    `reward` is the prompt-level score (1.0 when every instruction is followed, else
    0.0) or, with `reward="instruction"`, the fraction of instructions followed; `mode`
    chooses strict or loose scoring for it. The components always hold all four scores
    ("prompt_strict", "instruction_strict", "prompt_loose", "instruction_loose") and the
    metadata the per-instruction results under "instructions". An unknown instruction id
    or bad kwargs raises `VerifierError` naming the id and field. A reply that only
    repeats the prompt (runs of `ECHO_SPAN` words or more) scores 0 on every level:
    the prompt holds the words its instructions ask for.
    """

    def __init__(self, mode: Mode = "strict", reward: RewardLevel = "prompt") -> None:
        if mode not in ("strict", "loose"):
            raise ValueError(f"IFEvalVerifier mode must be 'strict' or 'loose', got {mode!r}")
        if reward not in ("prompt", "instruction"):
            raise ValueError(
                f"IFEvalVerifier reward must be 'prompt' or 'instruction', got {reward!r}"
            )
        self.mode: Mode = mode
        self.reward: RewardLevel = reward

    def __repr__(self) -> str:
        return f"IFEvalVerifier(mode={self.mode!r}, reward={self.reward!r})"

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Score `trajectory.final_text` against the task's instructions."""
        metadata = task.metadata
        if "instruction_id_list" not in metadata:
            raise VerifierError(
                f"task {task.id}: metadata has no 'instruction_id_list' (IFEval needs it)",
                code="ifeval_bad_kwargs",
            )
        # Validate before doing any work, so bad rows fail fast and name the field.
        instructions = build_instructions(metadata["instruction_id_list"], metadata.get("kwargs"))
        # Checking is pure CPU (langdetect, regexes over the whole response, eight loose
        # variants), so it runs in a worker thread rather than on the event loop.
        reply = trajectory.final_text
        prompt = "\n".join(m.content or "" for m in task.messages if m.role != "assistant")
        if reply.strip() and not without_copies(reply, prompt, ECHO_SPAN).strip():
            # The prompt names the words, endings and phrases its instructions ask for, so
            # repeating it follows them without answering anything.
            zero = {f"{r}_{m}": 0.0 for r in ("prompt", "instruction") for m in ("strict", "loose")}
            return Rewards(
                reward=0.0,
                components=zero,
                metadata={
                    "mode": self.mode,
                    "reward_level": self.reward,
                    "reason": "the reply only repeats the prompt",
                },
            )
        score = await asyncio.to_thread(score_instructions, reply, instructions)
        components = score.components()
        return Rewards(
            reward=components[f"{self.reward}_{self.mode}"],
            components=components,
            metadata={
                "mode": self.mode,
                "reward_level": self.reward,
                "instructions": [result.as_dict() for result in score.results],
            },
        )


def ifeval_task(row: Mapping[str, Any]) -> Task:
    """A `Task` from an IFEval dataset row (`key`, `prompt`, `instruction_id_list`, `kwargs`).

    The row is validated here, so a bad row fails when tasks are loaded rather than at
    scoring time.
    """
    for name in ("prompt", "instruction_id_list"):
        if name not in row:
            raise VerifierError(f"IFEval row has no {name!r} field", code="ifeval_bad_kwargs")
    kwargs = row.get("kwargs")
    build_instructions(row["instruction_id_list"], kwargs)
    key = row.get("key")
    return Task(
        id=str(key) if key is not None else "",
        prompt=row["prompt"],
        metadata={
            "instruction_id_list": list(row["instruction_id_list"]),
            "kwargs": [dict(k) if k is not None else {} for k in kwargs]
            if kwargs is not None
            else [{} for _ in row["instruction_id_list"]],
        },
    )


def ifeval_metrics(
    rewards_list: Iterable[Rewards | Rollout | None], *, per_instruction: bool = False
) -> dict[str, float]:
    """Aggregate IFEval results into prompt-level and instruction-level accuracy.

    Takes the `Rewards` an `IFEvalVerifier` returned (or `Rollout`s holding them). As in
    IFEval, prompt-level accuracy is the fraction of prompts with every instruction
    followed, and instruction-level accuracy the fraction of all instructions (pooled
    over prompts) followed. Failed rollouts and None are not scored: they are counted in
    "n_skipped". With `per_instruction=True`, adds "<instruction id>/strict" and
    "<instruction id>/loose" accuracies. Raises `ValueError` when nothing was scored or a
    result does not come from `IFEvalVerifier`.
    """
    prompts = 0
    prompt_hits = {"strict": 0, "loose": 0}
    instruction_hits = {"strict": 0, "loose": 0}
    instructions = 0
    skipped = 0
    by_id: dict[str, list[int]] = {}
    for item in rewards_list:
        rewards = item.rewards if isinstance(item, Rollout) and item.ok else item
        if not isinstance(rewards, Rewards):
            skipped += 1
            continue
        results = rewards.metadata.get("instructions")
        if not isinstance(results, list) or not results:
            raise ValueError(
                "ifeval_metrics needs Rewards from IFEvalVerifier "
                "(metadata['instructions'] is missing)"
            )
        prompts += 1
        instructions += len(results)
        for mode in ("strict", "loose"):
            followed = [bool(result[mode]) for result in results]
            prompt_hits[mode] += all(followed)
            instruction_hits[mode] += sum(followed)
        for result in results:
            counts = by_id.setdefault(result["instruction_id"], [0, 0, 0])
            counts[0] += 1
            counts[1] += bool(result["strict"])
            counts[2] += bool(result["loose"])
    if prompts == 0:
        raise ValueError(f"no IFEval results to aggregate ({skipped} skipped)")
    metrics: dict[str, float] = {
        "prompt_strict": prompt_hits["strict"] / prompts,
        "instruction_strict": instruction_hits["strict"] / instructions,
        "prompt_loose": prompt_hits["loose"] / prompts,
        "instruction_loose": instruction_hits["loose"] / instructions,
        "n_prompts": float(prompts),
        "n_instructions": float(instructions),
        "n_skipped": float(skipped),
    }
    if per_instruction:
        for instruction_id in sorted(by_id):
            total, strict, loose = by_id[instruction_id]
            metrics[f"{instruction_id}/strict"] = strict / total
            metrics[f"{instruction_id}/loose"] = loose / total
    return metrics
