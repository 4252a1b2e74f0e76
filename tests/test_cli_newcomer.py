"""What a newcomer meets first in the gym command: exit codes a CI script can trust, a
resume command that resumes, text that reads right, examples that leave tracked files
alone, and install metadata without warnings."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nemo_gym.cli import main as cli
from nemo_gym.cli.main import main

ROOT = Path(__file__).parents[1]


class _Flaky(BaseHTTPRequestHandler):
    """Answers every `fail_every`-th request with 400 (not retried), the rest correctly."""

    fail_every = 1
    lock = threading.Lock()
    count = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            type(self).count += 1
            fail = type(self).count % self.fail_every == 0
        if fail:
            data = json.dumps({"error": {"message": "no such model", "type": "bad"}}).encode()
            self.send_response(400)
        else:
            question = body["messages"][-1]["content"]
            expression = re.fullmatch(r"What is (.*)\?", question).group(1)  # type: ignore[union-attr]
            message = {"role": "assistant", "content": f"\\boxed{{{eval(expression)}}}"}
            data = json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
                }
            ).encode()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _serve(fail_every: int) -> Iterator[str]:
    handler = type("Handler", (_Flaky,), {"fail_every": fail_every, "count": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def failing() -> Iterator[str]:
    yield from _serve(1)


@pytest.fixture
def half_failing() -> Iterator[str]:
    yield from _serve(2)


def _run_args(base_url: str, output: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "run",
        "arithmetic",
        "--model",
        "openai:m",
        "--base-url",
        base_url,
        "--limit",
        "6",
        "--concurrency",
        "1",  # one request at a time: "every second request fails" is exact
        "--no-progress",
        "--output",
        str(output),
        *extra,
    ]


def test_a_run_whose_every_rollout_failed_exits_1(
    failing: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert main(_run_args(failing, tmp_path / "run")) == cli.EXIT_FAILURES
    captured = capsys.readouterr()
    assert "rollouts 6  ok 0  failed 6" in captured.out  # the summary is still printed
    assert "6 of 6 rollouts failed (model 6)" in captured.err
    assert (tmp_path / "run" / "failures.jsonl").exists()


def test_max_failure_rate_bounds_the_failed_share(
    half_failing: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    # 3 of 6 failed: not all, so 0 by default; above 0.25, so 1 with the flag.
    assert main(_run_args(half_failing, tmp_path / "a")) == cli.EXIT_OK
    assert main(_run_args(half_failing, tmp_path / "b", "--max-failure-rate", "0.25")) == 1
    assert "50.0% is above --max-failure-rate 0.25" in capsys.readouterr().err
    assert main(_run_args(half_failing, tmp_path / "c", "--max-failure-rate", "0.5")) == 0
    assert main(_run_args(half_failing, tmp_path / "d", "--max-failure-rate", "2")) == 2


def test_ctrl_c_prints_the_command_that_resumes_the_run(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import nemo_gym.collect  # noqa: F401  (the module; `nemo_gym.collect` is the function)

    seen: list[Path] = []

    async def interrupted(parts: Any, model: Any, *, output: Path, **options: Any) -> Any:
        seen.append(Path(output))
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.modules["nemo_gym.collect"], "collect", interrupted)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    argv = ["eval", "run", "arithmetic", "--model", "openai:m", "--limit", "2", "--no-progress"]
    assert main(argv) == cli.EXIT_INTERRUPTED
    err = capsys.readouterr().err
    command = shlex.split(err.split("resume with: ", 1)[1].strip())
    # Without --output, each run gets a new timestamped directory: the command names it.
    assert command[:1] == ["gym"] and command[-2:] == ["--output", str(seen[0])]
    assert command[1:-2] == argv
    assert main(command[1:]) == cli.EXIT_INTERRUPTED
    assert seen[1] == seen[0]  # the same run directory: a resume
    # Given --output, the command is the one that was typed.
    again = shlex.split(capsys.readouterr().err.split("resume with: ", 1)[1].strip())
    assert again == command


def test_list_counts_read_right(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--domain", "math"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ environments in 1 domain: math", last), last
    assert cli.plural(1, "domain") == "1 domain" and cli.plural(2, "domain") == "2 domains"


def test_compare_on_few_tasks_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_cli_eval import _rollout

    for name, rewards in (("a", [0.0] * 4), ("b", [1.0] * 4), ("c", [0.0] * 40)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rollouts.jsonl").write_text(
            "".join(_rollout(f"t{i}", r) + "\n" for i, r in enumerate(rewards))
        )
    assert main(["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    # The interval excludes 0 beside p = 0.125: the output says why not to trust it.
    assert "sign test p = 0.125" in out and "only 4 tasks" in out
    assert main(["eval", "compare", str(tmp_path / "c"), str(tmp_path / "c")]) == 0
    assert "only" not in capsys.readouterr().out


def test_the_example_writes_to_a_run_directory_unless_asked() -> None:
    spec = importlib.util.spec_from_file_location("grpo_cpu", ROOT / "examples" / "grpo_cpu.py")
    assert spec is not None and spec.loader is not None
    pytest.importorskip("trl")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out, plot = module.output_paths(module.parse_args(["--steps", "2"]))
    assert out.parts[0] == "runs" and plot.parent == out.parent
    assert "docs" not in out.parts and "docs" not in plot.parts
    asked = module.parse_args(["--out", "docs/grpo_cpu.json", "--plot", "docs/grpo_cpu.png"])
    assert module.output_paths(asked) == (Path("docs/grpo_cpu.json"), Path("docs/grpo_cpu.png"))


def test_the_license_is_an_spdx_string() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # `license = { text = ... }` makes setuptools warn on every install.
    assert project["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in project.get("classifiers", []))


def _rollout(ok: bool, reward: float = 1.0) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(ok=ok, reward=reward if ok else None)


def test_progress_says_what_the_run_waits_on_within_a_second() -> None:
    import io
    import time

    from nemo_gym.cli.progress import Progress

    stream = io.StringIO()
    status = ["loading SmolLM2-135M-Instruct"]
    progress = Progress(8, stream=stream, terminal=False, status=lambda: status[0], tick=0.05)
    deadline = time.monotonic() + 5
    while "loading" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stream.getvalue().startswith("rollouts 0: loading SmolLM2-135M-Instruct")
    status[0] = "generating 8 replies: 40 tokens so far"
    while "generating" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "rollouts 0: generating 8 replies: 40 tokens so far" in stream.getvalue()
    status[0] = "generating 8 replies: 80 tokens so far"  # same phase: no new line
    time.sleep(0.2)
    assert "80 tokens" not in stream.getvalue()
    progress.close()
    progress.close()  # idempotent


def test_resumed_progress_counts_the_rows_already_there() -> None:
    import io

    from nemo_gym.cli.progress import Progress, Tally

    stream = io.StringIO()
    progress = Progress(
        10, stream=stream, terminal=False, already=Tally(done=6, ok=4, reward_sum=2)
    )
    assert progress.eta() is None  # nothing new has landed: no rate to speak of
    for _ in range(4):
        progress.update(_rollout(True, 1.0))
    progress.close()
    last = stream.getvalue().splitlines()[-1]
    # The summary's figures: 10 rollouts, 2 failed, reward (2 + 4) / 8.
    assert last.startswith("rollouts 10/10 (100%)") and "failed 2" in last
    assert last.endswith("reward 0.750") and "ETA 0:00" in last


def test_a_resumed_run_directory_is_tallied(tmp_path: Path) -> None:
    rows = [
        {"status": "ok", "reward": 1.0},
        {"status": "ok", "reward": 0.0},
        {"status": "failed", "reward": None},
    ]
    (tmp_path / "rollouts.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + '{"status": "ok", "rew'
    )
    tally = cli._existing_rows(tmp_path, retry_failed=False)
    assert (tally.done, tally.ok, tally.reward_sum) == (3, 2, 1.0)
    assert cli._existing_rows(tmp_path, retry_failed=True).done == 2


async def test_a_local_policy_reports_what_its_worker_is_doing() -> None:
    import asyncio

    from nemo_gym.errors import ModelError
    from nemo_gym.models.policy import LivePolicy
    from nemo_gym.records import Message, ModelRequest

    release = threading.Event()

    class SlowLoad(LivePolicy):
        def __init__(self) -> None:
            self._configure(
                name="slow",
                chat_template=None,
                tool_format="hermes",
                max_batch_size=1,
                batch_window_s=0.0,
                default_sampling=None,
                max_conversations=1,
                max_concurrency=None,
                retry=None,
            )

        def _ensure_model(self) -> None:
            release.wait(10)
            raise ModelError("no weights here", code="missing_weights")

    policy = SlowLoad()
    assert policy.activity() is None
    call = asyncio.ensure_future(policy.generate(ModelRequest(messages=(Message.user("hi"),))))
    for _ in range(200):
        if policy.activity() is not None:
            break
        await asyncio.sleep(0.01)
    assert policy.activity() == "loading slow"  # what `gym eval run` shows while it loads
    release.set()
    with pytest.raises(ModelError):
        await call
    assert policy.activity() is None
    await policy.aclose()
