"""collect: streaming JSONL, resume without duplicates, failures sidecar, metrics from file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.collect import iter_rows
from nemo_gym.errors import ConfigError, ModelError
from nemo_gym.models import ScriptedModel


async def exact(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return float(trajectory.final_text.strip() == task.answer)


def make_env(n: int = 4) -> gym.Env:
    tasks = [gym.Task(id=f"t{i}", prompt=f"say {i}", answer=str(i)) for i in range(n)]
    return gym.Env(exact, name="echo", tasks=tasks)


def echo(request: gym.ModelRequest) -> str:
    return request.messages[-1].content.removeprefix("say ")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_collect_writes_rollouts_failures_and_metrics(tmp_path: Path) -> None:
    def flaky(request: gym.ModelRequest) -> str:
        if request.messages[-1].content == "say 3":
            raise ModelError("overloaded")
        return "0" if request.sampling.seed % 2 else echo(request)

    result = await gym.collect(make_env(), ScriptedModel(flaky), output=tmp_path, repeats=4)
    written = rows(tmp_path / "rollouts.jsonl")
    assert len(written) == 16 and result.new == 16
    failures = rows(tmp_path / "failures.jsonl")
    assert len(failures) == 4 and {f["failure"]["kind"] for f in failures} == {"model"}
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics == json.loads(result.metrics.model_dump_json())
    assert result.metrics.n_failed == 4 and result.metrics.failures_by_kind == {"model": 4}
    ok = [r for r in written if r["status"] == "ok"]
    assert result.metrics.rewards["reward"].n == len(ok) == 12
    expected = sum(r["rewards"]["reward"] for r in ok) / 12
    assert result.metrics.rewards["reward"].mean == pytest.approx(expected)
    assert set(result.metrics.pass_at_k) == {1, 2, 4}
    # Every line validates against the record, and the schema is the exported one.
    for line in written:
        gym.Rollout.model_validate(line)


async def test_resume_skips_what_is_written_and_adds_no_duplicates(tmp_path: Path) -> None:
    model = ScriptedModel(echo)
    first = await gym.collect(make_env(), model, output=tmp_path, limit=2, repeats=2, seed=3)
    assert first.new == 4
    # A crash mid-write leaves a torn line; resume drops it and reruns that rollout.
    with (tmp_path / "rollouts.jsonl").open("a") as handle:
        handle.write('{"task_id": "t2", "repe')
    second = await gym.collect(make_env(), model, output=tmp_path, repeats=2, seed=3)
    assert second.new == 4
    written = rows(tmp_path / "rollouts.jsonl")
    keys = [(r["task_id"], r["repeat"]) for r in written]
    assert len(keys) == len(set(keys)) == 8
    run_id = json.loads((tmp_path / "run.json").read_text())["run_id"]
    assert {r["run_id"] for r in written} == {run_id}
    assert second.metrics.n_rollouts == 8 and len(model.requests) == 8
    third = await gym.collect(make_env(), model, output=tmp_path, repeats=2, seed=3)
    assert third.new == 0 and len(model.requests) == 8


async def test_resume_with_retry_failed_reruns_failures_and_metrics_take_the_latest(
    tmp_path: Path,
) -> None:
    await gym.collect(make_env(2), ScriptedModel([ModelError("down")], cycle=True), output=tmp_path)
    assert len(rows(tmp_path / "failures.jsonl")) == 2
    again = await gym.collect(make_env(2), ScriptedModel(echo), output=tmp_path)
    assert again.new == 0  # failures are kept unless asked
    result = await gym.collect(make_env(2), ScriptedModel(echo), output=tmp_path, retry_failed=True)
    assert result.new == 2 and len(rows(tmp_path / "rollouts.jsonl")) == 4
    assert result.metrics.n_rollouts == 2 and result.metrics.n_failed == 0
    assert result.metrics.rewards["reward"].mean == 1.0


async def test_resume_refuses_a_different_run(tmp_path: Path) -> None:
    await gym.collect(make_env(1), ScriptedModel(echo), output=tmp_path, seed=1)
    with pytest.raises(ConfigError, match=r"field 'seed' is 1 in run.json but 2 in this run"):
        await gym.collect(make_env(1), ScriptedModel(echo), output=tmp_path, seed=2)


def test_a_corrupt_line_is_reported_with_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "rollouts.jsonl").write_text(
        '{"task_id": "a", "repeat": 0, "status": "ok"}\nnot json\n'
    )
    with pytest.raises(ConfigError, match=r"rollouts.jsonl:2: not valid JSON"):
        list(iter_rows(tmp_path / "rollouts.jsonl"))


def test_evaluate_is_synchronous_and_works_in_memory() -> None:
    result = gym.evaluate(make_env(3), ScriptedModel(echo), repeats=2)
    assert len(result.rollouts) == 6 and result.metrics.rewards["reward"].mean == 1.0
    assert result.metrics.pass_at_k == {1: 1.0, 2: 1.0}


async def test_evaluate_works_inside_a_running_loop(tmp_path: Path) -> None:
    result = gym.evaluate(make_env(2), ScriptedModel(echo), output=tmp_path)
    assert result.output == tmp_path and result.metrics.n_ok == 2


async def test_reverify_rescores_without_inference_and_keeps_originals(tmp_path: Path) -> None:
    async def broken(task, trajectory):
        raise gym.errors.VerifierError("judge timed out", code="judge_failed")

    env = gym.Env(broken, name="echo", tasks=make_env(3).tasks())
    await gym.collect(env, ScriptedModel(echo), output=tmp_path)
    original = (tmp_path / "rollouts.jsonl").read_text()
    assert len(rows(tmp_path / "failures.jsonl")) == 3
    result = await gym.reverify(tmp_path, exact, judge_failed_only=True)
    assert (tmp_path / "rollouts.jsonl").read_text() == original
    assert result.output == tmp_path / "reverified"
    assert result.metrics.n_ok == 3 and result.metrics.rewards["reward"].mean == 1.0
    assert all(r.metadata["reverified"] for r in gym.read_rollouts(result.output))
    assert (result.output / "failures.jsonl").read_text() == ""


async def test_reverify_leaves_model_failures_alone(tmp_path: Path) -> None:
    await gym.collect(
        make_env(2), ScriptedModel([ModelError("x"), "1"]), output=tmp_path, concurrency=1
    )
    result = await gym.reverify(tmp_path, exact)
    got = {r.task_id: r for r in gym.read_rollouts(result.output)}
    assert got["t0"].failure.kind == "model" and "reverified" not in got["t0"].metadata
    assert got["t1"].ok and got["t1"].reward == 1.0


async def test_reverify_without_a_manifest_or_verifier_is_a_clear_error(tmp_path: Path) -> None:
    await gym.collect(make_env(1), ScriptedModel(echo), output=tmp_path)
    (tmp_path / "run.json").unlink()
    with pytest.raises(ConfigError, match=r"run.json: missing, so the environment is unknown"):
        await gym.reverify(tmp_path)


def test_pass_at_k_estimator() -> None:
    assert gym.pass_at_k(4, 0, 1) == 0.0
    assert gym.pass_at_k(4, 4, 4) == 1.0
    assert gym.pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert gym.pass_at_k(4, 1, 2) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        gym.pass_at_k(2, 1, 4)


async def test_a_crash_mid_atomic_write_leaves_no_temp_file_for_good(tmp_path: Path) -> None:
    # SIGKILL between mkstemp and the rename leaves `.NAME.XXXX.tmp`; the next run (or
    # reverify) clears them, so repeated crashes do not pile them up.
    for name in ("run.json", "metrics.json", "failures.jsonl"):
        (tmp_path / f".{name}.k2j4h1qz.tmp").write_text("half")
    (tmp_path / ".notes.tmp").write_text("not ours")

    async def one(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return 1.0

    env = gym.Env(one, name="echo", tasks=[gym.Task(prompt="p", answer="a")])
    await gym.collect(env, ScriptedModel(["a"]), output=tmp_path)
    assert sorted(p.name for p in tmp_path.glob(".*")) == [".notes.tmp"]
