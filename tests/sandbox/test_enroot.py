"""The `enroot` provider: its command lines, its errors, the conformance suite and orphan
removal, through a stand-in `enroot` (`tests/sandbox/enroot_fake.py`; Enroot itself is not
installable here)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.base import worker_source
from nemo_gym.sandbox.conformance import ConformanceSuite
from nemo_gym.sandbox.enroot import (
    EnrootProvider,
    container_name,
    enroot_start_argv,
    find_binary,
    owner_of,
)
from nemo_gym.sandbox.local import unavailable_reason
from nemo_gym.sandbox.network import MOUNT
from nemo_gym.sandbox.remote.common import owner_token
from tests.sandbox.enroot_fake import squashfs_stub, write_fake_enroot

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"the fake needs bwrap: {unavailable_reason()}"
)

# One store for the module (what a user's ENROOT_DATA_PATH is), set before any provider
# runs, so the conformance suite's child processes see it too.
ROOT = Path(tempfile.mkdtemp(prefix="nemo_gym_test_enroot_"))
(ROOT / "bin").mkdir()
BINARY = str(write_fake_enroot(ROOT / "bin")) if unavailable_reason() is None else "enroot"
IMAGE = str(squashfs_stub(ROOT / "python.sqsh"))
DATA = ROOT / "data"
LOG = ROOT / "calls.jsonl"
os.environ["ENROOT_DATA_PATH"] = str(DATA)
os.environ["ENROOT_FAKE_LOG"] = str(LOG)
OPTIONS: dict[str, Any] = {"binary": BINARY, "image": IMAGE, "cache_dir": str(ROOT / "cache")}


class TestConformance(ConformanceSuite):
    provider = "enroot"
    options: ClassVar[dict[str, Any]] = OPTIONS


def calls(command: str) -> list[list[str]]:
    lines = LOG.read_text().splitlines() if LOG.exists() else []
    return [c for c in map(json.loads, lines) if c and c[0] == command]


def containers() -> list[str]:
    return sorted(os.listdir(DATA)) if DATA.exists() else []


def test_registered_by_name() -> None:
    assert isinstance(get("enroot", **OPTIONS), EnrootProvider)


def test_command_line_isolates_pid_and_network_by_default() -> None:
    spec = SandboxSpec(image=IMAGE)
    argv = enroot_start_argv("/usr/bin/enroot", spec, "box", "/h", bwrap="/usr/bin/bwrap")
    start = argv.index("/usr/bin/enroot")
    wrapper = argv[:start]
    assert wrapper[0] == "/usr/bin/bwrap" and wrapper[-1] == "--"
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent"):
        assert flag in wrapper
    assert argv[start : start + 3] == ["/usr/bin/enroot", "start", "--rw"]
    assert argv[argv.index("--mount") + 1] == "/h:/work:none:x-create=dir,rbind"
    assert argv[argv.index("box") :] == ["box", "python3", "-I", "-c", worker_source()]


def test_host_network_keeps_the_network_namespace() -> None:
    spec = SandboxSpec(image=IMAGE, network="host")
    argv = enroot_start_argv("enroot", spec, "box", "/h", bwrap="bwrap")
    assert "--unshare-net" not in argv and "--unshare-pid" in argv
    bare = enroot_start_argv("enroot", spec, "box", "/h", isolate=False)
    assert bare[:3] == ["enroot", "start", "--rw"]


@pytest.mark.parametrize("network", ["none", "loopback"])
def test_without_isolation_only_the_host_network_is_offered(network: str) -> None:
    spec = SandboxSpec(image=IMAGE, network=network, ports=(8000,) if network == "loopback" else ())
    with pytest.raises(ConfigError, match="shares the host's network namespace"):
        enroot_start_argv("enroot", spec, "box", "/h", isolate=False)
    provider = EnrootProvider(**OPTIONS, isolate=False)
    with pytest.raises(ConfigError, match="needs isolate=True"):
        asyncio.run(provider.create(spec))


def test_loopback_mounts_the_relay_read_only_and_starts_the_forwarder() -> None:
    spec = SandboxSpec(image=IMAGE, network="loopback", ports=(8000,))
    argv = enroot_start_argv("enroot", spec, "box", "/h", bwrap="bwrap", net_dir="/run/relay")
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert mounts[1] == f"/run/relay:{MOUNT}:none:x-create=dir,rbind,ro"
    assert "--unshare-net" in argv
    assert json.loads(argv[argv.index("box") + 5]) == [[8000, f"{MOUNT}/8000.sock"]]


@pytest.mark.parametrize("workdir", ["relative", "/", "/tmp", "/has space", "/a:b"])
def test_bad_workdir_is_a_config_error(workdir: str) -> None:
    with pytest.raises(ConfigError, match="workdir"):
        enroot_start_argv("enroot", SandboxSpec(workdir=workdir), "box", "/h", bwrap="b")


def test_no_image_and_a_bad_image_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"needs SandboxSpec\(image=...\)"):
        asyncio.run(EnrootProvider(binary=BINARY).create(SandboxSpec()))
    with pytest.raises(ConfigError, match=r"neither a \.sqsh file here nor a docker://"):
        asyncio.run(EnrootProvider(binary=BINARY).create(SandboxSpec(image="ubuntu")))


def test_missing_binary_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match="'enroot' on PATH") as info:
        find_binary()
    assert "NVIDIA/enroot" in str(info.value) and info.value.code == "sandbox_unavailable"
    with pytest.raises(SandboxError, match="on PATH"):
        asyncio.run(EnrootProvider(image=IMAGE).create())


def test_container_names_carry_their_owner() -> None:
    name = container_name()
    assert owner_of(name) == owner_token()
    assert owner_of("ubuntu") is None and owner_of("nemo-gym_abc") is None


def test_each_sandbox_is_its_own_container_removed_on_close() -> None:
    async def main() -> None:
        provider = EnrootProvider(**OPTIONS)
        async with provider.start() as a, provider.start() as b:
            mine = [c for c in containers() if owner_of(c) == owner_token()]
            assert len(mine) >= 2
            await a.write_file("/data/secret", "a's")  # `--rw`: the root is writable
            assert (await a.read_file("/data/secret")) == b"a's"
            with pytest.raises(FileNotFoundError):
                await b.read_file("/data/secret")
            result = await b.exec("echo $HOME; pwd", env={"X": "1"})
            assert result.stdout == "/work\n/work\n"
        assert not [c for c in containers() if owner_of(c) == owner_token()]

    asyncio.run(main())
    start = calls("start")[-1]
    assert start[1] == "--rw" and start[start.index("--mount") + 1].endswith(
        ":/work:none:x-create=dir,rbind"
    )


def test_a_docker_uri_is_imported_once(tmp_path: Path) -> None:
    async def main() -> None:
        provider = EnrootProvider(binary=BINARY, cache_dir=tmp_path)
        spec = SandboxSpec(image="docker://nvcr.io#nvidia/pytorch:24.01-py3")
        async with provider.start(spec) as box, provider.start(spec):
            assert (await box.exec("echo ok")).stdout == "ok\n"

    before = len(calls("import"))
    asyncio.run(main())
    imports = calls("import")[before:]
    assert len(imports) == 1 and imports[0][-1] == "docker://nvcr.io#nvidia/pytorch:24.01-py3"
    (image,) = tmp_path.glob("*.sqsh")
    assert image.name.startswith("nvcr.io+nvidia+pytorch+24.01-py3-")
    creates = calls("create")[-2:]
    assert all(c[-1] == str(image) for c in creates)


def test_enroot_errors_are_sandbox_errors_with_what_it_said(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqsh"
    bad.write_bytes(b"not squashfs")

    async def main() -> None:
        with pytest.raises(
            SandboxError, match=r"`enroot create` failed \(exit 1\).*Invalid image format"
        ):
            await EnrootProvider(binary=BINARY).create(SandboxSpec(image=str(bad)))

    asyncio.run(main())


def test_a_killed_runs_containers_are_removed_on_the_next_start() -> None:
    """A trainer makes two sandboxes and is SIGKILLed: the sandboxes' processes die with
    it (PID namespace); the containers it left are removed by the next provider start,
    and a live owner's container is left alone."""
    before = set(containers())
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import asyncio, json, os, sys\n"
            "from nemo_gym.sandbox import get\n"
            "p = get('enroot', **json.loads(sys.argv[1]))\n"
            "async def main():\n"
            "    a = await p.create(); b = await p.create()\n"
            "    os.kill(os.getpid(), 9)\n"
            "asyncio.run(main())\n",
            json.dumps(OPTIONS),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr
    orphans = sorted(set(containers()) - before)
    assert len(orphans) == 2 and all(owner_of(c) for c in orphans), orphans

    async def main() -> None:
        live = await EnrootProvider(**OPTIONS, reap_on_start=False).create()
        try:
            async with EnrootProvider(**OPTIONS).start():
                left = containers()
                assert not any(c in left for c in orphans)
                assert sum(owner_of(c) == owner_token() for c in left) == 2
        finally:
            await live.aclose()

    asyncio.run(main())


def test_without_isolation_the_host_network_runs_bare_enroot() -> None:
    async def main() -> str:
        provider = EnrootProvider(**OPTIONS, isolate=False)
        async with provider.start(SandboxSpec(network="host")) as box:
            return (await box.exec("echo bare")).stdout

    assert asyncio.run(main()) == "bare\n"
    assert calls("start")[-1][:2] == ["start", "--rw"]


def test_reaping_everything_spares_live_owners_here_and_takes_other_hosts() -> None:
    elsewhere = DATA / "nemo-gym_0123456789ab_other-host.4242.777"
    elsewhere.mkdir(parents=True)

    async def main() -> None:
        provider = EnrootProvider(**OPTIONS, reap_on_start=False)
        live = await provider.create()
        try:
            assert await provider.reap() == []  # dead owners only: none here
            assert await provider.reap(dead_owners_only=False) == [elsewhere.name]
            assert any(owner_of(c) == owner_token() for c in containers())
            with pytest.raises(ConfigError, match="drop --run"):
                await provider.reap(run="r1")
        finally:
            await live.aclose()

    asyncio.run(main())
