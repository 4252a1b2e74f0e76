"""Loopback endpoint overhead, side by side in one run: CPU µs per model call.

    python bench/harness.py              # 3,000 calls per row
    python bench/harness.py --calls 500  # quicker
    python bench/harness.py --swe 5      # seconds per SWE episode outside agent and tests

(`--swe N`: see `swe_rows` below; needs a Docker engine and the `swe` extra.)

Every row makes the same model call on the same in-process model (a scripted reply
with token ids), which costs next to nothing, so what is left is the call path:

- `direct`: the harness awaits `model.generate(request)` in process (the baseline);
- `endpoint ...`: the call goes out over HTTP on 127.0.0.1 to the `ModelEndpoint`
  and back, client and server both in this process (what a harness pays when its
  agent speaks HTTP); the client is our `OpenAIChat` / `OpenAIResponses` / `Anthropic`
  adapter on the fast transport, or the real `openai` SDK;
- `thread`: the endpoint serving from a thread of its own.

CPU time is process time (all threads) over the calls, divided by the calls; `conc`
calls run at once. `+µs` and the ratio are against `direct` at the same concurrency
(the direct call of a scripted model is a fraction of a µs, so the ratio is large and
the added µs are the figure to read).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

import nemo_gym as gym  # noqa: E402
from nemo_gym.endpoint import ModelEndpoint, Route  # noqa: E402
from nemo_gym.models import ScriptedModel  # noqa: E402

REPLY = gym.ModelResponse(
    message=gym.Message.assistant("The answer is 4."),
    finish_reason="stop",
    usage=gym.Usage(prompt_tokens=12, completion_tokens=6),
    prompt_token_ids=list(range(12)),
    completion_token_ids=list(range(100, 106)),
    completion_logprobs=[-0.1] * 6,
)
REQUEST = gym.ModelRequest(
    messages=(gym.Message.system("Be brief."), gym.Message.user("What is 2+2?")),
    sampling=gym.Sampling(max_tokens=16),
)

Call = Callable[[], Awaitable[object]]


async def measure(call: Call, calls: int, concurrency: int) -> float:
    """CPU µs per call, `concurrency` calls in flight."""
    for _ in range(min(50, calls)):  # warm up: connections, caches
        await call()
    queue = iter(range(calls))

    async def worker() -> None:
        for _ in queue:
            await call()

    cpu = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - cpu) / calls * 1e6


async def rows(calls: int) -> list[tuple[str, int, float]]:
    from nemo_gym.models.anthropic import Anthropic
    from nemo_gym.models.openai import OpenAIChat, OpenAIResponses

    model = ScriptedModel([REPLY], cycle=True, keep_requests=False)
    out: list[tuple[str, int, float]] = []
    for concurrency in (1, 32):
        out.append(
            (
                "direct",
                concurrency,
                await measure(lambda: model.generate(REQUEST), calls, concurrency),
            )
        )
        for thread in (False, True):
            endpoint = ModelEndpoint(thread=thread)
            route: Route = await endpoint.route(model)
            clients: list[tuple[str, object]] = [
                ("chat", OpenAIChat("m", base_url=route.base_url, api_key=route.api_key)),
                (
                    "chat stream",
                    OpenAIChat("m", base_url=route.base_url, api_key=route.api_key, stream=True),
                ),
            ]
            if not thread:
                clients += [
                    (
                        "responses",
                        OpenAIResponses("m", base_url=route.base_url, api_key=route.api_key),
                    ),
                    (
                        "messages",
                        Anthropic("m", base_url=route.anthropic_base_url, api_key=route.api_key),
                    ),
                ]
            for label, client in clients:
                name = f"{'thread' if thread else 'endpoint'} {label}"
                out.append(
                    (
                        name,
                        concurrency,
                        await measure(lambda c=client: c.generate(REQUEST), calls, concurrency),
                    )
                )  # type: ignore[attr-defined]
                await client.aclose()  # type: ignore[attr-defined]
            if not thread:
                import openai

                sdk = openai.AsyncOpenAI(
                    base_url=route.base_url, api_key=route.api_key, max_retries=0
                )
                body = [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "What is 2+2?"},
                ]

                async def via_sdk(sdk: openai.AsyncOpenAI = sdk, body: list = body) -> object:
                    return await sdk.chat.completions.create(
                        model="m", messages=body, max_tokens=16
                    )  # type: ignore[arg-type]

                out.append(
                    (
                        "endpoint chat, openai SDK client",
                        concurrency,
                        await measure(via_sdk, max(calls // 5, 100), concurrency),
                    )
                )
                await sdk.close()
            await endpoint.aclose()
    return out


async def swe_rows(episodes: int) -> list[tuple[str, dict[str, float]]]:
    """Wall seconds per SWE episode of the sample task `nemo-gym__calc-1`, gold patch as
    the agent, by phase, median over `episodes`:

    - `docker`: the agent's container start (`open`), the agent (the gold patch through
      the `apply_patch` tool), the take (freeze and archive) and the agent container's
      removal, the grading container's start, its preparation (base archive, module
      list, the graded files written) and the tests; the image is built before timing.
    - `local`: the floor with no container: the repository written to a temp folder, the
      gold patch applied in process, the same test command run there and its log scored.

    `overhead` is everything but the agent and the tests.
    """
    import statistics

    from nemo_gym.envs.swe import SWEEnv, take
    from nemo_gym.envs.swe.grading import grade

    env = SWEEnv()
    task = next(t for t in env.tasks() if t.id == "nemo-gym__calc-1")
    swe = env.swe_task(task)
    spec = await env.spec_for(swe)  # builds the image once, before any timing
    docker: list[dict[str, float]] = []
    for _ in range(episodes):
        phase: dict[str, float] = {}
        t = time.perf_counter()
        episode = await env.open(task)
        phase["container start"] = time.perf_counter() - t
        t = time.perf_counter()
        apply = next(tool for tool in episode.tools if tool.spec.name == "apply_patch")
        await apply.fn(patch=swe.patch)
        phase["agent"] = time.perf_counter() - t
        t = time.perf_counter()
        assert episode.sandbox is not None
        taken = await take(episode.sandbox, swe.workdir)
        await episode.sandbox.aclose()
        phase["take + remove"] = time.perf_counter() - t
        t = time.perf_counter()
        async with env.provider().start(spec) as fresh:
            phase["grading container start"] = time.perf_counter() - t
            report = await grade(swe, taken, fresh)
            assert report.resolved, report.log[-2000:]
            phase["grading prepare"] = report.timings["prepare_s"]
            phase["tests"] = report.timings["tests_s"]
            t = time.perf_counter()
        phase["grading container stop"] = time.perf_counter() - t
        episode.sandbox = None
        await episode._stack.aclose()
        docker.append(phase)
    await env.aclose()
    local = await asyncio.to_thread(_swe_local, swe, episodes)
    out = []
    for name, runs in (("docker", docker), ("local", local)):
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        median["overhead"] = sum(v for k, v in median.items() if k not in ("agent", "tests"))
        out.append((name, median))
    return out


def _swe_local(swe: Any, episodes: int) -> list[dict[str, float]]:
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    from nemo_gym.envs.swe import apply_patch
    from nemo_gym.envs.swe.grading import score
    from nemo_gym.envs.swe.sample import sample

    local: list[dict[str, float]] = []
    repo = {path: text.encode() for path, text in sample()["repo"].items()}
    for _ in range(episodes):
        phase = {}
        t = time.perf_counter()
        root = Path(tempfile.mkdtemp(prefix="swe-bench-"))
        for path, data in repo.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
        phase["setup"] = time.perf_counter() - t
        t = time.perf_counter()
        changed = apply_patch(repo, swe.patch or "")
        phase["agent"] = time.perf_counter() - t
        t = time.perf_counter()
        for path, data in {**changed, **apply_patch(repo, swe.test_patch)}.items():
            (root / path).write_bytes(data or b"")
        phase["prepare"] = time.perf_counter() - t
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests"],
            cwd=root, capture_output=True, text=True, check=False,
            # only pytest itself, as in the task's image (not this venv's plugins)
            env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        )  # fmt: skip
        phase["tests"] = time.perf_counter() - t
        t = time.perf_counter()
        _, report = score(swe, done.stdout)
        assert not report["FAIL_TO_PASS"]["failure"], done.stdout[-2000:]
        shutil.rmtree(root)
        phase["score + cleanup"] = time.perf_counter() - t
        local.append(phase)
    return local


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--swe", type=int, default=0, metavar="EPISODES")
    args = parser.parse_args()
    if args.swe:
        for name, phases in asyncio.run(swe_rows(args.swe)):
            print(f"{name}: " + "  ".join(f"{k} {v:.3f}s" for k, v in phases.items()))
        return
    results = asyncio.run(rows(args.calls))
    base = {c: us for name, c, us in results if name == "direct"}
    print(f"{'path':34} {'conc':>4} {'CPU µs/call':>12} {'+µs vs direct':>14} {'x direct':>9}")
    for name, concurrency, us in results:
        extra = us - base[concurrency]
        ratio = us / base[concurrency]
        print(f"{name:34} {concurrency:>4} {us:>12.1f} {extra:>14.1f} {ratio:>9.0f}")


if __name__ == "__main__":
    main()
