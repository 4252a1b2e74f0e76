"""One registry for everything built by name, and the spec that rebuilds it.

Five kinds are registered: environments (`env`), models (`model`), harnesses
(`harness`), verifiers (`verifier`) and sandbox providers (`sandbox`). A name resolves
by one rule, the same for every kind:

    registered at run time  >  built in  >  local folder (envs)  >  entry point (plugin)

Local folders hold one-file environments: `<dir>/<name>.py` defines the environment
`name` (a factory called `environment`, or the `Env` subclass whose `name` is the
file's). They are searched in the order given by `add_search_dir` and then the
`NEMO_GYM_ENV_PATH` environment variable (`os.pathsep`-separated).

Registering over a built-in name needs `replace=True`; a plugin never shadows a
built-in. A name may carry a version, `name@2`; a bare name resolves to the highest
version registered under it.

Everything `build` makes remembers its `Spec` — kind, name, version, options and the
import path of its factory — so it can be rebuilt in another process (a Ray worker, a
`reverify` run, a config file): `build(spec)` needs nothing but the spec, because a
name registered only in the first process is found again through `spec.target` when
the caller trusts the spec (`rebuild(spec, trust_code=True)`): a spec read from a file
otherwise builds only names this process knows.
The spec is carried on the object (`SPEC_ATTRIBUTE`, set by `build`), not kept in a
table. Objects built directly (`Arithmetic(seed=3)`) describe themselves the same way:
the built-in classes carry the keyword arguments they were constructed with
(`Described`), and `spec_of` falls back to the object's type for anything else.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from nemo_gym.builtins import BUILTINS, FAMILIES
from nemo_gym.describe import (
    SECRET_NAMES,
    SPEC_ATTRIBUTE,
    Described,
    attr_version,
    check_kind,
    import_object,
    import_path,
    is_secret,
    jsonable_options,
    remember,
    secret_parameters,
    spec_of,
)
from nemo_gym.discovery import (
    ENTRY_POINT_GROUPS,
    distribution,
    load_local,
    plugin,
    plugin_map,
    refresh_plugins,
)
from nemo_gym.errors import ConfigError
from nemo_gym.protocols import (
    Environment,
    Harness,
    Model,
    SandboxProvider,
    Verifier,
)
from nemo_gym.spec import KINDS, Kind, Spec, has_opaque, join_id, split_id

# Described, spec_of and the secret rules live in nemo_gym.describe, the tables of
# built-in names in nemo_gym.builtins; they are re-exported here, where they have
# always been imported from.
__all__ = [
    "BUILTINS",
    "ENTRY_POINT_GROUPS",
    "INFO_FIELDS",
    "KINDS",
    "SEARCH_PATH_VARIABLE",
    "SECRET_NAMES",
    "SPEC_ATTRIBUTE",
    "Described",
    "Entry",
    "Kind",
    "Registry",
    "Spec",
    "active",
    "add_search_dir",
    "build",
    "builtin_name",
    "default_registry",
    "entries",
    "is_secret",
    "isolated",
    "jsonable_options",
    "lookup",
    "names",
    "rebuild",
    "refresh_plugins",
    "register",
    "remember",
    "search_dirs",
    "secret_parameters",
    "spec_of",
    "unregister",
]


Source = Literal["registered", "builtin", "local", "plugin"]

Factory = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Entry:
    """One registered name: where its factory lives and what it says about itself."""

    kind: Kind
    name: str
    target: str | Factory
    source: Source
    version: str | None = None
    info: Mapping[str, Any] = field(default_factory=dict)

    def load(self) -> Factory:
        """The factory (imported on first use)."""
        if callable(self.target):
            return self.target
        try:
            return import_object(self.target)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"{self.kind} {self.name!r} ({self.source}): cannot import {self.target!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    @property
    def target_path(self) -> str | None:
        """`module:attribute` of the factory, when another process can import it."""
        if isinstance(self.target, str):
            return self.target
        return import_path(self.target)

    @property
    def id(self) -> str:
        """`name@version` (the bare name when unversioned)."""
        return join_id(self.name, self.version)


INFO_FIELDS: dict[Kind, tuple[str, ...]] = {
    "env": ("domain", "verification", "description", "source", "license", "requires", "splits"),
    "model": (),
    "harness": (),
    "verifier": (),
    "sandbox": (),
}
"""What `register(kind, name, target, **info)` may say about a name (`EnvInfo`'s fields)."""

LABELS: dict[Kind, str] = {
    "env": "environment",
    "model": "model",
    "harness": "harness",
    "verifier": "verifier",
    "sandbox": "sandbox provider",
}


@dataclass(slots=True)
class Registry:
    """What `register` and `add_search_dir` change: the run-time registrations and the
    local-environment folders. The process has one (`default_registry`); `isolated()`
    gives a block a fresh one (tests), built-ins and plugins included as always."""

    registered: dict[Kind, dict[str, dict[str | None, Entry]]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    search_dirs: list[Path] = field(default_factory=list)


default_registry = Registry()
_active: ContextVar[Registry] = ContextVar("nemo_gym_registry", default=default_registry)


def active() -> Registry:
    """The registry names resolve in here: `default_registry`, or an `isolated()` one."""
    return _active.get()


@contextlib.contextmanager
def isolated() -> Iterator[Registry]:
    """Run a block against a fresh `Registry`: what it registers or adds as a search
    folder is gone when it ends, and nothing registered outside is seen inside."""
    token = _active.set(Registry())
    try:
        yield _active.get()
    finally:
        _active.reset(token)


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]*$")


def _version_key(version: str | None) -> tuple[Any, ...]:
    if version is None:
        return ((-1,),)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-]", version))


def register(
    kind: Kind,
    name: str,
    target: str | Factory,
    *,
    version: str | None = None,
    replace: bool = False,
    **info: Any,
) -> Entry:
    """Register `target` (a class, a factory, or its import path) as `kind` `name`:
    `gym.register("env", "my_env", MyEnv)`, then `gym.make("my_env")` /
    `build("env", "my_env")`. The one way to register anything, of every kind.

    An import path (`"mypkg.envs:MyEnv"`) is what makes the name reproducible in another
    process: the spec of everything built under it carries the path. A callable is
    recorded by its own import path when it has one. `info` is what `gym list` shows
    (`INFO_FIELDS`: for environments domain, description, ...). Registering a name that
    exists (here or as a built-in) needs `replace=True`.
    """
    kind = check_kind(kind)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{kind} name {name!r}: use letters, digits and _ . - /")
    unknown = set(info) - set(INFO_FIELDS[kind])
    if unknown:
        raise ConfigError(
            f"register({kind!r}, {name!r}): unknown info {', '.join(sorted(unknown))}; "
            f"a {LABELS[kind]} takes {', '.join(INFO_FIELDS[kind]) or 'none'}"
        )
    if not (isinstance(target, str) or callable(target)):
        raise ConfigError(f"{kind} {name!r}: target must be callable or 'module:attr'")
    if isinstance(target, str):
        module, sep, attribute = target.partition(":")
        if not sep or not module or not attribute:
            raise ConfigError(f"{kind} {name!r}: import path {target!r} is not 'module:attr'")
    versions = active().registered[kind].setdefault(name, {})
    exists = version in versions or (name in BUILTINS[kind] and version is None)
    if exists and not replace:
        raise ConfigError(
            f"a {LABELS[kind]} named {name!r} is already registered; pass replace=True to "
            "replace it"
        )
    entry = Entry(kind, name, target, "registered", version, dict(info))
    versions[version] = entry
    return entry


def unregister(kind: Kind, name: str, *, version: str | None = None) -> None:
    """Remove a run-time registration (built-ins and plugins stay)."""
    versions = active().registered[check_kind(kind)].get(name, {})
    versions.pop(version, None)
    if not versions:
        active().registered[kind].pop(name, None)


SEARCH_PATH_VARIABLE = "NEMO_GYM_ENV_PATH"


def add_search_dir(path: str | os.PathLike[str]) -> None:
    """Search `path` for one-file environments (`<name>.py`), before NEMO_GYM_ENV_PATH."""
    folder = _checked_dir(path)
    folders = active().search_dirs
    if folder not in folders:
        folders.append(folder)


_query_dirs: ContextVar[tuple[Path, ...]] = ContextVar("nemo_gym_query_dirs", default=())


@contextlib.contextmanager
def searching(folders: Iterable[str | os.PathLike[str]]) -> Iterator[None]:
    """Also search `folders` for local environments inside this block only (what a query
    such as `list_envs(search_dirs=...)` uses: it leaves the process's search path as
    it was)."""
    extra = tuple(_checked_dir(f) for f in folders)
    token = _query_dirs.set(_query_dirs.get() + extra)
    try:
        yield
    finally:
        _query_dirs.reset(token)


def _checked_dir(path: str | os.PathLike[str]) -> Path:
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise ConfigError(f"environment search folder {str(path)!r} is not a folder")
    return folder


def search_dirs() -> list[Path]:
    """The folders searched for local environments, in order."""
    found = list(active().search_dirs)
    found += [f for f in _query_dirs.get() if f not in found]
    for part in os.environ.get(SEARCH_PATH_VARIABLE, "").split(os.pathsep):
        folder = Path(part).expanduser().resolve() if part.strip() else None
        if folder is not None and folder.is_dir() and folder not in found:
            found.append(folder)
    return found


def _local_names() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in search_dirs():
        for file in sorted(folder.glob("*.py")):
            if not file.stem.startswith("_") and _NAME.match(file.stem):
                found.setdefault(file.stem, file)
    return found


def _candidates(kind: Kind, name: str) -> list[Entry]:
    """Every entry under `name`, by the precedence rule (first source that has it)."""
    registered = active().registered[kind].get(name)
    if registered:
        return list(registered.values())
    builtins = [
        Entry(kind, name, target, "builtin", split_id(key)[1])
        for key, target in BUILTINS[kind].items()
        if split_id(key)[0] == name
    ]
    if builtins:
        return builtins
    for prefix, target in FAMILIES.get(kind, {}).items():
        if name.startswith(prefix) and len(name) > len(prefix):
            return [Entry(kind, name, import_object(target)(name[len(prefix) :]), "builtin")]
    if kind == "env":
        file = _local_names().get(name)
        if file is not None:
            return [Entry(kind, name, load_local(name, file), "local")]
    found_plugin = plugin(kind, name, LABELS[kind])
    if found_plugin is not None:
        return [Entry(kind, name, found_plugin.value, "plugin")]
    return []


def lookup(kind: Kind, name: str) -> Entry:
    """The entry `name` (or `name@version`) resolves to; `ConfigError` if none."""
    kind = check_kind(kind)
    if not isinstance(name, str):
        raise ConfigError(f"a {kind} name must be a string, got {name!r}")
    base, version = split_id(name)
    found = _candidates(kind, base)
    if not found:
        known = names(kind)
        close = difflib.get_close_matches(base, known, n=3)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(
            f"no {LABELS[kind]} named {base!r}{hint} (known: {', '.join(known) or 'none'})"
        )
    if version is not None:
        exact = [e for e in found if e.version == version]
        if not exact:  # an unversioned entry whose class declares the version asked for
            exact = [e for e in found if e.version is None and _declared_version(e) == version]
        if not exact:
            have = ", ".join(join_id(e.name, e.version or _declared_version(e)) for e in found)
            raise ConfigError(f"{kind} {base!r} has no version {version!r}; have: {have}")
        return exact[0]
    return max(found, key=lambda e: _version_key(e.version))


def _declared_version(entry: Entry) -> str | None:
    try:
        declared = getattr(entry.load(), "version", None)
    except ConfigError:
        return None
    return (
        str(declared)
        if isinstance(declared, str | int) and not isinstance(declared, bool)
        else None
    )


def names(kind: Kind) -> list[str]:
    """Every name of `kind` the registry knows (registered, built-in, plugins)."""
    kind = check_kind(kind)
    found = {split_id(key)[0] for key in BUILTINS[kind]}
    found.update(active().registered[kind])
    if kind == "env":
        found.update(_local_names())
    for name, eps in plugin_map(kind).items():
        if "/" in name:
            continue
        sources = {distribution(ep) for ep in eps}
        # A clash lists the qualified names, the ones that can be built.
        found.update([name] if len(sources) == 1 else (f"{d}/{name}" for d in sources))
    return sorted(found)


def entries(kind: Kind) -> Iterator[Entry]:
    """The entry each name of `kind` resolves to, in name order."""
    for name in names(kind):
        yield lookup(kind, name)


@overload
def build(kind: Literal["env"], name: str, /, **options: Any) -> Environment: ...
@overload
def build(kind: Literal["model"], name: str, /, **options: Any) -> Model: ...
@overload
def build(kind: Literal["harness"], name: str, /, **options: Any) -> Harness: ...
@overload
def build(kind: Literal["verifier"], name: str, /, **options: Any) -> Verifier: ...
@overload
def build(kind: Literal["sandbox"], name: str, /, **options: Any) -> SandboxProvider: ...
@overload
def build(kind: Kind, name: str, /, **options: Any) -> Any: ...
@overload
def build(kind: Spec, /) -> Any: ...
def build(kind: Kind | Spec, name: str | None = None, /, **options: Any) -> Any:
    """Build `kind` `name` with `options` (typed per kind: `build("env", ...)` is an
    `Environment`), or rebuild from a `Spec`.

    `build("env", "arithmetic", seed=3)`, `build(spec)` (= `rebuild(spec)`). The object
    remembers its spec (`spec_of`).
    """
    if isinstance(kind, Spec):
        if name is not None or options:
            raise TypeError("build(spec) takes no other arguments")
        return rebuild(kind)
    kind = check_kind(kind)
    if name is None:
        raise TypeError("build(kind, name, **options) needs a name")
    entry = lookup(kind, name)
    return _construct(entry, options, entry.target_path)


def _construct(entry: Entry, options: dict[str, Any], target: str | None) -> Any:
    factory = entry.load()
    try:
        obj = factory(**options)
    except TypeError as exc:
        raise ConfigError(f"{entry.kind} {entry.id!r} rejected its options: {exc}") from exc
    version = entry.version or attr_version(obj)
    # What the factory itself never records (a `Described` class's `spec_exclude`:
    # secrets, large data) is not recorded when it is built by name either.
    excluded = getattr(factory, "spec_exclude", frozenset()) | secret_parameters(factory)
    spec = Spec(
        kind=entry.kind,
        name=entry.name,
        version=version,
        options=jsonable_options({k: v for k, v in options.items() if k not in excluded}),
        target=target,
    )
    remember(obj, spec)
    return obj


def rebuild(spec: Spec, /, *, trust_code: bool = False) -> Any:
    """Build the object `spec` describes, by its registered name.

    A spec names only what this process can already build (registered, built-in, local
    folder, plugin) unless `trust_code=True`: then a name unknown here is rebuilt from
    the spec's `target` import path, which imports and calls whatever that path names.
    Specs come from files (`run.json`, a config, a Ray driver): pass `trust_code=True`
    only for specs from a source you trust as you trust your own code. Options recorded
    as `{"$spec": ...}` are rebuilt first, under the same rule.
    """
    options = {key: _revive(value, trust_code) for key, value in spec.options.items()}
    if has_opaque(spec.options):
        opaque = [k for k, v in spec.options.items() if has_opaque(v)]
        raise ConfigError(
            f"{spec.kind} {spec.id!r} cannot be rebuilt from its spec: option(s) "
            f"{', '.join(opaque)} were objects without a spec; pass the object itself"
        )
    try:
        entry = lookup(spec.kind, spec.id if spec.version and _has_version(spec) else spec.name)
    except ConfigError:
        if spec.target is None:
            raise
        if not trust_code:
            raise ConfigError(
                f"{spec.kind} {spec.id!r} is not a name this process knows, and its spec "
                f"names the import path {spec.target!r}: importing it runs code the spec "
                "chose, so it is refused. Register the name (or install its plugin), or "
                "pass trust_code=True (gym eval reverify --trust-run-code) if the spec "
                "comes from a source you trust"
            ) from None
        entry = Entry(spec.kind, spec.name, spec.target, "registered", spec.version)
    return _construct(entry, options, spec.target or entry.target_path)


def _has_version(spec: Spec) -> bool:
    return any(e.version == spec.version for e in _candidates(spec.kind, spec.name))


def _revive(value: Any, trust_code: bool) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$spec"}:
            return rebuild(Spec.model_validate(value["$spec"]), trust_code=trust_code)
        return {k: _revive(v, trust_code) for k, v in value.items()}
    if isinstance(value, list):
        return [_revive(v, trust_code) for v in value]
    return value


def builtin_name(kind: Kind, cls: type) -> str | None:
    """The name `cls` is registered or built in under, if any (how a `Described`
    object names itself)."""
    path = f"{cls.__module__}:{cls.__qualname__}"
    for key, target in BUILTINS[kind].items():
        if target == path:
            return split_id(key)[0]
    for name, versions in active().registered[kind].items():
        if any(e.target_path == path for e in versions.values()):
            return name
    return None
