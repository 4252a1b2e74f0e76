"""Sandbox providers, found by name: `nemo_gym.sandbox.get("local")`.

Built-ins (imported only when asked for): `local` (bubblewrap namespaces), `process`
(plain subprocesses with rlimits, not isolated), `docker`, `apptainer`, `enroot`, and
the remote ones (`e2b`, `daytona`, `opensandbox`, `modal`, `kubernetes`, `ecs`). Providers are
one kind of `nemo_gym.registry`: third-party ones register under the entry-point group
`nemo_gym.sandbox_providers` (or `registry.register("sandbox", name, target)`); the
entry names a provider class or factory, called with the options given to `get`.

```python
provider = nemo_gym.sandbox.get("local")
async with provider.start(SandboxSpec()) as sandbox:
    result = await sandbox.exec("echo hi")
```
"""

from __future__ import annotations

from typing import Any

from nemo_gym import registry
from nemo_gym.errors import ConfigError
from nemo_gym.protocols import SandboxProvider

ENTRY_POINT_GROUP = registry.ENTRY_POINT_GROUPS["sandbox"]


def names() -> list[str]:
    """Every provider name `get` knows: built-ins, registered and installed entry points."""
    return registry.names("sandbox")


def get(name: str, **options: Any) -> SandboxProvider:
    """The provider called `name`, built with `options` (e.g. `get("docker", image=...)`).

    Resolved by the registry's one rule (registered > built-in > entry point). Raises
    `ConfigError` for an unknown name, listing the known ones, or for options the
    provider rejects.
    """
    if not isinstance(name, str):
        raise ConfigError(f"a sandbox provider name must be a string, got {name!r}")
    return registry.build("sandbox", name, **options)


__all__ = ["ENTRY_POINT_GROUP", "get", "names"]
