"""The in-sandbox worker: framing, reaping, process-group kill, output cap, fast paths."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemo_gym.errors import SandboxError
from nemo_gym.records import ResourceLimits, SandboxSpec
from nemo_gym.sandbox.conformance import leftover_processes
from nemo_gym.sandbox.process import ProcessProvider
from nemo_gym.sandbox.worker import FRAME, encode_frame, split_blobs

pytestmark = pytest.mark.timeout(120)


async def _gone(marker: str, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not leftover_processes(marker):
            return True
        await asyncio.sleep(0.05)
    return False


def _sleep_marker() -> str:
    # `sleep` keeps its argument in its command line: a unique duration finds it again
    return f"{random.randint(5000, 9000)}.{random.randint(100, 999)}"


@given(
    header=st.dictionaries(st.sampled_from(["op", "id", "path", "x"]), st.integers() | st.text()),
    blobs=st.lists(st.binary(max_size=64), max_size=5),
)
def test_frame_round_trip(header: dict, blobs: list[bytes]) -> None:
    frame = encode_frame(header, blobs)
    head_len, body_len = FRAME.unpack_from(frame)
    assert len(frame) == FRAME.size + head_len + body_len
    import json

    decoded = json.loads(frame[FRAME.size : FRAME.size + head_len])
    assert split_blobs(decoded, frame[FRAME.size + head_len :]) == blobs
    assert {k: v for k, v in decoded.items() if k != "blobs"} == header


async def test_every_child_is_reaped() -> None:
    async with ProcessProvider().start() as sb:
        for _ in range(5):
            await sb.exec("true")
            await sb.run_python("pass")
        worker_pid = (await sb.run_python("import os; print(os.getppid())")).stdout.strip()
        children = (await sb.exec(f"cat /proc/{worker_pid}/task/{worker_pid}/children")).stdout
        # only the `cat` itself is a child of the worker at that moment
        assert len(children.split()) == 1


async def test_deadline_kills_the_whole_process_group() -> None:
    marker = _sleep_marker()
    async with ProcessProvider().start() as sb:
        result = await sb.exec(f"sleep {marker} & sleep {marker}; echo never", timeout=0.5)
        assert result.timed_out and result.exit_code == -9
        assert "never" not in result.stdout
        assert await _gone(marker)


async def test_escaped_grandchild_is_killed_on_reset_and_close() -> None:
    marker = _sleep_marker()
    escape = (
        f"import os, subprocess; subprocess.Popen(['sleep', '{marker}'], start_new_session=True)"
    )
    async with ProcessProvider().start() as sb:
        result = await sb.run_python(escape)
        assert result.exit_code == 0
        assert leftover_processes(marker), "the escaped process should outlive its exec"
        await sb.reset()
        assert await _gone(marker)
        await sb.run_python(escape)
    assert await _gone(marker)


async def test_output_is_capped_without_blocking_the_child() -> None:
    spec = SandboxSpec(limits=ResourceLimits(output_bytes=1000))
    async with ProcessProvider().start(spec) as sb:
        result = await sb.exec(
            "head -c 5000000 /dev/zero | tr '\\0' x; echo done >&2; exit 4", timeout=30
        )
        assert result.exit_code == 4 and not result.timed_out
        assert len(result.stdout) == 1000 and result.stdout_truncated
        assert result.stderr == "done\n" and not result.stderr_truncated


async def test_python_fast_path_behaves_like_python_c() -> None:
    async with ProcessProvider().start() as sb:
        result = await sb.run_python(
            "import sys, os\nprint(sys.argv, os.environ['X'], os.getcwd().endswith('sub'))\n"
            "print(input()[::-1])\nsys.exit(3)",
            stdin="abc\n",
            env={"X": "yes"},
            cwd="/work/sub" if await _mkdir(sb, "sub") else None,
            args=["a1"],
        )
        assert result.exit_code == 3
        assert result.stdout == "['-c', 'a1'] yes True\ncba\n"
        err = await sb.run_python("def f(:\n pass")
        assert err.exit_code == 1 and "SyntaxError" in err.stderr
        boom = await sb.run_python("x = 1\nraise KeyError('k')")
        assert boom.exit_code == 1 and boom.stderr.endswith("KeyError: 'k'\n")
        assert 'File "<string>", line 2' in boom.stderr
        assert (await sb.run_python("import sys; sys.exit('bye')")).stderr == "bye\n"
        looping = await sb.run_python("while True: pass", timeout=0.5)
        assert looping.timed_out


async def _mkdir(sb, name: str) -> bool:
    await sb.write_file(f"{name}/.keep", b"")
    return True


async def test_python_child_cannot_reach_the_protocol_pipe() -> None:
    async with ProcessProvider().start() as sb:
        result = await sb.run_python(
            "import os\nfds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
            "print(fds, [os.readlink(f'/proc/self/fd/{fd}')[:5] for fd in fds[4:]])"
        )
        # 0-2 are the child's stdio; 3 is the listdir handle itself; past them only the
        # child's completion pipe (a pipe, write-only), never the channel (a socket)
        fds, kinds = result.stdout.strip().split("] ")
        assert fds.startswith("[0, 1, 2, 3") and len(fds.split(",")) <= 5, result
        assert kinds in ("[]", "['pipe:']"), result


async def test_batch_compiles_once_and_runs_each_input() -> None:
    async with ProcessProvider().start() as sb:
        batch = await sb.run_batch(
            "n = int(input())\nprint(n * n)\nif n == 3: raise SystemExit(5)",
            ["1\n", "2\n", "3\n", "4\n"],
            python=True,
            timeout_per_run=5,
        )
        assert batch.compile_error is None
        assert [r.stdout for r in batch.results] == ["1\n", "4\n", "9\n", "16\n"]
        assert [r.exit_code for r in batch.results] == [0, 0, 5, 0]
        stopped = await sb.run_batch(
            "n = int(input())\nif n == 2:\n    while True: pass\nprint(n)",
            ["1\n", "2\n", "3\n"],
            python=True,
            timeout_per_run=0.3,
            stop_on_error=True,
        )
        assert [r.timed_out for r in stopped.results] == [False, True]
        broken = await sb.run_batch("print(", ["1"], python=True)
        assert broken.results == [] and "SyntaxError" in (broken.compile_error or "")
        harness = await sb.run_batch(
            "def add(a, b):\n    return a + b\nif __name__ == '__main__': print('main ran')",
            ["1 2", "5 6"],
            python=True,
            harness="print(add(*map(int, input().split())))",
            module_name="solution",
        )
        assert [r.stdout for r in harness.results] == ["3\n", "11\n"]
        argv = await sb.run_batch(["cat"], ["x", "y"])
        assert [r.stdout for r in argv.results] == ["x", "y"]


async def test_total_deadline_leaves_later_runs_out() -> None:
    async with ProcessProvider().start() as sb:
        batch = await sb.run_batch(
            "import time; time.sleep(0.3)", ["a"] * 20, python=True, timeout_total=0.5
        )
        assert 1 <= len(batch.results) < 20
        # every run, also one started late in the batch, is killed at its own deadline
        slow = await sb.run_batch(
            "import time; time.sleep(30)",
            ["a"] * 10,
            python=True,
            timeout_per_run=0.4,
            timeout_total=1.5,
        )
        assert 3 <= len(slow.results) <= 4
        assert all(r.timed_out and r.exit_code == -9 for r in slow.results)
        assert all(r.duration_s < 1.5 for r in slow.results)


async def test_worker_death_is_a_sandbox_error() -> None:
    async with ProcessProvider().start() as sb:
        with pytest.raises(SandboxError, match="died"):
            await sb.run_python("import os, signal; os.kill(os.getppid(), signal.SIGKILL)")
        with pytest.raises(SandboxError, match="died"):
            await sb.exec("true")
        assert not sb.alive


async def test_cancelled_exec_kills_its_command() -> None:
    marker = _sleep_marker()
    async with ProcessProvider().start() as sb:
        task = asyncio.create_task(sb.exec(f"sleep {marker}", timeout=60))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await _gone(marker)
        assert (await sb.exec("echo still usable")).stdout == "still usable\n"


async def _worker_children(sb) -> list[int]:
    """The worker's children, seen from a `cat` the worker runs (the cat included)."""
    worker = (await sb.run_python("import os; print(os.getppid())")).stdout.strip()
    listing = await sb.exec(f"cat /proc/{worker}/task/{worker}/children")
    return [int(pid) for pid in listing.stdout.split()]


async def test_exit_codes_are_exact_for_every_kind_of_ending() -> None:
    # The worker may take a Python child's exit code from /proc before reaping it; the
    # code must be the one waitpid would give, whatever the ending and however often.
    endings = {
        "pass": 0,
        "raise SystemExit(3)": 3,
        "raise ValueError('x')": 1,
        "import sys; sys.stdout.write('o'); sys.exit(7)": 7,
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)": -9,
        "import os; os._exit(42)": 42,
        "import os; os.close(1); os.close(2); os._exit(5)": 5,
    }
    async with ProcessProvider().start() as sb:
        for _ in range(3):
            for code, expected in endings.items():
                assert (await sb.run_python(code)).exit_code == expected, code
        batch = await sb.run_batch(
            "import sys\nn = int(input())\nprint(n)\nsys.exit(n % 4)",
            [f"{i}\n" for i in range(24)],
            python=True,
            timeout_per_run=5,
        )
        assert [r.exit_code for r in batch.results] == [i % 4 for i in range(24)]
        assert [r.stdout for r in batch.results] == [f"{i}\n" for i in range(24)]
        # a child that closes its output but keeps running is not taken for finished
        held = await sb.run_python(
            "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(0.3)\nos._exit(6)"
        )
        assert held.exit_code == 6 and held.duration_s >= 0.3


async def test_batch_runs_one_at_a_time_in_order() -> None:
    # The next run is forked ahead; it must not start before the previous one ended.
    program = (
        "import os, time\nn = int(input())\n"
        "assert not os.path.exists('busy'), 'overlap'\n"
        "open('busy', 'w').close()\ntime.sleep(0.02)\n"
        "with open('log', 'a') as f: f.write(f'{n} ')\nos.unlink('busy')\n"
    )
    async with ProcessProvider().start() as sb:
        batch = await sb.run_batch(program, [f"{i}\n" for i in range(8)], python=True)
        assert [r.exit_code for r in batch.results] == [0] * 8, batch.results
        assert await sb.read_file("log") == b"0 1 2 3 4 5 6 7 "
        # env, cwd and args reach every run, the one forked ahead included
        await sb.write_file("sub/.keep", b"")
        env_batch = await sb.run_batch(
            "import os\nprint(os.environ['K'], os.getcwd().endswith('sub'), input())",
            ["a", "b", "c"],
            python=True,
            env={"K": "v"},
            cwd="sub",
        )
        assert [r.stdout for r in env_batch.results] == [f"v True {x}\n" for x in "abc"]


async def test_runs_forked_ahead_leave_nothing_behind() -> None:
    async with ProcessProvider().start() as sb:
        # stop_on_error and the total deadline cancel the run already forked ahead
        stopped = await sb.run_batch(
            "raise SystemExit(int(input()))", ["0", "1", "0", "0"], python=True, stop_on_error=True
        )
        assert [r.exit_code for r in stopped.results] == [0, 1]
        late = await sb.run_batch(
            "import time; time.sleep(0.2)", ["x"] * 10, python=True, timeout_total=0.3
        )
        assert 1 <= len(late.results) < 10
        # only the cat, nothing forked ahead and nothing still exiting
        assert len(await _worker_children(sb)) == 1
        await sb.reset()
        assert len(await _worker_children(sb)) == 1


async def test_spare_child_serves_any_exec_and_is_replaced_when_unusable() -> None:
    async with ProcessProvider().start() as sb:
        await asyncio.sleep(0.2)  # idle: the worker forks its spare
        worker = (await sb.run_python("import os; print(os.getppid())")).stdout.strip()
        await asyncio.sleep(0.2)
        children = (await sb.exec(["cat", f"/proc/{worker}/task/{worker}/children"])).stdout
        assert len(children.split()) == 1  # the cat was the spare: no other child
        # stdin too large for the spare's pipe: a fresh fork runs it
        big = "x" * (200 << 10)
        result = await sb.run_python("import sys; print(len(sys.stdin.read()))", stdin=big)
        assert result.stdout == f"{len(big)}\n"
        assert (await sb.exec("wc -c", stdin=big)).stdout.strip() == str(len(big))
        # code inside the sandbox kills the idle spare: the next exec still runs
        await asyncio.sleep(0.2)
        killed = await sb.run_python(
            "import os, signal\n"
            "for pid in open(f'/proc/{os.getppid()}/task/{os.getppid()}/children').read()"
            ".split():\n"
            "    if int(pid) != os.getpid(): os.kill(int(pid), signal.SIGKILL)\n"
        )
        assert killed.exit_code == 0
        for _ in range(3):
            assert (await sb.run_python("print(6 * 7)")).stdout == "42\n"
        assert (await sb.exec(["echo", "ok"])).stdout == "ok\n"


async def test_python_child_environment_is_exactly_the_sandboxs() -> None:
    async with ProcessProvider().start() as sb:
        plain = await sb.run_python("import os; print(sorted(os.environ))")
        assert (
            plain.stdout
            == (await sb.exec(["python3", "-c", "import os; print(sorted(os.environ))"])).stdout
        )
        extra = await sb.run_python(
            "import os, subprocess\nprint(os.environ['A'], os.environ['HOME'] == os.getcwd())\n"
            "print(subprocess.run(['sh', '-c', 'echo $A'], capture_output=True, text=True).stdout)",
            env={"A": "1"},
        )
        assert extra.stdout == "1 True\n1\n\n", extra
        # an exec's env does not leak into the next one
        after = await sb.run_python("import os; print(os.environ.get('A'))")
        assert after.stdout == "None\n"
