"""Where names come from besides the registry's own tables: plugins (entry points,
namespaced `<distribution>/<name>`) and one-file environments in local folders.

`nemo_gym.registry` resolves through these after run-time registrations and
built-ins; nothing here keeps state except the entry-point cache (`refresh_plugins`).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nemo_gym.errors import ConfigError
from nemo_gym.spec import Kind

__all__ = [
    "ENTRY_POINT_GROUPS",
    "distribution",
    "load_local",
    "plugin",
    "plugin_map",
    "refresh_plugins",
]

ENTRY_POINT_GROUPS: dict[Kind, str] = {
    "env": "nemo_gym.envs",
    "model": "nemo_gym.models",
    "harness": "nemo_gym.harnesses",
    "verifier": "nemo_gym.verifiers",
    "sandbox": "nemo_gym.sandbox_providers",
}
"""The entry-point group plugins use for each kind (name -> a class or factory)."""


@functools.cache
def plugin_map(kind: Kind) -> dict[str, list[Any]]:
    """Entry points by bare name and by `<distribution>/<name>`; a bare name two
    distributions declare maps to both (a clash `lookup` reports, never a silent pick)."""
    from importlib.metadata import entry_points  # ~10 ms: only when a name is looked up

    found: dict[str, list[Any]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUPS[kind]):
        found.setdefault(ep.name, []).append(ep)
        found.setdefault(f"{distribution(ep)}/{ep.name}", []).append(ep)
    return found


def distribution(ep: Any) -> str:
    """The normalized name of the distribution an entry point comes from."""
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) or "unknown"
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def plugin(kind: Kind, name: str, label: str) -> Any | None:
    """The entry point `name` names (bare or `<distribution>/<name>`), None when none
    does; two distributions declaring one bare name is a `ConfigError` naming both."""
    found = plugin_map(kind).get(name)
    if not found:
        return None
    sources = {distribution(ep) for ep in found}
    if len(sources) > 1:
        qualified = ", ".join(sorted(f"{d}/{name}" for d in sources))
        raise ConfigError(
            f"{len(sources)} installed plugins declare a {label} named {name!r}; "
            f"name the one you mean: {qualified}"
        )
    return found[0]


def refresh_plugins() -> None:
    """Forget the cached entry points (after installing a plugin in this process)."""
    plugin_map.cache_clear()


def load_local(name: str, file: Path) -> Callable[..., Any]:
    """The factory of one-file environment `name` in `file`: its `environment`
    function, or the one environment class whose `name` is the file's."""
    module_name = f"nemo_gym_local_envs.{name}"
    module = sys.modules.get(module_name)
    if module is None or getattr(module, "__file__", None) != str(file):
        spec = importlib.util.spec_from_file_location(module_name, file)
        if spec is None or spec.loader is None:
            raise ConfigError(f"{file}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise ConfigError(f"{file}: importing it raised {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, "environment", None)
    if callable(factory):
        return factory
    classes = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and value.__module__ == module_name
        and getattr(value, "name", None) == name
        and callable(getattr(value, "tasks", None))
    ]
    if len(classes) != 1:
        raise ConfigError(
            f"{file}: define a factory called `environment`, or one environment class "
            f"whose `name` is {name!r} (found {len(classes)})"
        )
    return classes[0]
