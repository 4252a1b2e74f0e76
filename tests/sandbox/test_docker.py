"""The `docker` provider: its HTTP client, the container it asks for, and a real engine.

Tests marked by `engine` need a Docker (or Podman) engine socket in NEMO_GYM_DOCKER_HOST
or DOCKER_HOST and the test image (`scripts/docker-engine.sh start` provides both);
without one they skip, saying so. The conformance suite runs the rest of the contract.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import ResourceLimits, SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.docker import (
    _SWEEP,
    DEFAULT_CAP_DROP,
    LABEL,
    MARKER_VAR,
    DockerProvider,
    EngineClient,
    _read_frames,
)

DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
IMAGE = os.environ.get("NEMO_GYM_DOCKER_IMAGE", "nemo-gym-test:py")
# Podman on a host whose RLIMIT_NPROC hard limit is below 1048576 needs it (see DockerProvider).
NPROC = (
    int(os.environ["NEMO_GYM_DOCKER_NPROC"]) if os.environ.get("NEMO_GYM_DOCKER_NPROC") else None
)


def _no_engine() -> str | None:
    if not DOCKER_HOST:
        return (
            "no docker engine: set NEMO_GYM_DOCKER_HOST or DOCKER_HOST (scripts/docker-engine.sh)"
        )
    if DOCKER_HOST.startswith(("unix://", "/")):
        path = DOCKER_HOST.removeprefix("unix://")
        if not os.path.exists(path):
            return f"no docker engine socket at {path} (scripts/docker-engine.sh start)"
    return None


engine = pytest.mark.skipif(_no_engine() is not None, reason=_no_engine() or "")


# ------------------------------------------------------------- without an engine


@pytest.mark.parametrize(
    ("host", "unix", "tcp"),
    [
        ("unix:///run/x.sock", "/run/x.sock", None),
        ("/run/podman/podman.sock", "/run/podman/podman.sock", None),
        ("tcp://10.0.0.2:2375", None, ("10.0.0.2", 2375)),
    ],
)
def test_engine_addresses(host: str, unix: str | None, tcp: tuple[str, int] | None) -> None:
    client = EngineClient(host)
    assert (client._unix_path, client._tcp) == (unix, tcp)


@pytest.mark.parametrize("host", ["ssh://me@box", "tcp://nohost", "npipe:////./pipe/docker"])
def test_bad_engine_address(host: str) -> None:
    with pytest.raises(ConfigError, match="docker host"):
        EngineClient(host)


def test_host_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEMO_GYM_DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///a.sock")
    assert EngineClient().host == "unix:///a.sock"
    monkeypatch.setenv("NEMO_GYM_DOCKER_HOST", "unix:///b.sock")
    assert EngineClient().host == "unix:///b.sock"


def test_container_config_isolates_and_limits() -> None:
    provider = DockerProvider(host="unix:///nowhere.sock", cpus=0.5)
    limits = ResourceLimits(
        cpu_seconds=2.5, memory_bytes=256 << 20, file_size_bytes=1 << 20, open_files=99,
        processes=16,
    )  # fmt: skip
    spec = SandboxSpec(image="img", limits=limits, env={"A": "1"}, workdir="/code")
    config = provider._container_config(spec, "img", provider.options)
    host = config["HostConfig"]
    assert host["NetworkMode"] == "none" and config["NetworkDisabled"] is True
    assert host["Memory"] == host["MemorySwap"] == 256 << 20
    assert host["PidsLimit"] == 16 + 8
    assert host["NanoCpus"] == 500_000_000
    assert {u["Name"]: u["Hard"] for u in host["Ulimits"]} == {
        "cpu": 3, "fsize": 1 << 20, "nofile": 99,
    }  # fmt: skip
    assert host["AutoRemove"] is True and host["Init"] is True
    with_nproc = DockerProvider(host="unix:///nowhere.sock", nproc=4096)
    ulimits = with_nproc._container_config(spec, "img", with_nproc.options)["HostConfig"]["Ulimits"]
    assert {"Name": "nproc", "Soft": 4096, "Hard": 4096} in ulimits
    assert host["CapDrop"] == list(DEFAULT_CAP_DROP)
    assert "no-new-privileges" in host["SecurityOpt"]
    # The keep-alive reads a stdin only we hold: it ends when we do.
    assert config["Entrypoint"] == ["cat"] and config["Cmd"] is None
    assert config["OpenStdin"] is True and config["StdinOnce"] is True
    assert config["WorkingDir"] == "/code" and config["Env"] == ["A=1"]
    assert config["Labels"] == {LABEL: "1"}


def test_container_config_network_and_none_limits() -> None:
    provider = DockerProvider(host="unix:///nowhere.sock", cpus=None, storage_size="1G")
    spec = SandboxSpec(image="img", network=True, limits=ResourceLimits(memory_bytes=None))
    config = provider._container_config(spec, "img", provider.options)
    host = config["HostConfig"]
    assert "NetworkMode" not in host and config["NetworkDisabled"] is False
    assert host["Memory"] == 1 << 30  # None takes the provider default
    assert "NanoCpus" not in host
    assert host["StorageOpt"] == {"size": "1G"}


async def test_create_refuses_bad_input_before_touching_an_engine() -> None:
    provider = DockerProvider(host="unix:///nowhere.sock")
    with pytest.raises(ConfigError, match="no image"):
        await provider.create(SandboxSpec())
    with pytest.raises(ConfigError, match=r"unknown sandbox option\(s\) \['gpu'\]"):
        await provider.create(SandboxSpec(image="img", options={"gpu": True}))
    with pytest.raises(SandboxError, match=r"no engine socket at unix:///nowhere\.sock") as info:
        await provider.create(SandboxSpec(image="img"))
    assert info.value.code == "sandbox_unavailable"


def test_registered_by_name() -> None:
    provider = get("docker", host="unix:///x.sock", image="img")
    assert isinstance(provider, DockerProvider) and provider.image == "img"


def _frame(kind: int, data: bytes) -> bytes:
    return bytes([kind, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


async def test_frames_are_demultiplexed() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(_frame(1, b"out1") + _frame(2, b"err") + _frame(1, b"") + _frame(1, b"2"))
    reader.feed_eof()
    got: list[tuple[int, bytes]] = []
    await _read_frames(reader, lambda kind, chunk: got.append((kind, chunk)))
    assert got == [(1, b"out1"), (2, b"err"), (1, b""), (1, b"2")]


async def test_a_cut_frame_is_an_error() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(_frame(1, b"abcdef")[:-2])
    reader.feed_eof()
    with pytest.raises(SandboxError, match="cut an output frame short"):
        await _read_frames(reader, lambda kind, chunk: None)


async def test_client_reads_chunked_and_sized_replies(tmp_path: Path) -> None:
    """The client against a stand-in engine: version negotiation, chunked bodies, errors."""
    seen: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = (await reader.readline()).decode()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        seen.append(request_line.split()[1])
        if request_line.startswith("GET /version"):
            body = json.dumps({"ApiVersion": "1.43"}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        elif "/containers/json" in request_line:
            writer.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"3\r\n[{}\r\n4\r\n,{}]\r\n0\r\n\r\n"
            )
        else:
            body = b'{"message": "No such container: x"}'
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    socket_path = str(tmp_path / "engine.sock")
    server = await asyncio.start_unix_server(serve, socket_path)
    try:
        client = EngineClient(f"unix://{socket_path}")
        listing = await client.request("GET", "/containers/json", params={"all": True})
        assert listing.status == 200 and listing.json() == [{}, {}]
        missing = await client.request("GET", "/containers/x/json")
        assert missing.status == 404 and missing.message() == "No such container: x"
    finally:
        server.close()
        await server.wait_closed()
    assert seen == ["/version", "/v1.43/containers/json?all=true", "/v1.43/containers/x/json"]


async def test_unreachable_engine_is_a_sandbox_error(tmp_path: Path) -> None:
    path = tmp_path / "dead.sock"
    path.touch()  # exists, but nobody listens
    with pytest.raises(SandboxError, match="cannot reach the docker engine"):
        await EngineClient(f"unix://{path}").request("GET", "/_ping")


# ----------------------------------------------------------------- with an engine


@pytest.fixture
def provider() -> DockerProvider:
    return DockerProvider(host=DOCKER_HOST, image=IMAGE, nproc=NPROC)


@engine
async def test_close_removes_the_container(provider: DockerProvider) -> None:
    async with provider.start() as box:
        info = (await box.client.request("GET", f"/containers/{box.id}/json")).json()
        assert info["State"]["Running"] and info["HostConfig"]["NetworkMode"] == "none"
    gone = await box.client.request("GET", f"/containers/{box.id}/json")
    assert gone.status == 404


@engine
async def test_no_network_but_loopback(provider: DockerProvider) -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "0.0.0.0", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with provider.start() as box:
            interfaces = await box.exec("cat /proc/net/dev")
            names = {line.split(":")[0].strip() for line in interfaces.stdout.splitlines()[2:]}
            assert names == {"lo"}, interfaces
            code = (
                f"import socket; socket.create_connection(('172.17.0.1', {port}), timeout=2); "
                "print('connected')"
            )
            result = await box.exec(["python3", "-c", code], timeout=10)
            assert not result.ok and "connected" not in result.stdout, result
    finally:
        server.close()
        await server.wait_closed()


@engine
async def test_memory_limit_holds(provider: DockerProvider) -> None:
    spec = SandboxSpec(limits=ResourceLimits(memory_bytes=64 << 20))
    async with provider.start(spec) as box:
        code = "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096]); print('survived')"
        result = await box.exec(["python3", "-c", code], timeout=20)
        assert not result.ok and "survived" not in result.stdout, result
        assert (await box.exec("echo alive")).stdout == "alive\n"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return "gone"


def test_sweep_kills_the_group_and_the_marked_despite_unreadable_environs() -> None:
    """The kill sweep under this host's /bin/sh (Debian's: dash), on processes of our own.

    Regressions: dash's `kill` took `--` for an illegal number, so the group kill never
    happened; and grep exits 2 when some /proc/<pid>/environ cannot be read (a zombie,
    which a fork bomb leaves plenty of), which ended the marker rounds before any kill.
    """
    marker = f"{MARKER_VAR}={secrets.token_hex(8)}"
    group = subprocess.Popen(["sleep", "60"], start_new_session=True)
    marked = subprocess.Popen(
        ["sleep", "60"],
        start_new_session=True,
        env={**os.environ, MARKER_VAR: marker.partition("=")[2]},
    )
    zombie = subprocess.Popen(["true"])  # not reaped until the end: its environ reads ESRCH
    try:
        for _ in range(500):
            if _state(zombie.pid) == "Z":
                break
            time.sleep(0.01)
        assert _state(zombie.pid) == "Z"
        subprocess.run(
            ["/bin/sh", "-c", _SWEEP, "sweep", str(group.pid), marker], timeout=30, check=True
        )
        assert group.wait(timeout=10) == -9
        assert marked.wait(timeout=10) == -9
    finally:
        for proc in (group, marked, zombie):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@engine
async def test_fork_bomb_is_contained(provider: DockerProvider) -> None:
    spec = SandboxSpec(limits=ResourceLimits(processes=32))
    async with provider.start(spec) as box:
        started = time.monotonic()
        # `exec sleep`: a shell that must fork its `sleep` may fail to under the pids limit
        # and exit early (no deadline, no sweep), which is not what this test checks.
        result = await box.exec(["sh", "-c", "f() { f | f & }; f; exec sleep 30"], timeout=3)
        assert result.timed_out and time.monotonic() - started < 20, result
        left = await box.exec("ls /proc | grep -c '^[0-9]'")
        assert int(left.stdout) <= 6, left  # init, keep-alive, this exec: nothing of the bomb
        assert (await box.exec("echo alive")).stdout == "alive\n"


@engine
@pytest.mark.parametrize(
    ("sweep", "why"),
    [("exit 1", "left processes alive"), ("sleep 30", "did not finish")],
    ids=["survivors", "stuck"],
)
async def test_a_failed_sweep_kills_the_sandbox(
    provider: DockerProvider, monkeypatch: pytest.MonkeyPatch, sweep: str, why: str
) -> None:
    """A sweep that cannot vouch for the kill: the sandbox is never silently reused."""
    monkeypatch.setattr("nemo_gym.sandbox.docker._SWEEP", sweep)
    monkeypatch.setattr("nemo_gym.sandbox.docker._SWEEP_TIMEOUT_S", 2.0)
    async with provider.start() as box:
        result = await box.exec("sleep 30", timeout=1)
        assert result.timed_out and result.exit_code == -9, result
        with pytest.raises(SandboxError, match=why) as info:
            await box.exec("echo alive")
        assert info.value.code == "sandbox_gone"
        state = (await box.client.request("GET", f"/containers/{box.id}/json")).json() or {}
        assert not state.get("State", {}).get("Running")


@engine
async def test_cpu_limit_kills_a_spin(provider: DockerProvider) -> None:
    spec = SandboxSpec(limits=ResourceLimits(cpu_seconds=1))
    async with provider.start(spec) as box:
        result = await box.exec(["python3", "-c", "sum(range(10**11))"], timeout=30)
        assert not result.ok and not result.timed_out and result.duration_s < 15, result
        assert result.exit_code == 128 + 9  # RLIMIT_CPU's hard limit: SIGKILL, as 128 + n


@engine
async def test_missing_image_is_a_clear_error(provider: DockerProvider) -> None:
    provider = DockerProvider(host=DOCKER_HOST, pull=False)
    with pytest.raises(SandboxError, match="nemo-gym-no-such-image") as info:
        await provider.create(SandboxSpec(image="nemo-gym-no-such-image:1"))
    assert info.value.code == "sandbox_image"


@engine
async def test_exec_in_a_removed_container_is_a_sandbox_error(provider: DockerProvider) -> None:
    async with provider.start() as box:
        await box.client.request("DELETE", f"/containers/{box.id}", params={"force": True})
        with pytest.raises(SandboxError, match="cannot start a command"):
            await box.exec("true")


@engine
async def test_code_verifier_runs_on_docker(provider: DockerProvider) -> None:
    """`CodeVerifier` through the plain Sandbox protocol (docker has no worker fast path)."""
    from nemo_gym.envs.code import CodeEnv
    from nemo_gym.records import Message, Trajectory

    env = CodeEnv(provider=provider, pool_size=2)
    tasks = [t for t in env.tasks("all") if t.id in ("code-a-plus-b", "code-two-sum")]
    try:
        rewards = await asyncio.gather(
            *(
                env.verifier.verify(
                    task,
                    Trajectory(
                        messages=[
                            Message.assistant(
                                f"```python\n{task.metadata['reference_solution']}```"
                            )
                        ]
                    ),
                )
                for task in tasks
            )
        )
    finally:
        await env.aclose()
    assert [r.reward for r in rewards] == [1.0, 1.0], [r.metadata for r in rewards]


@engine
async def test_cancelling_at_any_moment_leaves_no_process(provider: DockerProvider) -> None:
    async with provider.start() as box:
        for delay in (0.0, 0.01, 0.05, 0.1, 0.3, 0.6):
            task = asyncio.ensure_future(box.exec("sleep 612.345"))
            await asyncio.sleep(delay)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        # The bracket keeps grep from finding its own command line.
        left = await box.exec("grep -l '61[2].345' /proc/[0-9]*/cmdline", timeout=10)
        assert left.stdout == "", left
