"""The core's shape (issue 18) and the run-directory items of issue 17: one test (at
least) per defect — files that run nothing, contracts that cannot leak, one options
type, an explicit registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym import registry
from nemo_gym.cli.main import main
from nemo_gym.errors import ConfigError
from nemo_gym.models import ScriptedModel


async def exact(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return float(trajectory.final_text.strip() == task.answer)


class Marker(gym.Env):
    """An env rebuilt only from its import path (never registered by name)."""

    name = "marker"

    def __init__(self, *, n: int = 2) -> None:
        super().__init__(exact)
        self.n = n

    def tasks(self, split: str = "test", limit: int | None = None) -> list[gym.Task]:
        return [gym.Task(id=f"t{i}", prompt=f"say {i}", answer=str(i)) for i in range(self.n)][
            :limit
        ]


# ------------------------------------------------------------------ 17.4 files that run nothing


async def _collect_then_poison(tmp_path: Path, marker: Path) -> Path:
    run = tmp_path / "run"
    await gym.collect(
        gym.make("arithmetic", seed=1), ScriptedModel(["1"], cycle=True), output=run, limit=2
    )
    manifest = json.loads((run / "run.json").read_text())
    hostile = {
        "kind": "env",
        "name": "not-a-registered-name",
        "options": {"command": f"touch {marker}"},
        "target": "os:system",
    }
    manifest["spec"]["env"] = hostile
    for part in manifest["parts"]:
        part["spec"]["env"] = hostile
    (run / "run.json").write_text(json.dumps(manifest))
    return run


async def test_reverify_never_imports_a_run_json_target_unless_trusted(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    run = await _collect_then_poison(tmp_path, marker)
    with pytest.raises(
        ConfigError, match=r"run\.json: field 'parts\[0\]\.spec\.env'.*'os:system'.*trust_code=True"
    ):
        await gym.reverify(run)
    assert not marker.exists()


def test_reverify_cli_names_the_opt_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    marker = tmp_path / "pwned"
    run = asyncio.run(_collect_then_poison(tmp_path, marker))
    assert main(["eval", "reverify", str(run)]) != 0
    assert "--trust-run-code" in capsys.readouterr().err
    assert not marker.exists()


async def test_a_trusted_spec_still_rebuilds_from_its_import_path(tmp_path: Path) -> None:
    spec = registry.spec_of(Marker(n=3), "env")
    assert spec.target == f"{__name__}:Marker"
    with pytest.raises(ConfigError, match="trust_code=True"):
        gym.make(spec)
    with pytest.raises(ConfigError, match="trust_code=True"):  # nested specs too
        registry.rebuild(
            gym.Spec(kind="env", name="arithmetic", options={"x": {"$spec": spec.model_dump()}})
        )
    rebuilt = registry.rebuild(spec, trust_code=True)
    assert isinstance(rebuilt, Marker) and rebuilt.n == 3
