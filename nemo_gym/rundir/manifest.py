"""A run directory's `run.json`: what ran, and what another run must share with it.

`Manifest` is the typed, versioned `run.json`; `read_manifest` is the one reader every
client uses (collect's resume, reverify, aggregate, the analysis, the CLI through them).
It migrates each shape an older nemo_gym wrote to the current one:

- version 1 (no `schema_version`): `env` (a name), `seed`, `repeats`, `split`, `limit`,
  and `model`/`harness` as Python reprs, so its parts carry no `RunSpec`
  (`ManifestPart.spec is None`): it can be reverified and reported, not resumed;
- version 2 of one environment, written before mixed runs: a top-level `spec` and
  `limit` and no `parts`;
- version 2 (current): `parts`, `shard`, and for a run of one environment the first
  part's `spec` and `limit` again at the top level (what older readers look for).

A `run.json` is data, possibly someone else's: every failure to read it — not JSON,
over `MANIFEST_LIMITS`, a field of the wrong type or out of range, a version newer than
this release — is a `ConfigError` naming the file and the field. Unknown top-level keys
are ignored (a newer release of the same version may add one).

`run_identity` is what two runs must agree on to be one run (each part's env, model and
harness spec identity, sampling, seed, repeats, split and task source; the shard to
resume), and `first_difference` names the first field they differ in.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from nemo_gym.errors import ConfigError
from nemo_gym.limits import DocumentLimits, LimitExceeded, check_document
from nemo_gym.records import SCHEMA_VERSION, RunSpec, Sampling
from nemo_gym.rundir.files import loads

__all__ = [
    "MANIFEST_LIMITS",
    "MANIFEST_VERSION",
    "AggregatedFrom",
    "Manifest",
    "ManifestPart",
    "Shard",
    "check_resume",
    "first_difference",
    "merged_manifest",
    "new_manifest",
    "parse_manifest",
    "part_label",
    "read_manifest",
    "run_identity",
    "spec_identity",
]

MANIFEST_VERSION = SCHEMA_VERSION
"""The `schema_version` this release writes in `run.json` (the rows' version: a run
directory is versioned as a whole)."""

MANIFEST_LIMITS = DocumentLimits(max_chars=16 << 20, max_nodes=1_000_000, max_depth=64)
"""What a `run.json` may cost to read: far above any run's (a few KB per part)."""

_BIG = 1 << 62  # counts and ids beyond this are not a run's: refused, not computed with


class _Model(BaseModel):
    # A newer release of the same version may add a field: ignored, not refused. The
    # specs inside (`RunSpec`) forbid unknown fields, so nothing that rebuilds is lost.
    model_config = ConfigDict(frozen=True, extra="ignore")


class Shard(_Model):
    """Which share of each part's tasks a run holds: every `count`-th, from `index`."""

    index: int = Field(ge=0, le=_BIG)
    count: int = Field(ge=1, le=_BIG)

    @model_validator(mode="after")
    def _index_below_count(self) -> Shard:
        if self.index >= self.count:
            raise ValueError(f"index {self.index} is not below count {self.count}")
        return self


class ManifestPart(_Model):
    """One environment (or variant) of a run: its `RunSpec`, task limit and source.

    `env` is the environment's name (None in a run of one environment written before
    mixed runs: its rows name it); `spec` is None only in a run a version-1 nemo_gym
    wrote, which recorded the environment's name and nothing rebuildable of the rest.
    """

    env: str | None = None
    variant: str | None = None
    spec: RunSpec | None = None
    limit: int | None = Field(default=None, ge=0, le=_BIG)
    source: str | None = None

    @property
    def label(self) -> str:
        """How the part is named in messages: `env` or `env[variant]`."""
        return part_label(self.env, self.variant)


class AggregatedFrom(_Model):
    """One shard `aggregate` merged: its directory, run id and shard."""

    path: str
    run_id: str | None = None
    shard: Shard | None = None


class Manifest(BaseModel):
    """A run's `run.json`, read (and migrated) by `read_manifest`, written by `to_json`."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: int = Field(default=MANIFEST_VERSION, ge=MANIFEST_VERSION, le=MANIFEST_VERSION)
    run_id: str = Field(min_length=1, max_length=256)
    created_at: FiniteFloat
    parts: tuple[ManifestPart, ...] = Field(min_length=1)
    shard: Shard | None = None
    aggregated_from: tuple[AggregatedFrom, ...] | None = None
    reverified_from: str | None = None
    reverified_at: FiniteFloat | None = None
    # The file had no `parts` (a run written before mixed runs): its one part's fields
    # are at the top level, and messages name them there.
    _top_level_part: bool = PrivateAttr(default=False)
    # The version the file was written in (the model itself is always the current one).
    _read_version: int = PrivateAttr(default=MANIFEST_VERSION)

    def part_field(self, index: int, name: str) -> str:
        """How the file names field `name` of part `index` (for messages)."""
        return name if self._top_level_part else f"parts[{index}].{name}"

    @property
    def resumable(self) -> bool:
        """Whether a run may append to this one: every part has a `RunSpec`."""
        return self._read_version == MANIFEST_VERSION and all(
            part.spec is not None for part in self.parts
        )

    def to_json(self) -> str:
        """The `run.json` text, in the shape every release since mixed runs reads."""
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "created_at": self.created_at,
        }
        parts = [part.model_dump(mode="json") for part in self.parts]
        if len(parts) == 1 and parts[0]["spec"] is not None:
            out["spec"] = parts[0]["spec"]  # what a run of one environment has always said
            out["limit"] = parts[0]["limit"]
        out["parts"] = parts
        out["shard"] = None if self.shard is None else self.shard.model_dump()
        for name in ("aggregated_from", "reverified_from", "reverified_at"):
            value = getattr(self, name)
            if value is not None:
                out[name] = (
                    [a.model_dump(mode="json") for a in value]
                    if name == "aggregated_from"
                    else value
                )
        return json.dumps(out, indent=2)


class _Version1(BaseModel):
    """`run.json` as version 1 wrote it (model and harness were reprs: not kept)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] | None = None
    run_id: str = Field(min_length=1, max_length=256)
    created_at: FiniteFloat
    env: str
    limit: int | None = Field(default=None, ge=0, le=_BIG)
    seed: int | None = None
    repeats: int = 1
    split: str = "test"
    sampling: Sampling | None = None
    reverified_from: str | None = None
    reverified_at: FiniteFloat | None = None

    def migrate(self) -> Manifest:
        out = Manifest(
            run_id=self.run_id,
            created_at=self.created_at,
            parts=(ManifestPart(env=self.env, limit=self.limit),),
            reverified_from=self.reverified_from,
            reverified_at=self.reverified_at,
        )
        out._top_level_part = True
        out._read_version = self.schema_version or 1
        return out


class _Version2Single(BaseModel):
    """`run.json` of one environment as version 2 wrote it before mixed runs."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: int
    run_id: str = Field(min_length=1, max_length=256)
    created_at: FiniteFloat
    spec: RunSpec
    limit: int | None = Field(default=None, ge=0, le=_BIG)
    shard: Shard | None = None
    aggregated_from: tuple[AggregatedFrom, ...] | None = None
    reverified_from: str | None = None
    reverified_at: FiniteFloat | None = None

    def migrate(self) -> Manifest:
        out = Manifest(
            run_id=self.run_id,
            created_at=self.created_at,
            parts=(ManifestPart(spec=self.spec, limit=self.limit),),
            shard=self.shard,
            aggregated_from=self.aggregated_from,
            reverified_from=self.reverified_from,
            reverified_at=self.reverified_at,
        )
        out._top_level_part = True
        out._read_version = self.schema_version or 1
        return out


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for item in loc:
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else str(item))
    return out or "(top level)"


def _error(path: Path | str, exc: ValidationError) -> ConfigError:
    first = exc.errors(include_url=False, include_input=False)[0]
    more = exc.error_count() - 1
    also = f" (and {more} more)" if more else ""
    return ConfigError(f"{path}: field {_field(first['loc'])!r}: {first['msg']}{also}")


def parse_manifest(raw: Any, path: Path | str) -> Manifest:
    """A parsed `run.json` as a `Manifest`, migrated from the shape its version wrote;
    `ConfigError` naming `path` and the field when it is not a run of this nemo_gym."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    version = raw.get("schema_version")
    if version is not None and (type(version) is not int or not 1 <= version <= MANIFEST_VERSION):
        shown = repr(version) if len(repr(version)) <= 40 else repr(version)[:40] + "..."
        raise ConfigError(
            f"{path}: field 'schema_version' is {shown}; this nemo_gym reads run.json "
            f"versions 1 to {MANIFEST_VERSION}"
            + (
                "; upgrade nemo_gym to read it"
                if type(version) is int and version > MANIFEST_VERSION
                else ""
            )
        )
    try:
        if version is None or version == 1:
            return _Version1.model_validate(raw).migrate()
        if "parts" not in raw:
            if "spec" not in raw:
                raise ConfigError(
                    f"{path}: no field 'parts' (or 'spec'): not a run of this nemo_gym"
                )
            return _Version2Single.model_validate(raw).migrate()
        # Read as the current version (an older one whose shape had `parts` is the same
        # shape); the version it was written in is kept for resume to check.
        out = Manifest.model_validate({**raw, "schema_version": MANIFEST_VERSION})
        out._read_version = version
        return out
    except ValidationError as exc:
        raise _error(path, exc) from None


def read_manifest(path: Path) -> Manifest | None:
    """A run's `run.json`, typed and migrated, or None when there is none; every way it
    can be unreadable is a `ConfigError` naming the file (and the field)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size > MANIFEST_LIMITS.max_chars:
        raise ConfigError(
            f"{path}: {size} bytes, over the {MANIFEST_LIMITS.max_chars} a run.json may have"
        )
    raw = loads(path.read_bytes(), str(path))
    try:
        check_document(raw, MANIFEST_LIMITS)
    except LimitExceeded as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return parse_manifest(raw, path)


def part_label(env: str | None, variant: str | None) -> str:
    """How a part is named in messages: `env` or `env[variant]`."""
    return f"{env}" if variant is None else f"{env}[{variant}]"


def new_manifest(
    parts: Sequence[ManifestPart], run_id: str, shard: tuple[int, int] | None
) -> Manifest:
    """A new `run.json` for these parts and shard."""
    return Manifest(
        run_id=run_id,
        created_at=time.time(),
        parts=tuple(parts),
        shard=None if shard is None else Shard(index=shard[0], count=shard[1]),
    )


def spec_identity(spec: RunSpec | None) -> dict[str, Any]:
    """The fields of a run spec a resumed run must agree on."""
    if spec is None:
        return {"env": None, "model": None, "harness": None}
    return {
        "env": spec.env.identity(),
        "model": spec.model.identity(),
        "harness": spec.harness.identity(),
        "sampling": None if spec.sampling is None else spec.sampling.model_dump(mode="json"),
        "seed": spec.seed,
        "repeats": spec.repeats,
        "split": spec.split,
    }


def run_identity(manifest: Manifest, *, shard: bool) -> dict[str, Any]:
    """What two runs must share to be one run: each part's spec identity (and task
    source), and — to resume, not to aggregate — the shard."""
    parts = manifest.parts
    if len(parts) == 1:
        identity = spec_identity(parts[0].spec)
        for name in ("variant", "source"):
            if getattr(parts[0], name) is not None:
                identity[name] = getattr(parts[0], name)
    else:
        identity = {
            "parts": {p.label: {**spec_identity(p.spec), "source": p.source} for p in parts}
        }
    if shard:
        identity["shard"] = None if manifest.shard is None else manifest.shard.model_dump()
    return identity


def _differences(stored: Any, current: Any, prefix: str) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(stored, dict) and isinstance(current, dict):
        for key in sorted(set(stored) | set(current)):
            name = f"{prefix}.{key}" if prefix else str(key)
            yield from _differences(stored.get(key), current.get(key), name)
    elif stored != current:
        yield prefix, stored, current


def first_difference(before: dict[str, Any], now: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first field two run identities differ in; a different set of parts is named
    as such, not as a dump of both."""
    if set(before.get("parts", {})) != set(now.get("parts", {})) and (
        "parts" in before or "parts" in now
    ):
        have = ", ".join(before.get("parts", {})) or "one environment"
        want = ", ".join(now.get("parts", {})) or "one environment"
        return "parts", have, want
    return next(_differences(before, now, ""), None)


def check_resume(path: Path, manifest: Manifest) -> Manifest:
    """Reuse the stored run id; refuse to resume a different run, naming the field."""
    stored = read_manifest(path)
    if stored is None:
        return manifest
    if not stored.resumable:
        raise ConfigError(
            f"{path}: field 'schema_version' is {stored._read_version} but this nemo_gym writes "
            f"{MANIFEST_VERSION}; the run can be read (gym eval reverify, read_rollouts) "
            "but not resumed: use another output directory"
        )
    difference = first_difference(
        run_identity(stored, shard=True), run_identity(manifest, shard=True)
    )
    if difference is not None:
        field, old, new = difference
        raise ConfigError(
            f"{path}: field {field!r} is {old!r} in run.json but {new!r} in this run; "
            "use another output directory to start a new run"
        )
    return manifest.model_copy(update={"run_id": stored.run_id, "created_at": stored.created_at})


def merged_manifest(paths: Sequence[Path], manifests: Sequence[Manifest]) -> Manifest:
    """The `run.json` of shards merged by `aggregate`: the first shard's, a new run
    id, no shard, each part's largest limit, and the shards it came from."""
    parts = []
    for index, part in enumerate(manifests[0].parts):
        limits = [m.parts[index].limit for m in manifests]
        known = [limit for limit in limits if limit is not None]
        parts.append(part.model_copy(update={"limit": None if None in limits else max(known)}))
    return manifests[0].model_copy(
        update={
            "run_id": uuid.uuid4().hex[:12],
            "created_at": time.time(),
            "shard": None,
            "parts": tuple(parts),
            "aggregated_from": tuple(
                AggregatedFrom(path=str(path), run_id=m.run_id, shard=m.shard)
                for path, m in zip(paths, manifests, strict=True)
            ),
        }
    )
