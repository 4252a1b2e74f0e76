"""One process of a 2-process `GRPOTrainer` run (run by `torchrun`, CPU, gloo).

`tests/integrations/test_trl.py::test_grpo_groups_split_across_processes_hold_distinct_samples`
starts it as `torchrun --standalone --nproc_per_node 2 trl_world.py OUT`: per-device
batch 2 and `num_generations` 4, so every GRPO group is split across the two processes,
each sampling its half with the live model being trained. Each process writes what its
`rollout_func` played, call by call, to `OUT/rank<r>.json`.

Then, in the same processes (starting them is most of the cost), a second run of two
steps with prefetched steps (`rollout_func(ahead=1)`, generated from a copy of the
model), recording each sample's weights version and staleness too. The file holds
`{"world": 2, "sync": [calls...], "ahead": [calls...]}`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import transformers
import trl
from tinyllama import tiny_llama

import nemo_gym as gym
from nemo_gym.integrations import trl as gym_trl
from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path


async def lengthy(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return len(trajectory.final_text) / 40  # random tokens: a reward with a spread


def train(out: Path, tokenizer: object, ahead: int) -> list[dict[str, object]]:
    model = tiny_llama(tokenizer, seed=0)  # the same initial weights on both processes
    tasks = [gym.Task(id=f"q{i}", prompt=f"Write something about {i}.") for i in range(4)]
    env = gym.Env(lengthy, name="lengthy", tasks={"train": tasks})
    s = gym_trl.spec(env, split="train", ahead=ahead)
    played: list[dict[str, object]] = []

    def rollout_func(prompts: list[object], trainer: object) -> dict[str, list[object]]:
        out = s.rollout_func(prompts, trainer)
        played.append(
            {
                "step": trainer.state.global_step,  # type: ignore[attr-defined]
                "staleness": out.get(gym_trl.STALENESS_FIELD),
                "rollouts": [
                    {
                        "task": r.task_id,
                        "repeat": r.repeat,
                        "seed": r.seed,
                        "ok": r.ok,
                        "completion": r.trajectory.model_calls[0].response.completion_token_ids,
                        "version": r.metadata.get("weights_version"),
                    }
                    for r in s.rollout_func.last_rollouts
                ],
            }
        )
        return out

    args = trl.GRPOConfig(
        output_dir=str(out / f"trainer-{ahead}"),
        per_device_train_batch_size=2,
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        temperature=1.0,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=s.reward_funcs,
        args=args,
        train_dataset=s.train_dataset,
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )
    trainer.train()
    s.close()
    return played


def main(out: Path) -> None:
    import torch.distributed as dist

    directory, _ = converted_checkpoint(embedded_gguf_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    runs = {"sync": train(out, tokenizer, 0), "ahead": train(out, tokenizer, 1)}
    rank, world = dist.get_rank(), dist.get_world_size()
    (out / f"rank{rank}.json").write_text(json.dumps({"world": world, **runs}))


if __name__ == "__main__":
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    main(Path(sys.argv[1]))
