"""Where answers sit in a reply: reasoning blocks, `\\boxed{}`, math spans, code fences.

Every scan here is linear in the text (no nested unbounded repetition), so a 1 MB reply
costs milliseconds on the event loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_BOXED = 10_000  # longer "answers" are not answers; also bounds the brace scan
_THINK_CLOSE = "</think>"


def strip_thinking(text: str) -> str:
    """Drop a leading reasoning block: everything up to the last ``</think>``.

    Reasoning models that put their thinking in the content would otherwise have drafts
    and rejected options scored as their answer.
    """
    cut = text.rfind(_THINK_CLOSE)
    return text[cut + len(_THINK_CLOSE) :] if cut >= 0 else text


def tail_matches(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    """The matches in the shortest tail of `text` that holds one (a whole one).

    Scanning windows growing from the end costs at most ~4/3 of one scan when nothing
    matches, and only the tail when something does: a reply with 500k numbers does not
    build 500k match objects to keep the last.
    """
    window = 4096
    while True:
        start = max(0, len(text) - window)
        matches = [m for m in pattern.finditer(text, start) if m.start() > start or start == 0]
        if matches or start == 0:
            return matches
        window *= 4


# ---------------------------------------------------------------------------------------
# \boxed{...}

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*(\{)?")


@dataclass(frozen=True, slots=True)
class Boxed:
    """One `\\boxed{...}` in a reply: its stripped content and where it sits."""

    content: str
    start: int
    end: int


def _brace_content(text: str, open_index: int) -> tuple[str, int] | None:
    """The content of the `{...}` group opening at `open_index` and the index after it."""
    depth = 0
    end = min(len(text), open_index + MAX_BOXED)
    for i in range(open_index, end):
        ch = text[i]
        if ch == "{" and text[i - 1] != "\\":
            depth += 1
        elif ch == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : i], i + 1
    return None


def boxed_spans(text: str, limit: int = 8) -> list[Boxed]:
    """The last `limit` closed `\\boxed{...}` / `\\fbox{...}` (also `\\boxed 5`), in order.

    Braces are balanced (escaped ones skipped); an unclosed box (a reply cut off by
    `max_tokens`) is left out. Empty boxes are kept: the caller decides what they mean.
    """
    if "\\boxed" not in text and "\\fbox" not in text:
        return []
    found: list[Boxed] = []
    for match in reversed(tail_matches(_BOXED, text)[-limit:]):
        if match.group(1):
            inner = _brace_content(text, match.start(1))
            if inner is None:
                continue
            content, end = inner
        else:  # `\boxed 5`
            rest = text[match.end() : match.end() + 100]
            words = rest.split()
            if not words:
                continue
            content = words[0].rstrip(".$")
            end = match.end() + rest.find(words[0]) + len(words[0])
        found.append(Boxed(content.strip(), match.start(), end))
    found.reverse()
    # A box nested in another (`\boxed{\boxed{5}}`) is the same answer: keep the outer.
    return [b for b in found if not any(o.start < b.start and b.end <= o.end for o in found)]


def last_boxed(text: str) -> str | None:
    """The stripped content of the last non-empty `\\boxed{...}` (or `\\fbox`), or None.

    An unclosed or empty box is passed over for the one before it (a few tries: the last
    is often cut off by max_tokens).
    """
    for box in reversed(boxed_spans(text, limit=3)):
        if box.content:
            return box.content
    return None


# ---------------------------------------------------------------------------------------
# Math delimiters. A `$` escaped as `\$` (a price: `$\$12.50$`) is content, never a
# delimiter, on either side.

MATH_SPAN = re.compile(
    r"(?<!\\)\$\$(.{1,2000}?)(?<!\\)\$\$"
    r"|(?<![\\$])\$((?:[^$\\\n]|\\.){1,2000}?)\$"
    r"|\\\((.{1,2000}?)\\\)"
    r"|\\\[(.{1,2000}?)\\\]",
    re.S,
)


def span_content(match: re.Match[str]) -> str:
    """The stripped content of a `MATH_SPAN` match, whichever delimiter it used."""
    return next(g for g in match.groups() if g is not None).strip()


# ---------------------------------------------------------------------------------------
# Markdown code fences.


@dataclass(frozen=True, slots=True)
class FencedBlock:
    """A Markdown fenced code block: its info-string language (lowercase) and body."""

    lang: str
    body: str
    start: int


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^\n]*)$", re.MULTILINE)
_MAX_FENCES = 10_000  # fence lines read; past that a text is garbage, not a reply


def fenced_blocks(text: str) -> list[FencedBlock]:
    """Every Markdown code fence (```lang ... ```) in `text`, in order.

    An unclosed final fence counts as a block running to the end: models cut off by
    `max_tokens` often leave one. Only the first 10,000 fence lines are read.
    """
    blocks: list[FencedBlock] = []
    opener: re.Match[str] | None = None
    fence = lang = ""
    for count, m in enumerate(_FENCE.finditer(text)):
        if count >= _MAX_FENCES:
            break
        run, info = m.group(1), m.group(2).strip()
        if opener is None:
            if run[0] == "`" and "`" in info:
                continue  # ```inline``` code, not a fence (CommonMark)
            opener, fence = m, run
            lang = info.split()[0].lower() if info else ""
        elif run[0] == fence[0] and len(run) >= len(fence) and not info:
            blocks.append(FencedBlock(lang, text[opener.end() + 1 : m.start()], opener.start()))
            opener = None
    if opener is not None:
        blocks.append(FencedBlock(lang, text[opener.end() + 1 :], opener.start()))
    return blocks
