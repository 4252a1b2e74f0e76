"""The `process` provider: exec, stdin, env, cwd, exit codes, timeouts, limits, files."""

from __future__ import annotations

import asyncio
import os

import pytest

import nemo_gym.sandbox as registry
from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.protocols import Sandbox, SandboxProvider
from nemo_gym.records import ResourceLimits, SandboxSpec
from nemo_gym.sandbox.process import ProcessProvider

pytestmark = pytest.mark.timeout(120)


def test_registry_finds_builtins_lazily() -> None:
    assert isinstance(registry.get("process"), ProcessProvider)
    assert {"local", "process", "docker", "apptainer"} <= set(registry.names())
    with pytest.raises(ConfigError, match="no sandbox provider named 'nope'"):
        registry.get("nope")
    with pytest.raises(ConfigError, match="rejected its options"):
        registry.get("process", colour="blue")


async def test_exec_basics() -> None:
    provider = ProcessProvider()
    assert isinstance(provider, SandboxProvider)
    async with provider.start(SandboxSpec(env={"FROM_SPEC": "1"})) as sb:
        assert isinstance(sb, Sandbox)
        shell = await sb.exec("echo out; echo err >&2; exit 7")
        assert (shell.exit_code, shell.stdout, shell.stderr) == (7, "out\n", "err\n")
        assert not shell.ok and shell.duration_s > 0
        argv = await sb.exec(["printf", "%s|", "a b", "$HOME"])
        assert argv.stdout == "a b|$HOME|"
        piped = await sb.exec("tr a-z A-Z", stdin="hello")
        assert piped.stdout == "HELLO"
        binary = await sb.exec(["wc", "-c"], stdin=bytes(range(256)) * 4)
        assert binary.stdout.strip() == "1024"
        env = await sb.exec("echo $FROM_SPEC $PER_CALL", env={"PER_CALL": "2"})
        assert env.stdout == "1 2\n"
        signal = await sb.exec("kill -TERM $$")
        assert signal.exit_code == -15
        missing = await sb.exec(["definitely-not-a-command-xyz"])
        assert missing.exit_code == 127 and "definitely-not-a-command-xyz" in missing.stderr


async def test_timeout_and_cpu_limit() -> None:
    spec = SandboxSpec(limits=ResourceLimits(cpu_seconds=1))
    async with ProcessProvider().start(spec) as sb:
        slow = await sb.exec("sleep 30", timeout=0.3)
        assert slow.timed_out and slow.exit_code < 0 and slow.duration_s < 5
        spin = await sb.run_python("while True: pass", timeout=20)
        # RLIMIT_CPU: SIGXCPU at 1s of CPU, long before the wall-clock deadline
        assert not spin.timed_out and spin.exit_code in (-24, -9)


async def test_memory_file_size_and_open_file_limits() -> None:
    limits = ResourceLimits(memory_bytes=256 << 20, file_size_bytes=1 << 20, open_files=32)
    async with ProcessProvider().start(SandboxSpec(limits=limits)) as sb:
        memory = await sb.run_python("x = bytearray(512 << 20)")
        assert memory.exit_code == 1 and "MemoryError" in memory.stderr
        big = await sb.exec("head -c 2000000 /dev/zero > big.bin")
        assert big.exit_code != 0
        assert len(await sb.read_file("big.bin")) == 1 << 20
        files = await sb.run_python("fs = [open('/dev/null') for _ in range(100)]")
        assert "Too many open files" in files.stderr


async def test_files_cwd_and_workdir_alias() -> None:
    async with ProcessProvider().start() as sb:
        payload = bytes(range(256)) * 3
        await sb.write_file("/work/data/blob.bin", payload)
        assert await sb.read_file("data/blob.bin") == payload
        await sb.write_file("notes.txt", "héllo")
        assert (await sb.read_file("/work/notes.txt")).decode() == "héllo"
        listing = await sb.exec("ls", cwd="/work/data")
        assert listing.stdout == "blob.bin\n"
        assert (await sb.exec("pwd")).stdout.strip() == sb.workdir
        with pytest.raises(FileNotFoundError):
            await sb.read_file("nope.txt")
        with pytest.raises(IsADirectoryError):
            await sb.read_file("data")
        workdir = sb.workdir
        assert os.path.isdir(workdir)
    assert not os.path.exists(workdir), "the private workdir is removed on close"


async def test_bad_input_is_a_clear_error() -> None:
    async with ProcessProvider().start() as sb:
        with pytest.raises(ConfigError, match="timeout"):
            await sb.exec("true", timeout=0)
        with pytest.raises(ConfigError, match="cmd"):
            await sb.exec([])
        with pytest.raises(ConfigError, match="env"):
            await sb.exec("true", env={"A": 1})  # type: ignore[dict-item]
        with pytest.raises(ConfigError, match="stdin"):
            await sb.exec("true", stdin=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cpu_seconds"):
        await ProcessProvider().create(SandboxSpec(limits=ResourceLimits(cpu_seconds=-1)))


async def test_close_is_idempotent_and_final() -> None:
    sb = await ProcessProvider().create()
    await sb.aclose()
    await sb.aclose()
    with pytest.raises(SandboxError, match="closed"):
        await sb.exec("true")


async def test_concurrent_execs_share_one_sandbox() -> None:
    import asyncio

    async with ProcessProvider().start() as sb:
        results = await asyncio.gather(*(sb.exec(f"sleep 0.2; echo {i}") for i in range(6)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]


def test_cgroups_of_dead_owners_are_swept() -> None:
    import time

    from nemo_gym.sandbox.base import PidsCgroup

    left = PidsCgroup.create(4)
    if left is None:
        pytest.skip("no writable pids cgroup here")
    # an owner SIGKILLed before close() leaves an empty cgroup; age it past the threshold
    os.utime(left.path, (time.time() - 1000, time.time() - 1000))
    fresh = PidsCgroup.create(4)
    assert fresh is not None
    try:
        assert not left.path.exists()
        assert fresh.path.exists(), "a young cgroup (a sandbox still starting) is kept"
    finally:
        fresh.destroy()
    assert not fresh.path.exists()


async def test_workdir_is_removed_even_if_the_owner_never_closes() -> None:
    sb = await ProcessProvider().create()
    workdir = sb.workdir
    assert sb._proc is not None and sb._channel is not None
    sb._channel[1].write_eof()  # what the worker sees when its owner dies: end of input
    await sb._proc.wait()
    assert not os.path.exists(workdir)
    await sb.aclose()


# A worker gone bad: ready, then it answers every request with a frame that claims a
# body of 1 GiB. The host must refuse the frame from its header, never buffer it.
_HUGE_REPLY_WORKER = r"""
import json, os, struct, sys, time
config = json.loads(sys.argv[1])
fd = config["channel_fd"]
def send(head, body_len=0):
    head = json.dumps(head).encode()
    os.write(fd, struct.pack("!II", len(head), body_len) + head)
send({"id": 0, "ok": True, "ready": True})
head_len, body_len = struct.unpack("!II", os.read(fd, 8))
request = json.loads(os.read(fd, head_len))
send({"id": request["id"], "ok": True, "exit_code": 0, "blobs": [1 << 30]}, 1 << 30)
os.write(fd, b"x" * 4096)
time.sleep(30)
"""


async def test_a_reply_over_the_output_cap_is_refused_unread(tmp_path) -> None:
    import sys
    import time

    from nemo_gym.sandbox.base import WorkerSandbox

    limits = ResourceLimits(output_bytes=64 << 10)
    sb = WorkerSandbox(
        provider="fake",
        argv=[sys.executable, "-I", "-c", _HUGE_REPLY_WORKER],
        spec=SandboxSpec(limits=limits),
        workdir=str(tmp_path),
        env={},
        process_env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    await sb.start()
    try:
        started = time.monotonic()
        with pytest.raises(SandboxError, match="reply of 1073741824 bytes"):
            await sb.exec("true", timeout=5)
        assert time.monotonic() - started < 5  # refused at once, not after a timeout
        assert not sb.alive
    finally:
        await sb.aclose()


async def test_read_file_is_bounded_by_the_file_size_limit() -> None:
    import errno

    spec = SandboxSpec(limits=ResourceLimits(file_size_bytes=4096))
    async with ProcessProvider().start(spec) as sb:
        await sb.write_file("small", b"x" * 4096)
        assert await sb.read_file("small") == b"x" * 4096
        await sb.write_file("big", b"x" * 4097)
        with pytest.raises(OSError) as info:
            await sb.read_file("big")
        assert info.value.errno == errno.EFBIG
        assert sb.alive


async def test_unenforceable_specs_warn_loudly_or_are_refused(caplog) -> None:
    import logging

    provider = ProcessProvider()
    with caplog.at_level(logging.WARNING, logger="nemo_gym.sandbox.process"):
        async with provider.start(SandboxSpec()) as sb:  # network="none" by default
            assert (await sb.exec("true")).ok
        async with provider.start(SandboxSpec()):
            pass
    warnings = [r.getMessage() for r in caplog.records if 'network="none"' in r.getMessage()]
    assert len(warnings) == 1 and "does NOT enforce" in warnings[0]
    strict = ProcessProvider(strict=True)
    for spec in (SandboxSpec(), SandboxSpec(network="loopback", ports=(8000,))):
        with pytest.raises(ConfigError, match="cannot enforce network="):
            await strict.create(spec)
    async with strict.start(SandboxSpec(network="host")) as sb:
        assert (await sb.exec("true")).ok


async def test_a_cancelled_exec_s_late_reply_leaves_the_sandbox_usable() -> None:
    # The worker answers a killed request with what it printed so far: that reply is read
    # and dropped, never taken for an oversized frame (which would end the sandbox).
    async with ProcessProvider().start(SandboxSpec(network="host")) as sb:
        task = asyncio.ensure_future(sb.exec("echo partial; sleep 30", timeout=60))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)  # the killed command's reply arrives
        after = await sb.exec("echo after", timeout=10)
        assert after.ok and after.stdout == "after\n", after
        assert sb.alive
