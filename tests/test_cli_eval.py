"""The gym command end to end: config files mixing environments, shards and aggregate,
compare, profile, diagnose, validation, datasets, search; over a loopback server."""

from __future__ import annotations

import io
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nemo_gym.cli.main import build_parser, main
from nemo_gym.cli.progress import Progress
from nemo_gym.cli.reference import reference
from nemo_gym.records import Message, Rewards, Rollout, Task, Timings, Trajectory

DOCS = Path(__file__).parents[1] / "docs"


class _Server(BaseHTTPRequestHandler):
    """Right on two-term expressions (arithmetic_small); wrong on three-term ones
    (arithmetic) unless the system prompt says "carefully"."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][-1]["content"]
        expression = re.fullmatch(r"What is (.*)\?", question).group(1)
        careful = "carefully" in (body["messages"][0].get("content") or "")
        value = eval(expression)
        if len(expression.split()) == 5 and not careful:
            value += 1
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": f"\\boxed{{{value}}}"},
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
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("GYM_TEST_KEY", "sk-test-secret")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def config(server: str, body: str, tmp: Path, top: str = "") -> Path:
    head = f"""\
seed = 0
repeats = 2
{top}

[model]
name = "openai"
options = {{ model = "m", base_url = "{server}" }}
api_key_env = "GYM_TEST_KEY"

"""
    path = tmp / "run.toml"
    path.write_text(head + body)
    return path


def rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]


def test_a_config_mixing_two_environments_has_per_environment_metrics(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config(
        server,
        """
[[envs]]
name = "arithmetic_small"
weight = 3

[[envs]]
name = "arithmetic"
weight = 1
options = { seed = 5 }
""",
        tmp_path,
        top="limit = 8  # in all, shared by weight",
    )
    run = tmp_path / "run"
    assert main(["eval", "run", "--config", str(path), "--output", str(run)]) == 0
    out = capsys.readouterr().out
    assert "rollouts 16  ok 16  failed 0  tasks 8" in out
    assert re.search(r"arithmetic_small +rollouts 12 .* tasks 6  reward 1.0000", out)
    assert re.search(r"arithmetic +rollouts 4 .* tasks 2  reward 0.0000", out)
    metrics = json.loads((run / "metrics.json").read_text())
    small, big = metrics["by_env"]["arithmetic_small"], metrics["by_env"]["arithmetic"]
    assert (small["n_tasks"], small["rewards"]["reward"]["mean"]) == (6, 1.0)
    assert (big["n_tasks"], big["rewards"]["reward"]["mean"]) == (2, 0.0)
    assert metrics["rewards"]["reward"]["mean"] == 0.75 and metrics["pass_at_k"]["2"] == 0.75
    written = rows(run)
    assert {r["spec"]["env"]["name"] for r in written} == {"arithmetic", "arithmetic_small"}
    assert all(
        r["spec"]["env"]["options"] == {"seed": 5} for r in written if r["env"] == "arithmetic"
    )
    for name in ("rollouts.jsonl", "run.json", "metrics.json"):
        assert "sk-test-secret" not in (run / name).read_text()
    # The same command resumes: nothing new.
    assert main(["eval", "run", "--config", str(path), "--output", str(run)]) == 0
    assert len(rows(run)) == 16
    # A flag overrides the file (more tasks), and is named when it is bad.
    assert main(["eval", "run", "--config", str(path), "--output", str(run), "--limit", "12"]) == 0
    assert len(rows(run)) == 24
    assert main(["eval", "run", "--config", str(path), "--output", str(run), "--repeats", "0"]) == 2
    assert "argument --repeats: must be >= 1" in capsys.readouterr().err


def test_variants_in_a_yaml_config_are_compared_side_by_side(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        f"""\
repeats: 1
limit: 6
model:
  name: openai
  options: {{model: m, base_url: "{server}"}}
  api_key_env: GYM_TEST_KEY
envs: [arithmetic]
variants:
  - name: plain
  - name: careful
    system_prompt: Solve it carefully. Put the final answer in \\boxed{{}}.
"""
    )
    run = tmp_path / "run"
    assert main(["eval", "run", "--config", str(path), "--output", str(run), "--report"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"plain +rollouts 6 .* reward 0.0000", out)
    assert re.search(r"careful +rollouts 6 .* reward 1.0000", out)
    assert (run / "report.html").exists()
    assert {r["metadata"]["variant"] for r in rows(run)} == {"plain", "careful"}
    assert (
        main(
            [
                "eval",
                "compare",
                str(run),
                str(run),
                "--a-variant",
                "plain",
                "--b-variant",
                "careful",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "all: 6 paired tasks; mean reward A 0.0000, B 1.0000" in out
    assert "B better on 6, worse on 0, tied on 0; sign test p = 0.03125" in out
    assert main(["eval", "compare", str(run), str(run)]) == 2
    assert "has variants careful, plain; choose one with --a-variant" in capsys.readouterr().err


def test_two_shards_aggregate_to_the_single_run(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [
        "eval",
        "run",
        "arithmetic",
        "arithmetic_small",
        "--model",
        "openai:m",
        "--base-url",
        server,
        "--api-key-env",
        "GYM_TEST_KEY",
        "--limit",
        "5",
        "--repeats",
        "2",
        "--no-progress",
    ]
    assert main([*base, "--output", str(tmp_path / "whole")]) == 0
    for index in (0, 1):
        assert main([*base, "--shard", f"{index}/2", "--output", str(tmp_path / f"s{index}")]) == 0
    assert len(rows(tmp_path / "s0")) == 12 and len(rows(tmp_path / "s1")) == 8
    merged = tmp_path / "merged"
    assert (
        main(["aggregate", str(tmp_path / "s0"), str(tmp_path / "s1"), "--output", str(merged)])
        == 0
    )
    assert "merged 2 run directories: 20 rollouts" in capsys.readouterr().out

    def comparable(row: dict[str, Any]) -> tuple[Any, ...]:
        row = dict(row)
        for name in ("run_id", "timings"):
            row.pop(name)
        for call in row["trajectory"]["model_calls"]:
            call.pop("latency_s")
            call["response"].pop("latency_s")
        return (row["env"], row["task_id"], row["repeat"], json.dumps(row, sort_keys=True))

    assert sorted(map(comparable, rows(merged))) == sorted(
        map(comparable, rows(tmp_path / "whole"))
    )
    assert json.loads((merged / "metrics.json").read_text()) == json.loads(
        (tmp_path / "whole" / "metrics.json").read_text()
    )
    # A shard of another run (another seed) is refused, naming the field.
    assert main([*base, "--seed", "9", "--shard", "1/2", "--output", str(tmp_path / "x")]) == 0
    code = main(
        ["aggregate", str(tmp_path / "s0"), str(tmp_path / "x"), "--output", str(tmp_path / "bad")]
    )
    assert code == 2
    assert "x/run.json: field 'parts.arithmetic.seed' is 9 but 0" in capsys.readouterr().err


def _rollout(task_id: str, reward: float, env: str = "e") -> str:
    return Rollout(
        run_id="r",
        env=env,
        task_id=task_id,
        repeat=0,
        seed=0,
        task=Task(id=task_id, prompt="q"),
        trajectory=Trajectory(messages=[Message.user("q"), Message.assistant("a")]),
        rewards=Rewards(reward=reward),
        status="ok",
        timings=Timings(started_at=0, duration_s=0.1),
    ).model_dump_json()


def test_compare_is_a_paired_test_with_known_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, rewards in (("a", [0.0] * 10), ("b", [1.0] * 8 + [0.0, 0.0])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rollouts.jsonl").write_text(
            "".join(_rollout(f"t{i}", r) + "\n" for i, r in enumerate(rewards))
        )
    argv = ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", "--seed", "7"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["n"], first["wins"], first["losses"], first["ties"]) == (10, 8, 0, 2)
    assert first["diff"] == 0.8 and first["p_value"] == 2 / 2**8
    assert first["low"] <= 0.8 <= first["high"] <= 1.0
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == first  # deterministic given the seed


def test_profile_and_diagnose_read_a_run(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    argv = [
        "eval",
        "run",
        "arithmetic",
        "arithmetic_small",
        "--model",
        "openai:m",
        "--base-url",
        server,
        "--limit",
        "4",
        "--output",
        str(run),
        "--no-progress",
    ]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["eval", "profile", str(run)]) == 0
    out = capsys.readouterr().out
    assert "majority (all): maj@1 0.5000" in out and f"report: {run}/report.html" in out
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["eval", "diagnose", str(run)]) == 0
    out = capsys.readouterr().out
    assert "arithmetic: 4 rollouts, 0 passed, 100.0 points of reward lost" in out
    assert re.search(r"wrong +4 rollouts +100.0% of the loss", out)
    assert main(["eval", "diagnose", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["arithmetic_small"]["passed"] == 4


def test_env_validate_names_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        'limit = 2\n[model]\nname = "scripted"\noptions = {replies = ["1"]}\n'
        '[[envs]]\nname = "arithmetic"\n'
    )
    assert main(["env", "validate", str(good)]) == 0
    assert "ok, 1 part(s): arithmetic; model scripted" in capsys.readouterr().out
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(good.read_text().replace("limit = 2", "limit = 2\nrepaets = 3"))
    assert main(["env", "validate", str(unknown)]) == 2
    assert "unknown.toml:2: field 'repaets': unknown field" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace("limit = 2", 'limit = "all"'))
    assert main(["env", "validate", str(bad)]) == 2
    assert "bad.toml:1: field 'limit': Input should be a valid integer" in capsys.readouterr().err
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"\n')
    assert main(["env", "validate", str(tasks)]) == 2
    assert (
        "tasks.jsonl:2: not valid JSON (Expecting ',' delimiter at column 27, after field 'prompt')"
        in (capsys.readouterr().err)
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "rollouts.jsonl").write_text(_rollout("t0", 1.0) + "\n" + _rollout("t1", 0.0) + "\n")
    assert main(["env", "validate", str(run)]) == 0
    assert main(["env", "validate", str(run / "rollouts.jsonl")]) == 0
    assert "ok, 2 rollouts" in capsys.readouterr().out
    broken = json.loads(_rollout("t2", 1.0))
    broken["rewards"]["reward"] = "high"
    (run / "rollouts.jsonl").write_text(_rollout("t0", 1.0) + "\n" + json.dumps(broken) + "\n")
    assert main(["env", "validate", str(run)]) == 2
    assert "rollouts.jsonl:2: field 'rewards.reward'" in capsys.readouterr().err


def test_dataset_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "src.jsonl"
    source.write_text("".join(json.dumps({"q": f"{i}+1?", "a": i + 1}) + "\n" for i in range(4)))
    out = tmp_path / "tasks.jsonl"
    argv = [
        "dataset",
        "prepare",
        str(source),
        "--output",
        str(out),
        "--prompt-field",
        "q",
        "--answer-field",
        "a",
    ]
    assert main(argv) == 0
    assert "4 task rows (prompt from 'q', answer from 'a'" in capsys.readouterr().out
    assert main(["dataset", "validate", str(out)]) == 0
    assert main(["dataset", "show", str(out), "-n", "1"]) == 0
    shown = capsys.readouterr().out
    assert "[user] 0+1?" in shown and "[answer] 1" in shown and "1+1?" not in shown
    out.write_text(out.read_text() + '{"prompt": "x", "answr": 1}\n')
    assert main(["dataset", "validate", str(out)]) == 2
    assert "tasks.jsonl:5: field 'answr': unknown field" in capsys.readouterr().err


def test_eval_run_reads_a_task_file_and_records_its_hash(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
            for i in range(3)
        )
    )
    run = tmp_path / "run"
    argv = [
        "eval",
        "run",
        "arithmetic_small",
        "--tasks",
        str(tasks),
        "--model",
        "openai:m",
        "--base-url",
        server,
        "--output",
        str(run),
        "--no-progress",
    ]
    assert main(argv) == 0
    assert sorted(r["task_id"] for r in rows(run)) == ["q0", "q1", "q2"]
    manifest = json.loads((run / "run.json").read_text())
    assert re.fullmatch(
        rf"{re.escape(str(tasks))} sha256:[0-9a-f]{{16}}", manifest["parts"][0]["source"]
    )
    tasks.write_text(tasks.read_text().replace("q2", "q9"))
    assert main(argv) == 2
    assert "field 'source'" in capsys.readouterr().err


def test_search_list_and_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "arith"]) == 0
    assert "environment" in capsys.readouterr().out
    for query, kind in (
        ("openai", "model"),
        ("tool", "harness"),
        ("math", "verifier"),
        ("docker", "sandbox provider"),
    ):
        assert main(["search", query]) == 0
        assert any(line.startswith(kind) for line in capsys.readouterr().out.splitlines()), query
    assert main(["search", "zzz-nothing"]) == 1
    assert main(["list", "--domain", "math"]) == 0
    listed = capsys.readouterr().out.split()
    assert "arithmetic" in listed and "bank" not in listed
    assert main(["eval", "run", "arithmetic", "--limit", "many"]) == 2
    assert "argument --limit: invalid _count value: 'many'" in capsys.readouterr().err
    assert main(["eval", "run", "arithmetic", "--api-key", "x"]) == 2  # no abbreviation
    assert "unrecognized arguments: --api-key" in capsys.readouterr().err
    assert main(["eval", "run"]) == 2
    assert "name an environment (gym list) or give --config FILE" in capsys.readouterr().err


def test_every_command_has_help_and_the_reference_page_is_in_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    assert main(["--help"]) == 0
    for path in (
        ["eval", "run"],
        ["eval", "compare"],
        ["aggregate"],
        ["dataset", "prepare"],
        ["env", "validate"],
        ["eval", "profile"],
        ["search"],
    ):
        assert main([*path, "--help"]) == 0
        assert "usage: gym" in capsys.readouterr().out
    assert parser.prog == "gym"
    assert (DOCS / "cli.md").read_text() == reference(), (
        "docs/cli.md is out of date: python -m nemo_gym.cli.reference > docs/cli.md"
    )


def _fake(ok: bool) -> Any:
    class Fake:
        reward = 1.0 if ok else None

    fake = Fake()
    fake.ok = ok  # type: ignore[attr-defined]
    return fake


def test_progress_lines_without_a_terminal_and_a_bar_with_one() -> None:
    stream = io.StringIO()
    progress = Progress(20, stream=stream, terminal=False)
    for index in range(20):
        progress.update(_fake(index % 5 != 0))
    progress.close()
    lines = stream.getvalue().splitlines()
    # Landing within one second, the twenty make one line as they land and one at the
    # end, not a line per tenth all at once.
    assert len(lines) == 2
    assert re.fullmatch(
        r"rollouts 20/20 \(100%\)  [\d.]+ rollouts/s  ETA 0:00  elapsed 0:00  failed 4  "
        r"reward 1.000",
        lines[-1],
    )
    stream = io.StringIO()
    progress = Progress(None, stream=stream, terminal=False, interval=3600)
    progress.update(_fake(True))
    progress.close()
    assert stream.getvalue().startswith("rollouts 1  ") and "ETA ?" in stream.getvalue()
    stream = io.StringIO()
    progress = Progress(4, stream=stream, terminal=True)
    for _ in range(4):
        progress.update(_fake(False))
    progress.close()
    drawn = stream.getvalue()
    assert "rollouts/s" in drawn and "4/4" in drawn and "failed" in drawn and "\x1b[" in drawn


def test_the_walkthrough_commands_parse_and_its_config_is_the_example() -> None:
    import shlex

    text = (DOCS / "evaluation.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("gym "):
                commands.append(shlex.split(line)[1:])
    assert len(commands) >= 15
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv)  # exits (fails the test) on a flag the CLI does not have

    def body(toml: str) -> list[str]:
        return [line for line in toml.splitlines() if line and not line.startswith("#")]

    (shown,) = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert body(shown) == body((DOCS / "examples" / "smollm2.toml").read_text())
