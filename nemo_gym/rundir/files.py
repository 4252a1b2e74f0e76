"""The files of a run directory: JSONL rows (read, append, repair), atomic writes.

Every reader and writer of a run directory — collect, resume, reverify, aggregate,
metrics, the analysis — goes through these functions, so the crash rules (a torn last
line is dropped, a temporary file a crash left is removed, `run.json` and
`metrics.json` are replaced atomically) and the row-head check (`parse_row`: a JSON
object with `task_id`, `repeat` and `status`; `check_version`: a schema this release
reads) hold in one place. Parsing is bounded: a line nested deeper than the parser's
stack is a `ConfigError` naming file and line, never a `RecursionError`.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from nemo_gym.errors import ConfigError
from nemo_gym.limits import json_error
from nemo_gym.records import SCHEMA_VERSION

__all__ = [
    "FAILURES",
    "KNOWN_SCHEMA_VERSIONS",
    "MANIFEST",
    "METRICS",
    "ROLLOUTS",
    "check_version",
    "complete_size",
    "fsync_dir",
    "iter_rows",
    "lines",
    "loads",
    "numbered_rows",
    "parse_row",
    "remove_stale_temp_files",
    "repair_tail",
    "write_atomic",
    "write_line",
]

ROLLOUTS = "rollouts.jsonl"
FAILURES = "failures.jsonl"
METRICS = "metrics.json"
MANIFEST = "run.json"
KNOWN_SCHEMA_VERSIONS = (1, SCHEMA_VERSION)
"""Row versions this release reads (v1 rows store every request in full)."""


def loads(text: str | bytes, where: str) -> Any:
    """`json.loads`, with every way the text can fail to be JSON a `ConfigError` that
    starts with `where` (a file, or `file:line`): bad syntax (with its column and the
    field being read), bad UTF-8, nesting deeper than the parser's stack, and an integer
    too long to convert (Python refuses over 4,300 digits)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        raise ConfigError(f"{where}: not valid JSON ({json_error(shown, exc)})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc})") from exc
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as exc:  # an integer of more digits than int() converts
        raise ConfigError(f"{where}: not valid JSON ({exc})") from None


def lines(path: Path, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for each non-blank line of a file from byte `start` to `end`."""
    with path.open("rb") as handle:
        first = 1
        if start:
            handle.seek(start)
            first += _count_lines(path, start)
        position = start
        for number, line in enumerate(handle, first):
            position += len(line)
            if end is not None and position > end:
                return
            if line.strip():
                yield number, line


def parse_row(path: Path, number: int, line: bytes) -> dict[str, Any]:
    """The row-head check: line `number` of `path` as a JSON object with `task_id`,
    `repeat` and `status`; anything else a `ConfigError` naming file and line."""
    row = loads(line, f"{path}:{number}")
    if not isinstance(row, dict):
        raise ConfigError(f"{path}:{number}: expected a JSON object")
    for name in ("task_id", "repeat", "status"):
        if name not in row:
            raise ConfigError(f"{path}:{number}: missing field {name!r}")
    return row


def numbered_rows(
    path: Path, start: int = 0, *, end: int | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) for each row of a JSONL file from byte `start` (to byte `end`);
    a bad line raises `ConfigError` naming file and line."""
    for number, line in lines(path, start, end):
        yield number, parse_row(path, number, line)


def _count_lines(path: Path, end: int) -> int:
    """Newlines in the first `end` bytes, read a block at a time (not all at once: a
    resumed run's file can be larger than memory)."""
    count = 0
    with path.open("rb") as handle:
        while end > 0:
            block = handle.read(min(end, 1 << 20))
            if not block:
                break
            count += block.count(b"\n")
            end -= len(block)
    return count


def iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL file; a bad line raises `ConfigError` naming file and line."""
    for _, row in numbered_rows(path):
        yield row


def check_version(path: Path, number: int, row: dict[str, Any]) -> None:
    """A row of a schema version this release reads, else `ConfigError` (file:line)."""
    version = row.get("schema_version")
    if version not in KNOWN_SCHEMA_VERSIONS:
        raise ConfigError(
            f"{path}:{number}: field 'schema_version' is {version!r}; this nemo_gym reads "
            f"{', '.join(map(str, KNOWN_SCHEMA_VERSIONS))}"
        )


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so a crash leaves the old file or the new one, never half.

    A temporary file in the same directory is written and fsynced, renamed over `path`,
    and the directory fsynced so the rename itself survives a power loss.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); a run's files get the mode any file
        # written by this process gets, as rollouts.jsonl does.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def remove_stale_temp_files(directory: Path) -> list[Path]:
    """Delete the temporary files a crash in the middle of `write_atomic` left behind.

    They are named `.NAME.XXXXXXXX.tmp` after the file being replaced; nothing reads
    them, and without this every crash at that moment would leave one more.
    """
    removed = []
    for name in (MANIFEST, METRICS, FAILURES):
        for stale in directory.glob(f".{name}.*.tmp"):
            stale.unlink(missing_ok=True)
            removed.append(stale)
    return removed


@functools.cache
def _umask() -> int:
    """The process's umask, read without changing it (Linux reports it in /proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def fsync_dir(directory: Path) -> None:
    """Make the renames in `directory` durable (a power loss keeps them)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def repair_tail(path: Path) -> None:
    """Drop a torn last line left by a crash mid-write, so resume appends cleanly."""
    if not path.exists():
        return
    complete = complete_size(path)
    if complete != path.stat().st_size:
        with path.open("rb+") as handle:
            handle.truncate(complete)


def write_line(handle: IO[str], text: str) -> None:
    """Append one line and flush it (a crash loses at most the line being written)."""
    handle.write(text)
    handle.write("\n")
    handle.flush()


def complete_size(path: Path) -> int:
    """The size of a file up to its last newline (a torn last line left out)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return size
        position = size
        while position > 0:
            step = min(1 << 16, position)
            position -= step
            handle.seek(position)
            cut = handle.read(step).rfind(b"\n")
            if cut >= 0:
                return position + cut + 1
    return 0
