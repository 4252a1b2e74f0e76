"""Loopback endpoint overhead, side by side in one run: CPU µs per model call.

    python bench/harness.py              # 3,000 calls per row
    python bench/harness.py --calls 500  # quicker

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    results = asyncio.run(rows(args.calls))
    base = {c: us for name, c, us in results if name == "direct"}
    print(f"{'path':34} {'conc':>4} {'CPU µs/call':>12} {'+µs vs direct':>14} {'x direct':>9}")
    for name, concurrency, us in results:
        extra = us - base[concurrency]
        ratio = us / base[concurrency]
        print(f"{name:34} {concurrency:>4} {us:>12.1f} {extra:>14.1f} {ratio:>9.0f}")


if __name__ == "__main__":
    main()
