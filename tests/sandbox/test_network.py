"""`SandboxSpec.network`: the modes, old bools, and what each provider asks for.

The behaviour itself (the listed port reached, another host port and the outside not)
is the conformance check `loopback_network`, run for every provider in
test_conformance.py; here are the spec, the command lines and the relay's cleanup.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from pydantic import ValidationError

from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.apptainer import apptainer_argv
from nemo_gym.sandbox.docker import DockerProvider
from nemo_gym.sandbox.local import bwrap_argv, unavailable_reason
from nemo_gym.sandbox.network import MOUNT, PortRelay


def test_old_bools_still_mean_none_and_host() -> None:
    assert SandboxSpec(network=False).network == "none"
    assert SandboxSpec(network=True).network == "host"
    assert SandboxSpec().network == "none"
    assert SandboxSpec.model_validate_json('{"network": true}').network == "host"


def test_ports_need_loopback_and_must_be_ports() -> None:
    assert SandboxSpec(network="loopback", ports=(8000,)).ports == (8000,)
    with pytest.raises(ValidationError, match="needs network='loopback'"):
        SandboxSpec(network="host", ports=(8000,))
    with pytest.raises(ValidationError, match="not a TCP port"):
        SandboxSpec(network="loopback", ports=(70000,))
    with pytest.raises(ValidationError):
        SandboxSpec(network="internet")


def test_bwrap_argv_per_mode() -> None:
    none = bwrap_argv("bwrap", SandboxSpec(), "/usr/bin/python3")
    host = bwrap_argv("bwrap", SandboxSpec(network="host"), "/usr/bin/python3")
    loop = bwrap_argv(
        "bwrap", SandboxSpec(network="loopback", ports=(1234,)), "/usr/bin/python3", "/tmp/n"
    )
    assert "--share-net" not in none and "--share-net" in host and "--share-net" not in loop
    assert ["--ro-bind", "/tmp/n", MOUNT] == loop[loop.index(MOUNT) - 2 : loop.index(MOUNT) + 1]
    command = loop[loop.index("--") + 1 :]
    # the forwarder runs first, then execs the worker
    assert json.loads(command[4]) == [[1234, f"{MOUNT}/1234.sock"]]
    assert command[5] == "--" and command[6:9] == ["/usr/bin/python3", "-I", "-c"]


def test_docker_container_config_for_loopback() -> None:
    provider = DockerProvider(host="unix:///nonexistent.sock", python="/usr/bin/python3")
    spec = SandboxSpec(image="img", network="loopback", ports=(4321,))
    config = provider._container_config(spec, "img", provider.options, "/tmp/relay")
    host = config["HostConfig"]
    assert host["NetworkMode"] == "none" and host["Binds"] == [f"/tmp/relay:{MOUNT}:ro"]
    assert config["Entrypoint"][0] == "/usr/bin/python3" and config["Entrypoint"][-2:] == [
        "--",
        "cat",
    ]
    assert json.loads(config["Entrypoint"][4]) == [[4321, f"{MOUNT}/4321.sock"]]
    plain = provider._container_config(SandboxSpec(image="img"), "img", provider.options)
    assert plain["Entrypoint"] == ["cat"] and "Binds" not in plain["HostConfig"]


def test_apptainer_argv_for_loopback() -> None:
    spec = SandboxSpec(image="x.sif", network="loopback", ports=(99,))
    argv = apptainer_argv("apptainer", spec, "/tmp/w", net_dir="/tmp/relay")
    assert argv[3:6] == ["--net", "--network", "none"]
    assert f"/tmp/relay:{MOUNT}:ro" in argv
    image = argv.index("x.sif")
    assert argv[image + 1 : image + 4] == ["python3", "-I", "-c"] and "--" in argv[image:]


async def test_relay_refuses_nothing_it_was_not_given_and_cleans_up() -> None:
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readline())
        writer.write(b"ok\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    relay = await PortRelay((port,)).start()
    directory = relay.directory
    assert os.listdir(directory) == [f"{port}.sock"]
    reader, writer = await asyncio.open_unix_connection(os.path.join(directory, f"{port}.sock"))
    writer.write(b"hello\n")
    assert await reader.readline() == b"ok\n"
    writer.close()
    await relay.aclose()
    await relay.aclose()
    server.close()
    await server.wait_closed()
    assert seen == [b"hello\n"] and not os.path.exists(directory)


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"local: {unavailable_reason()}")
async def test_local_sandbox_closes_its_relay() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    before = {d for d in os.listdir("/tmp") if d.startswith("nemo_gym_net_")}
    async with get("local").start(SandboxSpec(network="loopback", ports=(port,))) as box:
        during = {d for d in os.listdir("/tmp") if d.startswith("nemo_gym_net_")} - before
        assert len(during) == 1
        assert (await box.exec(f"ls {MOUNT}")).stdout.split() == [f"{port}.sock"]
    after = {d for d in os.listdir("/tmp") if d.startswith("nemo_gym_net_")} - before
    server.close()
    await server.wait_closed()
    assert not after
