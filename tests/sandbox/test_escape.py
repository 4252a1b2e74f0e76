"""Escape suite: hostile commands against the `local` and `process` providers.

After each attack: the command is contained (the right `ExecResult`), the host is
intact (secret unread, outside files absent, free disk unchanged) and no process of it
is left. Processes are found by a marker unique to each test in their command line, so
other work on the machine cannot confuse the scan. Attacks that only namespaces stop
are skipped for `process`, which says it is not isolated.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator

import pytest

from nemo_gym.records import ResourceLimits, SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.base import PidsCgroup, WorkerSandbox
from nemo_gym.sandbox.conformance import leftover_processes

LIMITS = ResourceLimits(
    cpu_seconds=2,
    memory_bytes=512 << 20,
    file_size_bytes=16 << 20,
    open_files=64,
    processes=32,
    output_bytes=64 << 10,
)
SPEC = SandboxSpec(limits=LIMITS, options={})
LOCAL_SPEC = SandboxSpec(limits=LIMITS, options={"disk_bytes": 32 << 20})
NAMESPACES_ONLY = (
    "process is not isolated (host network, filesystem and user): only namespaces pass"
)


def _local_unavailable() -> str | None:
    from nemo_gym.sandbox.local import unavailable_reason

    return unavailable_reason()


def _no_pids_cgroup() -> str | None:
    cgroup = PidsCgroup.create(8)
    if cgroup is None:
        return "no writable pids cgroup: a fork bomb under `process` would not be bounded"
    cgroup.destroy()
    return None


@pytest.fixture(params=["local", "process"])
async def box(request: pytest.FixtureRequest) -> AsyncIterator[WorkerSandbox]:
    name = request.param
    if name == "local" and (reason := _local_unavailable()):
        pytest.skip(f"local: {reason}")
    provider = get(name)
    async with provider.start(LOCAL_SPEC if name == "local" else SPEC) as sandbox:
        yield sandbox


def _namespaces_only(box: WorkerSandbox) -> None:
    if box.provider == "process":
        pytest.skip(NAMESPACES_ONLY)


def _marker() -> str:
    return f"ngx{secrets.token_hex(6)}"


async def _gone(marker: str, within: float = 10.0) -> list[int]:
    """Wait until no process carries `marker`; return those still there."""
    deadline = time.monotonic() + within
    for _ in range(int(within / 0.05) + 1):
        left = leftover_processes(marker)
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.05)
    return leftover_processes(marker)


async def test_network_connect_to_host_service(box: WorkerSandbox) -> None:
    _namespaces_only(box)
    connections = 0

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        code = (
            f"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=3); "
            "print('connected')"
        )
        result = await box.exec(["python3", "-c", code], timeout=10)
        await asyncio.sleep(0.2)
    finally:
        server.close()
        await server.wait_closed()
    assert not result.ok and "connected" not in result.stdout, result
    assert connections == 0


async def test_read_host_secret(box: WorkerSandbox, tmp_path) -> None:
    _namespaces_only(box)
    token = secrets.token_hex(16)
    secret = tmp_path / "secret.txt"
    secret.write_text(token)
    result = await box.exec(f"cat {secret}; cat /etc/shadow; ls -la {tmp_path}", timeout=10)
    assert token not in result.stdout and token not in result.stderr, result
    assert "root:" not in result.stdout, "/etc/shadow readable"


async def test_write_outside_workdir(box: WorkerSandbox, tmp_path) -> None:
    _namespaces_only(box)
    outside = tmp_path / "outside"
    outside.mkdir()
    system_target = f"/usr/nemo-gym-escape-{secrets.token_hex(6)}"
    escape = f"escape-{secrets.token_hex(6)}"
    targets = [f"{outside}/pwned", system_target, "/etc/nemo-gym-escape"]
    try:
        for target in targets:
            result = await box.exec(["sh", "-c", 'echo pwned > "$1"', "sh", target], timeout=10)
            assert not result.ok, (target, result)
        # Above the workdir is the sandbox's own root (a tmpfs): writable, but not the host.
        await box.exec(f"echo pwned > ../../{escape}", timeout=10)
        assert not (outside / "pwned").exists()
        assert not os.path.exists(system_target)
        assert not os.path.exists("/etc/nemo-gym-escape")
        assert not os.path.exists(f"/{escape}")
    finally:
        for path in (system_target, "/etc/nemo-gym-escape", f"/{escape}"):
            if os.path.exists(path):
                os.unlink(path)


async def test_fork_bomb(box: WorkerSandbox) -> None:
    if box.provider == "process" and (reason := _no_pids_cgroup()):
        pytest.skip(reason)
    marker = _marker()
    started = time.monotonic()
    result = await box.exec(
        ["sh", "-c", f"f() {{ f | f & }}; f; exec sleep 30 # {marker}"], timeout=3
    )
    assert time.monotonic() - started < 15
    assert result.timed_out and not result.ok, result
    assert await _gone(marker) == []
    after = await box.exec("echo alive", timeout=10)
    assert after.stdout == "alive\n", after


async def test_memory_bomb(box: WorkerSandbox) -> None:
    marker = _marker()
    code = f"# {marker}\nx = []\nwhile True:\n    x.append(bytearray(32 << 20))\n"
    result = await box.exec(["python3", "-c", code], timeout=20)
    assert not result.ok and not result.timed_out, result
    assert "MemoryError" in result.stderr or result.exit_code < 0, result
    assert await _gone(marker) == []


async def test_fill_disk_one_file(box: WorkerSandbox) -> None:
    before = shutil.disk_usage("/tmp").free
    result = await box.exec("head -c 2000000000 /dev/zero > big && echo wrote", timeout=20)
    # `process`: RLIMIT_FSIZE stops it at 16 MiB; `local`: the 32 MiB tmpfs fills first.
    assert not result.ok and "wrote" not in result.stdout, result
    size = int((await box.exec("wc -c < big", timeout=10)).stdout.strip() or 0)
    assert size <= 32 << 20
    assert before - shutil.disk_usage("/tmp").free < 256 << 20


async def test_fill_disk_many_files(box: WorkerSandbox) -> None:
    _namespaces_only(box)  # RLIMIT_FSIZE bounds each file, not the host disk
    before = shutil.disk_usage("/").free
    result = await box.exec(
        "i=0; while [ $i -lt 100 ]; do head -c 8000000 /dev/zero > f$i || exit 1; "
        "i=$((i+1)); done; echo filled",
        timeout=30,
    )
    assert not result.ok and "filled" not in result.stdout, result
    assert "No space left" in result.stderr, result
    assert before - shutil.disk_usage("/").free < 256 << 20


async def test_cpu_spin_ignoring_signals_hits_timeout(box: WorkerSandbox) -> None:
    marker = _marker()
    code = (
        f"# {marker}\nimport signal\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\n"
        "sum(range(10**11))\n"
    )
    started = time.monotonic()
    result = await box.exec(["python3", "-c", code], timeout=2)
    assert time.monotonic() - started < 10
    assert result.timed_out and result.exit_code == -9, result
    assert await _gone(marker) == []


async def test_cpu_spin_ignoring_signals_hits_cpu_limit(box: WorkerSandbox) -> None:
    marker = _marker()
    code = (
        f"# {marker}\nimport signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
        "sum(range(10**11))\n"
    )
    result = await box.exec(["python3", "-c", code], timeout=30)
    # 2 CPU seconds (SIGXCPU, ignored), then the hard limit's SIGKILL a second later.
    assert not result.timed_out and result.exit_code == -9, result
    assert result.duration_s < 20
    assert await _gone(marker) == []


async def test_grandchild_outliving_parent(box: WorkerSandbox) -> None:
    marker = _marker()
    code = (
        f"# {marker}\nimport os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        for fd in (0, 1, 2):\n"
        "            os.close(fd)\n"
        "        time.sleep(300)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "print('parent done')\n"
    )
    result = await box.exec(["python3", "-c", code], timeout=10)
    assert result.ok and result.stdout == "parent done\n", result
    await box.aclose()
    assert await _gone(marker) == [], "the daemonised grandchild survived close()"


async def test_gigabytes_of_stdout(box: WorkerSandbox) -> None:
    marker = _marker()
    started = time.monotonic()
    result = await box.exec(["sh", "-c", f"head -c 2000000000 /dev/zero # {marker}"], timeout=30)
    assert time.monotonic() - started < 40
    assert result.stdout_truncated and len(result.stdout) == LIMITS.output_bytes, (
        result.exit_code,
        result.timed_out,
        len(result.stdout),
    )
    assert await _gone(marker) == []


# The attacker below tries every way sandboxed code has to reach the worker's reply
# channel: each descriptor of the worker and of its parent (bwrap's init inside a
# `local` sandbox, the host under `process`), reopened through /proc or taken with
# pidfd_getfd, fed forged replies and forged exec requests under every id it can find
# (the Python child also searches its own heap, a copy of the worker's, for job ids).
FORGE = r"""
import ctypes, gc, json, os, stat, struct, sys, time

def frame(head, body=b""):
    head = json.dumps(dict(head, blobs=[len(body)] if body else [])).encode()
    return struct.pack("!II", len(head), len(body)) + head + body

ids = set(range(0, 64))
for obj in gc.get_objects():
    rid = getattr(obj, "id", None) if type(obj).__name__ in ("Job", "Run") else None
    if isinstance(rid, int):
        ids.update(rid + k for k in range(-2, 64))
payload = b"".join(
    frame({"id": i, "ok": True, "exit_code": 0, "timed_out": False, "duration_s": 0.0}, b"FORGED")
    + frame({"op": "exec", "id": i, "argv": ["/bin/sh", "-c", "echo FORGED"], "timeout": 5,
             "env": {}, "cwd": None, "limits": {}}, b"")
    for i in sorted(ids)
)

def parent(pid):
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])

libc = ctypes.CDLL(None, use_errno=True)
worker = os.getppid()
reached = []
def channel(mode, pid):
    # a pipe or a socket; on the host (under `process`) sockets only, so that the test
    # runner's own output pipes stay clean
    return stat.S_ISSOCK(mode) or (stat.S_ISFIFO(mode) and pid in (worker, 1))

for pid in (worker, parent(worker)):
    for fd in range(64):
        try:
            if not channel(os.stat(f"/proc/{pid}/fd/{fd}").st_mode, pid):
                continue
            handle = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.write(handle, payload)
            reached.append(("proc", pid, fd))
        except OSError:
            pass
        os.close(handle)
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open
    if pidfd < 0:
        continue
    for fd in range(64):
        taken = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd
        if taken < 0:
            continue
        if channel(os.fstat(taken).st_mode, pid):
            try:
                os.set_blocking(taken, False)
                os.write(taken, payload)
                reached.append(("pidfd", pid, fd))
            except OSError:
                pass
        os.close(taken)
    os.close(pidfd)
print("reached", reached, file=sys.stderr, flush=True)
time.sleep(0.5)  # the forged replies first; the real one after
print("real")
raise SystemExit(3)
"""


@pytest.mark.parametrize("how", ["exec", "run_python"])
async def test_sandboxed_code_cannot_forge_its_result(box: WorkerSandbox, how: str) -> None:
    if how == "exec":
        result = await box.exec(["python3", "-c", FORGE], timeout=30)
    else:
        result = await box.run_python(FORGE, timeout=30)
    assert result.exit_code == 3 and result.stdout == "real\n", result
    assert "FORGED" not in result.stdout
    after = await box.exec("echo after", timeout=10)
    assert after.ok and after.stdout == "after\n", after
    # nothing of the sandbox holds capabilities or may gain any (the bounding set matters
    # for uid 0 only, which regains it on exec; anyone else gains nothing with no_new_privs)
    status = await box.exec(
        ["grep", "-E", "^(Uid|CapEff|CapPrm|CapBnd|NoNewPrivs)", "/proc/self/status"]
    )
    fields = dict(line.split(":\t", 1) for line in status.stdout.splitlines())
    uid = fields.pop("Uid").split()[0]
    if uid != "0":
        fields.pop("CapBnd")
    expected = {"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "NoNewPrivs": "1"}
    if uid == "0":
        expected["CapBnd"] = "0000000000000000"
    assert fields == expected, status.stdout


async def test_only_code_that_ran_to_its_end_is_completed(box: WorkerSandbox) -> None:
    tests = ["assert f(1) == 2\n", "assert f(2) == 3\n"]
    programs = {
        "def f(x):\n    return x + 1\n": [True, True],
        "def f(x):\n    return x\n": [False, False],
        "import sys\nsys.exit(0)\n": [False, False],
        "import os\nos._exit(0)\n": [False, False],
        "import sys, io\nsys.stdin = io.StringIO('')\ndef f(x):\n    return x\n": [False, False],
        "import builtins\nbuiltins.exec = print\ndef f(x):\n    return x\n": [False, False],
    }
    for program, expected in programs.items():
        batch = await box.run_batch(
            program, tests, python=True, module_name="solution", tests_as_code=True
        )
        assert batch.completed == expected, (program, batch)
    plain = await box.run_batch("print(input())", ["a", "b"], python=True)
    assert plain.completed == [True, True]
    assert [r.stdout for r in plain.results] == ["a\n", "b\n"]
