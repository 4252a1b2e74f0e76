"""The catalog: every registered environment passes `check_env`, its oracle scores its
maximum and a wrong reply less, `gym eval run` runs it end to end, and the catalog page
is the registry's own rendering."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from judges import keyword_judge

import nemo_gym as gym
from nemo_gym import registry
from nemo_gym.cli.main import main
from nemo_gym.testing.oracle import OracleModel

DOCS = Path(__file__).resolve().parents[2] / "docs"
INFOS = gym.list_envs()
NAMES = [info.name for info in INFOS]


def options(name: str) -> dict[str, Any]:
    """What each environment needs to be built here: a judge, a sandbox, a dataset."""
    info = gym.env_info(name)
    found: dict[str, Any] = {}
    if "judge" in info.requires:
        found["judge"] = keyword_judge()
    if "sandbox" in info.requires:
        found["provider"] = "process"  # runs where namespaces are missing
    engine = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
    if "docker" in info.requires and not engine:
        pytest.skip(f"{name} needs a docker engine (scripts/docker-engine.sh start)")
    if name == "reasoning_gym":
        found["dataset"] = "knights_knaves"
    return found


def test_the_catalog_is_forty_environments_in_twelve_domains() -> None:
    assert len(INFOS) >= 40, NAMES
    assert len({info.domain for info in INFOS}) >= 12
    for info in INFOS:
        assert info.description and info.verification and info.source and info.license, info.name
        assert info.version is not None, info.name
        assert info.origin == "builtin"


@pytest.mark.parametrize("name", NAMES)
def test_check_env_passes(name: str) -> None:
    report = gym.check_env(gym.make(name, **options(name)))
    assert report.ok
    assert {"tasks", "ids", "stable", "splits", "limit", "episode", "aclose"} <= set(report.passed)


@pytest.mark.parametrize("name", NAMES)
async def test_oracle_scores_the_maximum_and_a_wrong_reply_less(name: str) -> None:
    env = gym.make(name, **options(name))
    tasks = list(env.tasks(limit=3))
    assert tasks
    scored = 0
    for task in tasks:
        oracle = env.oracle(task)
        if oracle is None:
            continue
        best = await gym.rollout(env, gym.models.ScriptedModel(oracle), task)
        worse = await gym.rollout(env, gym.models.ScriptedModel(env.wrong(task)), task)
        assert best.ok and worse.ok, (best.failure, worse.failure)
        assert best.reward == pytest.approx(env.oracle_reward(task)), task.id
        assert worse.reward < best.reward, task.id
        scored += 1
    assert scored, f"{name}: no task of its own has an oracle"
    await env.aclose()


# The CLI smoke test: every environment that needs no judge, sandbox engine or network.
LOCAL = [i.name for i in INFOS if not {"judge", "network"} & set(i.requires)]


@pytest.mark.parametrize("name", LOCAL)
def test_gym_eval_run_works(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env_options = options(name)
    env = gym.make(name, **env_options)
    registry.register("model", "oracle-test", lambda: OracleModel(env, limit=3), replace=True)
    try:
        args = [
            "eval",
            "run",
            name,
            "--model",
            "oracle-test",
            "--limit",
            "3",
            "--concurrency",
            "1",
            "--output",
            str(tmp_path / "run"),
        ]
        args += [
            a for k, v in env_options.items() for a in ("--env-option", f"{k}={json.dumps(v)}")
        ]
        assert main(args) == 0, capsys.readouterr().err
    finally:
        registry.unregister("model", "oracle-test")
    out = capsys.readouterr().out
    assert "rollouts 3  ok 3  failed 0" in out, out
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()
    ]
    for row in rows:
        task = gym.Task.model_validate(row["task"])
        if env.oracle(task) is not None:
            assert row["rewards"]["reward"] == pytest.approx(env.oracle_reward(task)), row[
                "task_id"
            ]


def test_the_catalog_page_is_the_registry() -> None:
    page = (DOCS / "catalog.md").read_text()
    assert page == gym.catalog.catalog_markdown(), (
        "regenerate: gym list --markdown > docs/catalog.md"
    )


def test_gym_list_summarises(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith(
        f"{len(INFOS)} environments in {len({i.domain for i in INFOS})} domains"
    )
    assert main(["list", "--markdown"]) == 0
    assert capsys.readouterr().out == gym.catalog.catalog_markdown()


def test_versioned_ids_resolve_to_the_latest() -> None:
    assert gym.make("arithmetic@2").to_spec().version == "2"
    registry.register(
        "env", "versioned-test", "nemo_gym.envs.math.arithmetic:Arithmetic", version="1"
    )
    registry.register(
        "env", "versioned-test", "nemo_gym.envs.math.arithmetic:ArithmeticSmall", version="10"
    )
    try:
        assert gym.make("versioned-test").terms == 2  # type: ignore[attr-defined]
        assert gym.make("versioned-test@1").terms == 3  # type: ignore[attr-defined]
        with pytest.raises(gym.errors.ConfigError, match="no version '3'"):
            gym.make("versioned-test@3")
    finally:
        registry.unregister("env", "versioned-test", version="1")
        registry.unregister("env", "versioned-test", version="10")


LOCAL_ENV = '''
import nemo_gym as gym

async def verify(task, trajectory):
    return float(trajectory.final_text.strip() == task.answer)

class Echo(gym.Env):
    """Say the word back."""
    name = "echo_word"
    domain = "testing"

    def __init__(self):
        super().__init__(verify, tasks=[gym.Task(id="echo-1", prompt="Say: pear", answer="pear")])

    def oracle(self, task):
        return [gym.Message.assistant(task.answer)]
'''


def test_local_folders_add_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "echo_word.py").write_text(LOCAL_ENV)
    (tmp_path / "_helper.py").write_text("raise RuntimeError('never imported')")
    monkeypatch.setenv(registry.SEARCH_PATH_VARIABLE, str(tmp_path))
    info = gym.env_info("echo_word")
    assert (info.origin, info.domain, info.description) == (
        "local",
        "testing",
        "Say the word back.",
    )
    env = gym.make("echo_word")
    assert gym.check_env(env).ok
    assert main(["list"]) == 0
    assert "echo_word" in capsys.readouterr().out
    monkeypatch.delenv(registry.SEARCH_PATH_VARIABLE)
    assert "echo_word" not in registry.names("env")
    assert main(["list", "--search-dir", str(tmp_path)]) == 0
    assert "echo_word" in capsys.readouterr().out


def test_a_broken_local_environment_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_env.py").write_text("x = 1\n")
    monkeypatch.setenv(registry.SEARCH_PATH_VARIABLE, str(tmp_path))
    with pytest.raises(gym.errors.ConfigError, match=r"broken_env\.py: define a factory"):
        gym.make("broken_env")


def test_check_env_reports_every_problem_with_its_fix() -> None:
    class Sloppy(gym.Env):
        name = "sloppy"
        splits = ("train", "test")

        def tasks(self, split: str = "test", limit: int | None = None):  # type: ignore[override]
            base = [
                gym.Task(id="same", prompt="2+2?", answer="4"),
                gym.Task(id="same", prompt="3+3?", answer="6"),
            ]
            return base  # ignores split and limit

        def oracle(self, task: gym.Task) -> list[gym.Message]:
            return [gym.Message.assistant("5")]

    async def exact(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return float(trajectory.final_text == task.answer)

    report = gym.check_env(Sloppy(exact), raise_on_error=False)
    checks = {p.check for p in report.problems}
    assert {"ids", "limit", "splits", "oracle"} <= checks, report
    assert all(p.fix for p in report.problems)
    with pytest.raises(gym.EnvCheckError) as raised:
        gym.check_env(Sloppy(exact))
    assert "[ids]" in str(raised.value) and "fix:" in str(raised.value)


def test_the_oracle_model_serves_tasks_that_open_alike() -> None:
    env = gym.make("guess_number")
    tasks = list(env.tasks(limit=4))
    assert len({t.prompt for t in tasks}) == 1  # every game opens with the same prompt
    model = OracleModel(env, tasks)

    async def run() -> list[float | None]:
        return [(await gym.rollout(env, model, task)).reward for task in tasks]

    assert asyncio.run(run()) == [1.0] * 4
