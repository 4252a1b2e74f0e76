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
Objects built directly (`Arithmetic(seed=3)`) describe themselves the same way: the
built-in classes remember the keyword arguments they were constructed with
(`Described`), and `spec_of` falls back to the object's type for anything else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, ClassVar, Literal, overload

from pydantic import BaseModel, SecretBytes, SecretStr

from nemo_gym.errors import ConfigError
from nemo_gym.protocols import (
    Environment,
    Harness,
    Model,
    SandboxProvider,
    Verifier,
    function_of,
)
from nemo_gym.spec import KINDS, Kind, Spec, has_opaque
from nemo_gym.urls import without_credentials

__all__ = [
    "ENTRY_POINT_GROUPS",
    "SEARCH_PATH_VARIABLE",
    "Described",
    "Entry",
    "Kind",
    "Registry",
    "Spec",
    "active",
    "add_search_dir",
    "build",
    "default_registry",
    "entries",
    "isolated",
    "lookup",
    "names",
    "rebuild",
    "register",
    "search_dirs",
    "spec_of",
    "unregister",
]


ENTRY_POINT_GROUPS: dict[Kind, str] = {
    "env": "nemo_gym.envs",
    "model": "nemo_gym.models",
    "harness": "nemo_gym.harnesses",
    "verifier": "nemo_gym.verifiers",
    "sandbox": "nemo_gym.sandbox_providers",
}
"""The entry-point group plugins use for each kind (name -> a class or factory)."""

# Built-ins by import path: nothing is imported until it is asked for.
_BUILTINS: dict[Kind, dict[str, str]] = {
    "env": {
        "arithmetic": "nemo_gym.envs.math.arithmetic:Arithmetic",
        "arithmetic_small": "nemo_gym.envs.math.arithmetic:ArithmeticSmall",
        "algebra": "nemo_gym.envs.math.algebra:Algebra",
        "gsm8k": "nemo_gym.envs.math.gsm8k:GSM8K",
        "math": "nemo_gym.envs.math.math_dataset:MATHEnv",
        "aime": "nemo_gym.envs.math.aime:AIME",
        "polymath": "nemo_gym.envs.math.polymath:PolyMath",
        "mmlu": "nemo_gym.envs.knowledge.mmlu:MMLU",
        "mmlu_pro": "nemo_gym.envs.knowledge.mmlu_pro:MMLUPro",
        "gpqa": "nemo_gym.envs.knowledge.gpqa:GPQA",
        "mcqa": "nemo_gym.envs.knowledge.mcqa:MCQA",
        "hotpotqa": "nemo_gym.envs.knowledge.hotpotqa:HotpotQA",
        "short_answer": "nemo_gym.envs.knowledge.short_answer:ShortAnswerQA",
        "answer_equivalence": "nemo_gym.envs.knowledge.answer_equivalence:AnswerEquivalence",
        "over_refusal": "nemo_gym.envs.safety.over_refusal:OverRefusal",
        "jailbreak": "nemo_gym.envs.safety.jailbreak:Jailbreak",
        "bank": "nemo_gym.envs.tools.bank:Bank",
        "function_calling": "nemo_gym.envs.tools.function_calling:FunctionCalling",
        "tool_multireward": "nemo_gym.envs.tools.tool_multireward:ToolMultiReward",
        "tool_chain": "nemo_gym.envs.tools.tool_chain:ToolChain",
        "next_action": "nemo_gym.envs.tools.next_action:NextAction",
        "multiverse_math": "nemo_gym.envs.tools.multiverse_math:MultiverseMath",
        "counter": "nemo_gym.envs.tools.counter:Counter",
        "follow_ups": "nemo_gym.envs.knowledge.follow_ups:FollowUps",
        "weather_report": "nemo_gym.envs.tools.weather_report:WeatherReport",
        "citations": "nemo_gym.envs.instructions.citations:Citations",
        "retail": "nemo_gym.envs.agents.retail:Retail",
        "airline": "nemo_gym.envs.agents.airline:Airline",
        "calendar": "nemo_gym.envs.agents.calendar:Calendar",
        "text_to_sql": "nemo_gym.envs.sql.text_to_sql:TextToSQL",
        "niah": "nemo_gym.envs.long_context.niah:NIAH",
        "variable_tracking": "nemo_gym.envs.long_context.variable_tracking:VariableTracking",
        "multikey_retrieval": "nemo_gym.envs.long_context.multikey_retrieval:MultiKeyRetrieval",
        "graphwalks": "nemo_gym.envs.long_context.graphwalks:GraphWalks",
        "mrcr": "nemo_gym.envs.long_context.mrcr:MRCR",
        "translation": "nemo_gym.envs.translation.translation:Translation",
        "reasoning_gym": "nemo_gym.envs.reasoning.reasoning_gym:ReasoningGym",
        "arc_agi": "nemo_gym.envs.reasoning.arc_agi:ARCAGI",
        "spartqa": "nemo_gym.envs.reasoning.spartqa:SpartQA",
        "guess_number": "nemo_gym.envs.games.guess_number:GuessNumber",
        "wordle": "nemo_gym.envs.games.wordle:Wordle",
        "blackjack": "nemo_gym.envs.games.blackjack:Blackjack",
        "sokoban": "nemo_gym.envs.games.sokoban:Sokoban",
        "tetris": "nemo_gym.envs.games.tetris:Tetris",
        "code": "nemo_gym.envs.code.programs:CodeEnv",
        "humaneval": "nemo_gym.envs.code.humaneval:HumanEval",
        "mbpp": "nemo_gym.envs.code.mbpp:MBPP",
        "livecodebench": "nemo_gym.envs.code.livecodebench:LiveCodeBench",
        "ifeval": "nemo_gym.envs.instructions.ifeval:IFEval",
        "ifbench": "nemo_gym.envs.instructions.ifbench:IFBench",
        "json_schema": "nemo_gym.envs.structured.json_schema:JSONSchemaEnv",
        "formats": "nemo_gym.envs.structured.formats:Formats",
        "line_format": "nemo_gym.envs.structured.line_format:LineFormat",
        "swe": "nemo_gym.envs.swe:SWEEnv",
    },
    "model": {
        "local": "nemo_gym.models.local:Local",
        "openai": "nemo_gym.models.openai:OpenAIChat",
        "openai-responses": "nemo_gym.models.openai:OpenAIResponses",
        "openai-completions": "nemo_gym.models.openai:OpenAICompletions",
        "anthropic": "nemo_gym.models.anthropic:Anthropic",
        "scripted": "nemo_gym.models.scripted:ScriptedModel",
    },
    "harness": {
        "single_turn": "nemo_gym.harnesses:SingleTurn",
        "tool_loop": "nemo_gym.harnesses:ToolLoop",
        "multi_step": "nemo_gym.harnesses:MultiStep",
        "remote_agent": "nemo_gym.harnesses.remote:RemoteAgent",
        "cli_agent": "nemo_gym.harnesses.cli:CLIAgent",
        "codex": "nemo_gym.harnesses.cli.adapters:Codex",
        "claude_code": "nemo_gym.harnesses.cli.adapters:ClaudeCode",
        "opencode": "nemo_gym.harnesses.cli.adapters:OpenCode",
        "mini_swe_agent": "nemo_gym.harnesses.cli.adapters:MiniSWEAgent",
        "langgraph": "nemo_gym.interop.langgraph:LangGraphAgent",
        "reflection": "nemo_gym.harnesses.langgraph:Reflection",
        "orchestrator": "nemo_gym.harnesses.langgraph:Orchestrator",
        "parallel_thinking": "nemo_gym.harnesses.langgraph:ParallelThinking",
        "rewoo": "nemo_gym.harnesses.langgraph:ReWOO",
    },
    "verifier": {
        "math": "nemo_gym.verify.math:MathVerifier",
        "mcqa": "nemo_gym.verify.mcqa:MultipleChoiceVerifier",
        "exact": "nemo_gym.verify.text:ExactMatch",
        "normalized": "nemo_gym.verify.text:NormalizedMatch",
        "regex": "nemo_gym.verify.text:RegexMatch",
        "numeric": "nemo_gym.verify.text:NumericMatch",
        "token_f1": "nemo_gym.verify.text:TokenF1",
        "json": "nemo_gym.verify.structured:JSONMatch",
        "json_schema": "nemo_gym.verify.structured:JSONSchemaVerifier",
        "tool_call": "nemo_gym.verify.structured:ToolCallMatch",
        "ifeval": "nemo_gym.verify.ifeval:IFEvalVerifier",
        "judge": "nemo_gym.verify.judge:JudgeVerifier",
        "pairwise_judge": "nemo_gym.verify.judge:PairwiseJudge",
        "chrf": "nemo_gym.verify.translation:ChrF",
        "spbleu": "nemo_gym.verify.translation:SpBLEU",
        "sql": "nemo_gym.verify.sql:SQLVerifier",
        "code": "nemo_gym.verify.code:CodeVerifier",
        "short_answer": "nemo_gym.verify.short_answer:ShortAnswer",
        "label": "nemo_gym.verify.labels:LabelMatch",
        "document": "nemo_gym.verify.formats:DocumentVerifier",
        "reference_match": "nemo_gym.verify.long_context:ReferenceMatch",
        "node_set_f1": "nemo_gym.verify.long_context:NodeSetF1",
        "sequence_ratio": "nemo_gym.verify.long_context:SequenceRatio",
    },
    "sandbox": {
        "local": "nemo_gym.sandbox.local:LocalProvider",
        "process": "nemo_gym.sandbox.process:ProcessProvider",
        "docker": "nemo_gym.sandbox.docker:DockerProvider",
        "apptainer": "nemo_gym.sandbox.apptainer:ApptainerProvider",
        "enroot": "nemo_gym.sandbox.enroot:EnrootProvider",
        "e2b": "nemo_gym.sandbox.remote.e2b:E2BProvider",
        "daytona": "nemo_gym.sandbox.remote.daytona:DaytonaProvider",
        "opensandbox": "nemo_gym.sandbox.remote.opensandbox:OpenSandboxProvider",
        "kubernetes": "nemo_gym.sandbox.remote.kubernetes:KubernetesProvider",
        "ecs": "nemo_gym.sandbox.remote.ecs:EcsProvider",
    },
}

Source = Literal["registered", "builtin", "local", "plugin"]

# Built-in families: `prefix<member>` names, each built by `factory(member)(**options)`
# (`reasoning_gym/leg_counting`). They resolve as built-ins and are not listed one by one.
_FAMILIES: dict[Kind, dict[str, str]] = {
    "env": {
        "reasoning_gym/": "nemo_gym.envs.reasoning.reasoning_gym:for_dataset",
        "nemo_gym/": "nemo_gym.interop.nemo_gym:for_server",
    },
}
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
            return _import(self.target)
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
        return _import_path(self.target)

    @property
    def id(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


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


_specs: weakref.WeakKeyDictionary[Any, Spec] = weakref.WeakKeyDictionary()
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]*$")


def _check_kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    return kind


def _import(target: str) -> Any:
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute:
        raise ConfigError(f"{target!r}: an import path is 'package.module:attribute'")
    value: Any = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def _import_path(obj: Any) -> str | None:
    """`module:qualname` of a class or function when importing it gives it back."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    try:
        found = _import(f"{module}:{qualname}")
    except Exception:
        return None
    found = getattr(found, "__wrapped__", found)
    return f"{module}:{qualname}" if found is getattr(obj, "__wrapped__", obj) else None


def _split_id(name: str) -> tuple[str, str | None]:
    base, sep, version = name.partition("@")
    return base, (version if sep else None)


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
    """Register `target` (a class, a factory, or its import path) as `kind` `name`.

    An import path (`"mypkg.envs:MyEnv"`) is what makes the name reproducible in another
    process: the spec of everything built under it carries the path. A callable is
    recorded by its own import path when it has one. `info` is free metadata shown by
    `gym list` (for environments: domain, description, ...). Registering a name that
    exists (here or as a built-in) needs `replace=True`.
    """
    kind = _check_kind(kind)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{kind} name {name!r}: use letters, digits and _ . - /")
    if not (isinstance(target, str) or callable(target)):
        raise ConfigError(f"{kind} {name!r}: target must be callable or 'module:attr'")
    if isinstance(target, str):
        module, sep, attribute = target.partition(":")
        if not sep or not module or not attribute:
            raise ConfigError(f"{kind} {name!r}: import path {target!r} is not 'module:attr'")
    versions = active().registered[kind].setdefault(name, {})
    exists = version in versions or (name in _BUILTINS[kind] and version is None)
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
    versions = active().registered[_check_kind(kind)].get(name, {})
    versions.pop(version, None)
    if not versions:
        active().registered[kind].pop(name, None)


@functools.cache
def _plugin_map(kind: Kind) -> dict[str, list[Any]]:
    """Entry points by bare name and by `<distribution>/<name>`; a bare name two
    distributions declare maps to both (a clash `lookup` reports, never a silent pick)."""
    from importlib.metadata import entry_points  # ~10 ms: only when a name is looked up

    found: dict[str, list[Any]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUPS[kind]):
        found.setdefault(ep.name, []).append(ep)
        found.setdefault(f"{_distribution(ep)}/{ep.name}", []).append(ep)
    return found


def _distribution(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) or "unknown"
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def _plugin(kind: Kind, name: str) -> Any | None:
    found = _plugin_map(kind).get(name)
    if not found:
        return None
    sources = {_distribution(ep) for ep in found}
    if len(sources) > 1:
        qualified = ", ".join(sorted(f"{d}/{name}" for d in sources))
        raise ConfigError(
            f"{len(sources)} installed plugins declare a {LABELS[kind]} named {name!r}; "
            f"name the one you mean: {qualified}"
        )
    return found[0]


def refresh_plugins() -> None:
    """Forget the cached entry points (after installing a plugin in this process)."""
    _plugin_map.cache_clear()


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


def _load_local(name: str, file: Path) -> Factory:
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


def _candidates(kind: Kind, name: str) -> list[Entry]:
    """Every entry under `name`, by the precedence rule (first source that has it)."""
    registered = active().registered[kind].get(name)
    if registered:
        return list(registered.values())
    builtins = [
        Entry(kind, key.partition("@")[0], target, "builtin", key.partition("@")[2] or None)
        for key, target in _BUILTINS[kind].items()
        if key.partition("@")[0] == name
    ]
    if builtins:
        return builtins
    for prefix, target in _FAMILIES.get(kind, {}).items():
        if name.startswith(prefix) and len(name) > len(prefix):
            return [Entry(kind, name, _import(target)(name[len(prefix) :]), "builtin")]
    if kind == "env":
        file = _local_names().get(name)
        if file is not None:
            return [Entry(kind, name, _load_local(name, file), "local")]
    plugin = _plugin(kind, name)
    if plugin is not None:
        return [Entry(kind, name, plugin.value, "plugin")]
    return []


def lookup(kind: Kind, name: str) -> Entry:
    """The entry `name` (or `name@version`) resolves to; `ConfigError` if none."""
    kind = _check_kind(kind)
    if not isinstance(name, str):
        raise ConfigError(f"a {kind} name must be a string, got {name!r}")
    base, version = _split_id(name)
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
            have = ", ".join(
                e.id if e.version else f"{e.name}@{_declared_version(e)}" for e in found
            )
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
    kind = _check_kind(kind)
    found = {key.partition("@")[0] for key in _BUILTINS[kind]}
    found.update(active().registered[kind])
    if kind == "env":
        found.update(_local_names())
    for name, eps in _plugin_map(kind).items():
        if "/" in name:
            continue
        sources = {_distribution(ep) for ep in eps}
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
    kind = _check_kind(kind)
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
    version = entry.version or _attr_version(obj)
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


def _attr_version(obj: Any) -> str | None:
    version = getattr(obj, "version", None)
    if isinstance(version, bool) or not isinstance(version, str | int):
        return None
    return str(version)


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


def remember(obj: Any, spec: Spec) -> None:
    """Attach `spec` to `obj` (what `build` does); a no-op for objects without weakrefs."""
    try:
        _specs[obj] = spec
    except TypeError:
        pass


SECRET_NAMES = frozenset(
    {
        "api_key",
        "token",
        "access_token",
        "auth_token",
        "bearer_token",
        "hf_token",
        "password",
        "secret",
        "client_secret",
        "authorization",
    }
)
"""Option (and nested mapping) keys never recorded, whatever their value's type."""


def is_secret(name: str, value: Any) -> bool:
    """Whether an option is a credential: a `SecretStr`/`SecretBytes` value (the typed
    way to pass one), or a key that names one (`token`, `api_key`, ...)."""
    return isinstance(value, SecretStr | SecretBytes) or name.lower() in SECRET_NAMES


def secret_parameters(factory: Callable[..., Any]) -> frozenset[str]:
    """The parameters of `factory` annotated with a secret type (`SecretStr`, ...)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(p.name for p in parameters if "Secret" in str(p.annotation))


def jsonable_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options as JSON values: nested specs as `$spec`, other objects as `$object`;
    secrets (`is_secret`) left out."""
    return {
        str(key): _jsonable(value)
        for key, value in options.items()
        if not is_secret(str(key), value)
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, str):
        return without_credentials(value)  # a URL's user:password is never recorded
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, list | tuple | frozenset | set):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, frozenset | set) else items
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items() if not is_secret(str(k), v)}
    if isinstance(value, SecretStr | SecretBytes):
        return "**********"
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    spec = _known_spec(value)
    if spec is not None:
        return {"$spec": spec.model_dump(mode="json")}
    return {"$object": type(value).__qualname__}


def _known_spec(value: Any) -> Spec | None:
    try:
        found = _specs.get(value)
    except TypeError:
        found = None
    if found is not None:
        return found
    if isinstance(value, Described):
        return value.to_spec()
    return None


def spec_of(obj: Any, kind: Kind) -> Spec:
    """The spec of `obj`: the one it was built with, else what it says of itself.

    Built by `build`/`make`: that spec. A `Described` object (the built-in classes):
    its name, version and constructor options. Anything else: its `name` (for
    environments) or type name, no options, and its type's import path as target.
    """
    kind = _check_kind(kind)
    known = _known_spec(obj)
    if known is not None:
        return known
    describe = getattr(obj, "to_spec", None)
    if callable(describe):
        spec = describe()
        if isinstance(spec, Spec):
            return spec
    inner = function_of(obj)
    source = inner if inner is not None else obj
    kind_type = source if inspect.isfunction(source) else type(source)
    name = getattr(obj, "name", None) if kind == "env" else None
    return Spec(
        kind=kind,
        name=name if isinstance(name, str) and name else kind_type.__qualname__,
        version=_attr_version(obj),
        options={},
        target=_import_path(kind_type),
    )


def _builtin_name(kind: Kind, cls: type) -> str | None:
    path = f"{cls.__module__}:{cls.__qualname__}"
    for key, target in _BUILTINS[kind].items():
        if target == path:
            return key.partition("@")[0]
    for name, versions in active().registered[kind].items():
        if any(e.target_path == path for e in versions.values()):
            return name
    return None


class Described:
    """A class whose instances remember their constructor's keyword arguments.

    Subclasses set `spec_kind`; `spec_exclude` names arguments that are never recorded
    (secrets, large data). `to_spec()` then says how to rebuild the instance and
    `repr()` shows the options it was given: `SingleTurn(system_prompt='Solve it.')`.
    """

    spec_kind: ClassVar[Kind]
    spec_exclude: ClassVar[frozenset[str]] = frozenset()
    _spec_options: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_nemo_gym_described", False):
            return
        signature = inspect.signature(init)
        secret = secret_parameters(init)

        @functools.wraps(init)
        def __init__(self: Described, *args: Any, **kw: Any) -> None:
            # The outermost constructor records; a subclass calling super().__init__
            # with arguments of its own does not overwrite them.
            if "_spec_options" not in self.__dict__:
                try:
                    bound = signature.bind(self, *args, **kw)
                except TypeError:
                    options: dict[str, Any] = dict(kw)
                else:
                    options = {}
                    for param_name, value in list(bound.arguments.items())[1:]:
                        param = signature.parameters[param_name]
                        if param.kind is param.VAR_KEYWORD:
                            options.update(value)
                        elif param.kind is not param.VAR_POSITIONAL:
                            options[param_name] = value
                excluded = type(self).spec_exclude | secret
                self._spec_options = {k: v for k, v in options.items() if k not in excluded}
            init(self, *args, **kw)

        setattr(__init__, "_nemo_gym_described", True)  # noqa: B010 (a marker on a function)
        setattr(cls, "__init__", __init__)  # noqa: B010 (mypy refuses a method assignment)

    def to_spec(self) -> Spec:
        """How to rebuild this object: registry name (or type), version, options."""
        cls = type(self)
        kind = cls.spec_kind
        name = _builtin_name(kind, cls)
        if name is None and kind == "env":
            env_name = getattr(self, "name", None)
            name = env_name if isinstance(env_name, str) and env_name else None
        return Spec(
            kind=kind,
            name=name or cls.__qualname__,
            version=_attr_version(self),
            options=jsonable_options(self.__dict__.get("_spec_options", {})),
            target=_import_path(cls),
        )

    def __repr__(self) -> str:
        options = self.__dict__.get("_spec_options", {})
        shown = ", ".join(f"{k}={v!r}" for k, v in options.items())
        return f"{type(self).__name__}({shown})"
