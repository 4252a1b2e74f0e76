"""Code problems as `Task`s: our shipped set, and APPS / LiveCodeBench style datasets.

Every loader yields tasks whose `metadata` is what `CodeVerifier` reads (see
`nemo_gym.verify.code`): `tests` with `fn_name` for our problems, `input_output` for
APPS, `public_test_cases` / `private_test_cases` for LiveCodeBench.

```python
from datasets import Dataset
tasks = list(tasks_from_records(Dataset.from_list(rows)))        # format detected per row
tasks = load_hf("codeparrot/apps", split="test", limit=100)       # needs nemo-gym[datasets]
```
"""

from __future__ import annotations

import base64
import io
import json
import logging
import pickle
import zlib
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any, Literal

from nemo_gym.errors import ConfigError, require
from nemo_gym.records import Task

logger = logging.getLogger(__name__)

Format = Literal["auto", "nemo_gym", "apps", "livecodebench"]
FORMATS: tuple[str, ...] = ("auto", "nemo_gym", "apps", "livecodebench")

STDIN_INSTRUCTIONS = (
    "Write a complete Python 3 program that reads the input from standard input and "
    "writes the answer to standard output. Put the program in one ```python code block."
)
FUNCTION_INSTRUCTIONS = (
    "Write the Python 3 code below, completing the given signature; it is called "
    "directly with the test arguments (do not read input or print). Put the code in one "
    "```python code block."
)


def prompt_for(statement: str, *, title: str = "", starter_code: str = "") -> str:
    """The user prompt of a code problem: the statement, the rules, the starter code."""
    parts = [f"# {title}"] if title else []
    parts.append(statement.strip())
    if starter_code.strip():
        parts += [FUNCTION_INSTRUCTIONS, f"```python\n{starter_code.rstrip()}\n```"]
    else:
        parts.append(STDIN_INSTRUCTIONS)
    return "\n\n".join(parts) + "\n"


# ------------------------------------------------------------------ shipped problems


@cache
def _shipped() -> tuple[dict[str, Any], ...]:
    text = resources.files(__package__).joinpath("problems.jsonl").read_text("utf-8")
    return tuple(json.loads(line) for line in text.splitlines() if line.strip())


def shipped_problems(split: str = "all") -> list[dict[str, Any]]:
    """Our problems as dicts (id, title, statement, tests, reference, ...): a copy."""
    if split not in ("all", "train", "test"):
        raise ConfigError(f"unknown split {split!r} of the shipped code problems: all, train, test")
    return [json.loads(json.dumps(p)) for p in _shipped() if split == "all" or p["split"] == split]


def task_from_problem(problem: Mapping[str, Any]) -> Task:
    """A shipped-format problem (see problems.jsonl) as a `Task`."""
    try:
        tests = [{"input": t["input"], "output": t["output"]} for t in problem["tests"]]
        metadata: dict[str, Any] = {
            "source": problem.get("source", "nemo_gym"),
            "title": problem.get("title", ""),
            "difficulty": problem.get("difficulty"),
            "tags": list(problem.get("tags", ())),
            "tests": tests,
        }
        if problem.get("fn_name"):
            metadata["fn_name"] = problem["fn_name"]
        if problem.get("reference"):
            metadata["reference_solution"] = problem["reference"]
        prompt = prompt_for(
            problem["statement"],
            title=problem.get("title", ""),
            starter_code=problem.get("starter_code", "") if problem.get("fn_name") else "",
        )
        return Task(id=f"code-{problem['id']}", prompt=prompt, metadata=metadata)
    except (KeyError, TypeError) as exc:
        raise ConfigError(
            f"code problem {problem.get('id', '?')!r} lacks a field or has a bad one: {exc!r}"
        ) from exc


# ------------------------------------------------------------------ APPS


def _json_field(value: Any, what: str, row_id: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"row {row_id}: {what} is not valid JSON: {exc}") from exc
    return value


def task_from_apps(row: Mapping[str, Any]) -> Task | None:
    """An APPS row (question, input_output, starter_code, ...) as a `Task`; None without tests."""
    row_id = row.get("problem_id", row.get("id", "?"))
    io_spec = _json_field(row.get("input_output"), "input_output", row_id)
    if not io_spec or not io_spec.get("inputs"):
        return None
    if len(io_spec["inputs"]) != len(io_spec.get("outputs", ())):
        raise ConfigError(f"APPS row {row_id}: {len(io_spec['inputs'])} inputs but outputs differ")
    fn_name = io_spec.get("fn_name")
    starter = row.get("starter_code") or ""
    if fn_name and not starter:
        starter = f"def {fn_name}(*args):\n    ..."
    metadata = {
        "source": "apps",
        "problem_id": row_id,
        "difficulty": row.get("difficulty"),
        "url": row.get("url"),
        "input_output": io_spec,
    }
    prompt = prompt_for(str(row.get("question", "")), starter_code=starter if fn_name else "")
    return Task(id=f"apps-{row_id}", prompt=prompt, metadata=metadata)


# ------------------------------------------------------------------ LiveCodeBench


class _DataOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain data only: any class or function reference is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dataset")


def decode_test_cases(value: Any, what: str = "test cases", row_id: Any = "?") -> list[Any]:
    """LiveCodeBench test cases: a list, its JSON text, or base64(zlib(pickle(JSON text))).

    Newer LiveCodeBench releases compress private tests that way; the pickle holds a str,
    and is loaded with an unpickler that refuses every class, so a hostile dataset cannot
    run code here.
    """
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"row {row_id}: {what} must be a list or a string")
    text = value.strip()
    if text.startswith("["):
        decoded = _json_field(text, what, row_id)
    else:
        try:
            raw = zlib.decompress(base64.b64decode(text, validate=True))
            loaded = _DataOnlyUnpickler(io.BytesIO(raw)).load()
        except (ValueError, zlib.error, pickle.UnpicklingError, EOFError) as exc:
            raise ConfigError(f"row {row_id}: {what} are neither JSON nor compressed") from exc
        decoded = _json_field(loaded, what, row_id) if isinstance(loaded, str) else loaded
    if not isinstance(decoded, list):
        raise ConfigError(f"row {row_id}: {what} must decode to a list")
    return decoded


def task_from_livecodebench(row: Mapping[str, Any]) -> Task | None:
    """A LiveCodeBench row (question_content, public/private_test_cases, ...) as a `Task`."""
    row_id = row.get("question_id", row.get("id", "?"))
    public = decode_test_cases(row.get("public_test_cases"), "public_test_cases", row_id)
    private = decode_test_cases(row.get("private_test_cases"), "private_test_cases", row_id)
    if not public and not private:
        return None
    extra = _json_field(row.get("metadata"), "metadata", row_id) or {}
    fn_name = extra.get("func_name") if isinstance(extra, dict) else None
    metadata: dict[str, Any] = {
        "source": "livecodebench",
        "question_id": row_id,
        "title": row.get("question_title", ""),
        "platform": row.get("platform"),
        "contest_date": str(row["contest_date"]) if row.get("contest_date") else None,
        "difficulty": row.get("difficulty"),
        "public_test_cases": public,
        "private_test_cases": private,
    }
    if fn_name:
        metadata["fn_name"] = fn_name
    prompt = prompt_for(
        str(row.get("question_content", "")),
        title=str(row.get("question_title", "")),
        starter_code=str(row.get("starter_code") or ""),
    )
    return Task(id=f"lcb-{row_id}", prompt=prompt, metadata=metadata)


# ------------------------------------------------------------------ any dataset


def detect_format(row: Mapping[str, Any]) -> Format:
    """Which layout a row has: APPS (`input_output`), LiveCodeBench, or ours (`tests`)."""
    # By value, not key: a dataset mixing layouts fills the other layout's columns with None.
    if row.get("public_test_cases") or row.get("private_test_cases"):
        return "livecodebench"
    if "input_output" in row:
        return "apps"
    if "public_test_cases" in row:
        return "livecodebench"
    if "tests" in row and "statement" in row:
        return "nemo_gym"
    raise ConfigError(
        f"cannot tell the layout of a code dataset row with fields {sorted(row)}: expected "
        "'input_output' (APPS), 'public_test_cases' (LiveCodeBench) or 'statement' + 'tests'"
    )


_CONVERTERS = {
    "apps": task_from_apps,
    "livecodebench": task_from_livecodebench,
    "nemo_gym": task_from_problem,
}


def tasks_from_records(
    records: Iterable[Mapping[str, Any]], *, format: Format = "auto", limit: int | None = None
) -> Iterator[Task]:
    """Tasks from rows of a code dataset (a `datasets.Dataset` iterates as such rows).

    Rows without tests are skipped (logged once at the end); a malformed row raises
    `ConfigError` naming it.
    """
    if format not in FORMATS:
        raise ConfigError(f"unknown code dataset format {format!r}; choose from {FORMATS}")
    produced = skipped = 0
    for row in records:
        if limit is not None and produced >= limit:
            break
        convert = _CONVERTERS[detect_format(row) if format == "auto" else format]
        task = convert(row)
        if task is None:
            skipped += 1
            continue
        produced += 1
        yield task
    if skipped:
        logger.info("skipped %d code problem(s) without tests", skipped)


def load_hf(
    path: str,
    *,
    name: str | None = None,
    split: str = "test",
    format: Format = "auto",
    limit: int | None = None,
    **load_options: Any,
) -> list[Task]:
    """Tasks from a Hugging Face dataset (`datasets.load_dataset(path, name, split=...)`).

    `load_options` go to `load_dataset` (e.g. `version_tag="release_v2"` for
    LiveCodeBench's code_generation_lite, `trust_remote_code=True` where a dataset needs
    its script). Needs the `datasets` extra.
    """
    datasets = require("datasets", "datasets")
    dataset = datasets.load_dataset(path, name, split=split, **load_options)
    return list(tasks_from_records(dataset, format=format, limit=limit))
