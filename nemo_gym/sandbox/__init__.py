"""Sandbox providers, found by name: `nemo_gym.sandbox.get("local")`.

Built-ins (imported only when asked for): `local` (bubblewrap namespaces), `process`
(plain subprocesses with rlimits, not isolated), `docker`, `apptainer`. Third-party
providers register under the entry-point group `nemo_gym.sandbox_providers`; the entry
point names a provider class or factory, called with the options given to `get`.

```python
provider = nemo_gym.sandbox.get("local")
async with provider.start(SandboxSpec()) as sandbox:
    result = await sandbox.exec("echo hi")
```
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from nemo_gym.errors import ConfigError
from nemo_gym.protocols import SandboxProvider

ENTRY_POINT_GROUP = "nemo_gym.sandbox_providers"

_BUILTINS: dict[str, tuple[str, str]] = {
    "local": ("nemo_gym.sandbox.local", "LocalProvider"),
    "process": ("nemo_gym.sandbox.process", "ProcessProvider"),
    "docker": ("nemo_gym.sandbox.docker", "DockerProvider"),
    "apptainer": ("nemo_gym.sandbox.apptainer", "ApptainerProvider"),
}


def _builtin_factory(name: str) -> Any:
    module_name, attr = _BUILTINS[name]
    return getattr(importlib.import_module(module_name), attr)


def names() -> list[str]:
    """Every provider name `get` knows: built-ins and installed entry points."""
    found = set(_BUILTINS)
    found.update(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return sorted(found)


def get(name: str, **options: Any) -> SandboxProvider:
    """The provider called `name`, built with `options` (e.g. `get("docker", image=...)`).

    Built-in names win over entry points of the same name. Raises `ConfigError` for an
    unknown name, listing the known ones.
    """
    if not isinstance(name, str):
        raise ConfigError(f"a sandbox provider name must be a string, got {name!r}")
    if name in _BUILTINS:
        factory = _builtin_factory(name)
    else:
        matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not matches:
            raise ConfigError(f"unknown sandbox provider {name!r}; known: {', '.join(names())}")
        factory = matches[0].load()
    try:
        provider = factory(**options)
    except TypeError as exc:
        raise ConfigError(f"sandbox provider {name!r} rejected its options: {exc}") from exc
    return provider


__all__ = ["ENTRY_POINT_GROUP", "get", "names"]
