"""Sandbox latency, side by side: the worker's fork path vs fresh interpreters and sandboxes.

    .venv/bin/python bench/sandbox.py [--n 30] [--providers local,process] [--remote]

Rows (milliseconds, median and p90 over --n runs):

- `python snippet, fork path`: `sandbox.run_python(code)`, a fork of the warm worker;
- `python snippet, fresh interpreter`: `sandbox.exec(["python3", "-c", code])` in the
  same warm sandbox (fork + exec of a new interpreter);
- `python snippet, fresh bwrap`: a new bubblewrap sandbox per snippet, the way a naive
  provider would run it (`bwrap ... python3 -c code`), no worker;
- `20-test solution, CodeVerifier`: one stdin/stdout Python solution against 20 tests,
  end to end through `CodeVerifier.verify` (compiled once, one fork per test, warm pool);
- `20-test solution, exec per test`: the same through the generic path a provider
  without the worker gets (a fresh interpreter per test).
- `start to first exec`, `exec true` (`--remote`): a new sandbox until its first `exec`
  has returned, and one `exec("true")` in it, for `local` beside `remote machinery`: the
  shared remote-provider layer (`nemo_gym.sandbox.remote.common`: labels, rate limiter,
  the baseline listing at start, the rollout clock) over the stand-in service of the
  tests, whose sandboxes are `local` ones; the difference is the layer's own share.
  `pooled` takes a warm sandbox and gives it back through the checked reset. `e2b`:
  the real E2B SDK against its loopback fake (`tests/sandbox/e2b_fake.py`), whose
  sandboxes are `local` ones: the client's share (SDK, HTTP, Connect) beside `local`.
  `daytona`: the real Daytona SDK against its loopback fake (`tests/sandbox/daytona_fake.py`);
  an exec is one call (two with stdin: it is uploaded first), its reply the wrapper's output.
  `opensandbox`: the real OpenSandbox SDK against its loopback fake
  (`tests/sandbox/opensandbox_fake.py`); an exec is one streamed (SSE) call.
  `enroot`: the provider through the tests' stand-in `enroot` (`enroot create` and
  `remove` per sandbox, `start` in a bubblewrap PID and network namespace): the CLI's
  and the namespaces' share, not Enroot's image unpacking. `kubernetes`: the official
  client against the loopback fake API server (`tests/sandbox/kubernetes_fake.py`),
  pods as `local` sandboxes: REST, the exec websocket and the wrapper, beside `local`.
  `modal`: the real Modal SDK against its loopback gRPC fake (`tests/sandbox/modal_fake.py`):
  an exec is five calls to the task command router (start, stdin, two output streams,
  wait) plus the wrapper, beside `local`.
  `ecs`: real boto3 against the loopback ECS fake (`tests/sandbox/ecs_fake.py`), tasks as
  `local` sandboxes: an exec is an `ExecuteCommand` call and an SSM data channel session
  (websocket, handshake, acknowledged output) plus the report wrapper, beside `local`.
- `floor: ...`: what the machine charges for the primitives underneath: a bare
  `os.fork()` + `os._exit` + `waitpid` of a small Python process (the worker's imports,
  no sandbox), and `posix_spawn` of `/bin/true`. The fork path cannot beat the first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nemo_gym.records import Message, SandboxSpec, Task, Trajectory
from nemo_gym.sandbox import get
from nemo_gym.sandbox.base import WorkerSandbox, python_for_sandbox
from nemo_gym.sandbox.local import LocalProvider, bwrap_argv, find_bwrap, unavailable_reason
from nemo_gym.sandbox.process import ProcessProvider
from nemo_gym.verify.code import CodeVerifier

SNIPPET = "print(sum(i * i for i in range(100)))"
SOLUTION = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n"
TASK = Task(
    prompt="add two numbers",
    metadata={"tests": [{"input": f"{i} {i * 7}\n", "output": f"{i * 8}\n"} for i in range(20)]},
)
TRAJECTORY = Trajectory(messages=[Message.assistant(f"```python\n{SOLUTION}```")])


async def timed(fn: Callable[[], Awaitable[object]], n: int) -> list[float]:
    await fn()  # warm-up
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


class _PlainSandbox:
    """A sandbox seen through the `Sandbox` protocol only (no `run_batch` fast path)."""

    def __init__(self, inner: WorkerSandbox) -> None:
        self.inner = inner
        self.exec = inner.exec
        self.write_file = inner.write_file
        self.read_file = inner.read_file
        self.reset = inner.reset

    async def aclose(self) -> None:
        await self.inner.aclose()


class _NoFastPath:
    """A provider whose sandboxes hide `run_batch`: the verifier's generic exec path."""

    def __init__(self, inner: LocalProvider | ProcessProvider) -> None:
        self.inner = inner
        self.name = inner.name

    async def create(self, spec: SandboxSpec | None = None) -> _PlainSandbox:
        return _PlainSandbox(await self.inner.create(spec))


async def bench_provider(name: str, n: int) -> list[tuple[str, float, float]]:
    rows = []
    provider = get(name)
    async with provider.start() as sandbox:  # type: ignore[attr-defined]
        check = await sandbox.run_python(SNIPPET)
        assert check.stdout == "328350\n", check
        rows.append(
            (
                f"{name}: python snippet, fork path",
                *summary(await timed(lambda: sandbox.run_python(SNIPPET), n)),
            )
        )
        rows.append(
            (
                f"{name}: python snippet, fresh interpreter",
                *summary(await timed(lambda: sandbox.exec(["python3", "-c", SNIPPET]), n)),
            )
        )
    async with CodeVerifier(provider=provider, pool_size=1) as verifier:
        result = await verifier.verify(TASK, TRAJECTORY)
        assert result.reward == 1.0, result.metadata
        rows.append(
            (
                f"{name}: 20-test solution, CodeVerifier",
                *summary(await timed(lambda: verifier.verify(TASK, TRAJECTORY), n)),
            )
        )
    plain = _NoFastPath(provider)  # type: ignore[arg-type]
    async with CodeVerifier(provider=plain, pool_size=1) as verifier:  # type: ignore[arg-type]
        result = await verifier.verify(TASK, TRAJECTORY)
        assert result.reward == 1.0, result.metadata
        rows.append(
            (
                f"{name}: 20-test solution, exec per test",
                *summary(await timed(lambda: verifier.verify(TASK, TRAJECTORY), max(3, n // 5))),
            )
        )
    return rows


async def bench_fresh_bwrap(n: int) -> tuple[str, float, float]:
    argv = bwrap_argv(find_bwrap(), SandboxSpec(), python_for_sandbox())
    argv = [*argv[: argv.index("--") + 1], python_for_sandbox(), "-I", "-c", SNIPPET]

    async def once() -> None:
        done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, check=True)
        assert done.stdout == b"328350\n"

    return ("local: python snippet, fresh bwrap", *summary(await timed(once, max(3, n // 3))))


_FLOOR = """
import gc, json, os, selectors, shutil, statistics, sys, time, traceback
gc.freeze()
n = int(sys.argv[1])
def run(fn):
    out = []
    for _ in range(n + 1):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out[1:]
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
def spawn():
    os.waitpid(os.posix_spawn("/bin/true", ["/bin/true"], {}), 0)
print(json.dumps([run(fork), run(spawn)]))
"""


def bench_floor(n: int) -> list[tuple[str, float, float]]:
    """The cost of the primitives on this machine, measured in a separate small process."""
    done = subprocess.run(
        [python_for_sandbox(), "-I", "-c", _FLOOR, str(max(n, 20))],
        capture_output=True,
        check=True,
        text=True,
    )
    fork, spawn = json.loads(done.stdout)
    return [
        ("floor: python fork + _exit + waitpid", *summary(fork)),
        ("floor: spawn /bin/true + waitpid", *summary(spawn)),
    ]


async def bench_remote(n: int) -> list[tuple[str, float, float]]:
    """`local` beside the remote-provider layer over a stand-in service of `local` sandboxes."""
    from nemo_gym.sandbox.remote.common import RemoteProvider
    from tests.sandbox.remote_service import LocalService, LocalServiceBackend

    labels = {"team": "bench", "user": "bench", "workload": "bench", "run": "bench"}
    providers: list[tuple[str, Any]] = [
        ("local", LocalProvider()),
        ("remote machinery", RemoteProvider(LocalServiceBackend(LocalService()), labels=labels)),
        (
            "remote machinery, pooled",
            RemoteProvider(LocalServiceBackend(LocalService()), labels=labels, pool_size=1),
        ),
    ]
    fake = None
    try:
        import e2b  # noqa: F401

        from tests.sandbox.e2b_fake import E2BFake

        fake = E2BFake()
        url = fake.start()
        providers.append(
            (
                "e2b (SDK, loopback fake)",
                get("e2b", api_url=url, sandbox_url=url, api_key="e2b_" + "0" * 40, labels=labels),
            )
        )
    except ImportError:
        print("skipping e2b: the e2b extra is not installed")
    daytona_fake = None
    try:
        import daytona  # noqa: F401

        from tests.sandbox.daytona_fake import DaytonaFake

        daytona_fake = DaytonaFake()
        daytona_fake.start()
        providers.append(
            (
                "daytona (SDK, loopback fake)",
                get(
                    "daytona",
                    api_url=daytona_fake.api_url,
                    api_key="dtn_" + "0" * 40,
                    target="us",
                    labels=labels,
                ),
            )
        )
    except ImportError:
        print("skipping daytona: its SDK is not installed (bash scripts/install-remote-sdks.sh)")
    opensandbox_fake = None
    try:
        import opensandbox  # noqa: F401

        from tests.sandbox.opensandbox_fake import OpenSandboxFake

        opensandbox_fake = OpenSandboxFake()
        opensandbox_fake.start()
        providers.append(
            (
                "opensandbox (SDK, loopback fake)",
                get("opensandbox", domain=opensandbox_fake.domain, api_key="k", labels=labels),
            )
        )
    except ImportError:
        print(
            "skipping opensandbox: its SDK is not installed (bash scripts/install-remote-sdks.sh)"
        )
    kube = None
    try:
        import kubernetes  # noqa: F401

        from tests.sandbox.kubernetes_fake import KubernetesFake

        kube = KubernetesFake()
        kube_url = kube.start()
        providers.append(
            ("kubernetes (client, loopback fake)", get("kubernetes", host=kube_url, labels=labels))
        )
    except ImportError:
        print("skipping kubernetes: the kubernetes extra is not installed")
    modal_fake = None
    try:
        import modal  # noqa: F401

        from tests.sandbox.modal_fake import TOKEN_ID, TOKEN_SECRET, ModalFake

        modal_fake = ModalFake()
        os.environ["MODAL_SERVER_URL"] = modal_fake.start()
        providers.append(
            (
                "modal (SDK, loopback fake)",
                get("modal", token_id=TOKEN_ID, token_secret=TOKEN_SECRET, labels=labels),
            )
        )
    except ImportError:
        print("skipping modal: the modal extra is not installed")
    ecs_fake = None
    try:
        import boto3  # noqa: F401

        from tests.sandbox.ecs_fake import EcsFake

        ecs_fake = EcsFake()
        ecs_url = ecs_fake.start()
        # The fake checks only that requests are signed: these never leave the machine.
        os.environ.update(AWS_ACCESS_KEY_ID="AKIAFAKEFAKEFAKE", AWS_SECRET_ACCESS_KEY="fake")
        os.environ.pop("AWS_PROFILE", None)
        ecs = get(
            "ecs",
            subnets=["subnet-0abc"],
            region="us-east-1",
            endpoint_url=ecs_url,
            labels=labels,
        )
        providers.append(("ecs (boto3 + SSM channel, loopback fake)", ecs))
    except ImportError:
        print("skipping ecs: the ecs extra is not installed")
    enroot_dir = tempfile.mkdtemp(prefix="nemo_gym_bench_enroot_")
    providers.append(("enroot (CLI, stand-in enroot)", _enroot_stand_in(Path(enroot_dir))))
    rows = []
    for label, provider in providers:

        async def first_exec(provider: Any = provider) -> None:
            async with provider.start() as box:
                assert (await box.exec("true")).ok

        rounds = max(3, n // 3)
        rows.append((f"{label}: start to first exec", *summary(await timed(first_exec, rounds))))
        async with provider.start() as box:
            rows.append(
                (f"{label}: exec true", *summary(await timed(lambda b=box: b.exec("true"), n)))
            )
        if hasattr(provider, "aclose"):
            await provider.aclose()
    if fake is not None:
        fake.stop()
    if daytona_fake is not None:
        daytona_fake.stop()
    if opensandbox_fake is not None:
        opensandbox_fake.stop()
    if kube is not None:
        kube.stop()
    if modal_fake is not None:
        modal_fake.stop()
    if ecs_fake is not None:
        ecs_fake.stop()
    shutil.rmtree(enroot_dir, ignore_errors=True)
    return rows


def _enroot_stand_in(directory: Path) -> Any:
    """The `enroot` provider over the tests' stand-in `enroot` (user and mount namespaces
    by bubblewrap, as Enroot's), isolated as by default: its CLI and namespace layers."""
    from tests.sandbox.enroot_fake import squashfs_stub, write_fake_enroot

    os.environ["ENROOT_DATA_PATH"] = str(directory / "data")
    os.environ["ENROOT_FAKE_LOG"] = str(directory / "calls.jsonl")
    binary = write_fake_enroot(directory)
    image = squashfs_stub(directory / "image.sqsh")
    return get("enroot", binary=str(binary), image=str(image), cache_dir=str(directory))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=30, help="runs per row")
    parser.add_argument("--providers", default="local,process")
    parser.add_argument(
        "--remote", action="store_true", help="add the remote-provider layer's rows (needs local)"
    )
    args = parser.parse_args()
    rows: list[tuple[str, float, float]] = bench_floor(args.n)
    if args.remote:
        rows += await bench_remote(args.n)
    for name in filter(None, args.providers.split(",")):
        if name == "local" and unavailable_reason() is not None:
            print(f"skipping local: {unavailable_reason()}")
            continue
        rows += await bench_provider(name, args.n)
        if name == "local":
            rows.append(await bench_fresh_bwrap(args.n))
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  median ms     p90 ms")
    for label, median, p90 in rows:
        print(f"{label:{width}}  {median:9.2f}  {p90:9.2f}")
    print(f"(cpus: {os.cpu_count()}, load average: {os.getloadavg()[0]:.2f}, n={args.n})")


if __name__ == "__main__":
    asyncio.run(main())
