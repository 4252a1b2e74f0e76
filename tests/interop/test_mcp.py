"""MCP both ways, against the official SDK: its client on our servers, our client on its
servers (stdio subprocesses and streamable HTTP on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.records import Message, ModelRequest, ToolCall

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters

from nemo_gym.interop.mcp import (
    MCPEnv,
    MCPSession,
    Stdio,
    StreamableHTTP,
    ToolServer,
    mcp_tools,
)

ROOT = Path(__file__).parents[2]
COUNTER = str(Path(__file__).with_name("mcp_counter_server.py"))
ENV = {"PYTHONPATH": str(ROOT)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- our server, the SDK's client -----------------------------------------------------


async def test_an_environment_served_over_stdio_to_the_sdk_client() -> None:
    bank = gym.make("bank")
    task = next(iter(bank.tasks()))
    expected = await bank.open(task)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nemo_gym.interop.mcp", "bank", "--task", task.id],
        env=ENV,
    )
    async with Client(params) as client:
        assert task.prompt in (client.instructions or "")
        listed = (await client.list_tools()).tools
        assert [t.name for t in listed] == [t.name for t in expected.tools]
        for tool, ours in zip(listed, expected.tools, strict=True):
            assert tool.input_schema == ours.spec.parameters
            assert tool.description == ours.spec.description
        balance = await client.call_tool("get_balance", {"account": "checking"})
        assert not balance.is_error
        assert balance.content[0].text == str(expected.state["checking"])
        moved = await client.call_tool(
            "transfer", {"from_account": "checking", "to_account": "savings", "amount": 1}
        )
        assert moved.content[0].text.startswith("ok: checking=")
        bad = await client.call_tool("get_balance", {"account": "nope"})
        assert bad.is_error and "KeyError" in bad.content[0].text
        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error


async def test_an_environment_served_over_http_keeps_one_episode_and_closes_it() -> None:
    server = ToolServer(gym.make("bank"))
    async with server.http() as url:
        host, port = url.removeprefix("http://").split("/")[0].split(":")
        assert host == "127.0.0.1" and int(port) > 0
        await server.tools()  # opens the episode (a client's first request would)
        before = dict(server.final_state())
        async with Client(url) as client:
            result = await client.call_tool("deposit", {"account": "travel", "amount": 7})
            assert not result.is_error
        async with Client(url) as again:  # a second client sees the same world
            await again.call_tool("deposit", {"account": "travel", "amount": 1})
        assert server.final_state()["travel"] == before["travel"] + 8
    assert server.final_state() is None  # closed with the server
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", int(port)), timeout=1):
        pass


# -- the SDK's server, our client -----------------------------------------------------


def counter_script(request: ModelRequest) -> Message:
    done = [m for m in request.messages if m.role == "tool"]
    plan = [
        ToolCall(id="1", name="pid", arguments="{}"),
        ToolCall(id="2", name="add", arguments='{"amount": 2}'),
        ToolCall(id="3", name="add", arguments='{"amount": 3}'),
        ToolCall(id="4", name="fail", arguments='{"reason": "testing"}'),
        ToolCall(id="5", name="total", arguments="{}"),
    ]
    if len(done) < len(plan):
        return Message.assistant(None, tool_calls=(plan[len(done)],))
    return Message.assistant(f"done: {done[-1].content}")


async def check_total(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return float(trajectory.final_text == "done: total=5")


async def test_an_mcp_server_as_an_environment_a_process_per_episode() -> None:
    env = MCPEnv(
        Stdio(sys.executable, [COUNTER]),
        tasks=[gym.Task(id="count", prompt="Add 2 and 3.")],
        verifier=check_total,
        exclude=["sleep"],
    )
    model = gym.models.ScriptedModel(counter_script)
    rollouts = [r async for r in gym.rollouts(env, model, repeats=3, concurrency=3)]
    assert [r.reward for r in rollouts] == [1.0, 1.0, 1.0]  # each its own counter
    pids = set()
    for rollout in rollouts:
        results = rollout.trajectory.tool_results
        pids.add(int(results[0].output))
        assert [r.output for r in results[1:3]] == ["2", "5"]
        assert results[3].error.startswith("ToolFailed: Error executing tool fail")
        first = rollout.trajectory.model_calls[0].request
        assert sorted(t.name for t in first.tools) == ["add", "fail", "pid", "total"]
    assert len(pids) == 3
    assert not any(_alive(pid) for pid in pids)  # every session's process was stopped


async def test_a_cancelled_rollout_stops_its_server_process() -> None:
    def script(request: ModelRequest) -> Message:
        n = len([m for m in request.messages if m.role == "tool"])
        if n == 0:
            return Message.assistant(None, tool_calls=(ToolCall(id="p", name="pid"),))
        return Message.assistant(
            None, tool_calls=(ToolCall(id="s", name="sleep", arguments='{"seconds": 60}'),)
        )

    env = MCPEnv(
        Stdio(sys.executable, [COUNTER]), tasks=[gym.Task(prompt="wait")], verifier=check_total
    )
    started = time.monotonic()
    # The deadline covers the server's start too (an interpreter importing the MCP SDK:
    # over 3 s on two loaded cores); the sleep tool outlasts it whatever the machine.
    rollout = await gym.rollout(env, gym.models.ScriptedModel(script), env.tasks()[0], timeout=12.0)
    assert rollout.failure.kind == "timeout"
    assert rollout.failure.where == "harness", rollout.failure
    assert time.monotonic() - started < 40
    pid = int(rollout.trajectory.tool_results[0].output)
    assert not _alive(pid)


async def test_a_server_that_cannot_start_is_an_environment_failure() -> None:
    env = MCPEnv(
        Stdio(sys.executable, ["-c", "import sys; sys.exit(3)"]),
        tasks=[gym.Task(prompt="x")],
        verifier=check_total,
        start_timeout=10,
    )
    rollout = await gym.rollout(env, gym.models.ScriptedModel(["x"]), env.tasks()[0])
    assert rollout.failure.kind == "environment"
    assert rollout.failure.where == "open"
    assert "could not start" in rollout.failure.message


async def test_our_client_on_the_sdks_http_server_and_a_broken_session() -> None:
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        COUNTER,
        "--http",
        str(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the SDK's HTTP server did not start"
                await asyncio.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        async with mcp_tools(StreamableHTTP(url, headers={"x-test": "1"})) as tools:
            table = {t.name: t for t in tools}
            assert await table["add"](amount=4) == "4"
            assert await table["total"]() == "total=4"
        session = await MCPSession(StreamableHTTP(url), call_timeout=5).start()
        try:
            process.kill()
            await process.wait()
            with pytest.raises(Exception) as info:
                await session.call("total", {})
            assert type(info.value).__name__ in ("ToolError", "ToolFailed")
        finally:
            await session.aclose()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_round_trip_an_environment_served_and_consumed_over_mcp() -> None:
    bank = gym.make("bank")
    task = next(iter(bank.tasks()))
    server = ToolServer(bank, task)
    async with server.http() as url:
        env = MCPEnv(StreamableHTTP(url), tasks=[task], verifier=check_total)

        def script(request: ModelRequest) -> Message:
            if request.messages[-1].role == "tool":
                return Message.assistant(f"balance {request.messages[-1].content}")
            return Message.assistant(
                None,
                tool_calls=(
                    ToolCall(id="b", name="get_balance", arguments='{"account": "savings"}'),
                ),
            )

        rollout = await gym.rollout(env, gym.models.ScriptedModel(script), task)
        assert rollout.ok
        assert rollout.trajectory.final_text == f"balance {server.final_state()['savings']}"
        assert json.loads(rollout.trajectory.tool_results[0].arguments) == {"account": "savings"}
