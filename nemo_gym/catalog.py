"""The environment catalog, the front door of the registry: `make("arithmetic", seed=3)`.

Environments are one kind in `nemo_gym.registry` (built-ins by import path, run-time
`register`, plugins in the entry-point group `nemo_gym.envs`), resolved by its one
precedence rule. `list_envs()` describes each with an `EnvInfo`, read from what the
environment class declares (`domain`, `description`, ...) or what `register` was told.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from nemo_gym import registry
from nemo_gym.errors import ConfigError
from nemo_gym.protocols import Environment
from nemo_gym.registry import Spec

__all__ = ["EnvInfo", "env_info", "list_envs", "make", "register"]

EnvFactory = Callable[..., Environment]


class EnvInfo(BaseModel):
    """What an environment says about itself, for `gym list` and the catalog page."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str
    version: str | None = None
    domain: str = "other"
    verification: str = ""
    description: str = ""
    source: str = ""
    license: str = ""
    requires: tuple[str, ...] = ()
    origin: str = "builtin"


_INFO_FIELDS = ("domain", "verification", "description", "source", "license", "requires")


def register(
    name: str,
    factory: EnvFactory | str,
    *,
    version: str | None = None,
    replace: bool = False,
    **info: Any,
) -> None:
    """Make `factory(**options)` available as `make(name, **options)`.

    `factory` may be an import path (`"mypkg.envs:MyEnv"`), which is what lets another
    process (a Ray worker, `gym eval reverify`) rebuild the environment from its spec.
    `info` fills `EnvInfo` (domain, description, ...).
    """
    unknown = set(info) - set(_INFO_FIELDS)
    if unknown:
        raise ConfigError(f"register({name!r}): unknown info {', '.join(sorted(unknown))}")
    registry.register("env", name, factory, version=version, replace=replace, **info)


def make(name: str | Spec, **options: Any) -> Environment:
    """Build the environment registered under `name` (`name@version` for one version)
    with `options`, or rebuild one from its `Spec`."""
    if isinstance(name, Spec):
        if options:
            raise TypeError("make(spec) takes no options: they are in the spec")
        return registry.build(name)
    return registry.build("env", name, **options)


def env_info(name: str) -> EnvInfo:
    """The `EnvInfo` of one environment (imports its module to read what it declares)."""
    entry = registry.lookup("env", name)
    declared: dict[str, Any] = {}
    try:
        factory = entry.load()
    except ConfigError:
        factory = None
    for field in _INFO_FIELDS:
        value = getattr(factory, field, None)
        if isinstance(value, str | tuple | list) and value:
            declared[field] = tuple(value) if field == "requires" else value
    if not declared.get("description") and factory is not None and factory.__doc__:
        declared["description"] = factory.__doc__.strip().splitlines()[0]
    declared.update(entry.info)
    version = entry.version or getattr(factory, "version", None)
    return EnvInfo(
        name=entry.name,
        version=str(version) if version is not None else None,
        origin=entry.source,
        **declared,
    )


def list_envs(domain: str | None = None) -> list[EnvInfo]:
    """Every environment `make` knows (built-ins, registered, plugins), by name;
    `domain` keeps one domain."""
    infos = [env_info(name) for name in registry.names("env")]
    return [info for info in infos if domain is None or info.domain == domain]
