"""`Spec`: what rebuilds an object — kind, registry name, version, options, factory.

A leaf module (it imports nothing of nemo_gym), so records, protocols and the registry
can all use it.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KINDS", "Kind", "Spec", "has_opaque", "join_id", "split_id"]

Kind = Literal["env", "model", "harness", "verifier", "sandbox"]
KINDS: tuple[Kind, ...] = get_args(Kind)


def split_id(name: str) -> tuple[str, str | None]:
    """`"name@2"` -> `("name", "2")`, `"name"` -> `("name", None)`: the one reading of
    a registry id (the registry, specs, config files and the CLI all use it)."""
    base, sep, version = name.partition("@")
    return base, (version or None) if sep else None


def join_id(name: str, version: str | None) -> str:
    """`name@version`, or the bare name when there is no version (`split_id`'s inverse)."""
    return name if version is None else f"{name}@{version}"


class Spec(BaseModel):
    """What rebuilds an object: kind, registry name, version, options, factory path.

    `options` are JSON values; an option that was an object with a spec of its own is
    stored as `{"$spec": {...}}` (rebuilt too), any other object as
    `{"$object": "TypeName"}` (recorded, but not rebuildable). Secrets (API keys) are
    never part of a spec.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: Kind
    name: str
    version: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    target: str | None = None

    @property
    def id(self) -> str:
        """`name@version` (or the bare name when there is no version)."""
        return join_id(self.name, self.version)

    @property
    def rebuildable(self) -> bool:
        """Whether `build(self)` can make the object again (no opaque options)."""
        return not has_opaque(self.options)

    def identity(self) -> dict[str, Any]:
        """The fields a resumed run must agree on (the factory path is not one)."""
        return {"name": self.name, "version": self.version, "options": self.options}


def has_opaque(value: Any) -> bool:
    """Whether JSON options hold an object recorded as `$object` (not rebuildable)."""
    if isinstance(value, dict):
        return "$object" in value or any(has_opaque(v) for v in value.values())
    if isinstance(value, list):
        return any(has_opaque(v) for v in value)
    return False
