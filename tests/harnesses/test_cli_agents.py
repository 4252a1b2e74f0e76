"""CLI coding agents: the real programs, in a `local` sandbox and in a Docker container,
against a scripted policy.

The programs (Codex CLI, Claude Code, OpenCode from npm; mini-SWE-agent from PyPI) are
installed by `scripts/install-agents.sh` (CI runs it); a test whose program is missing
skips, naming the command. Each drives the program through one small coding task
(agent_policy.py) and checks the verification (the original test passes in the
agent's workdir) and the capture (every model call on the rollout, with the policy's
token ids, although the program only ever saw text).

The Docker runs use the private engine (`eval "$(bash scripts/docker-engine.sh start)"`,
which CI runs) and its image, which has python3 but no Node and no agent: the programs
and their runtime are mounted read-only; a test without an engine skips.

Without the programs, their adapters are still checked against a recording of each
program's real requests (recorded/*.json.gz: its first and last request of this task).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_policy import (
    AIDER_REPLY,
    FINAL,
    STEPS,
    FixTheTest,
    policy,
    shell_tool,
    whole_file_policy,
    wrong_policy,
)

import nemo_gym as gym
from nemo_gym.harnesses.cli import CLIAgent, CommandAdapter
from nemo_gym.harnesses.cli.adapters import (
    Aider,
    ClaudeCode,
    Codex,
    GeminiCLI,
    Hermes,
    KiloCode,
    MiniSWEAgent,
    OpenCode,
    Pi,
    QwenCode,
)
from nemo_gym.harnesses.cli.programs import find
from nemo_gym.harnesses.cli.segments import Segments, message_key
from nemo_gym.models import ScriptedModel
from nemo_gym.sandbox.docker import DockerProvider
from nemo_gym.sandbox.local import unavailable_reason
from nemo_gym.wire import anthropic, gemini, openai_chat, openai_responses

RECORDED = Path(__file__).parent / "recorded"
BUILT_IN = {
    "codex": Codex,
    "claude-code": ClaudeCode,
    "opencode": OpenCode,
    "mini-swe-agent": MiniSWEAgent,
}
"""The programs also failed on a wrong fix, and checked against recordings of their
requests."""
HARNESSES = {
    **BUILT_IN,
    "pi": Pi,
    "qwen-code": QwenCode,
    "kilocode": KiloCode,
    "gemini-cli": GeminiCLI,
    "hermes": Hermes,
}
IN_CONTAINERS = [*BUILT_IN, "pi", "qwen-code", "gemini-cli", "hermes"]
"""The programs tested in a Docker container (KiloCode works there too, at 50 to 80 s a run)."""
PARSERS = {
    "codex": openai_responses.parse_request,
    "claude-code": anthropic.parse_request,
    "opencode": openai_chat.parse_request,
    "mini-swe-agent": openai_chat.parse_request,
    "gemini-cli": gemini.parse_request,
    "hermes": openai_chat.parse_request,
}
"""The programs whose real requests are recorded (recorded/<name>.json.gz)."""
needs_local = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"local sandbox: {unavailable_reason()}"
)


DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
DOCKER_IMAGE = os.environ.get("NEMO_GYM_DOCKER_IMAGE", "nemo-gym-test:py")


def _no_engine() -> str | None:
    if not DOCKER_HOST:
        return "no docker engine: set NEMO_GYM_DOCKER_HOST (scripts/docker-engine.sh start)"
    path = DOCKER_HOST.removeprefix("unix://")
    if DOCKER_HOST.startswith(("unix://", "/")) and not os.path.exists(path):
        return f"no docker engine socket at {path} (scripts/docker-engine.sh start)"
    return None


needs_engine = pytest.mark.skipif(_no_engine() is not None, reason=_no_engine() or "")


def docker() -> DockerProvider:
    """The private engine's test image: python3, no Node, no agent program."""
    return DockerProvider(host=DOCKER_HOST, image=DOCKER_IMAGE, pull=False)


def _installed(name: str) -> None:
    if find(name) is None:
        pytest.skip(
            f"{name} is not installed: bash scripts/install-agents.sh "
            f"(python -m nemo_gym.harnesses.cli.programs install {name})"
        )


async def _run(
    harness: CLIAgent, script: Callable[[gym.ModelRequest], gym.ModelResponse] = policy
) -> tuple[gym.Rollout, ScriptedModel]:
    env = FixTheTest()
    model = ScriptedModel(script)
    watch = asyncio.ensure_future(_watch_command_lines(harness))
    try:
        rollout = await gym.rollout(env, model, env.tasks()[0], harness=harness)
    finally:
        watch.cancel()
        leaked = await watch
        await harness.aclose()
    assert not leaked, f"route tokens on command lines: {leaked}"
    return rollout, model


async def _watch_command_lines(harness: CLIAgent) -> list[str]:
    """Every command line on the host that holds an open route token, until cancelled.

    Any local user reads /proc/*/cmdline; whoever holds a token speaks as the policy.
    """
    leaked: list[str] = []
    try:
        while True:
            tokens = list(harness.endpoint._routes)
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                leaked += [text[:300] for token in tokens if token in text]
            await asyncio.sleep(0.02)
    except asyncio.CancelledError:
        return leaked


@needs_local
@pytest.mark.parametrize("name", list(HARNESSES))
async def test_real_agent_fixes_the_test_and_every_call_is_captured(name: str) -> None:
    _installed(name)
    rollout, model = await _run(HARNESSES[name](timeout=240))
    _check_fixed(name, rollout, model)


@needs_engine
@pytest.mark.parametrize("name", IN_CONTAINERS)
async def test_real_agent_fixes_the_test_in_a_docker_container(name: str) -> None:
    _installed(name)
    rollout, model = await _run(HARNESSES[name](provider=docker(), timeout=240))
    _check_fixed(name, rollout, model)


@needs_engine
@pytest.mark.parametrize("name", list(BUILT_IN))
async def test_real_agent_with_a_wrong_fix_scores_zero_in_a_docker_container(name: str) -> None:
    _installed(name)
    rollout, _ = await _run(HARNESSES[name](provider=docker(), timeout=240), wrong_policy)
    assert rollout.ok, rollout.failure  # the agent ran as it should: its work is wrong
    assert rollout.reward == 0.0
    state = rollout.trajectory.final_state
    assert state["files"]["calc.py"] == "def add(a, b):\n    return a * b\n"
    assert state["checks"][0]["exit_code"] != 0 and "AssertionError" in state["checks"][0]["stderr"]
    assert all(c.response.completion_token_ids for c in rollout.trajectory.model_calls)


def _check_fixed(name: str, rollout: gym.Rollout, model: ScriptedModel) -> None:
    assert rollout.ok, rollout.failure
    assert rollout.reward == 1.0, rollout.trajectory.final_state
    state = rollout.trajectory.final_state
    assert state["files"]["calc.py"] == "def add(a, b):\n    return a + b\n"
    calls = rollout.trajectory.model_calls
    assert len(calls) == len(model.requests) >= len(STEPS)
    agent_calls = [c for c in calls if shell_tool(c.request) is not None]
    # mini-SWE-agent stops at the completion command; the others reply once more
    assert len(agent_calls) in (len(STEPS), len(STEPS) + 1)
    for step, call in enumerate(agent_calls):
        # the exact ids the policy returned, kept although the program saw only text
        assert call.response.completion_token_ids == [1000 + step, 7, 7]
        assert call.response.prompt_token_ids == [10, step]
        tool_results = [m for m in call.request.messages if m.role == "tool"]
        assert len(tool_results) == step
    # the test's output went back to the model through the program
    second_result = [m for m in agent_calls[2].request.messages if m.role == "tool"][1]
    assert "ok" in (second_result.content or "")
    # the program's tool runs joined into the trajectory, by the ids the policy gave
    results = rollout.trajectory.tool_results
    assert [r.call_id for r in results[:2]] == ["call_ng0", "call_ng1"], results
    assert "ok" in results[1].output
    # the trajectory is the program's last conversation
    assert rollout.messages[-1] == calls[-1].response.message
    if name != "mini-swe-agent":
        assert rollout.trajectory.final_text == FINAL


@needs_local
async def test_aider_fixes_the_test_by_whole_file_edits() -> None:
    # aider has no tools: the policy answers in its edit format, aider writes the files
    _installed("aider")
    rollout, model = await _run(Aider(timeout=240), whole_file_policy)
    assert rollout.ok and rollout.reward == 1.0, (rollout.failure, rollout.trajectory.final_state)
    calls = rollout.trajectory.model_calls
    assert len(calls) == len(model.requests) == 1
    assert calls[0].response.completion_token_ids == [2000, 7, 7]
    assert calls[0].response.message.content == AIDER_REPLY
    assert calls[0].request.agent == "aider/0"
    # its history files went to HOME: nothing of aider's in the graded workdir
    assert not rollout.trajectory.final_state["refused"]


# A program written for the test: the "any CLI agent" path needs no install. It is a
# stdlib chat-completions agent that runs the model's `bash` calls.
TINY_AGENT = r"""
import json, os, subprocess, sys, urllib.request
model, task = sys.argv[1:3]
base, key = os.environ["AGENT_BASE_URL"], os.environ["AGENT_API_KEY"]
tools = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
messages = [{"role": "system", "content": "You are tiny."}, {"role": "user", "content": task}]
compact_after = int(os.environ.get("AGENT_COMPACT_AFTER", "0"))
for turn in range(10):
    if compact_after and turn == compact_after:  # its context "filled": a summary instead
        messages = [messages[0], {"role": "user", "content": task + "\n(Summary: started.)"}]
    body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
    request = urllib.request.Request(base + "/chat/completions", body, {
        "content-type": "application/json", "authorization": "Bearer " + key})
    reply = json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["message"]
    messages.append(reply)
    if not reply.get("tool_calls"):
        print(reply["content"]); break
    for call in reply["tool_calls"]:
        command = json.loads(call["function"]["arguments"])["command"]
        out = subprocess.run(command, shell=True, capture_output=True, text=True)
        messages.append(
            {"role": "tool", "tool_call_id": call["id"], "content": out.stdout + out.stderr})
"""


def tiny(compact_after: int = 0, **options: Any) -> CLIAgent:
    adapter = CommandAdapter(
        name="tiny",
        dialect="chat",
        command=["python3", "{home}/agent.py", "{model}", "{prompt}"],
        env={
            "AGENT_BASE_URL": "{base_url}",
            "AGENT_API_KEY": "{api_key}",
            "AGENT_COMPACT_AFTER": str(compact_after),
        },
        files={"{home}/agent.py": TINY_AGENT.replace("{", "{{").replace("}", "}}")},
    )
    return CLIAgent(adapter, **options)


@needs_local
async def test_any_cli_agent_through_a_command_adapter() -> None:
    rollout, _ = await _run(tiny())
    assert rollout.ok, rollout.failure
    assert rollout.reward == 1.0
    calls = rollout.trajectory.model_calls
    assert len(calls) == len(STEPS) + 1
    assert [c.response.completion_token_ids[0] for c in calls] == [1000, 1001, 1002, 1003]
    assert [m.role for m in rollout.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert rollout.trajectory.final_text == FINAL
    # what the program ran, as it reported it back to the model, joined by call id
    results = rollout.trajectory.tool_results
    assert [(r.call_id, r.name) for r in results] == [(f"call_ng{i}", "bash") for i in range(3)]
    assert json.loads(results[1].arguments)["command"] == STEPS[1]
    assert results[1].output == "ok\n" and results[0].output == ""


def _tokens(message: gym.Message) -> list[int]:
    """A stand-in tokenizer: one stable id per message (what a re-sent turn keeps)."""
    return [zlib.crc32(repr(message_key(message)).encode()) % 50_000]


def chained(request: gym.ModelRequest) -> gym.ModelResponse:
    """`policy` with token ids that chain as a real tokenizer's do: each call's prompt
    ids are its messages' ids, so they extend the previous call's prompt and reply."""
    response = policy(request)
    prompt = [t for m in request.messages for t in _tokens(m)]
    return response.model_copy(
        update={"prompt_token_ids": prompt, "completion_token_ids": _tokens(response.message)}
    )


@needs_local
async def test_a_compacted_conversation_is_a_segment_of_its_own_never_one_sequence() -> None:
    rollout, _ = await _run(tiny(compact_after=2), chained)
    assert rollout.ok and rollout.reward == 1.0, rollout.failure
    trajectory = rollout.trajectory
    agents = [c.request.agent for c in trajectory.model_calls]
    # two calls, then the summary replaced the turns: the rest is another conversation
    assert agents == ["tiny/0", "tiny/0", "tiny/1", "tiny/1", "tiny/1", "tiny/1"]
    with pytest.raises(gym.errors.HarnessError, match="2 agents"):
        trajectory.token_trace()
    traces = trajectory.token_traces()
    assert list(traces) == ["tiny/0", "tiny/1"]
    first = traces["tiny/0"]
    # system, user, reply 1, the tool result, reply 2
    assert first.loss_mask == [0, 0, 1, 0, 1]
    sample = gym.training.sample(rollout)
    assert not sample.trainable and "agents" in (sample.excluded or "")


async def test_segments_follow_the_conversation_each_call_continues() -> None:
    seen: list[str | None] = []

    def record(request: gym.ModelRequest) -> gym.ModelResponse:
        seen.append(request.agent)
        return gym.ModelResponse(message=gym.Message.assistant(f"reply {len(seen)}"))

    segments = Segments(ScriptedModel(record), "prog")
    system, user = gym.Message.system("s"), gym.Message.user("task")
    main = [system, user]
    reply = await segments.generate(gym.ModelRequest(messages=tuple(main)))
    main += [reply.message, gym.Message.user("go on")]
    title = [gym.Message.system("write a title"), user]
    await segments.generate(gym.ModelRequest(messages=tuple(title)))  # a side request
    # the main conversation resumes after the side request, its reply re-sent reformatted
    resent = [*main[:2], gym.Message.assistant(" reply 1\n"), main[3]]
    reply = await segments.generate(gym.ModelRequest(messages=tuple(resent)))
    compacted = [system, gym.Message.user("summary of the task so far")]
    await segments.generate(gym.ModelRequest(messages=tuple(compacted)))
    named = gym.ModelRequest(messages=tuple(compacted), agent="critic")
    await segments.generate(named)  # a harness's own agent name is kept
    assert seen == ["prog/0", "prog/1", "prog/0", "prog/2", "critic"]
    assert segments.count == 3


@needs_engine
async def test_a_command_adapter_agent_in_a_docker_container() -> None:
    rollout, _ = await _run(tiny(provider=docker()))
    assert rollout.ok and rollout.reward == 1.0, rollout.failure
    assert [c.response.completion_token_ids[0] for c in rollout.trajectory.model_calls] == [
        1000,
        1001,
        1002,
        1003,
    ]


def remote() -> Any:
    """A remote provider on a stand-in service (its sandboxes `local` ones with no
    network) whose exec streams: loopback goes through the tunnel."""
    from sandbox.remote_service import LocalService, StreamingServiceBackend

    from nemo_gym.sandbox.remote.common import RemoteProvider

    labels = {"team": "rl", "user": "alice", "workload": "cli-agent", "run": "r"}
    return RemoteProvider(StreamingServiceBackend(LocalService()), labels=labels)


@needs_local
async def test_a_command_adapter_agent_on_a_remote_provider_through_the_tunnel() -> None:
    provider = remote()
    try:
        rollout, _ = await _run(tiny(provider=provider))
    finally:
        await provider.aclose()
    assert rollout.ok and rollout.reward == 1.0, rollout.failure
    calls = rollout.trajectory.model_calls
    assert [c.response.completion_token_ids[0] for c in calls] == [1000, 1001, 1002, 1003]
    assert rollout.metadata["sandbox"]["sandboxes"] == 2  # the agent's and the grader's


@needs_local
async def test_the_process_provider_runs_the_same_agent_unisolated() -> None:
    rollout, _ = await _run(tiny(provider="process"))
    assert rollout.ok and rollout.reward == 1.0, rollout.failure


@needs_local
async def test_a_model_failure_stops_the_program_and_fails_the_rollout() -> None:
    def broken(request: gym.ModelRequest) -> gym.ModelResponse:
        if sum(m.role == "tool" for m in request.messages) == 1:
            raise gym.errors.ModelError("policy server lost", code="model")
        return policy(request)

    env = FixTheTest()
    harness = tiny(timeout=120)
    rollout = await gym.rollout(env, ScriptedModel(broken), env.tasks()[0], harness=harness)
    await harness.aclose()
    assert rollout.failure is not None
    assert (rollout.failure.kind, rollout.failure.code) == ("model", "model")
    assert "policy server lost" in rollout.failure.message
    assert len(rollout.trajectory.model_calls) == 2 and rollout.trajectory.model_calls[1].error


@needs_local
async def test_exit_status_and_timeout_are_failures_with_their_kind() -> None:
    failing = CLIAgent(
        CommandAdapter(name="false", command=["sh", "-c", "echo broken >&2; exit 3"])
    )
    rollout, _ = await _run(failing)
    assert (rollout.failure.kind, rollout.failure.code) == ("harness", "agent_exit")
    assert "status 3" in rollout.failure.message and "broken" in rollout.failure.message
    slow = CLIAgent(CommandAdapter(name="slow", command=["sleep", "30"]), timeout=1)
    rollout, _ = await _run(slow)
    assert (rollout.failure.kind, rollout.failure.code) == ("timeout", "agent_timeout")


@pytest.mark.parametrize(
    "provider",
    [
        pytest.param("local", marks=needs_local),
        pytest.param("docker", marks=needs_engine),
        pytest.param("remote", marks=needs_local),
    ],
)
async def test_the_program_reaches_only_the_endpoint(provider: str) -> None:
    seen = 0

    async def other(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal seen
        seen += 1
        writer.close()

    server = await asyncio.start_server(other, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = (
        "import socket\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('reached')\n"
        "except OSError as e:\n    print('refused', e)\n"
    )
    adapter = CommandAdapter(
        name="probe",
        command=["python3", "-c", probe.replace("{", "{{").replace("}", "}}")],
    )
    made = {"docker": docker, "remote": remote}.get(provider)
    harness = CLIAgent(adapter, provider=made() if made else provider)
    env = FixTheTest()
    rollout = await gym.rollout(env, ScriptedModel([]), env.tasks()[0], harness=harness)
    await harness.aclose()
    if provider == "remote":
        await harness._sandbox_provider().aclose()
    server.close()
    await server.wait_closed()
    assert rollout.ok and seen == 0, rollout.failure


def test_a_command_adapter_survives_its_spec() -> None:
    harness = tiny(timeout=30)
    spec = harness.to_spec()
    assert spec.rebuildable and spec.options["adapter"]["name"] == "tiny"
    rebuilt = gym.registry.build(spec)
    assert isinstance(rebuilt, CLIAgent) and rebuilt.adapter.name == "tiny"
    with pytest.raises(gym.errors.ConfigError, match="placeholders"):
        CommandAdapter(name="x", command=["{nope}"]).command_for(_launch())


def _launch() -> Any:
    from nemo_gym.harnesses.cli import AgentLaunch

    return AgentLaunch(
        prompt="p",
        model="m",
        base_url="http://127.0.0.1:1/r/tok3n/v1",
        anthropic_base_url="http://127.0.0.1:1/r/tok3n",
        api_key="tok3n",
        workdir="/work",
    )


@pytest.mark.parametrize("name", [*HARNESSES, "aider"])
def test_adapters_point_the_program_at_the_endpoint(name: str) -> None:
    adapter = {**HARNESSES, "aider": Aider}[name](executable="/opt/x/bin/prog").adapter
    launch = _launch()
    text = json.dumps([adapter.files(launch), adapter.env(launch)])
    root = adapter.dialect in ("messages", "gemini")  # the SDK adds its own version path
    base = launch.anthropic_base_url if root else launch.base_url
    assert base in text and launch.api_key in text and "p" in adapter.command(launch)
    # the token (in the key and the URLs) never reaches the command line
    assert not [a for a in adapter.command(launch) if "tok3n" in a], adapter.command(launch)
    assert adapter.mounts() == ["/opt/x"]


def test_a_command_adapter_keeps_the_token_off_its_command_line() -> None:
    for field in ("api_key", "base_url", "anthropic_base_url"):
        with pytest.raises(gym.errors.ConfigError, match="route token"):
            CommandAdapter(name="x", command=["prog", f"--key={{{field}}}"])
    CommandAdapter(name="x", command=["prog", "{{api_key}}"])  # a literal brace is no field


@needs_local
async def test_an_adapter_that_puts_the_token_in_argv_is_refused_before_it_runs() -> None:
    class Leaky:
        name = "leaky"
        dialect = "chat"

        def command(self, launch: Any) -> list[str]:
            return ["sh", "-c", "echo ran > /work/ran", "--", launch.api_key]

        def files(self, launch: Any) -> dict[str, str]:
            return {}

        def env(self, launch: Any) -> dict[str, str]:
            return {}

        def mounts(self) -> list[str]:
            return []

    rollout, _ = await _run(CLIAgent(Leaky()))
    assert rollout.failure is not None and "route token" in rollout.failure.message


@needs_local
async def test_adapter_files_are_written_owner_only() -> None:
    probe = CommandAdapter(
        name="mode",
        command=["sh", "-c", "stat -c %a {home}/conf.json > NOTES.md"],
        files={"{home}/conf.json": '{{"key": "{api_key}"}}'},
    )
    rollout, _ = await _run(CLIAgent(probe))
    assert rollout.ok, rollout.failure
    assert rollout.trajectory.final_state["files"]["NOTES.md"] == "600\n"


@pytest.mark.parametrize("name", list(PARSERS))
def test_recorded_real_requests_parse_into_the_request_the_policy_sees(name: str) -> None:
    with gzip.open(RECORDED / f"{name}.json.gz", "rt") as f:
        recorded = json.load(f)
    parse = PARSERS[name]
    first = parse(recorded["first"]).request
    last = parse(recorded["last"]).request
    assert shell_tool(first) is not None, [t.name for t in first.tools]
    assert any(m.role == "user" and "test_calc.py" in (m.content or "") for m in first.messages)
    results = [m for m in last.messages if m.role == "tool"]
    assert len(results) >= 2 and all(m.tool_call_id for m in results)
    calls = [c for m in last.messages if m.role == "assistant" for c in m.tool_calls]
    assert [c.id for c in calls][: len(results)] == [m.tool_call_id for m in results]


def test_container_providers_show_the_program_read_only() -> None:
    from nemo_gym.sandbox.apptainer import apptainer_argv

    provider = DockerProvider(host="unix:///nowhere.sock", image="img")
    spec = Codex(provider=provider, executable="/opt/x/bin/codex").spec_for(4321)
    assert spec.network == "loopback" and spec.ports == (4321,)
    assert "disk_bytes" not in spec.options  # a `local` option docker would refuse
    config = provider._container_config(spec, "img", {**provider.options, **spec.options}, "/n")
    assert "/opt/x:/opt/x:ro" in config["HostConfig"]["Binds"]
    sif = spec.model_copy(update={"image": "a.sif"})
    argv = apptainer_argv("apptainer", sif, "/h", net_dir="/n")
    assert argv[argv.index("/opt/x:/opt/x:ro") - 1] == "--bind"
    bad = spec.model_copy(update={"options": {"ro_binds": ["/a:/etc"]}})
    with pytest.raises(gym.errors.ConfigError, match="ro_binds"):
        provider._container_config(bad, "img", {**provider.options, **bad.options}, "/n")
    with pytest.raises(gym.errors.ConfigError, match="ro_binds"):
        apptainer_argv("apptainer", bad.model_copy(update={"image": "a.sif"}), "/h", net_dir="/n")


def test_a_pypi_program_brings_its_interpreter_unless_it_is_the_system_one(
    tmp_path: Path,
) -> None:
    from nemo_gym.harnesses.cli.programs import PROGRAMS

    mini = PROGRAMS["mini-swe-agent"]
    venv = mini.root(tmp_path)
    venv.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /opt/pythons/3.11/bin\nversion = 3.11.7\n")
    assert mini.runtime(tmp_path) == [Path("/opt/pythons/3.11")]
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert mini.runtime(tmp_path) == []  # a container's own /usr is never hidden
    assert PROGRAMS["codex"].runtime(tmp_path) == []


def test_node_programs_run_on_the_node_copied_beside_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEMO_GYM_AGENTS_HOME", str(tmp_path))
    for harness in (Pi(), QwenCode()):
        # first on PATH: a container has no Node of its own, and /usr/bin is its own
        path = harness.adapter.env(_launch())["PATH"].split(":")
        assert path[0] == str(tmp_path / "npm/runtime/bin") and "/usr/bin" in path
        with pytest.raises(gym.errors.ConfigError, match="runtime/bin/node is not installed"):
            harness.adapter.command(_launch())
    assert "PATH" not in Codex().adapter.env(_launch())  # a static binary needs none
