"""What the wire formats share: the JSON codec, shape errors, Retry-After, SSE, token lists."""

from __future__ import annotations

import email.utils
import importlib
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, overload

from nemo_gym.records import ModelRequest, Usage

log = logging.getLogger(__name__)

_orjson: ModuleType | None
try:  # orjson (the `http` extra) is ~5x faster on the hot path; the stdlib serves otherwise.
    _orjson = importlib.import_module("orjson")
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    _orjson = None


class WireError(ValueError):
    """A body that is not the shape its format promises; the message names the field."""


def dumps(value: Any) -> bytes:
    """JSON bytes (UTF-8, no NaN: JSON has none)."""
    if _orjson is not None:
        return _orjson.dumps(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode JSON; raises `WireError` when it is not valid JSON (e.g. a truncated body)."""
    try:
        if _orjson is not None:
            return _orjson.loads(data)
        # the stdlib takes no memoryview (orjson does): a body read as one stays valid
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)
    except ValueError as exc:
        size = len(data)
        raise WireError(f"body is not valid JSON ({size} bytes): {exc}") from None


def as_object(value: Any, where: str) -> dict[str, Any]:
    """`value` when it is a JSON object, else `WireError` naming `where`."""
    if not isinstance(value, dict):
        raise WireError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def as_list(value: Any, where: str) -> list[Any]:
    """`value` when it is a JSON array (None: empty), else `WireError` naming `where`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise WireError(f"{where}: expected a JSON array, got {type(value).__name__}")
    return value


@overload
def as_str(value: Any, where: str, *, optional: Literal[True] = True) -> str | None: ...
@overload
def as_str(value: Any, where: str, *, optional: Literal[False]) -> str: ...
def as_str(value: Any, where: str, *, optional: bool = True) -> str | None:
    """`value` when it is a string (None allowed when `optional`), else `WireError`."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise WireError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def as_int(value: Any, where: str) -> int:
    """A token count: an int (None: 0), else `WireError`."""
    if value is None:
        return 0
    if type(value) is not int:
        raise WireError(f"{where}: expected an integer, got {type(value).__name__}")
    return value


def usage(prompt: Any, completion: Any, where: str) -> Usage:
    return Usage(
        prompt_tokens=as_int(prompt, f"{where}.prompt"),
        completion_tokens=as_int(completion, f"{where}.completion"),
    )


def token_ids(value: Any, what: str) -> list[int] | None:
    """A list of token ids, or None (with a warning) when the server sent something else."""
    if value is None:
        return None
    if isinstance(value, list) and all(type(t) is int for t in value):
        return value
    log.warning("ignoring %s: expected a list of ints, got %r", what, type(value).__name__)
    return None


def logprobs(values: list[Any] | None, n_tokens: int | None) -> list[float] | None:
    """Per-token logprobs; None when any is missing (a hole would misalign every later one)."""
    if values is None:
        return None
    if any(not isinstance(v, int | float) or isinstance(v, bool) for v in values):
        log.warning("server returned logprobs with missing or non-numeric values; dropping them")
        return None
    out = [float(v) for v in values]
    if n_tokens is not None and len(out) != n_tokens:
        # The trainer lines logprobs up with token ids one to one; say so when it can't.
        log.warning("server returned %d logprobs for %d completion tokens", len(out), n_tokens)
    return out


def retry_after_s(value: str | None, *, now: float | None = None) -> float | None:
    """A `Retry-After` header in seconds: delta-seconds or an HTTP date; None if absent/bad.

    A date in the past is 0 (retry now). Non-finite or unparsable values are None, so
    the retry policy's own backoff applies.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def error_message(body: Any) -> str | None:
    """The message of an error body (OpenAI's and Anthropic's `{"error": {"message"}}`)."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = error.get("message")
            if isinstance(message, str):
                return message
        elif isinstance(error, str):
            return error
        message = body.get("message") or body.get("detail")
        if isinstance(message, str):
            return message
    return None


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """A request as a server reads it: the `ModelRequest`, whether to stream, the rest.

    `options` holds the body's other fields (e.g. `logprobs`, `return_token_ids`, `n`),
    as sent, for a server that honours them.
    """

    request: ModelRequest
    stream: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- SSE


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: `data` (JSON-encoded unless a str), under `event` if given."""
    payload = data if isinstance(data, str) else dumps(data).decode()
    head = f"event: {event}\n" if event else ""
    lines = "".join(f"data: {line}\n" for line in payload.split("\n"))
    return f"{head}{lines}\n".encode()


class ChunkStream:
    """A stream of JSON chunks in SSE `data` fields ended by `[DONE]` (OpenAI's chat and
    completions streams); a subclass gathers the chunks in `feed` and starts `done` False."""

    done: bool

    def feed_event(self, event: str | None, data: str) -> None:
        """One SSE event (these streams carry no event names)."""
        self.feed_data(data)

    def feed_data(self, data: str) -> None:
        """One SSE `data` field: a JSON chunk, or `[DONE]`."""
        if data.strip() == "[DONE]":
            self.done = True
            return
        self.feed(loads(data))

    def feed(self, chunk: Any) -> None:
        raise NotImplementedError


MAX_EVENT_BYTES = 64 << 20
"""The largest server-sent event `SSEDecoder` accepts (a `WireError` past it)."""


class SSEDecoder:
    """An incremental text/event-stream parser: `feed(bytes)` -> completed events.

    Each event is `(event name or None, data)`; comments and `id:`/`retry:` fields are
    skipped; lines may end in LF, CRLF or CR. Linear in the stream's size however it
    is chunked (a partial line is kept as pieces, joined once), and an event over
    `max_event_bytes` is a `WireError`.
    """

    def __init__(self, *, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._pieces: list[bytes] = []  # the current line, so far
        self._pending = 0  # bytes in `_pieces`
        self._size = 0  # bytes of the current event's complete lines
        self._after_cr = False  # the last chunk ended in CR: a leading LF is its pair
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        if not chunk:  # (a decompressor's empty output) must not forget a pending CR
            return []
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._after_cr = False
        if b"\r" in chunk:
            self._after_cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            if chunk:
                self._pieces.append(chunk)
                self._pending += len(chunk)
                self._check_size()
            return []
        first, *lines, last = chunk.split(b"\n")
        if self._pieces:
            first = b"".join([*self._pieces, first])
        self._pieces = [last] if last else []
        self._pending = len(last)
        events: list[tuple[str | None, str]] = []
        for raw in (first, *lines):
            self._line(raw, events)
        self._check_size()
        return events

    def _check_size(self) -> None:
        if self._size + self._pending > self.max_event_bytes:
            raise WireError(f"a server-sent event is over {self.max_event_bytes} bytes")

    def _line(self, raw: bytes, events: list[tuple[str | None, str]]) -> None:
        if not raw:
            if self._data:
                events.append((self._event, "\n".join(self._data)))
            self._event, self._data = None, []
            self._size = 0
            return
        self._size += len(raw) + 1
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value

    def close(self) -> list[tuple[str | None, str]]:
        """Events still pending at the end of the stream (one with no blank line after it)."""
        events = self.feed(b"\n\n") if (self._pieces or self._data) else []
        return events


def iter_sse(body: bytes) -> Iterator[tuple[str | None, str]]:
    """Every event of a whole text/event-stream body."""
    decoder = SSEDecoder()
    yield from decoder.feed(body)
    yield from decoder.close()
