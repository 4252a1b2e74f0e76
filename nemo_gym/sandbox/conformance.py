"""A conformance suite any `SandboxProvider` runs against itself.

Two ways to run it. From pytest, subclass `ConformanceSuite` in a test module:

```python
from nemo_gym.sandbox.conformance import ConformanceSuite

class TestMyProvider(ConformanceSuite):
    provider = "my_package.sandbox:MyProvider"  # "module:attr", or a registered name
    options = {"region": "local"}                 # keyword arguments for it (JSON values)
    spec = SandboxSpec(image="python:3.12-slim")  # the base spec of every check
    skip = {"signal_exit_code": "the engine reports 128 + n"}
```

Each check becomes one test (`test_exec`, `test_timeout`, ...). The tests are plain
functions that run their own event loop, so no pytest async plugin is needed. Or, from
any script or notebook, `await self_check(provider, spec)` (inspect_ai's idea) returns
one `CheckOutcome` per check.

What it covers: exec and exit codes, stdout/stderr, stdin (also large and absent), env,
cwd, timeouts, output caps, binary files in and out, concurrent execs, no capability
held or gainable (remounts and unmounts refused, also as root), `aclose` being
idempotent, cleanup when an exec is cancelled mid-run, cleanup when the sandbox's
owner process is SIGKILLed, and `network="loopback"` reaching its port and nothing else.
The cancellation and owner-killed checks look for leftover processes in this host's
`/proc` by a marker in their command line, so they need the sandbox's processes to be
visible from here (true for local providers and a local container engine); where the
marker never shows up at all, they skip rather than pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.protocols import SandboxProvider
from nemo_gym.records import ExecResult, SandboxSpec

__all__ = [
    "CHECKS",
    "CheckOutcome",
    "CheckSkipped",
    "ConformanceSuite",
    "leftover_processes",
    "load_provider",
    "self_check",
]

Check = Callable[["CheckContext"], Awaitable[None]]
CHECKS: dict[str, Check] = {}
"""Every check by name, in the order they run."""

CHECK_TIMEOUT_S = 60.0
GONE_WITHIN_S = 10.0


class CheckSkipped(Exception):
    """A check cannot observe what it must (e.g. the sandbox's processes); not a pass."""


@dataclass(frozen=True)
class CheckOutcome:
    """The result of one check: passed, failed (with why) or skipped (with why)."""

    name: str
    status: Literal["passed", "failed", "skipped"]
    message: str = ""
    duration_s: float = 0.0


@dataclass
class CheckContext:
    """What a check gets: the provider, the base spec, and how to rebuild the provider."""

    provider: SandboxProvider
    spec: SandboxSpec
    provider_ref: str | None = None
    options: dict[str, Any] | None = None

    def with_limits(self, **limits: Any) -> SandboxSpec:
        return self.spec.model_copy(update={"limits": self.spec.limits.model_copy(update=limits)})


def check(fn: Check) -> Check:
    """Register a conformance check under its name (without the `check_` prefix)."""
    CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


def _expect(condition: bool, message: str, result: ExecResult | None = None) -> None:
    if not condition:
        raise AssertionError(f"{message}" + (f"\n  got: {result!r}" if result is not None else ""))


def load_provider(ref: str, options: dict[str, Any] | None = None) -> SandboxProvider:
    """A provider from `"module:attr"` (called with `options`) or a registered name."""
    options = options or {}
    if ":" in ref:
        module_name, _, attr = ref.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
        return factory(**options)
    registry = importlib.import_module("nemo_gym.sandbox")
    get = getattr(registry, "get", None)
    if get is None:
        raise ConfigError(f"no sandbox registry to look up {ref!r}; use 'module:attr'")
    return get(ref, **options)


def leftover_processes(marker: str) -> list[int]:
    """Live (non-zombie) pids on this host whose command line contains `marker` (this
    process excluded)."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{entry}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != "Z":
            found.append(int(entry))
    return found


async def _wait_for(predicate: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


def _sleep_marker() -> tuple[str, str]:
    """A `sleep` command unique to this check, and the marker that finds its processes."""
    seconds = f"{random.randint(300, 899)}.{random.randint(100000, 999999)}"
    return f"sleep {seconds}", seconds


# ---------------------------------------------------------------------------- checks


@check
async def check_exec(ctx: CheckContext) -> None:
    """A shell command and an argv command run; stdout and stderr come back apart."""
    async with ctx.provider.start(ctx.spec) as box:
        result = await box.exec("echo hello; echo oops >&2")
        _expect(result.exit_code == 0 and result.ok, "exit code 0 and ok", result)
        _expect(result.stdout == "hello\n", "stdout is 'hello\\n'", result)
        _expect(result.stderr == "oops\n", "stderr is 'oops\\n'", result)
        _expect(not result.timed_out and result.duration_s >= 0, "not timed out", result)
        result = await box.exec(["sh", "-c", 'printf "%s|" "$@"', "sh", "a b", "c'd"])
        _expect(result.stdout == "a b|c'd|", "argv passed without shell splitting", result)
        result = await box.exec("printf 'h\\303\\251 \\342\\234\\223'")
        _expect(result.stdout == "hé ✓", "UTF-8 output decoded", result)


@check
async def check_exit_codes(ctx: CheckContext) -> None:
    """Non-zero exits are results, not exceptions."""
    async with ctx.provider.start(ctx.spec) as box:
        for code in (1, 3, 42):
            result = await box.exec(f"exit {code}")
            _expect(result.exit_code == code and not result.ok, f"exit code {code}", result)
        result = await box.exec(["sh", "-c", "exit 7"])
        _expect(result.exit_code == 7, "argv exit code 7", result)
        result = await box.exec("definitely-not-a-command-nemo-gym")
        _expect(result.exit_code == 127, "a missing command exits 127", result)


@check
async def check_signal_exit_code(ctx: CheckContext) -> None:
    """A command killed by a signal reports it as a negative exit code."""
    async with ctx.provider.start(ctx.spec) as box:
        result = await box.exec(["sh", "-c", "kill -KILL $$"])
        _expect(result.exit_code == -9 and not result.timed_out, "exit code -9", result)


@check
async def check_stdin(ctx: CheckContext) -> None:
    """stdin as str or bytes reaches the command; without stdin, reads see EOF at once."""
    async with ctx.provider.start(ctx.spec) as box:
        result = await box.exec("cat", stdin="line one\nline two\n")
        _expect(result.stdout == "line one\nline two\n", "str stdin echoed", result)
        result = await box.exec(["wc", "-c"], stdin=bytes(range(256)) * 4096)
        _expect(result.stdout.strip() == str(256 * 4096), "1 MiB of bytes stdin counted", result)
        result = await box.exec("cat", timeout=10)
        _expect(result.ok and result.stdout == "", "no stdin: EOF, not a hang", result)
        result = await box.exec("true", stdin="x" * (1 << 20), timeout=10)
        _expect(result.ok, "stdin the command never reads does not block", result)


@check
async def check_env(ctx: CheckContext) -> None:
    """`spec.env` holds for every exec; `env=` adds to it and wins on conflicts."""
    spec = ctx.spec.model_copy(update={"env": {**ctx.spec.env, "NG_A": "spec", "NG_B": "spec"}})
    async with ctx.provider.start(spec) as box:
        result = await box.exec('echo "$NG_A/$NG_B/$NG_C"', env={"NG_B": "exec", "NG_C": "x y"})
        _expect(result.stdout == "spec/exec/x y\n", "env merged, exec wins", result)
        result = await box.exec('echo "${NG_C-unset}"')
        _expect(result.stdout == "unset\n", "exec env does not leak into the next exec", result)


@check
async def check_cwd(ctx: CheckContext) -> None:
    """Relative paths and the default cwd are the workdir; `cwd=` takes relative or absolute."""
    async with ctx.provider.start(ctx.spec) as box:
        await box.write_file("top.txt", "top")
        await box.write_file("sub/dir/inner.txt", "inner")
        result = await box.exec("cat top.txt")
        _expect(result.stdout == "top", "the default cwd is the workdir", result)
        result = await box.exec("cat inner.txt", cwd="sub/dir")
        _expect(result.stdout == "inner", "relative cwd", result)
        workdir = ctx.spec.workdir.rstrip("/")
        result = await box.exec("cat inner.txt", cwd=f"{workdir}/sub/dir")
        _expect(result.stdout == "inner", "absolute cwd under the workdir", result)
        result = await box.exec("echo made > new.txt")
        _expect(result.ok, "the workdir is writable", result)
        _expect(await box.read_file(f"{workdir}/new.txt") == b"made\n", "absolute read path")


@check
async def check_timeout(ctx: CheckContext) -> None:
    """A command past its timeout is killed, reported as timed out, and leaves nothing."""
    command, marker = _sleep_marker()
    async with ctx.provider.start(ctx.spec) as box:
        started = time.monotonic()
        result = await box.exec(f"echo before; {command}; echo after", timeout=1.0)
        elapsed = time.monotonic() - started
        _expect(result.timed_out and not result.ok, "timed_out and not ok", result)
        _expect(elapsed < 8.0, f"returned {elapsed:.1f}s after a 1s timeout", result)
        _expect("after" not in result.stdout, "the command did not go on", result)
        _expect(
            await _wait_for(lambda: not leftover_processes(marker), GONE_WITHIN_S),
            f"processes left after the timeout: {leftover_processes(marker)}",
        )
        result = await box.exec("echo still usable")
        _expect(result.stdout == "still usable\n", "the sandbox works after a timeout", result)


@check
async def check_output_cap(ctx: CheckContext) -> None:
    """Output past `limits.output_bytes` is cut at the cap and flagged, per stream."""
    spec = ctx.with_limits(output_bytes=1000)
    async with ctx.provider.start(spec) as box:
        result = await box.exec("yes abcdefgh | head -c 50000", timeout=20)
        _expect(len(result.stdout) == 1000, "stdout cut at 1000 bytes", result)
        _expect(result.stdout_truncated and not result.stderr_truncated, "stdout flagged", result)
        _expect(result.stdout.startswith("abcdefgh\nabcdefgh\n"), "the head is kept", result)
        result = await box.exec("yes abcdefgh | head -c 50000 >&2; echo done", timeout=20)
        _expect(len(result.stderr) == 1000 and result.stderr_truncated, "stderr capped", result)
        _expect(result.stdout == "done\n" and not result.stdout_truncated, "stdout apart", result)
        result = await box.exec("head -c 1000 /dev/zero | tr '\\0' z", timeout=20)
        _expect(
            len(result.stdout) == 1000 and not result.stdout_truncated,
            "exactly the cap is not truncation",
            result,
        )


@check
async def check_files(ctx: CheckContext) -> None:
    """Binary files go in and out byte for byte; parents are created; missing is OSError."""
    blob = bytes(range(256)) * 64 + b"\x00\r\n\xff"
    async with ctx.provider.start(ctx.spec) as box:
        await box.write_file("data/blob.bin", blob)
        _expect(await box.read_file("data/blob.bin") == blob, "binary round trip")
        result = await box.exec(["wc", "-c", "data/blob.bin"])
        _expect(result.stdout.split()[0] == str(len(blob)), "the command sees the file", result)
        await box.write_file("text.txt", "héllo\n")
        _expect(await box.read_file("text.txt") == "héllo\n".encode(), "str written as UTF-8")
        await box.write_file("text.txt", "short")
        _expect(await box.read_file("text.txt") == b"short", "write replaces the file")
        result = await box.exec("printf '\\000\\001\\377\\n' > made.bin")
        _expect(result.ok, "the command writes a file", result)
        _expect(await box.read_file("made.bin") == b"\x00\x01\xff\n", "binary out")
        await box.write_file("empty", b"")
        _expect(await box.read_file("empty") == b"", "an empty file")
        try:
            await box.read_file("no/such/file")
        except OSError:
            pass
        else:
            raise AssertionError("reading a missing file raised nothing")


@check
async def check_concurrent_execs(ctx: CheckContext) -> None:
    """Execs in one sandbox run concurrently, each with its own result."""
    n = 8
    async with ctx.provider.start(ctx.spec) as box:
        started = time.monotonic()
        results = await asyncio.gather(
            *(box.exec(f"sleep 1; echo {i}; echo e{i} >&2; exit {i}") for i in range(n))
        )
        elapsed = time.monotonic() - started
        for i, result in enumerate(results):
            _expect(
                (result.stdout, result.stderr, result.exit_code) == (f"{i}\n", f"e{i}\n", i),
                f"exec {i} got its own output",
                result,
            )
        _expect(elapsed < n * 0.75, f"{n} one-second execs took {elapsed:.1f}s: not concurrent")


@check
async def check_close(ctx: CheckContext) -> None:
    """`aclose` is idempotent; a closed sandbox refuses work with `SandboxError`."""
    async with ctx.provider.start(ctx.spec) as box:
        _expect((await box.exec("true")).ok, "a first exec works")
        await box.aclose()
        await box.aclose()
        try:
            await box.exec("true")
        except SandboxError:
            pass
        else:
            raise AssertionError("exec on a closed sandbox raised no SandboxError")
    # Leaving the context after an explicit aclose must not fail either.


@check
async def check_cancellation(ctx: CheckContext) -> None:
    """Cancelling an exec mid-run kills what it started; the sandbox stays usable."""
    command, marker = _sleep_marker()
    async with ctx.provider.start(ctx.spec) as box:
        task = asyncio.ensure_future(box.exec(f"{command} & {command}; wait", timeout=60))
        if not await _wait_for(lambda: len(leftover_processes(marker)) >= 2, 15.0):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise CheckSkipped("the sandbox's processes are not visible in this host's /proc")
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the cancelled exec returned instead of raising CancelledError")
        _expect(
            await _wait_for(lambda: not leftover_processes(marker), GONE_WITHIN_S),
            f"processes left after cancellation: {leftover_processes(marker)}",
        )
        result = await box.exec("echo alive")
        _expect(result.stdout == "alive\n", "the sandbox works after a cancelled exec", result)


_CHILD = r"""
import asyncio, json, sys
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox.conformance import load_provider

async def main():
    ref, options, spec, command = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    provider = load_provider(ref, options)
    async with provider.start(SandboxSpec.model_validate_json(spec)) as box:
        task = asyncio.ensure_future(box.exec(command + " & " + command + "; wait", timeout=120))
        await asyncio.sleep(0.5)
        print("started", flush=True)
        await task

asyncio.run(main())
"""


@check
async def check_owner_killed(ctx: CheckContext) -> None:
    """When the process owning a sandbox is SIGKILLed, nothing the sandbox ran survives."""
    if ctx.provider_ref is None:
        raise CheckSkipped("needs provider_ref ('module:attr' or a name) to start a child")
    command, marker = _sleep_marker()
    argv = [
        sys.executable,
        "-c",
        _CHILD,
        ctx.provider_ref,
        json.dumps(ctx.options or {}),
        ctx.spec.model_dump_json(),
        command,
    ]
    child = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        seen = await _wait_for(
            lambda: len(leftover_processes(marker)) >= 2 or child.returncode is not None, 30.0
        )
        if child.returncode is not None or not seen:
            child.kill()
            _, err = await child.communicate()
            if child.returncode not in (None, -9) and err:
                raise AssertionError(
                    f"the child failed to start a sandbox:\n{err.decode()[-2000:]}"
                )
            raise CheckSkipped("the sandbox's processes are not visible in this host's /proc")
        child.send_signal(signal.SIGKILL)
        await child.wait()
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    _expect(
        await _wait_for(lambda: not leftover_processes(marker), GONE_WITHIN_S),
        f"processes outlived their SIGKILLed owner: {leftover_processes(marker)}",
    )


_PROBE = r"""
import json, socket, sys
allowed, other = int(sys.argv[1]), int(sys.argv[2])
out = {}
with socket.create_connection(("127.0.0.1", allowed), timeout=5) as s:
    s.sendall(b"ping\n")
    out["allowed"] = s.makefile("rb").readline().decode().strip()
try:
    socket.create_connection(("127.0.0.1", other), timeout=3).close()
    out["other"] = "connected"
except OSError as exc:
    out["other"] = type(exc).__name__
with open("/proc/net/dev") as f:
    out["interfaces"] = sorted(l.split(":")[0].strip() for l in f.readlines()[2:])
print(json.dumps(out))
"""


@check
async def check_loopback_network(ctx: CheckContext) -> None:
    """`network="loopback"` reaches the listed host port and nothing else: another host
    loopback port is refused (no connection reaches it) and loopback is the only
    interface, so nothing beyond the host is reachable either."""
    seen = {"allowed": 0, "other": 0}

    def server(name: str) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen[name] += 1
            line = await reader.readline()
            writer.write(b"pong:" + line)
            await writer.drain()
            writer.close()

        return serve

    allowed = await asyncio.start_server(server("allowed"), "127.0.0.1", 0)
    other = await asyncio.start_server(server("other"), "127.0.0.1", 0)
    try:
        ports = [s.sockets[0].getsockname()[1] for s in (allowed, other)]
        spec = ctx.spec.model_copy(update={"network": "loopback", "ports": (ports[0],)})
        async with ctx.provider.start(spec) as sandbox:
            result = await sandbox.exec(
                ["python3", "-c", _PROBE, str(ports[0]), str(ports[1])], timeout=30
            )
            # a second exec: the forwarder outlives the first and a reset
            reset = getattr(sandbox, "reset", None)
            if reset is not None:
                await reset()
            again = await sandbox.exec(
                ["python3", "-c", _PROBE, str(ports[0]), str(ports[1])], timeout=30
            )
    finally:
        for s in (allowed, other):
            s.close()
            await s.wait_closed()
    _expect(result.ok and again.ok, "the probe failed", result if not result.ok else again)
    for outcome in (json.loads(result.stdout), json.loads(again.stdout)):
        _expect(outcome["allowed"] == "pong:ping", f"the allowed port: {outcome}")
        _expect(outcome["other"] != "connected", f"another host port was reachable: {outcome}")
        _expect(outcome["interfaces"] == ["lo"], f"interfaces besides lo: {outcome}")
    _expect(seen["other"] == 0, f"{seen['other']} connection(s) reached the other port")
    _expect(seen["allowed"] == 2, f"the allowed port saw {seen['allowed']} connections, not 2")


_PRIVILEGE_PROBE = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND, MNT_DETACH = 32, 4096, 2

out = {"status": {}}
with open("/proc/self/status") as handle:
    for line in handle:
        key, _, value = line.partition(":")
        if key in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Uid"):
            out["status"][key] = value.strip()
if any(int(out["status"].get(k, "0"), 16) for k in ("CapEff", "CapPrm", "CapAmb")) or (
    os.getuid() == 0 and int(out["status"].get("CapBnd", "0"), 16)
):
    # With capabilities, the attempts below could succeed, and on a provider without
    # namespaces change the host's own mounts: stop here, the check fails already.
    print(json.dumps(out))
    sys.exit(0)

def writable(path):
    probe = os.path.join(path, ".nemo_gym_probe_%d" % os.getpid())
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        return False
    os.unlink(probe)
    return True

for path in ("/usr", "/etc"):
    before = writable(path)
    remounted = libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND, None) == 0
    out[path] = {"remounted": remounted, "before": before, "after": writable(path)}
out["unmounted"] = [
    path for path in ("/etc/shadow", "/etc/gshadow")
    if os.path.exists(path) and libc.umount2(path.encode(), MNT_DETACH) == 0
]
out["unshared"] = libc.unshare(0x00020000) == 0  # CLONE_NEWNS: a mount namespace
print(json.dumps(out))
"""


@check
async def check_no_privileges(ctx: CheckContext) -> None:
    """Sandboxed code holds no capability and can gain none (also when the host runs as
    root): its capability sets are empty (the bounding set too, for uid 0) and
    no_new_privs is set; then (only then, so
    the check never changes a host's mounts) remounting `/usr` or `/etc` writable fails
    and gives no write access, unmounting the masks (`/etc/shadow`, `/etc/gshadow`)
    fails, and so does making a mount namespace."""
    async with ctx.provider.start(ctx.spec) as box:
        result = await box.exec(["python3", "-c", _PRIVILEGE_PROBE], timeout=30)
    _expect(result.ok, "the privilege probe failed", result)
    out = json.loads(result.stdout)
    zero = "0000000000000000"
    status = out["status"]
    # The bounding set matters for uid 0 alone (it regains the set on exec); anyone else
    # gains nothing from it under no_new_privs.
    root = status.get("Uid", "0").split()[0] == "0"
    for key in ("CapEff", "CapPrm", "CapAmb", *(("CapBnd",) if root else ())):
        _expect(status.get(key, zero) == zero, f"{key} is {status.get(key)}, not empty")
    _expect(status.get("NoNewPrivs") == "1", f"no_new_privs is {status.get('NoNewPrivs')}")
    for path in ("/usr", "/etc"):
        probe = out[path]
        _expect(not probe["remounted"], f"{path} could be remounted")
        _expect(probe["after"] == probe["before"], f"{path} became writable: {probe}")
    _expect(not out["unmounted"], f"could unmount {out['unmounted']}")
    _expect(not out["unshared"], "could make a mount namespace of its own")


# ------------------------------------------------------------------------- running


async def _run_one(name: str, ctx: CheckContext) -> CheckOutcome:
    started = time.monotonic()
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            await CHECKS[name](ctx)
    except CheckSkipped as exc:
        return CheckOutcome(name, "skipped", str(exc), time.monotonic() - started)
    except TimeoutError:
        message = f"did not finish within {CHECK_TIMEOUT_S:g}s"
        return CheckOutcome(name, "failed", message, time.monotonic() - started)
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
        return CheckOutcome(name, "failed", message, time.monotonic() - started)
    return CheckOutcome(name, "passed", "", time.monotonic() - started)


async def self_check(
    provider: SandboxProvider,
    spec: SandboxSpec | None = None,
    *,
    checks: list[str] | None = None,
    provider_ref: str | None = None,
    options: dict[str, Any] | None = None,
) -> list[CheckOutcome]:
    """Run the checks (all by default) against `provider`, one after the other.

    `provider_ref` (`"module:attr"` or a registered name, with `options`) lets the
    owner-killed check rebuild the provider in a child process; without it that check
    is skipped.
    """
    unknown = set(checks or ()) - set(CHECKS)
    if unknown:
        raise ConfigError(f"unknown conformance checks {sorted(unknown)}; known: {list(CHECKS)}")
    ctx = CheckContext(provider, spec or SandboxSpec(), provider_ref, options)
    return [await _run_one(name, ctx) for name in (checks or list(CHECKS))]


class ConformanceSuite:
    """Subclass as `TestSomething(ConformanceSuite)` to run every check as a pytest test.

    Set `provider` (`"module:attr"` or a registered name) and `options`, or override
    `make_provider()`; `spec` is the base spec; `skip` maps a check name to the reason
    it does not apply to this provider.
    """

    provider: ClassVar[str | None] = None
    options: ClassVar[dict[str, Any]] = {}
    spec: ClassVar[SandboxSpec] = SandboxSpec()
    skip: ClassVar[dict[str, str]] = {}

    def make_provider(self) -> SandboxProvider:
        if self.provider is None:
            raise ConfigError(f"{type(self).__name__}: set `provider` or override make_provider()")
        return load_provider(self.provider, dict(self.options))

    def _run_check(self, name: str) -> None:
        import pytest

        if name in self.skip:
            pytest.skip(self.skip[name])
        ctx = CheckContext(self.make_provider(), self.spec, self.provider, dict(self.options))
        outcome = asyncio.run(_run_one(name, ctx))
        if outcome.status == "skipped":
            pytest.skip(outcome.message)
        if outcome.status == "failed":
            pytest.fail(f"{name}: {outcome.message}", pytrace=False)


def _make_test(name: str) -> Callable[[ConformanceSuite], None]:
    def test(self: ConformanceSuite) -> None:
        self._run_check(name)

    test.__name__ = f"test_{name}"
    test.__qualname__ = f"ConformanceSuite.test_{name}"
    test.__doc__ = CHECKS[name].__doc__
    return test


for _name in CHECKS:
    setattr(ConformanceSuite, f"test_{_name}", _make_test(_name))
