"""What grading a CLI agent's workspace as data costs: seconds per step and per rollout.

    python bench/cli_grading.py              # 10 rollouts and 10 rounds of each step
    python bench/cli_grading.py --rounds 3   # quicker

Needs the `local` sandbox (bubblewrap). Rows:

- `sandbox start` / `sandbox close`: one `local` sandbox (the grading one starts while
  the agent works, so in a rollout its start-up overlaps the agent's run);
- `stop_processes`: killing what the agent left (a sandbox `reset` without wipe);
- `take_files (N files)`: listing the workdir and reading N small files out;
- `rollout`: a whole rollout of a scripted stdlib agent (`CommandAdapter`) that fixes
  one file over four model calls, graded by one check: the median wall time.

Wall time on a loaded machine inflates every row; compare rows of one run, or runs of
two checkouts made one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

sys.path[:0] = [
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "harnesses"),
]

import nemo_gym as gym  # noqa: E402
from nemo_gym.harnesses.cli import CLIAgent, CommandAdapter  # noqa: E402
from nemo_gym.harnesses.cli.workspace import stop_processes, take_files  # noqa: E402
from nemo_gym.models import ScriptedModel  # noqa: E402

AGENT = r"""
import json, os, subprocess, sys, urllib.request
model, task = sys.argv[1:3]
base, key = os.environ["AGENT_BASE_URL"], os.environ["AGENT_API_KEY"]
tools = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
messages = [{"role": "user", "content": task}]
for _ in range(10):
    body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
    request = urllib.request.Request(base + "/chat/completions", body, {
        "content-type": "application/json", "authorization": "Bearer " + key})
    reply = json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["message"]
    messages.append(reply)
    if not reply.get("tool_calls"):
        break
    for call in reply["tool_calls"]:
        command = json.loads(call["function"]["arguments"])["command"]
        out = subprocess.run(command, shell=True, capture_output=True, text=True)
        messages.append(
            {"role": "tool", "tool_call_id": call["id"], "content": out.stdout + out.stderr})
"""


async def steps(rounds: int, files: int) -> list[tuple[str, float]]:
    provider = gym.sandbox.get("local")
    times: dict[str, list[float]] = {
        "sandbox start": [],
        "stop_processes": [],
        f"take_files ({files} files)": [],
        "sandbox close": [],
    }
    for _ in range(rounds + 1):  # the first round warms up
        start = time.perf_counter()
        context = provider.start()
        box = await context.__aenter__()
        times["sandbox start"].append(time.perf_counter() - start)
        for i in range(files):
            await box.write_file(f"src/module_{i}.py", f"VALUE = {i}\n" * 20)
        start = time.perf_counter()
        await stop_processes(box)
        times["stop_processes"].append(time.perf_counter() - start)
        start = time.perf_counter()
        await take_files(box)
        times[f"take_files ({files} files)"].append(time.perf_counter() - start)
        start = time.perf_counter()
        await context.__aexit__(None, None, None)
        times["sandbox close"].append(time.perf_counter() - start)
    return [(name, statistics.median(values[1:])) for name, values in times.items()]


async def rollouts(count: int) -> float:
    from agent_policy import FixTheTest, policy

    adapter = CommandAdapter(
        name="tiny",
        command=["python3", "{home}/agent.py", "{model}", "{prompt}"],
        env={"AGENT_BASE_URL": "{base_url}", "AGENT_API_KEY": "{api_key}"},
        files={"{home}/agent.py": AGENT.replace("{", "{{").replace("}", "}}")},
    )
    harness = CLIAgent(adapter)
    env = FixTheTest()
    times = []
    try:
        for _ in range(count + 1):
            start = time.perf_counter()
            done = await gym.rollout(env, ScriptedModel(policy), env.tasks()[0], harness=harness)
            times.append(time.perf_counter() - start)
            if not (done.ok and done.reward == 1.0):
                raise SystemExit(f"the rollout failed: {done.failure}")
    finally:
        await harness.aclose()
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--files", type=int, default=100)
    args = parser.parse_args()
    for name, seconds in asyncio.run(steps(args.rounds, args.files)):
        print(f"{name:<28} {seconds * 1000:8.1f} ms")
    print(f"{'rollout (median)':<28} {asyncio.run(rollouts(args.rounds)) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
