"""A worker thread or process that dies fails what waits on it, promptly, with its error.

Before, a worker thread that raised outside a batch (`Local()` without the `local` extra)
printed its traceback and left every queued request awaiting a future nothing resolved:
`gym eval run` waited forever. Each test here has a bound far below "forever".
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nemo_gym.errors import MissingDependency, ModelError, NemoGymError
from nemo_gym.integrations.bridge import LoopThread
from nemo_gym.models.policy import LivePolicy
from nemo_gym.records import Message, ModelRequest
from nemo_gym.verify.pool import WorkerPool

# Makes `import torch` and `import transformers` fail in the child, as in an install
# without the `local` extra (None in sys.modules: "import of torch halted").
_NO_LOCAL_EXTRA = (
    "import sys\nfor _name in ('torch', 'transformers'):\n    sys.modules[_name] = None\n"
)


def _child(code: str, tmp_path: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "child.py"
    script.write_text(_NO_LOCAL_EXTRA + textwrap.dedent(code))
    env = {**os.environ, "NEMO_GYM_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,  # the old hang: a TimeoutExpired here
        cwd=tmp_path,
        env=env,
    )


def test_local_without_the_extra_fails_every_rollout_as_a_model_failure(tmp_path: Path) -> None:
    done = _child(
        """
        import json
        import nemo_gym as gym
        result = gym.evaluate(gym.make("arithmetic_small"), gym.models.Local(), limit=3)
        failures = [r.failure for r in result.rollouts]
        print(json.dumps([[f.kind, f.code, f.message] for f in failures]))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(failures) == 3
    for kind, code, message in failures:
        assert (kind, code) == ("model", "missing_dependency")
        assert "pip install 'nemo-gym[local]'" in message


def test_the_cli_checks_the_model_dependencies_before_starting(tmp_path: Path) -> None:
    started = time.monotonic()
    done = _child(
        """
        import sys
        from nemo_gym.cli.main import main
        sys.exit(main(["eval", "run", "arithmetic_small", "--limit", "2", "--output", "run"]))
        """,
        tmp_path,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "nemo-gym[local]" in done.stderr and "torch" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()  # nothing started
    assert time.monotonic() - started < 60


class _Broken(LivePolicy):
    """A LivePolicy whose worker thread dies on start, as `Local` without torch did."""

    def __init__(self) -> None:
        self._configure(
            name="broken",
            chat_template=None,
            tool_format="hermes",
            max_batch_size=8,
            batch_window_s=0.2,  # so that several requests are queued when it dies
            default_sampling=None,
            max_conversations=16,
            max_concurrency=None,
            retry=None,
        )

    def _on_worker_start(self) -> None:
        time.sleep(0.1)
        raise MissingDependency("torch", "local")


def _ask() -> ModelRequest:
    return ModelRequest(messages=(Message.user("hi"),))


async def test_a_dead_policy_worker_fails_queued_and_later_requests() -> None:
    policy = _Broken()
    results = await asyncio.wait_for(
        asyncio.gather(*(policy.generate(_ask()) for _ in range(5)), return_exceptions=True), 10
    )
    assert all(isinstance(r, ModelError) and r.code == "missing_dependency" for r in results)
    assert "nemo-gym[local]" in str(results[0])
    # A later request fails at once with the same error, without a new thread to die.
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"nemo-gym\[local\]"):
        await asyncio.wait_for(policy.generate(_ask()), 5)
    assert time.monotonic() - started < 1
    await policy.aclose()


async def test_a_dead_vllm_offline_worker_fails_queued_and_later_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nemo_gym.models import vllm as vllm_module

    def require(module: str, extra: str) -> None:
        time.sleep(0.1)
        raise MissingDependency(module.split(".")[0], extra)

    monkeypatch.setattr(vllm_module, "require", require)

    class OfflineLLM:  # a handed synchronous engine (no `async abort`)
        def abort(self) -> None: ...

    adapter = vllm_module.VLLM(engine=OfflineLLM(), name="offline")
    assert adapter._offline
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(3)]
    for future in futures:
        adapter._enqueue((object(), loop, future))  # type: ignore[arg-type]
    results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 10)
    assert all(isinstance(r, ModelError) and r.code == "missing_dependency" for r in results)
    with pytest.raises(ModelError, match=r"nemo-gym\[vllm\]"):
        adapter._enqueue((object(), loop, loop.create_future()))  # type: ignore[arg-type]
    await adapter.aclose()


async def test_a_pool_worker_killed_while_idle_is_replaced_not_reused() -> None:
    async with WorkerPool(size=1, kill_grace=0.05) as pool:
        first = await pool.call("os:getpid", timeout=30)
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the zygote reaps it
            try:
                os.kill(first, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.02)
        second = await pool.call("os:getpid", timeout=30)
        assert second != first
        assert await pool.call("os:getpid", timeout=30) == second


def test_a_bridge_loop_that_dies_fails_its_callers_and_later_calls() -> None:
    bridge = LoopThread("test-loop")
    outcome: list[BaseException] = []

    def waiter() -> None:
        try:
            bridge.run(asyncio.sleep(3600))
        except BaseException as exc:
            outcome.append(exc)

    async def stop_the_loop() -> None:
        asyncio.get_running_loop().stop()
        await asyncio.sleep(3600)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.1)
    with pytest.raises(NemoGymError, match="died"):
        bridge.run(stop_the_loop(), timeout=30)
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(outcome[0], NemoGymError)

    async def answer() -> int:
        return 42

    with pytest.raises(NemoGymError, match="died"):
        bridge.run(answer(), timeout=5)
    bridge.close()
    assert bridge.run(answer(), timeout=5) == 42
    bridge.close()
