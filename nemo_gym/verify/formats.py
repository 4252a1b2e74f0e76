"""Structured documents: JSON, YAML, TOML, CSV and XML replies, parsed and checked.

`DocumentVerifier` reads the document from the reply (a `<|BEGIN_CODE|>` span, else the
last fenced block, preferring one tagged with the format, else the whole reply; the
first of these that parses), and
scores one of three things, per task (`task.metadata`) or fixed at construction:

- `schema`: the document validates against a JSON Schema (`strict=True` first makes
  every listed property required and forbids others, as OpenAI's strict mode does).
  CSV values and XML text are coerced to the schema's types before validating.
- `paths`: StructEval's key paths (`novel.characters[0].name`, `recipe.steps.*.order`,
  `csv::header`, `@attr` for XML attributes) exist; reward = 0.2 if it parses plus 0.8
  times the fraction of paths found.
- neither: the reply is a well-formed document of the format (reward 1 or 0).

A task with `metadata["response_mode"] == "tool_call"` is answered by one tool call
instead (named `metadata["tool_name"]`, the document under `metadata["payload_key"]` of
its arguments, or the arguments themselves).

XML becomes nested dicts the way `xmltodict` builds them (attributes as "@name", text
beside children as "#text", repeated children as lists); it is parsed with the standard
library's expat, which refuses entity-expansion bombs. Every document is held to
`nemo_gym.limits.DEFAULT_LIMITS` (text and expanded size, depth; YAML aliases counted
each time they are reached): over them, the reply holds no document. YAML needs PyYAML
(the `formats` extra); the rest is the standard library.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tomllib
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nemo_gym.errors import ConfigError, VerifierError, require
from nemo_gym.limits import (
    DEFAULT_LIMITS,
    DocumentLimits,
    LimitExceeded,
    check_document,
    loads_json,
)
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import response_text
from nemo_gym.verify.extract import fenced_blocks

__all__ = [
    "FORMATS",
    "DocumentVerifier",
    "ParsedDocument",
    "document_from_paths",
    "dump_document",
    "extract_document",
    "parse_document",
    "path_exists",
    "strict_schema",
]

Format = Literal["json", "yaml", "toml", "csv", "xml"]
FORMATS: tuple[str, ...] = ("json", "yaml", "toml", "csv", "xml")
_TAGS = {
    "json": {"json"},
    "yaml": {"yaml", "yml"},
    "toml": {"toml"},
    "csv": {"csv"},
    "xml": {"xml"},
}
_BEGIN_END = re.compile(r"<\|BEGIN_CODE\|>[ \t]*\n?(.*?)(?:<\|END_CODE\|>|$)", re.S)


def _check_format(fmt: str) -> Format:
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise ConfigError(f"unknown document format {fmt!r}; one of {', '.join(FORMATS)}")
    return fmt  # type: ignore[return-value]


def _xml_value(element: ElementTree.Element) -> Any:
    node: dict[str, Any] = {f"@{k}": v for k, v in element.attrib.items()}
    for child in element:
        value = _xml_value(child)
        if child.tag in node:
            existing = node[child.tag]
            node[child.tag] = (
                [*existing, value] if isinstance(existing, list) else [existing, value]
            )
        else:
            node[child.tag] = value
    text = (element.text or "").strip()
    if not node:
        return text or None
    if text:
        node["#text"] = text
    return node


def parse_document(text: str, fmt: str, limits: DocumentLimits = DEFAULT_LIMITS) -> Any:
    """Parse `text` as `fmt`; raises `ValueError` (with the parser's message) if it is not.

    The text and the parsed document are held to `limits` (`LimitExceeded`, a
    `ValueError`): YAML aliases and repeated references count every time they are
    reached, so a few hundred bytes cannot become a row of hundreds of megabytes.
    """
    fmt = _check_format(fmt)
    if len(text) > limits.max_chars:
        raise LimitExceeded(f"the text is over {limits.max_chars} characters (max_chars)")
    try:
        value = _parse(text, fmt)
    except ValueError:
        raise
    except RecursionError:
        raise LimitExceeded(
            f"the document is nested over {limits.max_depth} levels deep (max_depth)"
        ) from None
    except Exception as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    check_document(value, limits)
    return value


def _parse(text: str, fmt: Format) -> Any:
    if fmt == "json":
        return json.loads(text)
    if fmt == "yaml":
        return require("yaml", "formats").safe_load(text)
    if fmt == "toml":
        return tomllib.loads(text)
    if fmt == "xml":
        root = ElementTree.fromstring(text.strip())
        return {root.tag: _xml_value(root)}
    rows = list(csv.DictReader(io.StringIO(text.strip())))
    if not rows:
        raise ValueError("no CSV rows after the header")
    return rows


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    ok: bool
    value: Any = None
    text: str = ""
    error: str | None = None


def extract_document(
    reply: str, fmt: str, limits: DocumentLimits = DEFAULT_LIMITS
) -> ParsedDocument:
    """The document in a reply: a `<|BEGIN_CODE|>` span, a fence, or the whole text
    (each held to `limits`)."""
    fmt = _check_format(fmt)
    candidates = [m.group(1).strip() for m in _BEGIN_END.finditer(reply)]
    blocks = fenced_blocks(reply)
    tagged = [b.body for b in blocks if b.lang in _TAGS[fmt]]
    candidates += list(reversed(tagged)) + [b.body for b in reversed(blocks)] + [reply.strip()]
    error = "empty reply"
    limit: str | None = None
    for candidate in candidates:
        if not candidate:
            continue
        try:
            value = parse_document(candidate, fmt, limits)
        except LimitExceeded as exc:
            error = limit = str(exc)
            continue
        except ValueError as exc:
            # A limit hit by one candidate says more than a later candidate's syntax error.
            error = limit or str(exc)[:300]
            continue
        if value not in (None, "", [], {}):
            return ParsedDocument(True, value, candidate)
        error = "the document is empty"
    return ParsedDocument(False, error=f"no {fmt.upper()} document: {error}")


def dump_document(value: Any, fmt: str) -> str:
    """Write `value` (JSON-like data) as `fmt`: what an oracle reply holds."""
    fmt = _check_format(fmt)
    if fmt == "json":
        return json.dumps(value, indent=2, ensure_ascii=False)
    if fmt == "yaml":
        return require("yaml", "formats").safe_dump(value, sort_keys=False, allow_unicode=True)
    if fmt == "toml":
        return _toml(value)
    if fmt == "csv":
        rows = value if isinstance(value, list) else [value]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    if not isinstance(value, dict) or len(value) != 1:
        raise ConfigError("an XML document is a mapping with exactly one root element")
    ((tag, body),) = value.items()
    return _xml(tag, body)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
        )
    return json.dumps(str(value), ensure_ascii=False)


def _toml(value: Any, prefix: str = "") -> str:
    if not isinstance(value, dict):
        raise ConfigError("a TOML document is a table (a mapping)")
    lines, tables = [], []
    for key, item in value.items():
        name = f"{prefix}{json.dumps(key)}"
        if isinstance(item, dict):
            tables.append(f"[{name}]\n" + _toml(item, f"{name}."))
        elif isinstance(item, list) and item and all(isinstance(i, dict) for i in item):
            tables += [f"[[{name}]]\n" + _toml(i, f"{name}.") for i in item]
        else:
            lines.append(f"{json.dumps(key)} = {_toml_value(item)}")
    return "\n".join([*lines, "", *tables]) if tables else "\n".join(lines) + "\n"


def _xml(tag: str, body: Any) -> str:
    if isinstance(body, list):
        return "".join(_xml(tag, item) for item in body)
    if not isinstance(body, dict):
        text = "" if body is None else str(body)
        return f"<{tag}>{_escape(text)}</{tag}>"
    attrs = "".join(f' {k[1:]}="{_escape(str(v))}"' for k, v in body.items() if k.startswith("@"))
    inner = "".join(_xml(k, v) for k, v in body.items() if not k.startswith(("@", "#")))
    text = _escape(str(body.get("#text", "")))
    return f"<{tag}{attrs}>{text}{inner}</{tag}>"


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def strict_schema(schema: Any) -> Any:
    """A copy of `schema` where every object lists all its properties as required and
    allows no others (OpenAI strict mode), at every depth."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) if k != "properties" else v for k, v in schema.items()}
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: strict_schema(v) for k, v in schema["properties"].items()}
        out["required"] = list(schema["properties"])
        out["additionalProperties"] = False
    return out


def _coerce(value: Any, schema: Any) -> Any:
    """Text (CSV cells, XML text) converted to the type the schema asks for, if it can be."""
    if not isinstance(schema, dict):
        return value
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "object" in kinds and isinstance(value, dict):
        props = schema.get("properties", {})
        return {k: _coerce(v, props.get(k, {})) for k, v in value.items()}
    if "array" in kinds:
        if isinstance(value, dict) and len(value) == 1:  # <items><item/>...</items>
            value = next(iter(value.values()))
        items = value if isinstance(value, list) else ([] if value is None else [value])
        return [_coerce(v, schema.get("items", {})) for v in items]
    if value is None and "string" in kinds:
        return ""
    if value == "" and "null" in kinds:
        return None
    if isinstance(value, str):
        for target in kinds:
            converted = _scalar(value, target)
            if converted is not value:
                return converted
    return value


def _scalar(text: str, target: Any) -> Any:
    try:
        if target == "integer":
            return int(text)
        if target == "number":
            return float(text)
    except ValueError:
        return text
    if target == "boolean" and text.lower() in ("true", "false", "1", "0"):
        return text.lower() in ("true", "1")
    return text


def _path_tokens(path: str) -> list[str]:
    if path.startswith("csv::"):
        return [path]
    tokens, buffer, quoted, i = [], "", False, 0
    while i < len(path):
        char = path[i]
        if char == "`":
            quoted = not quoted
        elif char == "." and not quoted:
            if buffer:
                tokens.append(buffer)
            buffer = ""
        elif char == "[" and not quoted:
            if buffer:
                tokens.append(buffer)
            end = path.find("]", i)
            if end < 0:
                raise ConfigError(f"unclosed '[' in path {path!r}")
            tokens.append(path[i : end + 1])
            buffer, i = "", end
        else:
            buffer += char
        i += 1
    return [*tokens, buffer] if buffer else tokens


def _new(rest: Sequence[str]) -> Any:
    if not rest:
        return "value"
    return [] if rest[0] == "*" or rest[0].startswith("[") else {}


def _put(node: Any, tokens: Sequence[str], xml: bool) -> None:
    token, rest = tokens[0], tokens[1:]
    if token == "*" or token.startswith("["):
        index = None if token == "*" else int(token[1:-1])
        while len(node) < max(2, (index or 0) + 1):
            node.append(_new(rest))
        for item in node if index is None else [node[index]]:
            if rest:
                _put(item, rest, xml)
        return
    key = token if xml or not token.startswith("@") else token[1:]
    if not rest:
        node.setdefault(key, "value")
        return
    wanted = type(_new(rest))
    if not isinstance(node.get(key), wanted):
        node[key] = _new(rest)
    _put(node[key], rest, xml)


def document_from_paths(paths: Sequence[str], fmt: str) -> Any:
    """A document in which every StructEval path exists (what an oracle can reply with)."""
    if paths and all(p.startswith("csv::") for p in paths):
        return [{p[5:]: f"v{i}" for p in paths} for i in range(2)]
    document: dict[str, Any] = {}
    for path in paths:
        _put(document, _path_tokens(path), _check_format(fmt) == "xml")
    return document


def path_exists(document: Any, path: str) -> bool:
    """Whether a StructEval key path exists in a parsed document (see the module doc)."""
    return _walk(document, _path_tokens(path))


def _walk(node: Any, tokens: Sequence[str]) -> bool:
    if not tokens:
        return True
    token, rest = tokens[0], tokens[1:]
    if token.startswith("csv::"):
        rows = node if isinstance(node, list) else []
        return not rest and bool(rows) and isinstance(rows[0], dict) and token[5:] in rows[0]
    if token == "*":
        return isinstance(node, list) and any(_walk(item, rest) for item in node)
    if token.startswith("[") and token.endswith("]"):
        try:
            index = int(token[1:-1])
        except ValueError:
            return False
        return isinstance(node, list) and 0 <= index < len(node) and _walk(node[index], rest)
    if isinstance(node, dict):
        for key in (token, f"@{token}") if not token.startswith("@") else (token, token[1:]):
            if key in node:
                return _walk(node[key], rest)
    return False


class DocumentVerifier:
    """Scores a structured document in the reply (see the module doc).

    `format`, `schema` and `paths` default to the task's `metadata["format"]`,
    `metadata["schema"]` (a dict or its JSON text) and `metadata["paths"]`.
    Components: `format` (it parsed), and `valid` (schema) or `paths` (fraction found).
    `limits` bounds the document (`nemo_gym.limits.DocumentLimits`; over them, the
    reply holds no document).
    """

    def __init__(
        self,
        format: str | None = None,
        *,
        schema: Mapping[str, Any] | None = None,
        paths: Sequence[str] | None = None,
        strict: bool = False,
        limits: DocumentLimits = DEFAULT_LIMITS,
    ) -> None:
        self.format = _check_format(format) if format else None
        self.limits = limits
        self.schema, self.paths, self.strict = schema, paths, strict
        self._jsonschema: Any = None

    def _validate(self, value: Any, schema: Any, task: Task) -> list[str]:
        if self._jsonschema is None:
            self._jsonschema = require("jsonschema", "schema")
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise VerifierError(f"task {task.id}: the schema is not JSON: {exc}") from exc
        schema = strict_schema(schema) if self.strict else schema
        try:
            cls = self._jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            errors = sorted(cls(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
        except self._jsonschema.SchemaError as exc:
            raise VerifierError(f"task {task.id}: invalid schema: {exc.message}") from exc
        return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:10]]

    def score(self, task: Task, value: Any, fmt: str) -> Rewards:
        """Score an already parsed document (a tool call's arguments, say)."""
        md = task.metadata
        schema = self.schema if self.schema is not None else md.get("schema")
        paths = self.paths if self.paths is not None else md.get("paths")
        if schema is not None:
            if fmt in ("csv", "xml"):
                value = _coerce(value, strict_schema(schema) if self.strict else schema)
            errors = self._validate(value, schema, task)
            meta: dict[str, Any] = {"extracted_answer": value}
            if errors:
                meta["errors"] = errors
            return Rewards(
                reward=float(not errors),
                components={"format": 1.0, "valid": float(not errors)},
                metadata=meta,
            )
        if paths:
            found = [p for p in paths if path_exists(value, p)]
            share = len(found) / len(paths)
            missing = [p for p in paths if p not in found][:10]
            return Rewards(
                reward=round(0.2 + 0.8 * share, 2),
                components={"format": 1.0, "paths": share},
                metadata={"extracted_answer": value, "missing_paths": missing},
            )
        return Rewards(reward=1.0, components={"format": 1.0}, metadata={"extracted_answer": value})

    def _tool_document(self, task: Task, trajectory: Trajectory) -> tuple[Any, str | None]:
        """The document passed as a tool call's arguments (`response_mode="tool_call"`)."""
        calls = [c for m in trajectory.messages if m.role == "assistant" for c in m.tool_calls]
        if len(calls) != 1:
            return None, f"expected exactly one tool call, got {len(calls)}"
        wanted = task.metadata.get("tool_name")
        if wanted and calls[0].name != wanted:
            return None, f"called {calls[0].name!r}, not {wanted!r}"
        try:
            arguments = loads_json(calls[0].arguments or "{}", self.limits)
        except ValueError as exc:  # not JSON, or over the document limits
            return None, f"the tool arguments are not JSON: {exc}"
        key = task.metadata.get("payload_key")
        if key:
            if not isinstance(arguments, dict) or key not in arguments:
                return None, f"the tool arguments have no {key!r}"
            arguments = arguments[key]
        return arguments, None

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        if task.metadata.get("response_mode") == "tool_call":
            value, error = self._tool_document(task, trajectory)
            if error is not None:
                return Rewards(
                    reward=0.0,
                    components={"format": 0.0},
                    metadata={"extracted_answer": None, "reason": error},
                )
            return self.score(task, value, "json")
        fmt = self.format or task.metadata.get("format")
        if not fmt:
            raise VerifierError(f"task {task.id}: no document format (metadata['format'])")
        parsed = extract_document(response_text(trajectory), str(fmt), self.limits)
        if not parsed.ok:
            return Rewards(
                reward=0.0,
                components={"format": 0.0},
                metadata={"extracted_answer": None, "reason": parsed.error},
            )
        return self.score(task, parsed.value, str(fmt).lower())
