"""How an object describes itself as a `Spec`: the one `build` attached, or what it
says of itself.

`build` attaches the spec it built from to the object (`remember`, the
`SPEC_ATTRIBUTE` attribute). A `Described` class (the built-in environments, models,
harnesses) carries the keyword arguments it was constructed with, stored by `__new__`
(no `__init__` is rewritten). `spec_of` reads either, else describes the object by its
type. Secrets never reach a spec: `SecretStr`/`SecretBytes` values, parameters typed
with a secret type, and options named like a credential (`SECRET_NAMES`) are left out
(`jsonable_options`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any, ClassVar, Self

from pydantic import BaseModel, SecretBytes, SecretStr

from nemo_gym.errors import ConfigError
from nemo_gym.protocols import function_of
from nemo_gym.spec import KINDS, Kind, Spec
from nemo_gym.urls import without_credentials

__all__ = [
    "SECRET_NAMES",
    "SPEC_ATTRIBUTE",
    "Described",
    "attr_version",
    "check_kind",
    "import_object",
    "import_path",
    "is_secret",
    "jsonable_options",
    "known_spec",
    "remember",
    "secret_parameters",
    "spec_of",
]


def import_object(target: str) -> Any:
    """What an import path `package.module:attribute` names (imported)."""
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute:
        raise ConfigError(f"{target!r}: an import path is 'package.module:attribute'")
    value: Any = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def import_path(obj: Any) -> str | None:
    """`module:qualname` of a class or function when importing it gives it back."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    try:
        found = import_object(f"{module}:{qualname}")
    except Exception:
        return None
    found = getattr(found, "__wrapped__", found)
    return f"{module}:{qualname}" if found is getattr(obj, "__wrapped__", obj) else None


def check_kind(kind: str) -> Kind:
    """`kind` if it is one of `KINDS`, else a `ConfigError` naming them."""
    if kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    return kind


def attr_version(obj: Any) -> str | None:
    """An object's `version` attribute as a string (None when it has no usable one)."""
    version = getattr(obj, "version", None)
    if isinstance(version, bool) or not isinstance(version, str | int):
        return None
    return str(version)


SPEC_ATTRIBUTE = "__nemo_gym_spec__"
"""The attribute `build` stores an object's `Spec` in (read by `spec_of`)."""


def remember(obj: Any, spec: Spec) -> None:
    """Attach `spec` to `obj` (what `build` does): the object carries it, so a copy
    does too and nothing outlives it. A no-op for an object that takes no attributes
    (`__slots__`, a bound method)."""
    try:
        object.__setattr__(obj, SPEC_ATTRIBUTE, spec)
    except (AttributeError, TypeError):
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
    spec = known_spec(value)
    if spec is not None:
        return {"$spec": spec.model_dump(mode="json")}
    return {"$object": type(value).__qualname__}


def known_spec(value: Any) -> Spec | None:
    try:
        found = vars(value).get(SPEC_ATTRIBUTE)
    except TypeError:  # no __dict__: nothing was attached
        found = None
    if isinstance(found, Spec):
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
    kind = check_kind(kind)
    known = known_spec(obj)
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
        version=attr_version(obj),
        options={},
        target=import_path(kind_type),
    )


class Described:
    """A class whose instances carry their constructor's keyword arguments.

    Subclasses set `spec_kind`; `spec_exclude` names arguments that are never recorded
    (secrets, large data; parameters typed `SecretStr` are excluded too). `to_spec()`
    then says how to rebuild the instance and `repr()` shows the options it was given:
    `SingleTurn(system_prompt='Solve it.')`. Nothing is rewritten: `__new__`, which
    receives the same arguments as `__init__`, binds them to the class's `__init__`
    signature and stores them on the instance (`_spec_options`) — once per object, so a
    subclass calling `super().__init__(...)` with other arguments changes nothing.
    """

    spec_kind: ClassVar[Kind]
    spec_exclude: ClassVar[frozenset[str]] = frozenset()
    _spec_options: dict[str, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        self = super().__new__(cls)
        # object.__setattr__: a subclass's own __setattr__ (a frozen one) is for its fields.
        object.__setattr__(self, "_spec_options", _constructor_options(cls, args, kwargs))
        return self

    def to_spec(self) -> Spec:
        """How to rebuild this object: registry name (or type), version, options."""
        cls = type(self)
        kind = cls.spec_kind
        from nemo_gym.registry import builtin_name  # the registry imports this module

        name = builtin_name(kind, cls)
        if name is None and kind == "env":
            env_name = getattr(self, "name", None)
            name = env_name if isinstance(env_name, str) and env_name else None
        return Spec(
            kind=kind,
            name=name or cls.__qualname__,
            version=attr_version(self),
            options=jsonable_options(self.__dict__.get("_spec_options", {})),
            target=import_path(cls),
        )

    def __repr__(self) -> str:
        options = self.__dict__.get("_spec_options", {})
        shown = ", ".join(f"{k}={v!r}" for k, v in options.items())
        return f"{type(self).__name__}({shown})"


@functools.lru_cache(maxsize=512)
def _init_parameters(init: Any) -> tuple[inspect.Signature | None, frozenset[str]]:
    """The signature of a class's `__init__` and its secret-typed parameters."""
    try:
        return inspect.signature(init), secret_parameters(init)
    except (TypeError, ValueError):
        return None, frozenset()


def _constructor_options(
    cls: type[Described], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The keyword options a constructor call amounts to, minus what is never recorded.
    Called with no arguments (pickle, copy), it records nothing: the state they restore
    carries the options."""
    # The __init__ this call runs: the first class in the MRO that defines one.
    init = next(c.__dict__["__init__"] for c in cls.__mro__ if "__init__" in c.__dict__)
    signature, secret = _init_parameters(init)
    options: dict[str, Any] = dict(kwargs)
    if signature is not None:
        try:
            bound = signature.bind(None, *args, **kwargs)
        except TypeError:
            pass
        else:
            options = {}
            for param_name, value in list(bound.arguments.items())[1:]:
                param = signature.parameters[param_name]
                if param.kind is param.VAR_KEYWORD:
                    options.update(value)
                elif param.kind is not param.VAR_POSITIONAL:
                    options[param_name] = value
    excluded = cls.spec_exclude | secret
    return {k: v for k, v in options.items() if k not in excluded}
