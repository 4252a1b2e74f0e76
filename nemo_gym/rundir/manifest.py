"""A run directory's `run.json`: what ran, and what another run must share with it.

`new_manifest` writes one; `manifest_parts` reads its parts (a run of one environment
written before mixed runs existed has a top-level `spec` only); `run_identity` is what
two runs must agree on to be one run (each part's env, model and harness spec identity,
sampling, seed, repeats, split and task source; the shard to resume), and
`first_difference` names the first field they differ in. collect (`check_resume`),
aggregate (`merged_manifest`), reverify and the analysis read `run.json` through these.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nemo_gym.errors import ConfigError
from nemo_gym.records import SCHEMA_VERSION
from nemo_gym.rundir.files import MANIFEST, read_manifest
from nemo_gym.spec import Spec

__all__ = [
    "check_resume",
    "first_difference",
    "manifest_parts",
    "merged_manifest",
    "new_manifest",
    "part_label",
    "run_identity",
    "spec_identity",
]


def part_label(env: str | None, variant: str | None) -> str:
    """How a part is named in messages: `env` or `env[variant]`."""
    return f"{env}" if variant is None else f"{env}[{variant}]"


def new_manifest(
    parts: list[dict[str, Any]], run_id: str, shard: tuple[int, int] | None
) -> dict[str, Any]:
    """A new `run.json` for these parts (each part's env, variant, spec, limit and
    source) and shard."""
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "created_at": time.time(),
    }
    if len(parts) == 1:  # what a run of one environment has always said
        manifest["spec"] = parts[0]["spec"]
        manifest["limit"] = parts[0]["limit"]
    manifest["parts"] = parts
    manifest["shard"] = None if shard is None else {"index": shard[0], "count": shard[1]}
    return manifest


def manifest_parts(
    manifest: Mapping[str, Any], path: Path | str = MANIFEST
) -> list[dict[str, Any]]:
    """The parts a `run.json` lists (one, from its `spec`, for a run written before
    mixed runs existed); `ConfigError` naming the file when it has neither."""
    parts = manifest.get("parts")
    if parts is None:
        spec = manifest.get("spec")
        if not isinstance(spec, dict):
            raise ConfigError(f"{path}: no field 'parts' or 'spec': not a run of this nemo_gym")
        return [{"env": None, "variant": None, "spec": spec, "limit": manifest.get("limit")}]
    if not isinstance(parts, list) or not all(
        isinstance(p, dict) and isinstance(p.get("spec"), dict) for p in parts
    ):
        raise ConfigError(f"{path}: field 'parts' must be a list of objects with a 'spec'")
    return parts


def spec_identity(spec: dict[str, Any]) -> dict[str, Any]:
    """The fields of a run spec a resumed run must agree on."""
    out: dict[str, Any] = {}
    for part in ("env", "model", "harness"):
        value = spec.get(part) or {}
        out[part] = Spec.model_validate(value).identity() if value else None
    for name in ("sampling", "seed", "repeats", "split"):
        out[name] = spec.get(name)
    return out


def run_identity(manifest: Mapping[str, Any], path: Path, *, shard: bool) -> dict[str, Any]:
    """What two runs must share to be one run: each part's spec identity (and task
    source), and — to resume, not to aggregate — the shard."""
    parts = manifest_parts(manifest, path)
    try:
        if len(parts) == 1:
            identity = spec_identity(parts[0]["spec"])
            for name in ("variant", "source"):
                if parts[0].get(name) is not None:
                    identity[name] = parts[0][name]
        else:
            identity = {
                "parts": {
                    part_label(p.get("env"), p.get("variant")): {
                        **spec_identity(p["spec"]),
                        "source": p.get("source"),
                    }
                    for p in parts
                }
            }
    except ValidationError as exc:
        raise ConfigError(f"{path}: field 'spec' is not a run spec: {exc}") from exc
    if shard:
        identity["shard"] = manifest.get("shard")
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


def check_resume(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Reuse the stored run id; refuse to resume a different run, naming the field."""
    stored = read_manifest(path)
    if stored is None:
        return manifest
    version = stored.get("schema_version", 1)
    if version != SCHEMA_VERSION or ("spec" not in stored and "parts" not in stored):
        raise ConfigError(
            f"{path}: field 'schema_version' is {version!r} but this nemo_gym writes "
            f"{SCHEMA_VERSION}; the run can be read (gym eval reverify, read_rollouts) "
            "but not resumed: use another output directory"
        )
    before = run_identity(stored, path, shard=True)
    now = run_identity(manifest, path, shard=True)
    difference = first_difference(before, now)
    if difference is not None:
        field, old, new = difference
        raise ConfigError(
            f"{path}: field {field!r} is {old!r} in run.json but {new!r} in this run; "
            "use another output directory to start a new run"
        )
    return {**manifest, "run_id": stored["run_id"], "created_at": stored["created_at"]}


def merged_manifest(paths: list[Path], manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """The `run.json` of shards merged by `aggregate`: the first shard's, a new run
    id, no shard, each part's largest limit, and the shards it came from."""
    merged = dict(manifests[0])
    merged["run_id"] = uuid.uuid4().hex[:12]
    merged["created_at"] = time.time()
    merged["shard"] = None
    if "parts" in merged:
        parts = []
        for index, part in enumerate(manifest_parts(merged)):
            limits = [manifest_parts(m)[index].get("limit") for m in manifests]
            known = [limit for limit in limits if limit is not None]
            parts.append({**part, "limit": None if None in limits else max(known)})
        merged["parts"] = parts
        if len(parts) == 1:
            merged["limit"] = parts[0]["limit"]
    merged["aggregated_from"] = [
        {"path": str(path), "run_id": m.get("run_id"), "shard": m.get("shard")}
        for path, m in zip(paths, manifests, strict=True)
    ]
    return merged
