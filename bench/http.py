"""The HTTP path, side by side in one run: CPU per rollout and rollouts/s by transport.

    python bench/http.py                      # the full table (several minutes)
    python bench/http.py --quick              # fewer rollouts per case
    python bench/http.py --in-flight 64 1024  # some concurrency levels only
    python bench/http.py --paths fast --gc-threshold 50000,20,100   # a trainer's gc setting
    python bench/http.py --clients h1 httpx2 aiohttp sdk   # bare POSTs per client library

Single-turn multiple-choice rollouts (`gym.rollouts`, MultipleChoiceVerifier) against
a fake OpenAI-compatible server that this script starts in a child process on
127.0.0.1 (the testing kit's LoopbackHTTPServer, on uvloop where installed), once
answering at once and once after 50 ms. One real HTTP call per rollout, for every row:

- core: ScriptedModel, no HTTP (the in-process baseline the HTTP path is measured against);
- fast: OpenAIChat(base_url=..., transport="fast"), aiohttp + orjson (the default);
- sdk: OpenAIChat(base_url=..., transport="sdk"), the openai SDK over httpx2.

verifiers and NeMo Gym are not driven here: neither is a dependency of this project
(install them in a venv of their own and point their OpenAI client at the same
`--serve` server to compare; see docs/models-http.md).

Columns: client CPU ms per rollout (this process: the trainer's cost), server CPU ms
per rollout (the fake server's process), rollouts/s (wall clock, after a warm-up wave
that opens the connections), and for the 50 ms server the share of the ideal, where
ideal = min(in_flight / 50 ms, 1 / client CPU per rollout): what the server's latency
allows, capped by what one core can drive at the measured CPU cost; "core used" is
rollouts/s x client CPU per rollout, the share of one core this process had (near 1.0:
CPU-bound; well below on a busy machine: other processes had the CPU).

Targets (issue 14): fast <= 0.25 ms CPU per rollout at 64 in flight; >= 3,000
rollouts/s against the instant server; with 50 ms latency >= 90% of ideal at 1,024
in flight and no drop from 1,024 to 4,096.
"""

from __future__ import annotations

import os
import sys

# This file is named like the stdlib's `http` package (which urllib, httpx2 and the SDKs
# import), and a script's folder leads sys.path: keep bench/ off the path so that
# `import http` finds the stdlib, here and in the other scripts of bench/.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
if __name__ == "http":
    # A sibling script (bench/overhead.py, ...) imported the stdlib's `http` and found
    # this file first: hand it the real package. (The definitions below are unused then.)
    import importlib

    del sys.modules["http"]
    sys.modules["http"] = importlib.import_module("http")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import gc  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

CANNED = "The answer is \\boxed{B}."


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# --------------------------------------------------------------------------- the server


def serve(port: int, delay_s: float) -> None:
    """The fake server: the same canned chat completion for every request."""
    from nemo_gym.records import Message, ModelResponse, Usage
    from nemo_gym.testing.httpserver import LoopbackHTTPServer, Reply
    from nemo_gym.wire import openai_chat

    reply = Reply(
        200,
        openai_chat.build_response(
            ModelResponse(
                message=Message.assistant(CANNED),
                usage=Usage(prompt_tokens=60, completion_tokens=9),
            ),
            model="policy",
            id="chatcmpl-bench",
            created=1,
        ),
        delay_s=delay_s,
    )

    async def main() -> None:
        server = LoopbackHTTPServer(lambda request: reply, port=port)
        await server.start()
        print(server.port, flush=True)
        await asyncio.Event().wait()

    _raise_fd_limit()
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())


class Server:
    """A `--serve` child process; `cpu_s()` is its CPU time so far."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", "0", "--delay", str(delay_s)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def cpu_s(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


# --------------------------------------------------------------------------- the client


@dataclass
class Row:
    path: str
    in_flight: int
    delay_s: float
    n: int
    client_ms: float
    server_ms: float
    rate: float


def _env(n: int):  # type: ignore[no-untyped-def]
    import nemo_gym as gym
    from nemo_gym.verify.mcqa import MultipleChoiceVerifier

    class Mcqa(gym.Env):
        """n single-turn multiple-choice tasks, generated lazily."""

        def __init__(self) -> None:
            super().__init__(MultipleChoiceVerifier(), name="bench-mcqa")

        def tasks(self, split: str = "test", limit: int | None = None):  # type: ignore[no-untyped-def]
            for i in range(n if limit is None else min(n, limit)):
                yield gym.Task(
                    id=f"q{i}",
                    prompt=f"Question {i}: which is right?\nA) 1\nB) 2\nC) 3\nD) 4\n"
                    "Answer with \\boxed{LETTER}.",
                    answer="B",
                    metadata={"options": ["1", "2", "3", "4"]},
                )

    return Mcqa()


def _model(path: str, url: str):  # type: ignore[no-untyped-def]
    import nemo_gym as gym

    if path == "core":
        return gym.models.ScriptedModel([CANNED], cycle=True, keep_requests=False)
    return gym.models.OpenAIChat("policy", base_url=url, transport=path)


async def _drive(env, model, n: int, in_flight: int) -> tuple[int, float, float]:  # type: ignore[no-untyped-def]
    import nemo_gym as gym

    ok = 0
    started_cpu, started = time.process_time(), time.perf_counter()
    async for rollout in gym.rollouts(env, model, limit=n, concurrency=in_flight):
        if not rollout.ok:
            raise RuntimeError(f"a rollout failed: {rollout.failure}")
        ok += rollout.reward == 1.0
    if ok != n:
        raise RuntimeError(f"{n - ok} of {n} rollouts were not scored 1.0")
    return n, time.process_time() - started_cpu, time.perf_counter() - started


async def case(path: str, server: Server | None, in_flight: int, n: int) -> Row:
    model = _model(path, server.url if server else "")
    # Warm-up: a wave that opens the connections and fills caches, not measured.
    await _drive(_env(in_flight), model, in_flight, in_flight)
    gc.collect()
    server_before = server.cpu_s() if server else 0.0
    done, cpu, wall = await _drive(_env(n), model, n, in_flight)
    server_cpu = (server.cpu_s() - server_before) if server else 0.0
    if hasattr(model, "aclose"):
        await model.aclose()
    return Row(
        path=path,
        in_flight=in_flight,
        delay_s=server.delay_s if server else 0.0,
        n=done,
        client_ms=cpu / done * 1e3,
        server_ms=server_cpu / done * 1e3,
        rate=done / wall,
    )


def _ideal(row: Row) -> float:
    latency_bound = row.in_flight / row.delay_s if row.delay_s else float("inf")
    return min(latency_bound, 1e3 / row.client_ms)


def _print(row: Row) -> None:
    latency = f"{row.delay_s * 1e3:.0f} ms" if row.delay_s else "instant"
    if row.path == "core":
        latency = "-"
    share = f"{row.rate / _ideal(row):6.0%}" if row.delay_s else "     -"
    # The share of one core this process used: near 1.0 it was CPU-bound; well below
    # with a fast server, other processes had the CPU (or it waited on latency).
    core = row.rate * row.client_ms / 1e3
    print(
        f"{row.path:5s} {latency:>8s} {row.in_flight:6d} {row.n:7d} "
        f"{row.client_ms:10.3f} {row.server_ms:10.3f} {row.rate:10.0f} {share}   {core:4.2f}",
        flush=True,
    )


async def main(args: argparse.Namespace) -> None:
    _raise_fd_limit()
    if args.gc_threshold:
        # The trainer's choice, not the library's: fewer collections of the objects that
        # thousands of rollouts in flight keep alive (see docs/models-http.md).
        gc.set_threshold(*args.gc_threshold)
    print(
        f"python {sys.version.split()[0]}, gc thresholds {gc.get_threshold()}, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )
    servers = {0.0: Server(0.0), 0.05: Server(0.05)}
    rows: list[Row] = []
    try:
        print(
            "path   server  in-flight rollouts  client ms  server ms  rollouts/s  of ideal"
            "  core used",
            flush=True,
        )
        core = await case("core", None, 64, args.n)
        rows.append(core)
        _print(core)
        for delay in (0.0, 0.05):
            for in_flight in args.in_flight:
                for path in args.paths:
                    if path == "sdk" and in_flight > args.sdk_max_in_flight:
                        continue
                    n = max(args.n, 3 * in_flight)
                    if path == "sdk":
                        n = max(args.n // 4, 2 * in_flight)
                    row = await case(path, servers[delay], in_flight, n)
                    rows.append(row)
                    _print(row)
    finally:
        for server in servers.values():
            server.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    _verdict(rows)


# --------------------------------------------------------------------------- --clients


async def _bare_clients(server: Server, in_flight: int, n: int, names: list[str]) -> None:
    """CPU µs per bare POST + JSON decode, and objects kept alive per request in flight."""
    import json

    payload = {"model": "policy", "messages": [{"role": "user", "content": "2+2?"}]}
    url = server.url + "/chat/completions"

    def make(name: str):  # type: ignore[no-untyped-def]
        if name == "h1":
            from nemo_gym.models import h1

            client = h1.Client(
                headers={"Content-Type": "application/json"},
                connect_s=30,
                read_s=600,
                total_s=600,
                max_connections=8192,
                keepalive_s=4,
            )

            async def one() -> None:
                json.loads((await client.post(url, json.dumps(payload).encode())).body)

            return one, client.aclose
        if name == "httpx2":
            import httpx2

            limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
            client = httpx2.AsyncClient(limits=limits, timeout=600)

            async def one() -> None:
                (await client.post(url, content=json.dumps(payload).encode())).json()

            return one, client.aclose
        if name == "aiohttp":
            import aiohttp

            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

            async def one() -> None:
                async with session.post(url, data=json.dumps(payload).encode()) as reply:
                    json.loads(await reply.read())

            return one, session.close
        if name == "sdk":
            import openai

            client = openai.AsyncOpenAI(api_key="x", base_url=server.url, max_retries=0)

            async def one() -> None:
                await client.chat.completions.create(**payload)  # type: ignore[arg-type]

            return one, client.close
        raise ValueError(name)

    for name in names:
        try:
            one, close = make(name)
        except ImportError:
            print(f"  {name:8s} not installed")
            continue
        left = [in_flight]

        async def worker(left: list[int] = left, one=one) -> None:  # type: ignore[no-untyped-def]
            while left[0] > 0:
                left[0] -= 1
                await one()

        await asyncio.gather(*(worker() for _ in range(in_flight)))  # open the connections
        gc.collect()
        base = len(gc.get_objects())
        left[0] = n
        workers = [asyncio.ensure_future(worker()) for _ in range(in_flight)]
        await asyncio.sleep(server.delay_s / 2 if server.delay_s else 0)
        alive = (len(gc.get_objects()) - base) / in_flight if server.delay_s else float("nan")
        started = time.process_time()
        await asyncio.gather(*workers)
        cpu = time.process_time() - started
        await close()
        print(
            f"  {name:8s} {in_flight:5d} in flight, {server.delay_s * 1e3:3.0f} ms server: "
            f"{cpu / n * 1e6:7.1f} µs CPU / request"
            + (f", {alive:5.1f} objects alive / request in flight" if server.delay_s else ""),
            flush=True,
        )


async def clients_main(args: argparse.Namespace) -> None:
    _raise_fd_limit()
    print(f"bare POST + JSON decode, per client library (load {os.getloadavg()[0]:.1f})")
    for delay, in_flight in ((0.0, 64), (0.05, 1024), (0.05, 4096)):
        server = Server(delay)
        try:
            names = [c for c in args.clients if not (c in ("sdk", "httpx2") and in_flight > 1024)]
            await _bare_clients(server, in_flight, max(args.n, 3 * in_flight), names)
        finally:
            server.stop()


def _verdict(rows: list[Row]) -> None:
    def find(path: str, delay: float, in_flight: int) -> Row | None:
        for row in rows:
            if (row.path, row.delay_s, row.in_flight) == (path, delay, in_flight):
                return row
        return None

    print("\ntargets (fast transport)")
    r64 = find("fast", 0.0, 64)
    if r64:
        print(f"  CPU per rollout at 64 in flight: {r64.client_ms:.3f} ms   target <= 0.25")
    best = max((r.rate for r in rows if r.path == "fast" and not r.delay_s), default=0.0)
    print(f"  rollouts/s, instant server, best level: {best:,.0f}   target >= 3,000")
    r1k, r4k = find("fast", 0.05, 1024), find("fast", 0.05, 4096)
    if r1k:
        print(
            f"  50 ms server, 1,024 in flight: {r1k.rate:,.0f}/s = {r1k.rate / _ideal(r1k):.0%} "
            f"of ideal (latency bound {1024 / 0.05:,.0f}/s, CPU bound "
            f"{1e3 / r1k.client_ms:,.0f}/s)   target >= 90%"
        )
    if r1k and r4k:
        print(
            f"  1,024 -> 4,096 in flight: {r1k.rate:,.0f}/s -> {r4k.rate:,.0f}/s "
            f"({r4k.rate / r1k.rate - 1:+.0%})   target: no drop"
        )
    for level in (64, 256, 1024):
        fast, sdk = find("fast", 0.0, level), find("sdk", 0.0, level)
        if fast and sdk:
            print(
                f"  fast vs sdk at {level} in flight (instant): "
                f"{sdk.client_ms / fast.client_ms:.1f}x less CPU, "
                f"{fast.rate / sdk.rate:.1f}x the rollouts/s"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--delay", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--paths", nargs="+", default=["fast", "sdk"], choices=["fast", "sdk"])
    parser.add_argument("--n", type=int, default=8000, help="rollouts per case (at least)")
    parser.add_argument(
        "--sdk-max-in-flight",
        type=int,
        default=1024,
        help="skip the SDK above this (its pool scan makes 4,096 take minutes)",
    )
    parser.add_argument(
        "--gc-threshold",
        type=lambda text: tuple(int(x) for x in text.split(",")),
        default=None,
        help="gc.set_threshold for this process, e.g. 50000,20,100 (what a trainer may set)",
    )
    parser.add_argument(
        "--clients",
        nargs="+",
        default=None,
        metavar="CLIENT",
        help="instead: bare POSTs per HTTP client library (h1 httpx2 aiohttp sdk), the "
        "figures that chose the fast transport",
    )
    parser.add_argument("--quick", action="store_true", help="--n 2000")
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.delay)
    else:
        if args.quick:
            args.n = 2000
        asyncio.run(clients_main(args) if args.clients else main(args))
