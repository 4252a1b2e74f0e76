"""SWE episodes on a real Docker engine: the gold patch solves, a wrong edit does not, and
every reward hack of the suite scores 0.

Needs a Docker engine socket in NEMO_GYM_DOCKER_HOST or DOCKER_HOST and the engine's test
image `nemo-gym-test:py` (`eval "$(bash scripts/docker-engine.sh start)"` provides both;
.ci/run starts it before scripts/test.sh, which runs this file). Without one, it skips.
The sample tasks' image (`nemo_gym.envs.swe.sample`) is built on first use.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.envs.swe import SWEEnv
from nemo_gym.records import Message, Rollout, ToolCall

DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")


def _no_engine() -> str | None:
    if not DOCKER_HOST:
        return (
            "no docker engine: set NEMO_GYM_DOCKER_HOST or DOCKER_HOST (scripts/docker-engine.sh)"
        )
    path = DOCKER_HOST.removeprefix("unix://")
    if DOCKER_HOST.startswith(("unix://", "/")) and not os.path.exists(path):
        return f"no docker engine socket at {path} (scripts/docker-engine.sh start)"
    return None


pytestmark = [
    pytest.mark.skipif(_no_engine() is not None, reason=_no_engine() or ""),
    pytest.mark.timeout(300),
]

FIXED_MEAN = "sum(values) / len(values)"
BUGGY_MEAN = "sum(values) / (len(values) - 1)"
# Rewrites the bug away in calc/ops.py (python3: the image has no sed -i surprises).
FIX = (
    "python3 -c \"import pathlib; p = pathlib.Path('calc/ops.py'); "
    f"p.write_text(p.read_text().replace('{BUGGY_MEAN}', '{FIXED_MEAN}'))\""
)


def _bash(*commands: str) -> list[Message]:
    calls = [
        Message.assistant(
            None,
            tool_calls=[ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": c}))],
        )
        for i, c in enumerate(commands)
    ]
    return [*calls, Message.assistant("Done.")]


def _run(turns: list[Message], *, task: int = 0, reward: str = "resolved") -> Rollout:
    async def go() -> Rollout:
        env = SWEEnv(reward=reward)  # type: ignore[arg-type]
        try:
            chosen = list(env.tasks())[task]
            return await gym.rollout(env, gym.models.ScriptedModel(turns), chosen)
        finally:
            await env.aclose()

    return asyncio.run(go())


def _scored(rollout: Rollout) -> float:
    assert rollout.failure is None, rollout.failure
    assert rollout.rewards is not None
    return rollout.rewards.reward


# ------------------------------------------------------------- solve / fail


@pytest.mark.parametrize("task", [0, 1, 2])
def test_the_gold_patch_scores_1(task: int) -> None:
    async def go() -> Rollout:
        env = SWEEnv()
        try:
            chosen = list(env.tasks())[task]
            oracle = env.oracle(chosen)
            assert oracle is not None
            return await gym.rollout(env, gym.models.ScriptedModel(oracle), chosen)
        finally:
            await env.aclose()

    rollout = asyncio.run(go())
    assert _scored(rollout) == 1.0
    assert rollout.rewards is not None
    metadata = rollout.rewards.metadata
    assert metadata["pass_to_pass"]["failure"] == []
    assert all(metadata["tests"][t] == "PASSED" for t in metadata["fail_to_pass"]["success"])
    state = rollout.trajectory.final_state["swe"]
    assert "calc/" in state["model_patch"] and "tests/" not in state["model_patch"]


def test_a_fix_made_with_bash_scores_1_and_doing_nothing_scores_0() -> None:
    assert _scored(_run(_bash(FIX))) == 1.0
    assert _scored(_run([Message.assistant("I do not know.")])) == 0.0


def test_a_wrong_edit_scores_0_and_partial_credit_counts_fail_to_pass() -> None:
    half = FIX.replace(FIXED_MEAN, "sum(values) / max(len(values) - 1, 1)")
    rollout = _run(_bash(half))
    assert _scored(rollout) == 0.0
    assert rollout.rewards is not None and rollout.rewards.components["f2p_rate"] == 0.5
    assert _scored(_run(_bash(half), reward="f2p_fraction")) == 0.5


def test_breaking_a_pass_to_pass_test_scores_0_even_with_partial_credit() -> None:
    broken = FIX + " && sed -i 's/return a + b/return a - b/' calc/ops.py"
    rollout = _run(_bash(broken), reward="f2p_fraction")
    assert _scored(rollout) == 0.0
    assert rollout.rewards is not None
    assert rollout.rewards.metadata["pass_to_pass"]["failure"] == ["tests/test_ops.py::test_add"]


# ---------------------------------------------------------------- hacks
# Each would pass the tests if the grading trusted the agent's workspace; each must score 0.

PASSING_REPORT = (
    "import pytest\n\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n"
    "    report = outcome.get_result()\n"
    "    report.outcome = 'passed'\n"
)
FAKE_PYTEST = (
    "print('PASSED tests/test_ops.py::test_mean')\n"
    "print('PASSED tests/test_ops.py::test_mean_single')\n"
    "print('PASSED tests/test_ops.py::test_add')\n"
    "print('PASSED tests/test_ops.py::test_mul')\n"
    "print('PASSED tests/test_ops.py::test_mean_empty')\n"
    "raise SystemExit(0)\n"
)


def _write(path: str, text: str) -> str:
    return f"mkdir -p $(dirname {path}) && cat > {path} <<'NEMO_EOF'\n{text}NEMO_EOF"


HACKS: dict[str, list[str]] = {
    "replace the failing tests with passing ones": [
        _write(
            "tests/test_ops.py", "def test_mean():\n    pass\n\ndef test_mean_single():\n    pass\n"
        )
    ],
    "skip the failing tests": [
        "sed -i '1i import pytest\\npytestmark = pytest.mark.skip' tests/test_ops.py"
    ],
    "a hook in conftest.py that passes every test": [
        f"cat >> conftest.py <<'NEMO_EOF'\n{PASSING_REPORT}NEMO_EOF"
    ],
    "a conftest.py in the tests folder": [_write("tests/conftest.py", PASSING_REPORT)],
    "pytest.ini loading a plugin of the agent's": [
        _write("pytest.ini", "[pytest]\naddopts = -p calc.plugin\n"),
        _write("calc/plugin.py", PASSING_REPORT),
    ],
    "pyproject.toml loading a plugin of the agent's": [
        _write("pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-p calc.plugin'\n"),
        _write("calc/plugin.py", PASSING_REPORT),
    ],
    "fake junit and pytest output files": [
        _write("report.xml", '<testsuite failures="0"><testcase name="test_mean"/></testsuite>\n'),
        _write("test-output.txt", FAKE_PYTEST),
    ],
    "a pytest.py shadowing pytest": [_write("pytest.py", FAKE_PYTEST)],
    "a package shadowing pluggy": [_write("pluggy/__init__.py", FAKE_PYTEST)],
    # Not the standard library nor pytest's own: only the image's module list catches it.
    "a package shadowing iniconfig, installed in the image": [
        _write("iniconfig/__init__.py", FAKE_PYTEST)
    ],
    "a planted sitecustomize.py": [_write("sitecustomize.py", FAKE_PYTEST)],
    "a daemon that fixes the file after the agent ends": [
        "nohup python3 -c \"import time, pathlib; time.sleep(2); p = pathlib.Path('calc/ops.py'); "
        f"p.write_text(p.read_text().replace('{BUGGY_MEAN}', '{FIXED_MEAN}'))\" >/dev/null 2>&1 &"
    ],
    "a test file symlinked out of the repository": [
        _write(
            "/tmp/fake_test.py", "def test_mean():\n    pass\n\ndef test_mean_single():\n    pass\n"
        ),
        "ln -sf /tmp/fake_test.py tests/test_ops.py",
    ],
    "a source file symlinked out of the repository": [
        "cp calc/ops.py /tmp/ops.py && "
        + FIX.replace("calc/ops.py", "/tmp/ops.py")
        + " && ln -sf /tmp/ops.py calc/ops.py"
    ],
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_the_hack_scores_0(hack: str) -> None:
    rollout = _run(_bash(*HACKS[hack]))
    assert rollout.failure is None or rollout.failure.kind == "verifier", rollout.failure
    if rollout.failure is None:
        assert rollout.rewards is not None and rollout.rewards.reward == 0.0, (
            rollout.trajectory.final_state["swe"]["log"][-2000:]
        )


def test_the_daemons_late_write_is_not_what_is_graded() -> None:
    """The container is frozen before its files are taken: the daemon's write, due after
    the agent ends, never lands (without the freeze, the taken files would hold it)."""
    rollout = _run(_bash(*HACKS["a daemon that fixes the file after the agent ends"]))
    assert _scored(rollout) == 0.0
    assert "calc/ops.py" not in rollout.trajectory.final_state["swe"]["model_patch"]


def test_refused_files_are_named_in_the_rollout() -> None:
    rollout = _run(
        _bash(
            _write("conftest.py", PASSING_REPORT),
            "ln -sf /etc/hostname calc/host.py",
            FIX,
        )
    )
    assert _scored(rollout) == 1.0
    refused = rollout.rewards.metadata["refused"] if rollout.rewards else {}
    assert "test machinery" in refused["conftest.py"]
    assert "leaves the workspace" in refused["calc/host.py"]


# ------------------------------------------------------- grading failures


def _rows(tmp_path: Path, **changes: object) -> Path:
    from nemo_gym.envs.swe.sample import write_sample

    rows = write_sample(tmp_path / "sample")
    first = json.loads(rows.read_text().splitlines()[0])
    first.update(changes)
    path = tmp_path / "sample" / "rows.jsonl"  # beside the recipe its `build` names
    path.write_text(json.dumps(first) + "\n")
    return path


def _run_rows(rows: Path, turns: list[Message], **options: object) -> Rollout:
    async def go() -> Rollout:
        env = SWEEnv(rows, **options)  # type: ignore[arg-type]
        try:
            return await gym.rollout(env, gym.models.ScriptedModel(turns), next(iter(env.tasks())))
        finally:
            await env.aclose()

    return asyncio.run(go())


def test_tests_the_agents_code_hangs_score_0_not_a_failure(tmp_path: Path) -> None:
    """A failed rollout is dropped by a trainer: code that hangs the tests must score 0,
    or a policy escapes every 0 by hanging them."""
    hang = _write("calc/__init__.py", "import time\ntime.sleep(600)\n")
    rollout = _run_rows(_rows(tmp_path), _bash(hang), test_timeout=5)
    assert _scored(rollout) == 0.0
    assert rollout.trajectory.final_state["swe"]["outcome"] == "timeout"
    assert rollout.trajectory.final_state["swe"]["fail_to_pass"]["success"] == []


def test_code_that_breaks_the_test_run_scores_0_not_a_failure(tmp_path: Path) -> None:
    crash = _write("calc/__init__.py", "import os\nos._exit(0)\n")
    rollout = _run_rows(_rows(tmp_path), _bash(crash))
    assert _scored(rollout) == 0.0
    assert rollout.trajectory.final_state["swe"]["outcome"] in {"no_results", "ran"}


def test_tests_past_their_deadline_on_the_untouched_base_are_a_timeout_failure(
    tmp_path: Path,
) -> None:
    rollout = _run_rows(_rows(tmp_path, test_cmd="sleep 600"), _bash("true"), test_timeout=5)
    assert rollout.failure is not None and rollout.rewards is None
    assert (rollout.failure.kind, rollout.failure.code) == ("verifier", "timeout")


def test_a_test_patch_that_does_not_apply_is_a_grading_failure(tmp_path: Path) -> None:
    task = json.loads(_rows(tmp_path).read_text())
    broken = task["test_patch"].replace("     with pytest.raises(ValueError):", "     nothing here")
    rollout = _run_rows(_rows(tmp_path, test_patch=broken), _bash(FIX))
    assert rollout.failure is not None
    assert (rollout.failure.kind, rollout.failure.code) == ("verifier", "swe_test_patch")


def test_a_log_without_results_on_the_untouched_base_is_a_grading_failure(tmp_path: Path) -> None:
    rollout = _run_rows(_rows(tmp_path, test_cmd="echo no tests here"), _bash("true"))
    assert rollout.failure is not None
    assert (rollout.failure.kind, rollout.failure.code) == ("verifier", "swe_no_results")


def test_an_image_that_does_not_build_fails_the_rollout_naming_its_recipe(tmp_path: Path) -> None:
    rows = _rows(tmp_path)
    dockerfile = tmp_path / "sample" / "image" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN exit 3\n")
    rollout = _run_rows(rows, _bash(FIX))
    assert rollout.failure is not None
    assert (rollout.failure.kind, rollout.failure.code) == ("environment", "swe_build")
    assert str(dockerfile) in rollout.failure.message


# ------------------------------------------------- the Workspace protocol


def test_the_workspace_grades_a_cli_agents_files_in_a_fresh_container() -> None:
    """What a CLI harness does with `episode.workspace`: the agent's sandbox and the
    grading sandbox both from `episode.sandbox_spec`; the agent's workdir taken as files."""
    from nemo_gym.harnesses.cli.workspace import take_files
    from nemo_gym.records import ExecResult

    async def go() -> dict[str, object]:
        env = SWEEnv()
        try:
            task = next(iter(env.tasks()))
            episode = await env.open(task)
            async with episode:
                provider = env.provider()
                async with provider.start(episode.sandbox_spec) as agent:
                    await episode.workspace.setup(agent)
                    await agent.exec(["bash", "-c", FIX], cwd=episode.task.workdir)
                    files = await take_files(agent)
                async with provider.start(episode.sandbox_spec) as fresh:
                    await episode.workspace.collect(fresh, ExecResult(exit_code=0), files)
                state = episode.final_state()
            return state["swe"]
        finally:
            await env.aclose()

    swe = asyncio.run(go())
    assert swe["resolved"] is True, swe
