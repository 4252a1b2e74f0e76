"""The core's shape (issue 18) and the run-directory items of issue 17: one test (at
least) per defect — files that run nothing, contracts that cannot leak, one options
type, an explicit registry."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, SecretStr

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


# ------------------------------------------------------------ 18.4 contracts that cannot leak


class _Adapter:
    """A policy with a client a harness could call around the recording wrapper."""

    name = "adapter"
    model = "policy-7b"

    def __init__(self) -> None:
        self.inner = ScriptedModel(["4"])
        self.client = self.inner

    async def generate(self, request: gym.ModelRequest) -> gym.ModelResponse:
        return await self.inner.generate(request)


async def test_a_harness_cannot_reach_the_unwrapped_policy() -> None:
    seen: dict[str, Any] = {}

    class Sneaky:
        async def run(
            self, task: gym.Task, episode: Any, model: Any
        ) -> AsyncGenerator[gym.Message, None]:
            seen["name"], seen["model"] = model.name, model.model
            for attribute in ("client", "inner", "generate_batch"):
                try:
                    getattr(model, attribute)
                except AttributeError as exc:
                    seen[attribute] = str(exc)
            yield gym.Message(role="user", content=task.prompt)
            reply = await model.generate(
                gym.ModelRequest(messages=(gym.Message(role="user", content="2+2"),))
            )
            yield reply.message

    env = gym.Env(exact, name="e", tasks=[gym.Task(id="t", prompt="2+2", answer="4")])
    rollout = await gym.rollout(env, _Adapter(), next(iter(env.tasks())), harness=Sneaky())
    assert rollout.ok and len(rollout.trajectory.model_calls) == 1
    assert seen["name"] == "adapter" and seen["model"] == "policy-7b"
    assert "records every call" in seen["client"] and "records every call" in seen["inner"]


async def test_close_all_releases_a_sandbox() -> None:
    from nemo_gym.lifecycle import close_all
    from nemo_gym.sandbox.process import ProcessProvider

    sandbox = await ProcessProvider(use_cgroup=False).create()
    assert sandbox.alive
    await close_all(sandbox)
    assert not sandbox.alive
    assert isinstance(sandbox, gym.protocols.Sandbox)


async def test_the_rollout_deadline_is_the_scope_own_not_a_clock_reading() -> None:
    """The event loop's clock decides when asyncio.timeout fires; a loop whose clock runs
    apart from `time.perf_counter` (a virtual-time test loop, another loop policy) must
    still see its rollout's own deadline as a `timeout` failure."""
    loop = asyncio.get_running_loop()
    real = loop.time
    start = real()
    loop.time = lambda: start + (real() - start) * 200  # type: ignore[method-assign]
    try:

        async def slow(request: gym.ModelRequest) -> str:
            await asyncio.sleep(5.0)  # 25 ms of wall time on this loop
            return "4"

        env = gym.Env(exact, name="e", tasks=[gym.Task(id="t", prompt="2+2", answer="4")])
        rollout = await gym.rollout(env, ScriptedModel(slow), next(iter(env.tasks())), timeout=1.0)
    finally:
        del loop.time
    assert rollout.failure is not None
    assert (rollout.failure.kind, rollout.failure.code) == ("timeout", "timeout")


class Item(BaseModel):
    sku: str
    qty: int


class Order(BaseModel):
    id: int
    items: list[Item]


@gym.tool
async def place(order: Order, note: str = "") -> str:
    """Place an order."""
    assert isinstance(order, Order) and isinstance(order.items[0], Item)
    return f"{order.id}:{order.items[0].qty}{note}"


def test_tool_schema_of_nested_models_is_one_valid_json_schema() -> None:
    schema = place.spec.parameters
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["order"] == {"$ref": "#/$defs/Order"}
    assert set(schema["$defs"]) == {"Order", "Item"}
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"order": {"id": 1, "items": [{"sku": "a", "qty": 2}]}})
    assert not validator.is_valid({"order": {"id": 1, "items": [{"sku": "a"}]}})


async def test_tool_arguments_are_validated_and_coerced() -> None:
    assert await place(order={"id": "7", "items": [{"sku": "a", "qty": "2"}]}) == "7:2"

    def calls(*pairs: tuple[str, str]) -> gym.ModelResponse:
        return gym.ModelResponse(
            message=gym.Message(
                role="assistant",
                tool_calls=tuple(
                    gym.ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(pairs)
                ),
            )
        )

    class E(gym.Env):
        async def open(self, task: gym.Task) -> gym.BasicEpisode:
            return gym.BasicEpisode([place])

    good = '{"order": {"id": "7", "items": [{"sku": "a", "qty": "2"}]}}'
    bad = '{"order": {"id": 7, "items": [{"sku": "a"}]}, "extra": 1}'
    model = ScriptedModel([calls(("place", good), ("place", bad)), "done"])
    task = gym.Task(id="t", prompt="order")
    rollout = await gym.rollout(E(exact, name="e"), model, task, harness=gym.harnesses.ToolLoop())
    first, second = rollout.trajectory.tool_results
    assert first.error is None and first.output == "7:2"
    assert second.error is not None and second.error.startswith("invalid arguments for 'place'")
    assert "order.items.0.qty: Field required" in second.error
    assert "extra: Extra inputs are not permitted" in second.error
    # ToolLoop's rule: the error goes back to the model as the tool's result.
    shown = [m.content for m in model.requests[1].messages if m.role == "tool"]
    assert shown[1] == f"Error: {second.error}"
    # With tool_errors="fail" the same error ends the rollout as a tool failure.
    model = ScriptedModel([calls(("place", bad)), "done"])
    failed = await gym.rollout(
        E(exact, name="e"), model, task, harness=gym.harnesses.ToolLoop(tool_errors="fail")
    )
    assert failed.failure is not None and failed.failure.kind == "tool"


def test_deeply_nested_tool_arguments_are_malformed_arguments() -> None:
    call = gym.ToolCall(id="c", name="place", arguments="[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        call.parsed_arguments()


# ------------------------------------------------------------- 18.2 one definition of options


def _arith(n: int = 3) -> gym.Env:
    tasks = [gym.Task(id=f"t{i}", prompt=f"{i}+0", answer=str(i)) for i in range(n)]
    return gym.Env(exact, name="arith", tasks=tasks)


def test_evaluate_takes_collect_options_in_memory_too(tmp_path: Path) -> None:
    seen: list[str] = []
    result = gym.evaluate(
        _arith(), ScriptedModel(["0"], cycle=True), on_rollout=lambda r: seen.append(r.task_id)
    )
    assert sorted(seen) == ["t0", "t1", "t2"] and result.metrics.n_rollouts == 3
    written = gym.evaluate(
        _arith(),
        ScriptedModel(["0"], cycle=True),
        output=tmp_path / "run",
        backend="local",
        on_rollout=lambda r: seen.append(r.task_id),
    )
    assert written.new == 3 and len(seen) == 6


def test_in_memory_evaluate_counts_what_it_ran() -> None:
    result = gym.evaluate(_arith(), ScriptedModel(["0"], cycle=True), repeats=2)
    assert result.new == 6 == len(result.rollouts)


async def test_a_mistyped_option_fails_at_the_call_and_names_the_right_one(
    tmp_path: Path,
) -> None:
    env, model = _arith(), ScriptedModel(["0"], cycle=True)
    with pytest.raises(TypeError, match=r"'concurency'; did you mean 'concurrency'\?"):
        gym.rollouts(env, model, concurency=4)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"'repeat'; did you mean 'repeats'\?"):
        gym.groups(env, model, repeats=2, repeat=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="needs repeats="):
        gym.groups(env, model)
    with pytest.raises(TypeError, match=r"collect\(\) got an unexpected keyword argument 'skip'"):
        await gym.collect(env, model, output=tmp_path, skip=set())  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'retry_faild'; did you mean 'retry_failed'"):
        gym.evaluate(env, model, retry_faild=True)  # type: ignore[call-arg]


def test_one_options_type_no_private_flag_in_public_signatures() -> None:
    import dataclasses
    import inspect

    from nemo_gym import options
    from nemo_gym.integrations import ray

    fields = {f.name for f in dataclasses.fields(options.RunSettings)}
    assert fields == options.STREAM_OPTIONS | options.COLLECT_OPTIONS
    for fn in (gym.rollouts, gym.groups, gym.collect, gym.evaluate, ray.rollouts, ray.groups):
        parameters = inspect.signature(fn).parameters
        assert not [p for p in parameters if p.startswith("_")], fn
        assert parameters["options"].kind is inspect.Parameter.VAR_KEYWORD, fn


# ---------------------------------------------------------------- 18.3 a registry without magic


class TokenEnv(gym.Env):
    """A user environment that takes credentials (not named api_key)."""

    name = "token_env"

    def __init__(self, *, token: str = "", password: SecretStr | None = None, n: int = 2) -> None:
        super().__init__(
            exact, tasks=[gym.Task(id=f"t{i}", prompt="1", answer="1") for i in range(n)]
        )
        self.token, self.password, self.n = token, password, n


async def test_secrets_never_reach_run_json(tmp_path: Path) -> None:
    env = TokenEnv(token="hunter2-token", password=SecretStr("hunter2-password"), n=2)
    spec = registry.spec_of(env, "env")
    assert spec.options == {"n": 2}
    registry.register("env", "token-env-test", TokenEnv, replace=True)
    try:
        built = gym.make("token-env-test", token="hunter2-token", n=1)
    finally:
        registry.unregister("env", "token-env-test")
    assert registry.spec_of(built, "env").options == {"n": 1}
    await gym.collect(env, ScriptedModel(["1"], cycle=True), output=tmp_path)
    for file in tmp_path.iterdir():
        assert "hunter2" not in file.read_text(), file.name
    # A secret typed as such is left out under any name, also inside an option's mapping.
    assert registry.jsonable_options(
        {"key": SecretStr("s"), "headers": {"Authorization": "Bearer s", "x": 1}}
    ) == {"headers": {"x": 1}}


def test_an_unknown_name_says_what_was_meant() -> None:
    with pytest.raises(
        ConfigError, match=r"no environment named 'arithmetc'; did you mean 'arithmetic'"
    ):
        gym.make("arithmetc")


class _FakeDist:
    def __init__(self, name: str) -> None:
        self.name = name


class _FakeEntryPoint:
    def __init__(self, name: str, value: str, dist: str) -> None:
        self.name, self.value, self.dist = name, value, _FakeDist(dist)


def test_two_plugins_with_one_name_are_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    eps = [
        _FakeEntryPoint("twin", f"{__name__}:Marker", "pkg-one"),
        _FakeEntryPoint("twin", f"{__name__}:TokenEnv", "pkg_two"),
        _FakeEntryPoint("solo", f"{__name__}:Marker", "pkg-one"),
    ]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: eps)
    registry.refresh_plugins()
    try:
        with pytest.raises(
            ConfigError, match=r"2 installed plugins .* 'twin'.*pkg-one/twin, pkg-two/twin"
        ):
            gym.make("twin")
        assert isinstance(gym.make("pkg-two/twin"), TokenEnv)
        assert isinstance(gym.make("pkg-one/twin"), Marker)
        assert isinstance(gym.make("solo"), Marker)
        listed = registry.names("env")
        assert {"pkg-one/twin", "pkg-two/twin", "solo"} <= set(listed) and "twin" not in listed
    finally:
        monkeypatch.undo()
        registry.refresh_plugins()


def test_listing_with_search_dirs_leaves_the_search_path_alone(tmp_path: Path) -> None:
    (tmp_path / "local_probe.py").write_text(
        "import nemo_gym as gym\n\n"
        "async def v(task, trajectory):\n    return 1.0\n\n"
        "def environment():\n    return gym.Env(v, name='local_probe', tasks=[])\n"
    )
    before = registry.search_dirs()
    names = [info.name for info in gym.list_envs(search_dirs=[tmp_path])]
    assert "local_probe" in names
    assert registry.search_dirs() == before
    assert "local_probe" not in registry.names("env")


# ------------------------------------------------ 17.3 deeply nested JSON in a run directory


async def test_deeply_nested_json_in_a_run_directory_is_a_clear_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    await gym.collect(_arith(2), ScriptedModel(["0"], cycle=True), output=run)
    deep = "[" * 200_000 + "]" * 200_000
    good = (run / "rollouts.jsonl").read_text()
    (run / "rollouts.jsonl").write_text(good + '{"task_id": "t9", "metadata": ' + deep + "}\n")
    with pytest.raises(ConfigError, match=r"rollouts\.jsonl:3: JSON nested too deeply"):
        list(gym.read_rollouts(run))
    with pytest.raises(ConfigError, match=r"rollouts\.jsonl:3: JSON nested too deeply"):
        await gym.collect(_arith(2), ScriptedModel(["0"], cycle=True), output=run)
    with pytest.raises(ConfigError, match=r"rollouts\.jsonl:3: JSON nested too deeply"):
        gym.analysis.profile(run)
    (run / "rollouts.jsonl").write_text(good)
    (run / "run.json").write_text('{"run_id": ' + deep + "}")
    with pytest.raises(ConfigError, match=r"run\.json: JSON nested too deeply"):
        await gym.reverify(run)
    with pytest.raises(ConfigError, match=r"run\.json: JSON nested too deeply"):
        gym.aggregate([run], output=tmp_path / "merged")


def test_no_module_imports_another_module_private_names() -> None:
    import ast

    package = Path(gym.__file__).parent
    found = []
    for file in package.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nemo_gym"):
                module = node.module or ""
                # A private module (`verify/_exact.py`) is its package's to share.
                if any(part.startswith("_") for part in module.split(".")):
                    continue
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private:
                    found.append(f"{file.relative_to(package)}: {module} {private}")
    assert not found, found


def test_an_isolated_registry_leaves_the_process_registry_alone(tmp_path: Path) -> None:
    with registry.isolated() as inner:
        registry.register("env", "only-inside", Marker)
        registry.add_search_dir(tmp_path)
        assert isinstance(gym.make("only-inside"), Marker)
        assert inner.search_dirs == [tmp_path.resolve()]
        assert isinstance(gym.make("arithmetic"), gym.Env)  # built-ins resolve as always
    assert registry.active() is registry.default_registry
    assert "only-inside" not in registry.names("env")
    assert tmp_path.resolve() not in registry.search_dirs()


async def test_tools_made_per_episode_share_a_validator_but_not_their_classes() -> None:
    def make() -> tuple[gym.Tool, type[BaseModel]]:
        class Point(BaseModel):
            x: int

        async def move(to: Point) -> str:
            """Move."""
            return type(to).__qualname__ if isinstance(to, Point) else "wrong class"

        # This module's annotations are strings; a local class resolves only as an object.
        move.__annotations__ = {"to": Point, "return": str}
        return gym.tool(move), Point

    first, _ = make()
    second, _ = make()
    # Each tool's argument is its own call's class (a shared validator would build the
    # first call's Point, and `isinstance` would fail for the second).
    assert await first(to={"x": "1"}) == await second(to={"x": 2})
    assert (await second(to={"x": 2})).endswith("make.<locals>.Point")
    assert first.spec.parameters == second.spec.parameters
    assert first.spec.parameters is not second.spec.parameters
    one, two = place, gym.tool(place.fn)
    assert one.arguments is two.arguments  # one signature, one validator built


# ------------------------------------------------ 18.1 run.json: typed, versioned, migrated

# The shapes run.json has had, as the code of each release wrote them (git history of
# nemo_gym/collect.py: b8da8ca, 52f43b3, ad589b4).
_SPEC = {
    "env": {"kind": "env", "name": "arithmetic", "version": "1", "options": {"seed": 1}},
    "model": {"kind": "model", "name": "scripted", "options": {}},
    "harness": {"kind": "harness", "name": "single_turn", "options": {}},
    "sampling": None,
    "seed": 0,
    "repeats": 1,
    "split": "test",
}
_V1 = {
    "run_id": "r1",
    "created_at": 1.5,
    "env": "arithmetic",
    "seed": 0,
    "repeats": 2,
    "split": "test",
    "limit": 3,
    "model": "<ScriptedModel object at 0x7f>",
    "harness": None,
    "sampling": None,
}
_V2_SINGLE = {"schema_version": 2, "run_id": "r2", "created_at": 2.5, "spec": _SPEC, "limit": 3}
_V2_PARTS = {
    "schema_version": 2,
    "run_id": "r3",
    "created_at": 3.5,
    "parts": [
        {"env": "arithmetic", "variant": None, "spec": _SPEC, "limit": 3, "source": None},
        {"env": "arithmetic", "variant": "b", "spec": _SPEC, "limit": None, "source": "f.jsonl"},
    ],
    "shard": {"index": 0, "count": 2},
}


def _manifest_file(tmp_path: Path, raw: Any) -> Path:
    path = tmp_path / "run.json"
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    return path


def test_each_older_run_json_shape_migrates_to_the_manifest(tmp_path: Path) -> None:
    from nemo_gym.records import RunSpec
    from nemo_gym.rundir.manifest import read_manifest

    v1 = read_manifest(_manifest_file(tmp_path, _V1))
    assert v1 is not None and v1.run_id == "r1" and v1.created_at == 1.5
    [part] = v1.parts
    assert (part.env, part.spec, part.limit) == ("arithmetic", None, 3)
    assert not v1.resumable  # its model was a repr: nothing to check a resume against

    single = read_manifest(_manifest_file(tmp_path, _V2_SINGLE))
    assert single is not None and single.resumable and single.shard is None
    [part] = single.parts
    assert part.spec == RunSpec.model_validate(_SPEC) and part.limit == 3

    mixed = read_manifest(_manifest_file(tmp_path, _V2_PARTS))
    assert mixed is not None and [p.label for p in mixed.parts] == ["arithmetic", "arithmetic[b]"]
    assert mixed.shard is not None and (mixed.shard.index, mixed.shard.count) == (0, 2)

    # Written back, each reads as itself (the single-part mirror at the top level too).
    for manifest in (v1, single, mixed):
        again = read_manifest(_manifest_file(tmp_path, manifest.to_json()))
        assert again is not None and again.model_dump() == manifest.model_dump()
    written = json.loads(single.to_json())
    assert RunSpec.model_validate(written["spec"]) == RunSpec.model_validate(_SPEC)


async def test_a_run_written_before_mixed_runs_resumes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env, model = gym.make("arithmetic", seed=1), ScriptedModel(["1"], cycle=True)
    await gym.collect(env, model, output=run, limit=2)
    current = json.loads((run / "run.json").read_text())
    old = {k: current[k] for k in ("schema_version", "run_id", "created_at", "spec", "limit")}
    (run / "run.json").write_text(json.dumps(old))
    result = await gym.collect(env, model, output=run, limit=3)
    assert result.new == 1  # the two stored rollouts were recognised as this run's
    assert json.loads((run / "run.json").read_text())["run_id"] == current["run_id"]


async def test_a_version_1_run_is_reported_and_reverified(tmp_path: Path) -> None:
    run = tmp_path / "run"
    await gym.collect(
        gym.make("arithmetic", seed=1), ScriptedModel(["1"], cycle=True), output=run, limit=2
    )
    (run / "run.json").write_text(json.dumps(_V1))
    assert (await gym.reverify(run)).new == 2  # rebuilt by the name it recorded
    html = gym.analysis.render(gym.analysis.profile(run))
    assert "run r1 · model ?" in html


@pytest.mark.parametrize("version", [3, 99, 10**30])
async def test_a_run_json_of_a_future_version_is_refused_naming_it(
    tmp_path: Path, version: int
) -> None:
    run = tmp_path / "run"
    await gym.collect(_arith(2), ScriptedModel(["0"], cycle=True), output=run)
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, "schema_version": version}))
    message = r"run\.json: field 'schema_version' is \d+.*versions 1 to 2; upgrade nemo_gym"
    with pytest.raises(ConfigError, match=message):
        await gym.collect(_arith(2), ScriptedModel(["0"], cycle=True), output=run)
    with pytest.raises(ConfigError, match=message):
        await gym.reverify(run)
    with pytest.raises(ConfigError, match=message):
        gym.aggregate([run], output=tmp_path / "merged")
    with pytest.raises(ConfigError, match=message):
        gym.analysis.profile(run)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"run_id": 5}, "run_id"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"parts": "all"}, "parts"),
        ({"parts": [5]}, "parts[0]"),
        ({"parts": []}, "parts"),
        ({"parts": [{"spec": {"env": 5}}]}, "parts[0].spec.env"),
        ({"parts": [{"spec": {**_SPEC, "evil": 1}}]}, "parts[0].spec.evil"),
        ({"parts": [{"spec": _SPEC, "limit": -1}]}, "parts[0].limit"),
        ({"parts": [{"spec": _SPEC, "limit": 10**30}]}, "parts[0].limit"),
        ({"shard": {"index": 5, "count": 2}}, "shard"),
        ({"shard": {"index": 0, "count": 0}}, "shard.count"),
        ({"schema_version": "2"}, "schema_version"),
        ({"schema_version": True}, "schema_version"),
        ({"schema_version": 2.0}, "schema_version"),
        ({"aggregated_from": [{"run_id": "x"}]}, "aggregated_from[0].path"),
        ({"spec": None, "parts": None}, "spec"),
        ({"parts": None}, "parts"),
    ],
)
def test_a_hostile_run_json_is_refused_naming_the_field(
    tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    from nemo_gym.rundir.manifest import read_manifest

    raw = {**_V2_PARTS, **change}
    if change.get("parts") is None and "parts" in change:
        del raw["parts"]
    path = _manifest_file(tmp_path, raw)
    with pytest.raises(ConfigError) as caught:
        read_manifest(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert f"field '{field}'" in message, message


@pytest.mark.parametrize(
    "text",
    [
        '{"run_id": "r", "created_at": 1' + "0" * 5000 + "}",  # int() refuses > 4300 digits
        '{"run_id": "r", "created_at": Infinity, "parts": [{}]}',
        '{"run_id": "r", "created_at": NaN, "parts": [{}]}',
        "[" * 100 + "]" * 100,
        '{"run_id": "' + "x" * 300 + '", "created_at": 1, "parts": [{}]}',
        '{"a": ' + "[" * 80 + "]" * 80 + "}",
        "\xff\xfe",
        "",
        "null",
    ],
)
def test_a_malformed_run_json_is_a_config_error_never_a_traceback(
    tmp_path: Path, text: str
) -> None:
    from nemo_gym.rundir.manifest import read_manifest

    path = tmp_path / "run.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: "):
        read_manifest(path)


def test_unknown_top_level_keys_in_run_json_are_ignored(tmp_path: Path) -> None:
    from nemo_gym.rundir.manifest import read_manifest

    manifest = read_manifest(_manifest_file(tmp_path, {**_V2_PARTS, "from_the_future": [1]}))
    assert manifest is not None and "from_the_future" not in manifest.to_json()


def test_an_oversized_run_json_is_refused_before_it_is_read(tmp_path: Path) -> None:
    from nemo_gym.rundir.manifest import MANIFEST_LIMITS, read_manifest

    path = tmp_path / "run.json"
    with path.open("wb") as handle:
        handle.truncate(MANIFEST_LIMITS.max_chars + 1)  # sparse: costs no disk
    with pytest.raises(ConfigError, match=r"run\.json: \d+ bytes, over the"):
        read_manifest(path)


async def test_a_report_of_a_hostile_run_json_is_a_clear_error(tmp_path: Path) -> None:
    # `parts: [5]` crashed the report with AttributeError: the header read parts[0].get.
    run = tmp_path / "run"
    await gym.collect(_arith(2), ScriptedModel(["0"], cycle=True), output=run)
    (run / "run.json").write_text(json.dumps({**_V2_PARTS, "parts": [5]}))
    with pytest.raises(ConfigError, match=r"run\.json: field 'parts\[0\]'"):
        gym.analysis.render(gym.analysis.profile(run))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raw=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "schema_version",
                        "run_id",
                        "created_at",
                        "parts",
                        "spec",
                        "env",
                        "shard",
                        "limit",
                        "kind",
                        "name",
                        "index",
                        "count",
                        "model",
                        "harness",
                        "x",
                    ]
                ),
                inner,
                max_size=6,
            )
        ),
        max_leaves=20,
    )
)
def test_any_json_as_run_json_is_a_manifest_or_a_config_error(raw: Any) -> None:
    from nemo_gym.rundir.manifest import Manifest, parse_manifest

    try:
        assert isinstance(parse_manifest(raw, "run.json"), Manifest)
    except ConfigError as exc:
        assert str(exc).startswith("run.json: ")


async def test_a_number_too_long_to_convert_is_a_config_error_naming_the_line(
    tmp_path: Path,
) -> None:
    # json.loads raises a bare ValueError past 4,300 digits: it escaped as a traceback.
    run = tmp_path / "run"
    await gym.collect(_arith(2), ScriptedModel(["0"], cycle=True), output=run)
    good = (run / "rollouts.jsonl").read_text()
    (run / "rollouts.jsonl").write_text(good + '{"task_id": "t9", "repeat": 1' + "0" * 5000 + "}\n")
    with pytest.raises(ConfigError, match=r"rollouts\.jsonl:3: not valid JSON"):
        list(gym.read_rollouts(run))
    (run / "rollouts.jsonl").write_text(good)
    (run / "run.json").write_text('{"run_id": "r", "created_at": 1' + "0" * 5000 + "}")
    with pytest.raises(ConfigError, match=r"run\.json: not valid JSON"):
        await gym.reverify(run)
