"""The registry: what a spec built by name records."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

import nemo_gym as gym
from nemo_gym import registry
from nemo_gym.errors import ConfigError


def test_a_model_built_by_name_never_records_its_api_key() -> None:
    # `registry.build` recorded every option it was given, so `gym eval run --api-key`
    # wrote the key into run.json and every row.
    model = registry.build(
        "model", "openai", model="m", base_url="http://127.0.0.1:9/v1", api_key="sk-secret"
    )
    spec = registry.spec_of(model, "model")
    assert spec.options == {"model": "m", "base_url": "http://127.0.0.1:9/v1"}
    assert "sk-secret" not in spec.model_dump_json()


def test_an_env_built_by_name_records_what_its_class_records() -> None:
    env = registry.build("env", "arithmetic", seed=3)
    assert registry.spec_of(env, "env").options == env.to_spec().options == {"seed": 3}


# ------------------------------------------------------------ a registry without magic


class Frozen(registry.Described):
    """A described class that refuses attribute assignment (as a frozen one does)."""

    spec_kind = "harness"

    def __init__(self, *, depth: int = 1, token: SecretStr | None = None) -> None:
        object.__setattr__(self, "depth", depth)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")


def test_described_rewrites_no_constructor() -> None:
    # Described wrapped every subclass's __init__ (functools.wraps): the function a
    # class defined was not the one it ran, and a frozen class could not be built.
    import nemo_gym.envs.math.arithmetic as arithmetic
    from nemo_gym.harnesses import SingleTurn, ToolLoop
    from nemo_gym.models.openai import OpenAIChat

    for cls in (SingleTurn, ToolLoop, OpenAIChat, arithmetic.Arithmetic, Frozen):
        init = cls.__dict__.get("__init__")
        assert init is not None and not hasattr(init, "__wrapped__"), cls
    built = Frozen(depth=3, token=SecretStr("s3cret"))
    assert repr(built) == "Frozen(depth=3)"  # the secret-typed argument never recorded
    assert built.to_spec().options == {"depth": 3}
    assert SingleTurn(system_prompt="Go.").to_spec().options == {"system_prompt": "Go."}


def make_marked(n: int = 2) -> Any:
    """A registered factory: what it builds is a gym.Env, named otherwise."""
    return gym.Env(_anything, name="marked", tasks=[gym.Task(id="t", prompt="p")] * n)


async def _anything(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return 1.0


def test_the_spec_is_carried_on_the_object_and_survives_pickling() -> None:
    # The spec lived in a WeakKeyDictionary keyed by the object: a copy or a pickled
    # object (a Ray worker's) lost it and was described by its type instead.
    with registry.isolated():
        registry.register("env", "marked-test", f"{__name__}:make_marked")
        env = registry.build("env", "marked-test", n=3)
        spec = registry.spec_of(env, "env")
        assert (spec.name, spec.options) == ("marked-test", {"n": 3})
        assert vars(env)[registry.SPEC_ATTRIBUTE] == spec
        for other in (pickle.loads(pickle.dumps(env)), copy.copy(env)):
            assert registry.spec_of(other, "env") == spec
    assert not hasattr(registry, "_specs")


def test_there_is_one_register_for_every_kind() -> None:
    assert gym.register is registry.register
    assert not hasattr(gym.catalog, "register")
    with registry.isolated():
        gym.register("env", "info-test", make_marked, domain="math", description="Marked.")
        info = gym.env_info("info-test")
        assert (info.domain, info.description, info.origin) == ("math", "Marked.", "registered")
        with pytest.raises(ConfigError, match=r"unknown info colour; a environment takes domain"):
            gym.register("env", "info-test-2", make_marked, colour="red")
        with pytest.raises(ConfigError, match=r"unknown info domain; a model takes none"):
            gym.register("model", "m-test", "nemo_gym.models.scripted:ScriptedModel", domain="x")


def test_name_at_version_has_one_spelling() -> None:
    from nemo_gym.config import SpecTable
    from nemo_gym.spec import join_id, split_id

    assert split_id("arithmetic@2") == ("arithmetic", "2")
    assert split_id("arithmetic") == ("arithmetic", None)
    assert join_id(*split_id("a@1.2")) == "a@1.2" and join_id("a", None) == "a"
    spec = SpecTable(name="arithmetic@2").spec("env")
    assert (spec.name, spec.version, spec.id) == ("arithmetic", "2", "arithmetic@2")
    entry = registry.lookup("env", "arithmetic@2")
    assert entry.id == join_id(entry.name, entry.version)
    assert gym.env_info("arithmetic").id == join_id(
        "arithmetic", gym.env_info("arithmetic").version
    )
    # Nothing that reads ids parses one by hand (URLs have an '@' of their own).
    package = Path(gym.__file__).parent
    readers = [package / "registry.py", package / "catalog.py", package / "config.py"]
    for path in [*readers, *(package / "cli").rglob("*.py")]:
        assert 'partition("@")' not in path.read_text(), path


def test_an_unknown_name_suggests_the_close_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"no environment named 'arithmatic'; did you mean 'arithmetic'"
    ):
        registry.build("env", "arithmatic")
