"""The gym command, end to end over a real loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nemo_gym.cli.main import main


class _Server(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][-1]["content"]
        expression = re.fullmatch(r"What is (.*)\?", question).group(1)
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": f"\\boxed{{{eval(expression)}}}"},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_eval_run_writes_a_run_and_resumes(
    server: str, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_TEST_KEY", "k-secret")
    args = [
        "eval",
        "run",
        "arithmetic",
        "--model",
        "openai:m",
        "--base-url",
        server,
        "--api-key-env",
        "GYM_TEST_KEY",
        "--limit",
        "6",
        "--repeats",
        "2",
        "--output",
        str(tmp_path / "run"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "rollouts 12  ok 12  failed 0  tasks 6" in out
    assert "pass@1 1.0000  pass@2 1.0000" in out
    lines = (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()
    assert len(lines) == 12
    # The key came from the environment and is nowhere on disk.
    for name in ("rollouts.jsonl", "run.json", "metrics.json", "failures.jsonl"):
        assert "k-secret" not in (tmp_path / "run" / name).read_text()
    assert main([*args, "--limit", "8"]) == 0
    assert len((tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()) == 16
    assert main(["eval", "reverify", str(tmp_path / "run")]) == 0
    assert "rollouts 16  ok 16" in capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "reverified" / "metrics.json").read_text())
    assert metrics["rewards"]["reward"]["mean"] == 1.0


def test_list_and_schema(capsys) -> None:
    assert main(["list"]) == 0
    assert {"arithmetic", "bank", "guess_number"} <= set(capsys.readouterr().out.split())
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "Rollout"


def test_bad_input_is_a_clear_error(capsys) -> None:
    assert main(["eval", "run", "nope"]) == 2
    assert "no environment named 'nope'" in capsys.readouterr().err
    assert main(["eval", "run", "arithmetic", "--model", "openai"]) == 2
    assert "needs a model name" in capsys.readouterr().err
    assert main(["eval", "run", "arithmetic", "--env-option", "size"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    assert main(["eval", "run", "arithmetic", "--env-option", "sise=3"]) == 2
    assert "--env-option: env 'arithmetic' rejected its options" in capsys.readouterr().err
