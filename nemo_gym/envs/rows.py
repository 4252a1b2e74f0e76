"""Rows of benchmark data, and the environment built from them.

Files and Hub datasets are read by `nemo_gym.dataset.source_rows` (the one reader, which
`gym dataset` uses too); this module adds splits, `Row` and `DatasetEnv`.
`read_rows(source, split=...)` yields `Row`s from

- a local JSONL, JSON, Parquet or CSV file (one split), or a folder holding
  `<split>.jsonl` (`.json`, `.parquet`, `.csv`), or Hugging Face's downloaded layout
  `data/<split>-*.parquet`;
- a Hugging Face dataset id, through `datasets.load_dataset` (the `datasets` extra);
- a file shipped in the package (`shipped_rows("math/data/gsm8k.jsonl")`).

Every `Row` knows where it came from (`row.where` is "gsm8k.jsonl:12" or
"openai/gsm8k[test] row 12"), and `row.require` / `row.bad` raise `ConfigError`
naming the file, the line and the field. `DatasetEnv` turns rows into tasks: its
shipped sample by default, the benchmark's own data given `path=` or `dataset=`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from nemo_gym.envs.base import Env
from nemo_gym.errors import ConfigError
from nemo_gym.limits import TASK_FILE_LIMITS, loads_json
from nemo_gym.protocols import Harness, Verifier, VerifyFunction
from nemo_gym.records import Task

__all__ = ["DatasetEnv", "Row", "read_rows", "shipped_rows"]


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a dataset: its fields, where it came from, its position."""

    data: Mapping[str, Any]
    where: str
    index: int

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def require(self, key: str, *types: type) -> Any:
        """The field `key`; `ConfigError` naming the row and field if absent or mistyped."""
        value = self.data.get(key)
        if value is None:
            raise ConfigError(
                f"{self.where}: missing field {key!r} (the row has {', '.join(sorted(self.data))})"
            )
        if types and not isinstance(value, types):
            names = " or ".join(t.__name__ for t in types)
            raise self.bad(key, f"must be {names}, got {type(value).__name__}")
        return value

    def first(self, *keys: str) -> Any:
        """The first of `keys` that the row has (a layout's alternative column names)."""
        for key in keys:
            if self.data.get(key) is not None:
                return self.data[key]
        raise ConfigError(f"{self.where}: none of the fields {', '.join(keys)} is present")

    def json(self, key: str) -> Any:
        """A field that holds JSON, as text or already decoded."""
        value = self.require(key)
        if isinstance(value, str):
            try:
                return loads_json(value, TASK_FILE_LIMITS)
            except ValueError as exc:  # not JSON, or over the limits (nested too deep)
                raise self.bad(key, f"is not valid JSON: {exc}") from None
        return value

    def bad(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.where}: field {key!r} {problem}")


_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


def _rows(source: str | Path, **options: Any) -> Iterator[Row]:
    """Rows through the one file / Hub reader (`nemo_gym.dataset.source_rows`)."""
    from nemo_gym.dataset import source_rows

    for index, (where, data) in enumerate(source_rows(source, **options)):
        yield Row(data, where, index)


def _split_files(folder: Path, split: str) -> list[Path] | None:
    for suffix in _SUFFIXES:
        if (folder / f"{split}{suffix}").is_file():
            return [folder / f"{split}{suffix}"]
    shards = sorted(folder.glob(f"data/{split}-*.parquet")) or sorted(
        folder.glob(f"{split}-*.parquet")
    )
    if shards:
        return shards
    if (folder / "dataset_dict.json").is_file() or (folder / "dataset_info.json").is_file():
        return None  # written by `datasets.save_to_disk`
    have = sorted(p.name for p in folder.iterdir() if p.suffix in _SUFFIXES)
    raise ConfigError(
        f"{folder}: no data for split {split!r}; expected {split}.jsonl (or .json, .parquet, "
        f".csv) or data/{split}-*.parquet; found {', '.join(have) or 'nothing'}"
    )


def read_rows(
    source: str | Path,
    *,
    split: str = "test",
    name: str | None = None,
    **load_options: Any,
) -> Iterator[Row]:
    """The rows of `split` in `source`: a local file or folder, else a Hugging Face id.

    A folder holds one file per split (or Hugging Face's `data/<split>-*.parquet`, or a
    `save_to_disk` dataset). A single file holds one split: rows with a `split` field are
    filtered by it, and a file without one is the "test" split only (asking it for
    another split is an error, so a train split is never silently the test set). `name`
    and `load_options` go to `datasets.load_dataset`.
    """
    path = Path(source).expanduser()
    if path.is_dir():
        files = _split_files(path, split)
        if files is None:
            yield from _rows(path, split=split)
            return
        index = 0
        for file in files:
            for row in _rows(file):
                yield Row(row.data, row.where, index)
                index += 1
        return
    if path.is_file():
        yield from _by_split(_rows(path), split, str(path))
        return
    if isinstance(source, Path) or str(source).startswith((".", "/", "~")):
        raise ConfigError(f"{source}: no such file or folder")
    yield from _rows(str(source), split=split, config=name, **load_options)


def _by_split(rows: Iterator[Row], split: str, name: str) -> Iterator[Row]:
    first = next(rows, None)
    if first is None:
        return
    if "split" not in first.data:
        if split != "test":
            raise ConfigError(
                f"{name} is one file without a 'split' field: it is the 'test' split. Give a "
                f"folder with {split}.jsonl for a {split!r} split, or a 'split' field per row"
            )
        yield first
        yield from rows
        return
    for row in (first, *rows):
        if row.data.get("split") == split:
            yield row


def shipped_rows(relative: str, split: str | None = None) -> list[Row]:
    """Rows of a data file shipped in `nemo_gym/envs/` (filtered by `split` if given)."""
    with resources.as_file(resources.files("nemo_gym.envs").joinpath(relative)) as path:
        rows = list(_rows(path))
    return [r for r in rows if split is None or r.data.get("split", "test") == split]


class DatasetEnv(Env):
    """An environment whose tasks are rows: a shipped sample, or the benchmark's data.

    With no source it reads `sample` (a JSONL file shipped in the package, its rows
    carrying a `split` field or all "test"). `path=` reads a local file or folder in the
    public benchmark's layout, `dataset=` a Hugging Face dataset (`dataset_name=` its
    config, `load_options=` the rest of `load_dataset`'s arguments); `tasks=` gives the
    tasks directly. Subclasses implement `task_from_row(row, split)`.
    """

    spec_exclude = frozenset({"tasks"})
    sample: ClassVar[str | None] = None
    public: ClassVar[str | None] = None
    """The public benchmark's Hugging Face id (what `dataset=` usually names)."""

    def __init__(
        self,
        verifier: Verifier | VerifyFunction,
        *,
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
        harness: Harness | None = None,
    ) -> None:
        if sum(x is not None for x in (path, dataset, tasks)) > 1:
            raise ConfigError(f"{self.name}: give at most one of path=, dataset= and tasks=")
        super().__init__(verifier, tasks=tasks, harness=harness)
        self.path, self.dataset, self.dataset_name = path, dataset, dataset_name
        self.load_options = dict(load_options or {})
        self._cache: dict[str, list[Task]] = {}

    def task_from_row(self, row: Row, split: str) -> Task:
        raise NotImplementedError(f"{type(self).__name__} must implement task_from_row()")

    def _rows(self, split: str) -> list[Row]:
        if self.path is not None:
            return list(read_rows(self.path, split=split))
        if self.dataset is not None:
            return list(
                read_rows(self.dataset, split=split, name=self.dataset_name, **self.load_options)
            )
        if self.sample is None:
            raise ConfigError(f"{self.name} ships no sample: give path= or dataset=")
        if split not in self.splits:
            raise ConfigError(f"{self.name}: unknown split {split!r}; choose from {self.splits}")
        return shipped_rows(self.sample, split)

    def tasks(self, split: str = "test", limit: int | None = None) -> list[Task]:
        """The tasks of `split` (at most `limit`), read once and kept."""
        given = self.given_tasks(split, limit)
        if given is not None:
            return given
        if split not in self._cache:
            tasks = [self.task_from_row(row, split) for row in self._rows(split)]
            self._cache[split] = tasks
        found = self._cache[split]
        return found[:limit] if limit is not None else list(found)

    def task_id(self, row: Row, split: str, *keys: str) -> str:
        """A stable id: the row's own id field (the first of `keys` present), else its index."""
        for key in keys:
            value = row.data.get(key)
            if value is not None and str(value).strip():
                return f"{self.name}-{split}-{value}"
        return f"{self.name}-{split}-{row.index}"
