"""Mixed runs (several environments, variants) and shards merged by `aggregate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.collect import Part, aggregate
from nemo_gym.errors import ConfigError
from nemo_gym.metrics import compute_metrics
from nemo_gym.models import ScriptedModel


async def exact(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return float(trajectory.final_text.strip() == task.answer)


def env_of(name: str, n: int, prefix: str = "t") -> gym.Env:
    tasks = [gym.Task(id=f"{prefix}{i}", prompt=f"say {i}", answer=str(i)) for i in range(n)]
    return gym.Env(exact, name=name, tasks=tasks)


def echo_unless(wrong: str) -> Any:
    """Echoes the number asked for, except in the system prompt's variant `wrong`."""

    def reply(request: gym.ModelRequest) -> str:
        if request.messages[0].role == "system" and request.messages[0].content == wrong:
            return "nope"
        return request.messages[-1].content.removeprefix("say ")

    return reply


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (path / "rollouts.jsonl").read_text().splitlines()]


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A row without what differs between two runs of the same work: ids and clocks."""
    row = json.loads(json.dumps(row))
    row.pop("run_id")
    row.pop("timings")
    for call in row["trajectory"]["model_calls"]:
        call.pop("latency_s")
        if call.get("response"):
            call["response"].pop("latency_s", None)
    return row


def by_key(items: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    return {
        (r["env"], r["metadata"].get("variant"), r["task_id"], r["repeat"]): comparable(r)
        for r in items
    }


async def test_a_mixed_run_has_metrics_per_environment_and_resumes(tmp_path: Path) -> None:
    parts = [Part(env_of("a", 6), limit=4), Part(env_of("b", 3))]
    model = ScriptedModel(lambda r: "0")  # right on task 0 of each env only
    result = await gym.collect(parts, model, output=tmp_path, repeats=2)
    assert result.new == (4 + 3) * 2
    metrics = result.metrics
    assert set(metrics.by_env) == {"a", "b"}
    assert metrics.by_env["a"].n_rollouts == 8 and metrics.by_env["a"].n_tasks == 4
    assert metrics.by_env["a"].rewards["reward"].mean == pytest.approx(1 / 4)
    assert metrics.by_env["b"].rewards["reward"].mean == pytest.approx(1 / 3)
    assert metrics.n_tasks == 7 and metrics.n_rollouts == 14
    # The same task id in two environments is two tasks, and metrics equal the file's.
    assert metrics == compute_metrics(rows(tmp_path))
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert [p["env"] for p in manifest["parts"]] == ["a", "b"] and "spec" not in manifest
    assert {r["spec"]["env"]["name"] for r in rows(tmp_path)} == {"a", "b"}
    # Resume: nothing new; then more tasks of `a`.
    again = await gym.collect(
        [Part(env_of("a", 6), limit=4), Part(env_of("b", 3))], model, output=tmp_path, repeats=2
    )
    assert again.new == 0
    more = await gym.collect(
        [Part(env_of("a", 6), limit=6), Part(env_of("b", 3))], model, output=tmp_path, repeats=2
    )
    assert more.new == 4 and more.metrics.by_env["a"].n_tasks == 6
    # Another set of environments is another run.
    with pytest.raises(ConfigError, match=r"field 'parts' is 'a, b' in run.json but 'a, c'"):
        await gym.collect([Part(env_of("a", 6)), Part(env_of("c", 3))], model, output=tmp_path)
    with pytest.raises(ConfigError, match=r"field 'parts\.a\.seed' is 0 in run.json but 1"):
        await gym.collect(
            [Part(env_of("a", 6), limit=6), Part(env_of("b", 3))],
            model,
            output=tmp_path,
            repeats=2,
            seed=1,
        )


async def test_rows_of_an_env_that_is_not_part_of_the_run_name_file_and_line(
    tmp_path: Path,
) -> None:
    parts = [Part(env_of("a", 2)), Part(env_of("b", 2))]
    await gym.collect(parts, ScriptedModel(lambda r: "0"), output=tmp_path)
    path = tmp_path / "rollouts.jsonl"
    lines = path.read_text().splitlines()
    stray = json.loads(lines[2])
    stray["env"] = "zzz"
    path.write_text("\n".join([*lines[:2], json.dumps(stray), *lines[3:]]) + "\n")
    with pytest.raises(ConfigError, match=r"rollouts.jsonl:3: field 'env' is 'zzz' but this run"):
        await gym.collect(
            [Part(env_of("a", 2)), Part(env_of("b", 2))],
            ScriptedModel(lambda r: "0"),
            output=tmp_path,
        )


async def test_variants_tag_every_rollout_and_get_metrics_of_their_own(tmp_path: Path) -> None:
    env = env_of("a", 5)
    parts = [
        Part(env, variant="plain", harness=gym.harnesses.SingleTurn(system_prompt="Be plain.")),
        Part(env, variant="bad", harness=gym.harnesses.SingleTurn(system_prompt="Be bad.")),
    ]
    result = await gym.collect(parts, ScriptedModel(echo_unless("Be bad.")), output=tmp_path)
    written = rows(tmp_path)
    assert sorted({r["metadata"]["variant"] for r in written}) == ["bad", "plain"]
    assert result.metrics.by_variant["plain"].rewards["reward"].mean == 1.0
    assert result.metrics.by_variant["bad"].rewards["reward"].mean == 0.0
    assert result.metrics.n_tasks == 5 and result.metrics.n_rollouts == 10
    # A row of a variant this run does not have is named with its line.
    path = tmp_path / "rollouts.jsonl"
    lines = path.read_text().splitlines()
    stray = json.loads(lines[0])
    stray["metadata"]["variant"] = "other"
    path.write_text("\n".join([json.dumps(stray), *lines[1:]]) + "\n")
    with pytest.raises(ConfigError, match=r"rollouts.jsonl:1: field 'metadata.variant' is 'other'"):
        await gym.collect(parts, ScriptedModel(echo_unless("Be bad.")), output=tmp_path)
    with pytest.raises(ConfigError, match=r"two parts of this run are a\[x\]"):
        await gym.collect(
            [Part(env, variant="x"), Part(env, variant="x")],
            ScriptedModel(["1"]),
            output=tmp_path / "other",
        )


async def test_two_shards_aggregate_to_the_single_run(tmp_path: Path) -> None:
    def model() -> ScriptedModel:
        return ScriptedModel(lambda r: "0" if r.sampling.seed % 3 else r.messages[-1].content[4:])

    def parts() -> list[Part]:
        return [Part(env_of("a", 7), limit=5), Part(env_of("b", 4))]

    whole = await gym.collect(parts(), model(), output=tmp_path / "whole", repeats=3, seed=4)
    for index in range(2):
        await gym.collect(
            parts(), model(), output=tmp_path / f"s{index}", repeats=3, seed=4, shard=(index, 2)
        )
    shard_rows = [rows(tmp_path / f"s{i}") for i in range(2)]
    assert shard_rows[0] and shard_rows[1]
    assert not set(by_key(shard_rows[0])) & set(by_key(shard_rows[1]))
    merged = aggregate([tmp_path / "s0", tmp_path / "s1"], output=tmp_path / "merged")
    assert by_key(rows(tmp_path / "merged")) == by_key(rows(tmp_path / "whole"))
    assert merged.metrics == whole.metrics
    saved = json.loads((tmp_path / "merged" / "metrics.json").read_text())
    assert saved == json.loads(whole.metrics.model_dump_json())
    # Overlapping shards (a shard and the whole run): still one row per key.
    overlap = aggregate([tmp_path / "s0", tmp_path / "whole"], output=tmp_path / "overlap")
    assert len(rows(tmp_path / "overlap")) == len(rows(tmp_path / "whole"))
    assert overlap.metrics == whole.metrics
    # A shard of another run is refused, naming the field.
    await gym.collect(parts(), model(), output=tmp_path / "other", repeats=3, seed=5)
    with pytest.raises(ConfigError, match=r"other/run.json: field 'parts.a.seed' is 5 but 4"):
        aggregate([tmp_path / "s0", tmp_path / "other"], output=tmp_path / "bad")
    # Resuming a shard with another shard setting is refused too.
    with pytest.raises(ConfigError, match=r"field 'shard.index' is 0 in run.json but 1"):
        await gym.collect(parts(), model(), output=tmp_path / "s0", repeats=3, seed=4, shard=(1, 2))


async def test_aggregate_prefers_an_ok_row_and_skips_a_torn_line(tmp_path: Path) -> None:
    calls = {"n": 0}

    def flaky(request: gym.ModelRequest) -> str:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise gym.errors.ModelError("down")
        return request.messages[-1].content.removeprefix("say ")

    await gym.collect(env_of("a", 4), ScriptedModel(flaky), output=tmp_path / "x", concurrency=1)
    await gym.collect(env_of("a", 4), ScriptedModel(flaky), output=tmp_path / "y", concurrency=1)
    with (tmp_path / "y" / "rollouts.jsonl").open("a") as handle:
        handle.write('{"schema_version": 2, "run_id": "torn')
    merged = aggregate([tmp_path / "x", tmp_path / "y"], output=tmp_path / "m")
    assert merged.metrics.n_rollouts == 4 and merged.metrics.n_failed == 0
    assert (tmp_path / "m" / "failures.jsonl").read_text() == ""
    with pytest.raises(ConfigError, match="aggregate writes a new run directory"):
        aggregate([tmp_path / "x"], output=tmp_path / "m")


async def test_the_files_of_a_run_are_as_readable_as_any_other(tmp_path: Path) -> None:
    # write_atomic's temporary file is private (0600); it kept that mode when renamed,
    # so run.json, metrics.json and failures.jsonl were unreadable to a team's others.
    await gym.collect(env_of("a", 2), ScriptedModel(lambda r: "0"), output=tmp_path)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert len(set(modes.values())) == 1, modes


async def test_reverify_of_a_mixed_run_uses_each_parts_verifier(tmp_path: Path) -> None:
    # Two registered environments (so run.json can rebuild them) with other verifiers.
    from nemo_gym import registry

    registry.register("env", "mix-a", EnvA, replace=True)
    registry.register("env", "mix-b", EnvB, replace=True)
    try:
        parts = [Part(gym.make("mix-a")), Part(gym.make("mix-b"), variant="v")]
        await gym.collect(parts, ScriptedModel(lambda r: "0"), output=tmp_path)
        result = await gym.reverify(tmp_path)
        assert result.metrics.by_env["a"].rewards["reward"].mean == 0.5
        assert result.metrics.by_env["b"].rewards["reward"].mean == 0.25
    finally:
        registry.unregister("env", "mix-a")
        registry.unregister("env", "mix-b")


async def half(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return 0.5


async def quarter(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return 0.25


class EnvA(gym.Env):
    name = "a"

    def __init__(self) -> None:
        super().__init__(half, tasks=[gym.Task(id="t", prompt="say 0", answer="0")])


class EnvB(gym.Env):
    name = "b"

    def __init__(self) -> None:
        super().__init__(quarter, tasks=[gym.Task(id="t", prompt="say 0", answer="0")])


ROW = st.builds(
    lambda env, variant, task, repeat, reward, fail: {
        "env": env,
        "task_id": task,
        "repeat": repeat,
        "metadata": {} if variant is None else {"variant": variant},
        **(
            {"status": "failed", "failure": {"kind": "model", "code": "x"}}
            if fail
            else {"status": "ok", "rewards": {"reward": reward}}
        ),
    },
    st.sampled_from(["a", "b"]),
    st.sampled_from([None, "v", "w"]),
    st.sampled_from(["t0", "t1", "t2"]),
    st.integers(0, 2),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(ROW, max_size=40))
def test_each_breakdown_is_the_metrics_of_its_own_rows(rows: list[dict[str, Any]]) -> None:
    whole = compute_metrics(rows)
    for env, metrics in whole.by_env.items():
        alone = compute_metrics([r for r in rows if r["env"] == env])
        assert metrics == alone.model_copy(update={"by_env": {}, "by_variant": {}})
    for variant, metrics in whole.by_variant.items():
        alone = compute_metrics([r for r in rows if r["metadata"].get("variant") == variant])
        if len(whole.by_env) > 1:
            assert metrics.by_env == alone.by_env
        assert metrics.model_copy(update={"by_env": {}}) == alone.model_copy(
            update={"by_env": {}, "by_variant": {}}
        )
    assert whole.n_rollouts == sum(m.n_rollouts for m in whole.by_env.values())
