"""Unified diffs (`git diff` output): parse, apply to file contents, and make.

Applied in the trainer's process to contents read from a container, so grading needs no
`git` or `patch` in the task's image and no program of the agent's reads the diff. A hunk
applies where its context matches exactly, at the line it names or the nearest line
where it does (as `patch` does, without fuzz); anything else is a `PatchError` naming
the file and hunk.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from nemo_gym.errors import ConfigError

__all__ = ["FilePatch", "PatchError", "apply_patch", "make_patch", "parse_patch"]

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


_Row = tuple[bytes, bytes, bool]
"""One line of a hunk: its tag (b" ", b"-", b"+"), its text, and whether a newline ends it."""


class PatchError(ConfigError):
    """A diff that cannot be read, or does not apply to the files it names."""


@dataclass
class FilePatch:
    """One file's part of a diff: `old`/`new` are None for a created/deleted file."""

    old: str | None
    new: str | None
    hunks: list[tuple[int, list[_Row]]] = field(default_factory=list)
    """(first line of the old side, 1-based; the hunk's rows)."""

    @property
    def path(self) -> str:
        """The path the file has after the patch (before it, for a deletion)."""
        path = self.new if self.new is not None else self.old
        assert path is not None
        return path


def _strip(name: bytes, where: str) -> str | None:
    text = name.split(b"\t")[0].strip().decode("utf-8", "surrogateescape")
    if text == "/dev/null":
        return None
    if text.startswith('"'):
        raise PatchError(f"{where}: quoted file names are not supported: {text}")
    if text.startswith(("a/", "b/")):
        text = text[2:]
    if not text or text.startswith("/") or ".." in text.split("/"):
        raise PatchError(f"{where}: {text!r} is not a relative path inside the repository")
    return text


def parse_patch(diff: str | bytes, *, name: str = "patch") -> list[FilePatch]:
    """The files of a unified diff, in order; `PatchError` names the line at fault."""
    data = diff.encode() if isinstance(diff, str) else diff
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out: list[FilePatch] = []
    current: FilePatch | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        where = f"{name}, line {i + 1}"
        if line.startswith(b"GIT binary patch") or line.startswith(b"Binary files "):
            raise PatchError(f"{where}: binary diffs are not supported")
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            current = FilePatch(
                old=_strip(line[4:], where), new=_strip(lines[i + 1][4:], f"{name}, line {i + 2}")
            )
            if current.old is None and current.new is None:
                raise PatchError(f"{where}: both sides are /dev/null")
            out.append(current)
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if current is None:
                raise PatchError(f"{where}: a hunk before any ---/+++ file header")
            old_count = int(match.group(2)) if match.group(2) is not None else 1
            new_count = int(match.group(4)) if match.group(4) is not None else 1
            body: list[_Row] = []
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_count or seen_new < new_count):
                row = lines[i]
                tag = row[:1]
                if tag == b"\\":  # "\ No newline at end of file" of the line before
                    if body:
                        body[-1] = (body[-1][0], body[-1][1], False)
                    i += 1
                    continue
                if tag == b"" and row == b"":
                    row, tag = b" ", b" "  # an empty context line whose space was trimmed
                if tag not in (b" ", b"-", b"+"):
                    raise PatchError(
                        f"{name}, line {i + 1}: a hunk of {current.path} ends early "
                        f"(expected {old_count} old and {new_count} new lines)"
                    )
                seen_old += tag in (b" ", b"-")
                seen_new += tag in (b" ", b"+")
                body.append((tag, row[1:], True))
                i += 1
            if seen_old != old_count or seen_new != new_count:
                raise PatchError(f"{where}: the hunk of {current.path} is cut short")
            while i < len(lines) and lines[i].startswith(b"\\"):
                if body:
                    body[-1] = (body[-1][0], body[-1][1], False)
                i += 1
            current.hunks.append((int(match.group(1)), body))
            continue
        i += 1
    return out


def _split(text: bytes) -> tuple[list[bytes], bool]:
    if not text:
        return [], True
    parts = text.split(b"\n")
    if parts[-1] == b"":
        return parts[:-1], True
    return parts, False


def _side(body: list[_Row], tag: bytes) -> tuple[list[bytes], bool]:
    """One side of a hunk: its lines, and whether its last line ends with a newline."""
    rows = [r for r in body if r[0] in (b" ", tag)]
    return [text for _, text, _ in rows], not rows or rows[-1][2]


def _apply_one(original: bytes | None, patch: FilePatch, name: str) -> bytes | None:
    if patch.new is None:
        return None
    lines, newline = _split(original or b"")
    out: list[bytes] = []
    cursor = 0
    for number, (start, body) in enumerate(patch.hunks, 1):
        old, _ = _side(body, b"-")
        new, new_newline = _side(body, b"+")
        want = max(start - 1, 0) if old else start
        at = _find(lines, old, want, cursor)
        if at is None:
            raise PatchError(f"{name}: hunk {number} of {patch.path} does not apply")
        out += lines[cursor:at] + new
        cursor = at + len(old)
        if cursor == len(lines):
            newline = new_newline
    out += lines[cursor:]
    if not out:
        return b""
    return b"\n".join(out) + (b"\n" if newline else b"")


def _find(lines: list[bytes], old: list[bytes], want: int, floor: int) -> int | None:
    if not old:
        return min(max(want, floor), len(lines))
    for offset in range(len(lines) + 1):
        for at in (want - offset, want + offset) if offset else (want,):
            if floor <= at <= len(lines) - len(old) and lines[at : at + len(old)] == old:
                return at
    return None


def apply_patch(
    files: Mapping[str, bytes | None], diff: str | bytes, *, name: str = "patch"
) -> dict[str, bytes | None]:
    """The contents the diff gives the files it names (None: deleted).

    `files` maps each path the diff reads to its content before (None: absent); a path
    missing from `files` counts as absent.
    """
    result: dict[str, bytes | None] = {}
    for patch in parse_patch(diff, name=name):
        source = patch.old
        if source is not None:
            before = result[source] if source in result else files.get(source)
            if before is None:
                raise PatchError(f"{name}: {source} does not exist, so it cannot be patched")
        else:
            before = None
            if result.get(patch.path) if patch.path in result else files.get(patch.path):
                raise PatchError(f"{name}: {patch.path} is created by the patch but exists")
        if source is not None and patch.new is not None and source != patch.new:
            result[source] = None  # a rename
        result[patch.path] = _apply_one(before, patch, name)
    return result


def make_patch(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> str:
    """A `git diff`-style unified diff from `before` to `after` (text files only)."""
    chunks: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        try:
            old_text = None if old is None else old.decode("utf-8")
            new_text = None if new is None else new.decode("utf-8")
        except UnicodeDecodeError:
            chunks.append(f"diff --git a/{path} b/{path}\nBinary files differ\n")
            continue
        chunks.append(f"diff --git a/{path} b/{path}\n")
        if old is None:
            chunks.append("new file mode 100644\n")
        elif new is None:
            chunks.append("deleted file mode 100644\n")
        diff = difflib.unified_diff(
            (old_text or "").splitlines(keepends=True),
            (new_text or "").splitlines(keepends=True),
            "/dev/null" if old is None else f"a/{path}",
            "/dev/null" if new is None else f"b/{path}",
        )
        for row in diff:
            chunks.append(row if row.endswith("\n") else row + "\n\\ No newline at end of file\n")
    return "".join(chunks)
