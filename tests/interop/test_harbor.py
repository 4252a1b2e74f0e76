"""Harbor task directories through `HarborEnv`: task directories in Harbor's layout
(tests/interop/harbor_tasks), read here; run end to end in Docker containers when an
engine is there (`scripts/docker-engine.sh start`, as CI does), else those tests skip."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.interop.harbor import HarborEnv, HarborOracle, _rewards, load_task
from nemo_gym.records import ExecResult, Message, ModelRequest, ToolCall

TASKS = Path(__file__).with_name("harbor_tasks")
DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")


def _no_engine() -> str | None:
    if not DOCKER_HOST:
        return "no docker engine: set NEMO_GYM_DOCKER_HOST (scripts/docker-engine.sh start)"
    path = DOCKER_HOST.removeprefix("unix://")
    if DOCKER_HOST.startswith(("unix://", "/")) and not os.path.exists(path):
        return f"no docker engine socket at {path}"
    return None


engine = pytest.mark.skipif(_no_engine() is not None, reason=_no_engine() or "")


# -- the layout -----------------------------------------------------------------------


def test_a_dataset_folder_of_task_directories() -> None:
    env = HarborEnv(TASKS)
    tasks = list(env.tasks())
    assert [t.id for t in tasks] == ["fix-add", "write-greeting"]
    greeting = tasks[1]
    assert greeting.prompt == (TASKS / "write-greeting" / "instruction.md").read_text()
    harbor = greeting.metadata["harbor"]
    assert harbor["config"]["verifier"]["timeout_sec"] == 60.0
    assert harbor["path"].endswith("write-greeting")
    assert [t.id for t in HarborEnv(TASKS / "fix-add").tasks()] == ["fix-add"]
    spec = env.spec_for(env.harbor_tasks()["write-greeting"], "img")
    assert (spec.image, spec.workdir, spec.network) == ("img", "/app", "none")
    assert spec.limits.memory_bytes == 512 * 2**20


def _copy(tmp_path: Path, name: str = "write-greeting") -> Path:
    target = tmp_path / name
    shutil.copytree(TASKS / name, target)
    return target


def test_bad_task_directories_name_the_file_and_field(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    config = task / "task.toml"
    config.write_text('[verifier]\ntimeout_sec = "soon"\n')
    with pytest.raises(ConfigError, match=r"task\.toml: \[verifier\] timeout_sec = 'soon'"):
        load_task(task)
    config.write_text("[environment]\nallow_internet = 1\n")
    with pytest.raises(ConfigError, match="allow_internet = 1 is not a bool"):
        load_task(task)
    config.write_text("[verifier\n")
    with pytest.raises(ConfigError, match=r"task\.toml: .*line 1"):
        load_task(task)
    config.write_text("")
    (task / "tests" / "test.sh").unlink()
    with pytest.raises(ConfigError, match=r"no tests/test\.sh"):
        load_task(task)
    (task / "tests" / "test.sh").write_text("exit 0\n")
    (task / "steps").mkdir()
    with pytest.raises(ConfigError, match="multi-step"):
        load_task(task)
    with pytest.raises(ConfigError, match="holds no Harbor task"):
        list(HarborEnv(tmp_path / "write-greeting" / "tests").tasks())


@pytest.mark.parametrize(
    "where", ["environment/secret.txt", "tests/helper.sh", "solution/data", "instruction.md"]
)
def test_symlinks_leaving_the_task_directory_are_refused(tmp_path: Path, where: str) -> None:
    task = _copy(tmp_path / "tasks")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret\n")
    link = task / where
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.exists():
        link.unlink()
    link.symlink_to(secret)
    with pytest.raises(ConfigError, match="outside the task directory") as info:
        harbor = load_task(task)
        for folder in ("environment", "tests", "solution"):
            harbor.files(folder)
    assert str(link) in str(info.value)
    # a symlink that stays inside is fine
    link.unlink()
    link.symlink_to(task / "task.toml")
    harbor = load_task(task)
    for folder in ("environment", "tests", "solution"):
        harbor.files(folder)


def test_a_symlinked_folder_leaving_the_task_directory_is_refused(tmp_path: Path) -> None:
    task = _copy(tmp_path / "tasks")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa").write_text("key\n")
    (task / "environment" / "home").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ConfigError, match="outside the task directory"):
        load_task(task).files("environment")


async def test_no_image_and_nothing_to_build_is_a_clear_error(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "environment" / "Dockerfile").unlink()
    env = HarborEnv(task, provider="process")
    rollout = await gym.rollout(env, gym.models.ScriptedModel(["x"]), next(iter(env.tasks())))
    assert rollout.failure.where == "open"
    assert "no [environment] docker_image" in rollout.failure.message
    assert "nor is there an environment/Dockerfile" in rollout.failure.message


class Files:
    """A sandbox double holding files, for the reward-file rules."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    async def read_file(self, path: str) -> bytes:
        return self.files[path]

    async def exec(self, *args: object, **kwargs: object) -> ExecResult:
        return ExecResult(exit_code=0)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"/logs/verifier/reward.txt": b"0.75\n"}, {"reward": 0.75}),
        (
            {"/logs/verifier/reward.json": b'{"reward": 1, "style": 0.5}'},
            {"reward": 1.0, "style": 0.5},
        ),
        (
            {"/logs/verifier/reward.json": b"0.5", "/logs/verifier/reward.txt": b"1"},
            {"reward": 0.5},
        ),
    ],
)
async def test_reward_files(files: dict[str, bytes], expected: dict[str, float]) -> None:
    assert await _rewards(Files(files)) == expected


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "neither /logs/verifier/reward.txt nor reward.json"),
        ({"/logs/verifier/reward.txt": b" \n"}, "reward.txt is empty"),
        ({"/logs/verifier/reward.txt": b"pass"}, "not a number"),
        ({"/logs/verifier/reward.txt": b"nan"}, "not a finite number"),
        ({"/logs/verifier/reward.json": b'{"reward": "1"}'}, "reward = '1' is not a number"),
        ({"/logs/verifier/reward.json": b"{oops"}, "reward.json is not JSON"),
        ({"/logs/verifier/reward.json": b'{"a": Infinity}'}, "is not finite"),
    ],
)
async def test_bad_reward_files_are_verifier_errors(files: dict[str, bytes], message: str) -> None:
    with pytest.raises(VerifierError, match=message):
        await _rewards(Files(files))


async def test_a_reward_map_without_a_primary_is_refused() -> None:
    trajectory = gym.Trajectory(
        final_state={"verifier": {"rewards": {"a": 1.0, "b": 0.0}, "exit_code": 0}}
    )
    from nemo_gym.interop.harbor import harbor_reward

    with pytest.raises(VerifierError, match="no 'reward' key"):
        await harbor_reward(gym.Task(prompt="x"), trajectory)
    with pytest.raises(VerifierError, match="did not run"):
        await harbor_reward(gym.Task(prompt="x"), gym.Trajectory())


# -- in containers --------------------------------------------------------------------


def _docker_env(path: Path = TASKS) -> HarborEnv:
    return HarborEnv(path, provider_options={"host": DOCKER_HOST, "pull": False})


@engine
async def test_the_oracle_solves_every_task_building_each_environment() -> None:
    env = _docker_env()
    rollouts = [
        r async for r in gym.rollouts(env, gym.models.ScriptedModel([]), harness=HarborOracle())
    ]
    by_task = {r.task_id: r for r in rollouts}
    assert {k: (r.reward, r.failure) for k, r in by_task.items()} == {
        "fix-add": (1.0, None),
        "write-greeting": (1.0, None),
    }
    assert by_task["fix-add"].rewards.components == {"reward": 1.0, "tests_passed": 1.0}
    assert by_task["fix-add"].trajectory.final_state["verifier"]["exit_code"] == 0


def fixing_script(request: ModelRequest) -> Message:
    done = [m for m in request.messages if m.role == "tool"]
    steps = [
        "cat calc.py",
        "sed -i 's/a - b/a + b/' calc.py && python3 check_calc.py",
    ]
    if len(done) < len(steps):
        command = steps[len(done)]
        return Message.assistant(
            None,
            tool_calls=(
                ToolCall(
                    id=str(len(done)), name="bash", arguments=json.dumps({"command": command})
                ),
            ),
        )
    return Message.assistant("Fixed add.")


@engine
async def test_a_model_with_the_bash_tool_fixes_a_task_and_its_tests_score_it() -> None:
    env = _docker_env(TASKS / "fix-add")
    task = next(iter(env.tasks()))
    rollout = await gym.rollout(env, gym.models.ScriptedModel(fixing_script), task)
    assert rollout.ok, rollout.failure
    assert rollout.reward == 1.0
    results = rollout.trajectory.tool_results
    assert results[0].output == "exit code 0\ndef add(a, b):\n    return a - b\n"
    assert results[1].output == "exit code 0\nok\n"
    assert rollout.trajectory.model_calls[0].request.tools[0].name == "bash"

    lazy = await gym.rollout(env, gym.models.ScriptedModel(["I would rather not."]), task)
    assert lazy.ok and lazy.reward == 0.0  # the tests ran on the untouched code
    assert lazy.rewards.components["tests_passed"] == 0.0
    await env.aclose()
