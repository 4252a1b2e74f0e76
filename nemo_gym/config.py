"""Config files: a run spec written down, in TOML or YAML.

A config names everything through the one registry (`registry.build(kind, name,
**options)`): the environments (several make a mixed run, with per-environment limits or
weights), the model, the harness, and optional variants (the same tasks under other
system prompts, harness options, sampling or environment options). Every error names
the file, the line and the field. An API key is never written in a config: the model's
`api_key_env` names the environment variable it is read from.

```toml
seed = 0
repeats = 4
limit = 100                      # per environment; with weights, the total

[model]
name = "openai"
options = { model = "my-policy", base_url = "http://127.0.0.1:8000/v1" }
api_key_env = "MY_API_KEY"

[sampling]
max_tokens = 512                 # greedy (temperature 0) unless set

[[envs]]
name = "arithmetic"
options = { seed = 3 }

[[envs]]
name = "bank"
limit = 20

[[variants]]
name = "terse"
system_prompt = "Answer with the number only."
```
"""

from __future__ import annotations

import inspect
import os
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nemo_gym import registry
from nemo_gym.collect import Part
from nemo_gym.errors import ConfigError, NemoGymError, require
from nemo_gym.protocols import Environment, Harness, Model
from nemo_gym.records import Sampling
from nemo_gym.registry import Kind, Spec
from nemo_gym.runner import DEFAULT_CONCURRENCY, default_harness
from nemo_gym.spec import split_id

__all__ = [
    "EnvTable",
    "ModelTable",
    "RunConfig",
    "Source",
    "SpecTable",
    "VariantTable",
    "build_model",
    "build_parts",
    "check_model",
    "load_config",
    "run_sampling",
    "weighted_limits",
]

_VARIANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SpecTable(_Table):
    """Something built by name: `name` (optionally `name@version`), `options`, and
    `target` (an import path, for a class the registry does not know by name)."""

    name: str
    version: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    target: str | None = None

    def spec(self, kind: Kind) -> Spec:
        name, version = split_id(self.name)
        return Spec(
            kind=kind,
            name=name,
            version=self.version or version,
            options=dict(self.options),
            target=self.target,
        )


class ModelTable(SpecTable):
    """The model. `api_key_env` names the environment variable holding its API key."""

    api_key_env: str | None = None

    @field_validator("options")
    @classmethod
    def _no_secret(cls, options: dict[str, Any]) -> dict[str, Any]:
        if "api_key" in options:
            raise ValueError(
                "an API key is never written in a config; name its variable in api_key_env"
            )
        return options


class EnvTable(SpecTable):
    """One environment of the run.

    `limit`: its number of tasks (default: the run's `limit`); `weight`: its share of the
    run's `limit` instead. `harness`: its harness (default: the run's, else its own).
    `tasks`: a task-rows file (`gym dataset prepare`) to run instead of its own tasks,
    relative to the config file.
    """

    limit: int | None = Field(default=None, ge=0)
    weight: float | None = Field(default=None, gt=0)
    harness: SpecTable | None = None
    tasks: str | None = None


class HarnessChange(_Table):
    """A variant's harness: a `name` replaces it; `options` alone change its options."""

    name: str | None = None
    version: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    target: str | None = None


class VariantTable(_Table):
    """A named setting every environment of the run is also run under.

    `system_prompt` is the harness option of that name; `harness` changes the harness;
    `sampling` is merged over the run's; `env_options` over each environment's options.
    """

    name: str
    system_prompt: str | None = None
    harness: HarnessChange | None = None
    sampling: Sampling | None = None
    env_options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _VARIANT.match(name):
            raise ValueError("use letters, digits and _ . -")
        return name


class RunConfig(_Table):
    """A run: what a config file holds (and what `gym eval run`'s flags build)."""

    envs: list[EnvTable] = Field(min_length=1)
    model: ModelTable = Field(default_factory=lambda: ModelTable(name="local"))
    harness: SpecTable | None = None
    sampling: Sampling | None = None
    seed: int | None = 0
    repeats: int = Field(default=1, ge=1)
    split: str = "test"
    limit: int | None = Field(default=None, ge=0)
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1)
    timeout: float | None = Field(default=None, gt=0)
    output: str | None = None
    success_threshold: float = 1.0
    variants: list[VariantTable] = Field(default_factory=list)

    @field_validator("envs", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        # `envs = ["arithmetic", "bank"]` is short for tables with a name each.
        if isinstance(value, list):
            return [{"name": item} if isinstance(item, str) else item for item in value]
        return value


# --------------------------------------------------------------------------- where


@dataclass
class Source:
    """Where a config came from, to name the line of a field in errors."""

    path: Path | None = None
    text: str = ""
    format: str = "toml"
    flags: Mapping[str, str] | None = None
    _lines: dict[tuple[Any, ...], int] | None = None

    def line(self, loc: Sequence[Any]) -> int | None:
        """The line a field (or, when absent, its nearest parent) is on."""
        if self.path is None:
            return None
        path = tuple(loc)
        while path:
            found = self._find(path)
            if found is not None:
                return found
            path = path[:-1]
        return 1

    def _find(self, path: tuple[Any, ...]) -> int | None:
        if self.format == "yaml":
            if self._lines is None:
                self._lines = yaml_lines(self.text)
            return self._lines.get(path)
        return toml_line(self.text, path)

    def where(self, loc: Sequence[Any]) -> str:
        """`file:line: field 'x'`, or `--flag` for a value given on the command line."""
        name = field_name(loc)
        for end in range(len(loc), 0, -1):  # the most specific flag that set it
            flag = (self.flags or {}).get(field_name(loc[:end]))
            if flag is not None:
                return flag
        if self.path is None:
            return f"field {name!r}"
        return f"{self.path}:{self.line(loc)}: field {name!r}"

    def error(self, loc: Sequence[Any], message: str) -> ConfigError:
        return ConfigError(f"{self.where(loc)}: {message}")


def field_name(loc: Sequence[Any]) -> str:
    """A field path as written: `envs[1].options.seed`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def toml_line(text: str, path: tuple[Any, ...]) -> int | None:
    """The line of the statement that first defines `path` in a TOML document.

    Each prefix of whole lines that parses is a document holding exactly the statements
    it contains, so the first prefix holding `path` ends at its statement; the
    statement starts at the first line after the previous parseable prefix that is not
    blank or a comment (a multi-line array or string starts there).
    """
    lines = text.splitlines(keepends=True)
    last_ok = 0
    for end in range(1, len(lines) + 1):
        try:
            data = tomllib.loads("".join(lines[:end]))
        except tomllib.TOMLDecodeError:
            continue
        if _has(data, path):
            for number in range(last_ok + 1, end + 1):
                stripped = lines[number - 1].strip()
                if stripped and not stripped.startswith("#"):
                    return number
            return end
        last_ok = end
    return None


def _has(data: Any, path: tuple[Any, ...]) -> bool:
    for part in path:
        if isinstance(part, int):
            if not isinstance(data, list) or part >= len(data):
                return False
        elif not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def yaml_lines(text: str) -> dict[tuple[Any, ...], int]:
    """Every key and item path of a YAML document, with its (1-based) line."""
    yaml = require("yaml", "cli")
    out: dict[tuple[Any, ...], int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return out

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                here = (*path, key.value)
                out.setdefault(here, key.start_mark.line + 1)
                walk(value, here)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                here = (*path, index)
                out.setdefault(here, item.start_mark.line + 1)
                walk(item, here)

    if root is not None:
        walk(root, ())
    return out


# --------------------------------------------------------------------------- load


def parse_text(path: Path, text: str) -> tuple[Any, str]:
    """The data of a TOML or YAML config (by suffix), and its format."""
    suffix = path.suffix.lower()
    if suffix == ".toml":
        try:
            return tomllib.loads(text), "toml"
        except tomllib.TOMLDecodeError as exc:
            match = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
            where = f"{path}:{match.group(1)}" if match else f"{path}"
            raise ConfigError(f"{where}: not valid TOML ({exc})") from exc
    if suffix in (".yaml", ".yml"):
        yaml = require("yaml", "cli")
        try:
            return yaml.safe_load(text), "yaml"
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else f"{path}"
            raise ConfigError(f"{where}: not valid YAML ({exc})") from exc
    raise ConfigError(f"{path}: a config file is .toml, .yaml or .yml")


def load_config(
    path: str | os.PathLike[str], overrides: Mapping[str, tuple[str, Any]] | None = None
) -> tuple[RunConfig, Source]:
    """Read and check a config file; `overrides` maps fields to (flag, value) given on
    the command line, which win over the file. Errors name file, line and field (or the
    flag)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{file}: no such file") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 ({exc.reason})") from exc
    data, form = parse_text(file, text)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{file}:1: a config is a table of fields, got {type(data).__name__}")
    overrides = overrides or {}
    source = Source(
        path=file, text=text, format=form, flags={k: flag for k, (flag, _) in overrides.items()}
    )
    data = {**data, **{k: value for k, (_, value) in overrides.items()}}
    return validate_config(data, source), source


def validate_config(data: Mapping[str, Any], source: Source) -> RunConfig:
    """A `RunConfig` from its data; every error (at most 10) names where."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        messages = [_describe(source, error) for error in exc.errors()[:10]]
        raise ConfigError("\n".join(messages)) from exc


def _describe(source: Source, error: Any) -> str:
    loc = tuple(error["loc"])
    if error["type"] == "extra_forbidden":
        allowed = fields_at(loc[:-1])
        hint = f"; expected one of {', '.join(allowed)}" if allowed else ""
        return source.error(loc, f"unknown field{hint}").args[0]
    if error["type"] == "missing":
        return source.error(loc, "missing (required)").args[0]
    message = error["msg"].removeprefix("Value error, ")
    given = error.get("input")
    if not isinstance(given, dict | list):
        message += f" (got {given!r})"
    return source.error(loc, message).args[0]


def fields_at(loc: Sequence[Any]) -> list[str]:
    """The field names the table at `loc` of a `RunConfig` takes."""
    annotation: Any = RunConfig
    for part in loc:
        annotation = _unwrap(annotation, isinstance(part, int))
        if isinstance(part, int):
            continue
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        info = annotation.model_fields.get(str(part))
        if info is None:
            return []
        annotation = info.annotation
    annotation = _unwrap(annotation, False)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def _unwrap(annotation: Any, item: bool) -> Any:
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        models = [a for a in get_args(annotation) if a is not type(None)]
        annotation = models[0] if len(models) == 1 else annotation
        origin = get_origin(annotation)
    if item and origin in (list, tuple):
        return _unwrap(get_args(annotation)[0], False)
    return annotation


# --------------------------------------------------------------------------- build


def run_sampling(config: RunConfig) -> Sampling:
    """The run's sampling: greedy (temperature 0) unless the config sets a temperature,
    because an evaluation should be reproducible and score the model's best guess."""
    sampling = config.sampling or Sampling()
    if sampling.temperature is None:
        sampling = sampling.model_copy(update={"temperature": 0.0})
    return sampling


def weighted_limits(total: int, weights: Sequence[float]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders; sums to `total`)."""
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    limits = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (limits[i] - exact[i], i))
    for i in order[: total - sum(limits)]:
        limits[i] += 1
    return limits


def _limits(config: RunConfig, source: Source) -> list[int | None]:
    weighted = [env.weight is not None for env in config.envs]
    if not any(weighted):
        return [env.limit if env.limit is not None else config.limit for env in config.envs]
    for index, env in enumerate(config.envs):
        if env.weight is None:
            raise source.error(("envs", index), "every environment needs a weight when one has one")
        if env.limit is not None:
            raise source.error(("envs", index, "limit"), "give a limit or a weight, not both")
    if config.limit is None:
        first = weighted.index(True)
        raise source.error(
            ("envs", first, "weight"), "weights share the run's total `limit`; set `limit`"
        )
    return list(weighted_limits(config.limit, [env.weight or 0.0 for env in config.envs]))


def _build(kind: Kind, table: SpecTable | Spec, source: Source, loc: tuple[Any, ...]) -> Any:
    spec = table if isinstance(table, Spec) else table.spec(kind)
    try:
        # A config's `target` is an import path its author wrote on purpose.
        return registry.rebuild(spec, trust_code=True)
    except NemoGymError as exc:
        field = loc + (("options",) if "rejected its options" in str(exc) else ("name",))
        unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if unexpected and unexpected.group(1) in spec.options:
            field = (*loc, "options", unexpected.group(1))
        raise source.error(field, str(exc)) from exc
    except (TypeError, ValueError) as exc:
        raise source.error((*loc, "options"), f"{type(exc).__name__}: {exc}") from exc


def build_parts(config: RunConfig, source: Source) -> list[Part]:
    """The parts of the run a config describes: one per environment, times each variant.

    Environments and harnesses are built through the registry; a task-rows file is read
    lazily, its path and hash recorded as the part's `source`.
    """
    from nemo_gym.dataset import file_digest, read_tasks

    limits = _limits(config, source)
    base_sampling = run_sampling(config)
    parts: list[Part] = []
    for index, table in enumerate(config.envs):
        loc: tuple[Any, ...] = ("envs", index)
        env: Environment = _build("env", table, source, loc)
        harness_table = table.harness or config.harness
        harness_loc = (*loc, "harness") if table.harness else ("harness",)
        harness: Harness | None = (
            _build("harness", harness_table, source, harness_loc) if harness_table else None
        )
        tasks_path: Path | None = None
        if table.tasks is not None:
            tasks_path = Path(table.tasks)
            if source.path is not None and not tasks_path.is_absolute():
                tasks_path = source.path.parent / tasks_path
            if not tasks_path.is_file():
                raise source.error((*loc, "tasks"), f"no such file {str(tasks_path)!r}")
        recorded = f"{tasks_path} {file_digest(tasks_path)}" if tasks_path else None

        def tasks_of(path: Path | None = tasks_path) -> Any:
            return None if path is None else read_tasks(path)

        if not config.variants:
            parts.append(
                Part(
                    env,
                    harness=harness,
                    sampling=base_sampling,
                    limit=limits[index],
                    tasks=tasks_of(),
                    source=recorded,
                )
            )
            continue
        for v_index, variant in enumerate(config.variants):
            v_loc: tuple[Any, ...] = ("variants", v_index)
            v_env = env
            if variant.env_options:
                changed = table.model_copy(
                    update={"options": {**table.options, **variant.env_options}}
                )
                v_env = _build("env", changed, source, (*v_loc, "env_options"))
            v_harness = _variant_harness(variant, v_env, harness, source, v_loc)
            sampling = (
                variant.sampling.merged_over(base_sampling) if variant.sampling else base_sampling
            )
            parts.append(
                Part(
                    v_env,
                    harness=v_harness,
                    sampling=sampling,
                    limit=limits[index],
                    variant=variant.name,
                    tasks=tasks_of(),
                    source=recorded,
                )
            )
    return parts


def _variant_harness(
    variant: VariantTable,
    env: Environment,
    harness: Harness | None,
    source: Source,
    loc: tuple[Any, ...],
) -> Harness | None:
    change = variant.harness
    options: dict[str, Any] = dict(change.options) if change else {}
    if variant.system_prompt is not None:
        options["system_prompt"] = variant.system_prompt
    if change is None and not options:
        return harness
    if change is not None and change.name is not None:
        table = SpecTable(
            name=change.name, version=change.version, options=options, target=change.target
        )
        return _build("harness", table, source, (*loc, "harness"))
    base = registry.spec_of(harness or default_harness(env), "harness")
    if not base.rebuildable:
        raise source.error(
            (*loc, "harness"),
            f"the harness of {env.name!r} ({base.name}) has options that are objects, so it "
            "cannot be rebuilt with new ones; name a harness here",
        )
    spec = base.model_copy(update={"options": {**base.options, **options}})
    return _build("harness", spec, source, (*loc, "system_prompt" if change is None else "harness"))


def build_model(table: ModelTable, source: Source, loc: tuple[Any, ...] = ("model",)) -> Model:
    """The model a config names; the API key read from `api_key_env`, never recorded."""
    options = dict(table.options)
    if table.api_key_env is not None:
        key = os.environ.get(table.api_key_env)
        if not key:
            raise source.error(
                (*loc, "api_key_env"), f"the environment variable {table.api_key_env} is not set"
            )
        options["api_key"] = key
    spec = table.spec("model")
    return _build("model", spec.model_copy(update={"options": options}), source, loc)


def check_model(table: ModelTable, source: Source, loc: tuple[Any, ...] = ("model",)) -> None:
    """Check a model's name and options without building it (building `local` loads
    weights): the name resolves and the factory takes the options."""
    spec = table.spec("model")
    try:
        entry = registry.lookup("model", spec.id if spec.version else spec.name)
        factory = entry.load()
    except ConfigError as exc:
        if spec.target is None:
            raise source.error((*loc, "name"), str(exc)) from exc
        return
    try:
        inspect.signature(factory).bind(**table.options)
    except TypeError as exc:
        raise source.error((*loc, "options"), f"model {spec.name!r}: {exc}") from exc
    except ValueError:  # no signature to check
        return
    if table.api_key_env is not None and not os.environ.get(table.api_key_env):
        raise source.error(
            (*loc, "api_key_env"), f"the environment variable {table.api_key_env} is not set"
        )


def iter_locs(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key and item path of parsed config data (for tests of the line finders)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*prefix, key)
            yield from iter_locs(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield (*prefix, index)
            yield from iter_locs(value, (*prefix, index))
