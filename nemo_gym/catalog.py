"""The environment catalog, the front door of the registry: `make("arithmetic", seed=3)`.

Environments are one kind in `nemo_gym.registry` (built-ins by import path, run-time
`register`, one-file environments in local folders, plugins in the entry-point group
`nemo_gym.envs`), resolved by its one precedence rule. `make("name@2")` builds one
version; a bare name is the latest. `list_envs()` describes each with an `EnvInfo`,
read from what the environment class declares (`domain`, `verification`, `source`,
`license`, `requires`, `splits`, the first docstring line) or what
`registry.register("env", ...)` was told.
`catalog_markdown()` renders them as the catalog page (docs/catalog.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from nemo_gym import registry
from nemo_gym.errors import ConfigError
from nemo_gym.protocols import Environment
from nemo_gym.registry import Spec, add_search_dir
from nemo_gym.spec import join_id

__all__ = [
    "EnvInfo",
    "add_search_dir",
    "catalog_markdown",
    "env_info",
    "list_envs",
    "make",
]


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
    splits: tuple[str, ...] = ()
    origin: str = "builtin"

    @property
    def id(self) -> str:
        """`name@version` (the bare name when unversioned)."""
        return join_id(self.name, self.version)


_INFO_FIELDS = registry.INFO_FIELDS["env"]
_TUPLES = ("requires", "splits")


def make(name: str | Spec, **options: Any) -> Environment:
    """Build the environment registered under `name` (`name@version` for one version)
    with `options`, or rebuild one from its `Spec` (by name only: see `registry.rebuild`
    for a spec whose import path you trust)."""
    if isinstance(name, Spec):
        if options:
            raise TypeError("make(spec) takes no options: they are in the spec")
        return registry.rebuild(name)
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
            declared[field] = tuple(value) if field in _TUPLES else value
    if not declared.get("description") and factory is not None and factory.__doc__:
        declared["description"] = _summary(factory.__doc__)
    declared.update({k: tuple(v) if k in _TUPLES else v for k, v in entry.info.items()})
    version = entry.version or getattr(factory, "version", None)
    return EnvInfo(
        name=entry.name,
        version=str(version) if version is not None else None,
        origin=entry.source,
        **declared,
    )


def _summary(doc: str) -> str:
    """The docstring's first sentence (its first paragraph, when that is short)."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    if len(paragraph) <= 160:
        return paragraph
    end = paragraph.find(". ")
    return paragraph[: end + 1] if 0 < end < 300 else paragraph[:157] + "..."


def list_envs(
    domain: str | None = None, *, search_dirs: Iterable[str | os.PathLike[str]] = ()
) -> list[EnvInfo]:
    """Every environment `make` knows (built-ins, registered, local folders, plugins), by
    name; `domain` keeps one domain; `search_dirs` are searched too, for this query
    only (`add_search_dir` adds a folder for the process)."""
    with registry.searching(search_dirs):
        infos = [env_info(name) for name in registry.names("env")]
    return [info for info in infos if domain is None or info.domain == domain]


def catalog_markdown(infos: Iterable[EnvInfo] | None = None) -> str:
    """The catalog page: one table per domain, generated from the registry."""
    infos = list(infos if infos is not None else list_envs())
    domains = sorted({i.domain for i in infos})
    lines = [
        "# Environment catalog",
        "",
        "<!-- Generated from the registry by `gym list --markdown > docs/catalog.md`;",
        "     tests/envs/test_catalog.py fails when this page and the registry disagree. -->",
        "",
        f"{len(infos)} environments in {len(domains)} domains. `gym list` prints the same; "
        "`gym.make(name)` builds one, `gym.make('name@version')` one version. "
        "*Needs* names what an environment requires beyond the core install.",
        "",
    ]
    for domain in domains:
        lines += [
            f"## {domain}",
            "",
            "| id | what | verified by | data | licence | needs |",
            "|---|---|---|---|---|---|",
        ]
        for info in (i for i in infos if i.domain == domain):
            cells = [
                f"`{info.id}`",
                info.description,
                info.verification,
                info.source,
                info.license,
                ", ".join(info.requires) or "-",
            ]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)
