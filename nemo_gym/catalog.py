"""The catalog: environments by name. `make("arithmetic", **options)`.

Built-ins are registered here by module path (imported on first use); plugins add
theirs through the entry-point group `nemo_gym.envs` (name -> a callable returning an
environment), or at run time with `register`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from nemo_gym.errors import ConfigError
from nemo_gym.protocols import Environment

__all__ = ["list_envs", "make", "register"]

EnvFactory = Callable[..., Environment]

_BUILTIN: dict[str, str] = {
    "arithmetic": "nemo_gym.envs.arithmetic:Arithmetic",
    "bank": "nemo_gym.envs.bank:Bank",
    "guess_number": "nemo_gym.envs.guess_number:GuessNumber",
    "code": "nemo_gym.envs.code:CodeEnv",
}
_registered: dict[str, EnvFactory] = {}


def register(name: str, factory: EnvFactory, *, replace: bool = False) -> None:
    """Make `factory(**options)` available as `make(name, **options)`."""
    if not replace and (name in _registered or name in _BUILTIN):
        raise ConfigError(f"an environment named {name!r} is already registered")
    _registered[name] = factory


def _load(target: str) -> EnvFactory:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group="nemo_gym.envs")}


def list_envs() -> list[str]:
    """Every environment name `make` knows: built-ins, registered and plugins."""
    return sorted({*_BUILTIN, *_registered, *_plugins()})


def make(name: str, **options: Any) -> Environment:
    """Build the environment registered under `name` with `options`."""
    if name in _registered:
        return _registered[name](**options)
    if name in _BUILTIN:
        return _load(_BUILTIN[name])(**options)
    plugin = _plugins().get(name)
    if plugin is not None:
        return plugin.load()(**options)
    raise ConfigError(f"no environment named {name!r}; known: {', '.join(list_envs())}")
