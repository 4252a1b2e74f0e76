"""The `local` (bubblewrap) provider: isolation, limits, files, cleanup."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from nemo_gym.errors import ConfigError
from nemo_gym.records import ResourceLimits, SandboxSpec
from nemo_gym.sandbox.conformance import leftover_processes
from nemo_gym.sandbox.local import LocalProvider, unavailable_reason

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]


async def test_exec_stdin_env_cwd_and_files() -> None:
    spec = SandboxSpec(env={"FROM_SPEC": "s"})
    async with LocalProvider().start(spec) as sb:
        result = await sb.exec("cat; echo $FROM_SPEC $X; pwd", stdin="in\n", env={"X": "x"})
        assert result.stdout == "in\ns x\n/work\n" and result.exit_code == 0
        payload = bytes(range(256)) * 2
        await sb.write_file("/work/sub/blob.bin", payload)
        assert await sb.read_file("sub/blob.bin") == payload
        assert (await sb.exec("ls", cwd="/work/sub")).stdout == "blob.bin\n"
        assert (await sb.exec(["sh", "-c", "exit 9"])).exit_code == 9
        timed = await sb.exec("sleep 20", timeout=0.3)
        assert timed.timed_out
        fast = await sb.run_python("print(sum(range(10)))")
        assert fast.stdout == "45\n"
        with pytest.raises(FileNotFoundError):
            await sb.read_file("/work/missing")


async def test_no_network_read_only_host_hidden_secrets() -> None:
    async with LocalProvider().start() as sb:
        net = await sb.run_python(
            "import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('1.1.1.1', 80))"
        )
        assert net.exit_code == 1 and "unreachable" in net.stderr.lower()
        ifaces = await sb.exec("cat /proc/net/dev")
        assert "eth" not in ifaces.stdout
        write_host = await sb.exec("touch /usr/nemo_gym_probe")
        assert write_host.exit_code != 0 and "Read-only" in write_host.stderr
        assert not os.path.exists("/usr/nemo_gym_probe")
        shadow = await sb.exec("cat /etc/shadow")
        assert "root:" not in shadow.stdout
        home = await sb.exec("ls /home /work/main 2>&1; true")
        assert "nemo_gym" not in home.stdout
        pid1 = await sb.exec("cat /proc/1/cmdline | tr '\\0' ' '")
        assert "bwrap" in pid1.stdout, "the sandbox has its own pid namespace"


async def test_filling_the_disk_is_contained() -> None:
    spec = SandboxSpec(
        options={"disk_bytes": 8 << 20}, limits=ResourceLimits(file_size_bytes=64 << 20)
    )
    async with LocalProvider().start(spec) as sb:
        fill = await sb.exec(
            "i=0; while head -c 1048576 /dev/zero > f$i; do i=$((i+1)); done; echo $i", timeout=30
        )
        assert int(fill.stdout.strip()) <= 8
        assert "No space left" in fill.stderr
        tmp = await sb.exec("head -c 20000000 /dev/zero > /tmp/x", timeout=30)
        assert tmp.exit_code != 0


async def test_process_limit_holds_as_root() -> None:
    spec = SandboxSpec(limits=ResourceLimits(processes=10))
    async with LocalProvider().start(spec) as sb:
        bomb = await sb.run_python(
            "import os, time\nn = 0\ntry:\n    for _ in range(200):\n"
            "        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n"
            "        n += 1\nexcept OSError as exc:\n    print('stopped at', n, exc.errno)\n",
            timeout=20,
        )
        assert bomb.stdout.startswith("stopped at"), bomb
        assert int(bomb.stdout.split()[2]) <= 10


async def test_everything_inside_dies_with_the_sandbox() -> None:
    marker = f"{random.randint(5000, 9000)}.{random.randint(100, 999)}"
    async with LocalProvider().start() as sb:
        await sb.run_python(
            "import subprocess\n"
            f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
            f"subprocess.Popen(['sh', '-c', 'sleep {marker} & sleep {marker}'])"
        )
        assert leftover_processes(marker)
    for _ in range(100):  # up to 5 s for the kernel to tear the namespace down
        if not leftover_processes(marker):
            break
        await asyncio.sleep(0.05)
    assert not leftover_processes(marker)


async def test_bad_workdir_is_refused() -> None:
    with pytest.raises(ConfigError, match="workdir"):
        await LocalProvider().create(SandboxSpec(workdir="relative"))
