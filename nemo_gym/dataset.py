"""Task rows on disk: convert a dataset into them, read them, validate them.

A task-rows file is JSONL, one `Task` per line (`id`, `prompt` or `messages`,
`answer`, `metadata`), what `gym dataset prepare` writes and what `gym eval run --tasks`
and a config's `tasks = "..."` read. Every error names the file, the line and the field.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nemo_gym.errors import ConfigError, require
from nemo_gym.limits import TASK_FILE_LIMITS, LimitExceeded, check_document, json_line
from nemo_gym.records import Task

__all__ = [
    "ANSWER_FIELDS",
    "ID_FIELDS",
    "PROMPT_FIELDS",
    "Prepared",
    "file_digest",
    "prepare",
    "read_tasks",
    "source_rows",
    "validate_tasks",
]

PROMPT_FIELDS = ("prompt", "question", "problem", "input", "query", "instruction", "text")
"""Source fields taken as the prompt, in this order, when none is named."""
ANSWER_FIELDS = ("answer", "expected_answer", "solution", "target", "output", "label")
"""Source fields taken as the gold answer, in this order, when none is named."""
ID_FIELDS = ("id", "task_id", "uid", "idx", "index")
"""Source fields taken as the task id, in this order, when none is named."""
MESSAGES_FIELDS = ("messages", "conversation", "conversations")


def _error_field(exc: ValidationError) -> tuple[str, str]:
    error = exc.errors()[0]
    name = ".".join(str(part) for part in error["loc"]) or "(row)"
    message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
    return name, message


def _task_of(where: str, row: Any) -> Task:
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: expected a JSON object (a task row), got {row!r:.80}")
    prompt = row.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        # Checked here: the task builds its message from it, and that error would
        # name the message's field instead.
        raise ConfigError(f"{where}: field 'prompt': must be text, got {type(prompt).__name__}")
    try:
        return Task.model_validate(row)
    except ValidationError as exc:
        name, message = _error_field(exc)
        raise ConfigError(f"{where}: field {name!r}: {message}") from exc


def read_tasks(path: str | os.PathLike[str]) -> Iterator[Task]:
    """The tasks of a task-rows file, validated, one at a time.

    A line that is not JSON, not an object, has an unknown field or a bad value raises
    `ConfigError` naming file, line and field; so does a task id seen twice.
    """
    path = Path(path)
    seen: dict[str, int] = {}
    for number, text in _text_lines(path):
        where = f"{path}:{number}"
        task = _task_of(where, json_line(text, where))
        first = seen.setdefault(task.id, number)
        if first != number:
            raise ConfigError(
                f"{where}: field 'id' is {task.id!r}, the id of line {first} too; task ids "
                "must be unique"
            )
        yield task


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{path}:{number}: not UTF-8 ({exc.reason})") from exc
            if text.strip():
                yield number, text


def validate_tasks(path: str | os.PathLike[str], *, max_errors: int = 20) -> tuple[int, list[str]]:
    """(valid rows, errors) of a task-rows file: every bad line, up to `max_errors`."""
    path = Path(path)
    errors: list[str] = []
    seen: dict[str, int] = {}
    valid = 0
    for number, text in _text_lines(path):
        where = f"{path}:{number}"
        try:
            task = _task_of(where, json_line(text, where))
        except ConfigError as exc:
            errors.append(str(exc))
        else:
            first = seen.setdefault(task.id, number)
            if first != number:
                errors.append(f"{where}: field 'id' is {task.id!r}, the id of line {first} too")
            else:
                valid += 1
        if len(errors) >= max_errors:
            break
    return valid, errors


def file_digest(path: str | os.PathLike[str]) -> str:
    """`sha256:` and the first 16 hex digits of a file's hash (what a run records)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()[:16]}"


# --------------------------------------------------------------------------- sources


def source_rows(
    source: str | os.PathLike[str],
    *,
    split: str | None = None,
    config: str | None = None,
    **load_options: Any,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) for each row of a dataset: a JSONL, JSON, CSV or Parquet file, a
    directory written by `datasets.save_to_disk`, or a Hugging Face Hub dataset id
    (`datasets.load_dataset(source, config, split=..., **load_options)`, split default
    "test")."""
    path = Path(source)
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in (".jsonl", ".ndjson"):
            yield from _jsonl_rows(path)
        elif suffix == ".json":
            yield from _json_rows(path)
        elif suffix == ".csv":
            yield from _csv_rows(path)
        elif suffix == ".parquet":
            yield from _parquet_rows(path)
        else:
            raise ConfigError(
                f"{path}: unknown file type {suffix!r}; use .jsonl, .json, .csv, .parquet"
            )
    elif path.is_dir():
        datasets = require("datasets", "datasets")
        loaded = datasets.load_from_disk(str(path))
        yield from _hf_rows(str(path), _pick_split(str(path), loaded, split))
    else:
        yield from _hf_rows(str(source), _load_hf(str(source), config, split, **load_options))


def _jsonl_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for number, text in _text_lines(path):
        where = f"{path}:{number}"
        yield where, json_line(text, where)


def _json_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError:
        raise ConfigError(
            f"{path}: nested over {TASK_FILE_LIMITS.max_depth} levels deep (max_depth)"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a JSON array of objects (or {{'data': [...]}})")
    for index, row in enumerate(data):
        if not isinstance(row, dict):
            raise ConfigError(f"{path}: item {index} is not an object")
        try:
            check_document(row, TASK_FILE_LIMITS)
        except LimitExceeded as exc:
            raise ConfigError(f"{path}: item {index}: {exc}") from None
        yield f"{path}: item {index}", row


def _csv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        for row in reader:
            yield f"{path}:{reader.line_num}", dict(row)


def _parquet_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    parquet = require("pyarrow.parquet", "datasets")
    index = 0
    for batch in parquet.ParquetFile(str(path)).iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            yield f"{path}: row {index}", row
            index += 1


def _load_hf(name: str, config: str | None, split: str | None, **kwargs: Any) -> Any:
    datasets = require("datasets", "datasets")
    try:
        return datasets.load_dataset(name, config, split=split or "test", **kwargs)
    except FileNotFoundError as exc:
        raise ConfigError(f"{name}: no such file, directory or Hub dataset ({exc})") from exc
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from exc


def _pick_split(name: str, loaded: Any, split: str | None) -> Any:
    if hasattr(loaded, "keys") and not hasattr(loaded, "features"):  # a DatasetDict
        splits = list(loaded.keys())
        if split is None:
            if len(splits) != 1:
                raise ConfigError(f"{name}: has splits {', '.join(splits)}; pass --split")
            split = splits[0]
        if split not in loaded:
            raise ConfigError(f"{name}: no split {split!r}; have {', '.join(splits)}")
        return loaded[split]
    return loaded


def _hf_rows(name: str, dataset: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for index, row in enumerate(dataset):
        yield f"{name}: row {index}", dict(row)


# --------------------------------------------------------------------------- prepare


@dataclass
class Prepared:
    """What `prepare` did: rows written, and which source field became what."""

    output: Path
    rows: int
    prompt: str | None
    messages: str | None
    answer: str | None
    id: str | None
    metadata: list[str] = field(default_factory=list)


def _first_present(row: Mapping[str, Any], names: Sequence[str]) -> str | None:
    return next((name for name in names if name in row), None)


def prepare(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    split: str | None = None,
    config: str | None = None,
    prompt_field: str | None = None,
    template: str | None = None,
    messages_field: str | None = None,
    system: str | None = None,
    answer_field: str | None = None,
    id_field: str | None = None,
    metadata: Sequence[str] | None = None,
    limit: int | None = None,
) -> Prepared:
    """Convert a dataset (see `source_rows`) into a task-rows file at `output`.

    The prompt is `template.format(**row)`, else the `prompt_field`, else the first of
    `PROMPT_FIELDS` the first row has; `messages_field` names a field holding a chat
    instead. `answer_field` and `id_field` likewise (`ANSWER_FIELDS`, `ID_FIELDS`; no id
    field: ids derived from the content). `system` adds a system message. `metadata`
    lists the fields kept as task metadata (default: every other field). A row missing a
    field, two rows with one id or a value a `Task` refuses raise `ConfigError` naming
    where. The file is written whole or not at all.
    """
    out = Path(output)
    rows: Iterable[tuple[str, dict[str, Any]]] = source_rows(source, split=split, config=config)
    chosen: dict[str, str | None] = {}
    kept: list[str] = []
    written = 0
    seen: dict[str, str] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for where, row in rows:
                if limit is not None and written >= limit:
                    break
                if not chosen:
                    chosen = _choose_fields(
                        where, row, prompt_field, template, messages_field, answer_field, id_field
                    )
                    used = {name for name in chosen.values() if name is not None}
                    kept = (
                        list(metadata)
                        if metadata is not None
                        else [k for k in row if k not in used]
                    )
                task = _convert(where, row, chosen, template, system, metadata)
                first = seen.setdefault(task.id, where)
                if first != where:
                    raise ConfigError(
                        f"{where}: field {chosen['id'] or 'id'!r} gives id {task.id!r}, as "
                        f"{first} does; task ids must be unique"
                    )
                handle.write(task.model_dump_json())
                handle.write("\n")
                written += 1
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return Prepared(
        output=out,
        rows=written,
        prompt=chosen.get("prompt"),
        messages=chosen.get("messages"),
        answer=chosen.get("answer"),
        id=chosen.get("id"),
        metadata=kept,
    )


def _choose_fields(
    where: str,
    row: Mapping[str, Any],
    prompt: str | None,
    template: str | None,
    messages: str | None,
    answer: str | None,
    id_field: str | None,
) -> dict[str, str | None]:
    for flag, name in (
        ("--prompt-field", prompt),
        ("--messages-field", messages),
        ("--answer-field", answer),
        ("--id-field", id_field),
    ):
        if name is not None and name not in row:
            raise ConfigError(
                f"{where}: no field {name!r} ({flag}); the row has {', '.join(map(str, row))}"
            )
    if template is None and prompt is None and messages is None:
        messages = _first_present(row, MESSAGES_FIELDS)
        if messages is None:
            prompt = _first_present(row, PROMPT_FIELDS)
        if prompt is None and messages is None:
            raise ConfigError(
                f"{where}: no prompt field found (looked for {', '.join(PROMPT_FIELDS)}); "
                f"name one with --prompt-field or --template; the row has "
                f"{', '.join(map(str, row))}"
            )
    return {
        "prompt": prompt,
        "messages": messages,
        "answer": answer if answer is not None else _first_present(row, ANSWER_FIELDS),
        "id": id_field if id_field is not None else _first_present(row, ID_FIELDS),
    }


def _convert(
    where: str,
    row: Mapping[str, Any],
    chosen: Mapping[str, str | None],
    template: str | None,
    system: str | None,
    metadata: Sequence[str] | None,
) -> Task:
    data: dict[str, Any] = {}
    used = {name for name in chosen.values() if name is not None}
    if template is not None:
        try:
            data["prompt"] = template.format_map(row)
        except KeyError as exc:
            raise ConfigError(f"{where}: field {exc.args[0]!r} (in --template) is missing") from exc
        except (IndexError, ValueError) as exc:
            raise ConfigError(f"--template {template!r}: {exc}") from exc
    elif chosen["messages"] is not None:
        data["messages"] = _get(where, row, chosen["messages"])
    else:
        data["prompt"] = _text(where, chosen["prompt"], _get(where, row, chosen["prompt"]))
    if system is not None:
        opening = data.pop("messages", None) or [{"role": "user", "content": data.pop("prompt")}]
        data["messages"] = [{"role": "system", "content": system}, *opening]
    if chosen["answer"] is not None:
        data["answer"] = _get(where, row, chosen["answer"])
    if chosen["id"] is not None:
        data["id"] = str(_get(where, row, chosen["id"]))
    names = metadata if metadata is not None else [k for k in row if k not in used]
    data["metadata"] = {name: _jsonable(_get(where, row, name)) for name in names}
    try:
        return Task.model_validate(data)
    except ValidationError as exc:
        name, message = _error_field(exc)
        source_field = {
            "prompt": chosen.get("prompt"),
            "messages": chosen.get("messages"),
            "id": chosen.get("id"),
        }.get(name.split(".")[0])
        shown = f"{source_field!r} (as {name})" if source_field else repr(name)
        raise ConfigError(f"{where}: field {shown}: {message}") from exc


def _get(where: str, row: Mapping[str, Any], name: str | None) -> Any:
    if name is None or name not in row:
        raise ConfigError(f"{where}: missing field {name!r}")
    return row[name]


def _text(where: str, name: str | None, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: field {name!r} must be text, got {type(value).__name__}")
    return value


def _jsonable(value: Any) -> Any:
    """A source value as JSON (dates, numpy scalars and the like as text)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        if hasattr(value, "tolist"):
            return _jsonable(value.tolist())
        if isinstance(value, Mapping):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [_jsonable(v) for v in value]
        return str(value)
    return value
