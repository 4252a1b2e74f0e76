"""The final answer of a math reply (the anchor policy of `extract_answer`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from nemo_gym.verify.extract._spans import (
    MATH_SPAN,
    MAX_BOXED,
    Boxed,
    boxed_spans,
    span_content,
    strip_thinking,
    tail_matches,
)

NoAnchorPolicy = Literal["last_number", "math_verify", "reject"]
Anchor = Literal["boxed", "answer", "last_number", "none"]
NO_ANCHOR_POLICIES: tuple[NoAnchorPolicy, ...] = ("last_number", "math_verify", "reject")

_ANSWER = re.compile(
    r"(?i)(?<![a-z])(?:final\s+answer|answer)"
    r"(?:\s+(?:is|was|would\s+be|should\s+be|will\s+be|equals)(?:\s+(?:therefore|thus|then))?"
    r"|\s*[:=])\s*(?:\*\*|__)?\s*(?::\s*)?"
)
# A number not glued to a word or a dot ("x2", ".5" are not numbers here). It opens with
# a character class, not a lookbehind, so that re can skip ahead fast (4x on 1 MB).
_NUMBER = re.compile(
    r"[-\d](?<![\w.][-\d])(?:(?<=-)\d+|(?<=\d)\d*)"
    r"(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?(?:\s*\\?%)?"
)
_MULTIPLIER_WORD = re.compile(r"\s*(thousand|million|billion|trillion)(?![A-Za-z])", re.I)
# What may separate boxes that together state one answer: `x = \boxed{2}` or
# `x = \boxed{3}`, `\boxed{2}, \boxed{3}`, one per line. Words other than "or"/"and"
# (a correction: "wait, actually") end the run.
_JOIN_GAP = re.compile(
    r"(?:\s|\$|\\[()\[\]]|[,;&]|\\(?:quad|qquad|[,;]|text\s*\{\s*(?:or|and|,)?\s*\})"
    r"|(?<![A-Za-z])(?:or|and)(?![A-Za-z])|[A-Za-z](?:_\{?\d{1,2}\}?)?\s*=)*"
)
_MAX_JOIN_GAP = 60
_CONNECTIVE = re.compile(r",|;|(?<![A-Za-z])(?:or|and)(?![A-Za-z])|\\text\s*\{\s*(?:or|and)")
# A final answer said in words: "There is no solution.", "x can be all real numbers."
_SET_PHRASE = re.compile(
    r"(?i)(?<![a-z])(?:no\s+(?:real\s+)?solutions?|all\s+real\s+numbers)(?![a-z])"
)
# Not an answer: nothing but spacing, signs, braces and punctuation (`\`, `\$`, `.`).
_NOT_CONTENT = re.compile(
    r"\\(?:[,;:! $%{}]|q?quad|left|right|displaystyle|text\s*\{\s*\}|mathrm\s*\{\s*\})"
)


@dataclass(frozen=True, slots=True)
class Extraction:
    """The answer found in a reply (`None` when there is none) and how it was found.

    `skipped` lists candidates passed over because they held no answer (an empty or
    punctuation-only box or span, such as the lone backslash of a cut price).
    """

    answer: str | None
    anchor: Anchor
    skipped: tuple[str, ...] = ()


_EMPTY_SET = re.compile(r"\s*\\\{\s*\\\}\s*")


def is_blank(answer: str) -> bool:
    """Whether `answer` holds no letter or digit once spacing commands are removed
    (the empty set `\\{\\}` is an answer)."""
    if _EMPTY_SET.fullmatch(answer):
        return False
    return not any(ch.isalnum() or ch in "∅∞π√" for ch in _NOT_CONTENT.sub("", answer))


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    matches = tail_matches(pattern, text)
    return matches[-1] if matches else None


def _answer_span(tail: str) -> str | None:
    """The answer at the start of `tail` (the text after an "answer is" anchor)."""
    tail = tail.lstrip()
    if tail.startswith("}"):  # the anchor sat inside `\text{The answer is }`
        tail = tail[1:].lstrip()
    span = MATH_SPAN.match(tail)
    if span:
        content = span_content(span)
        # `$2.5$ million`: the word is part of the number
        multiplier = _MULTIPLIER_WORD.match(tail, span.end())
        if multiplier:
            return content + " " + multiplier.group(1)
        # `$x = 2$ or $x = 3$`: the spans that follow in the same sentence belong to it
        contents, end = [content], span.end()
        while len(contents) < 8:
            gap = _JOIN_GAP.match(tail, end)  # the pattern matches "" at worst: never None
            gap_end = gap.end() if gap else end
            following = MATH_SPAN.match(tail, gap_end)
            if following is None or gap_end - end > _MAX_JOIN_GAP:
                break
            if not _CONNECTIVE.search(tail, end, gap_end):
                break
            contents.append(span_content(following))
            end = following.end()
        return ", ".join(dict.fromkeys(c for c in contents if c)) or None
    line = tail.split("\n", 1)[0]
    line = re.split(r"\*\*|__|(?<=[^\d\s])\.|\.(?=\s|$)|;|\s+(?:because|since|as|which)\s", line)[0]
    line = line.strip().rstrip(".,:;").strip()
    if not line:
        return None
    number = _NUMBER.match(line)
    # "12 apples" -> "12": a number followed by words only ("2.5 million" stays).
    rest = line[number.end() :] if number else ""
    if number and re.fullmatch(r"[\sA-Za-z]*", rest) and not _MULTIPLIER_WORD.match(rest):
        return line[: number.end()].strip()
    return line[:MAX_BOXED]


def _last_number(text: str) -> str | None:
    """The last number, math span or solution-set phrase, whichever ends last.

    Math spans in one sentence (`$x = 2$ or $x = 3$`) are read together. "" when the
    last number sits in undelimited LaTeX (`\\frac{\\sqrt3}{2}`).
    """
    best: tuple[int, str] | None = None
    region = max(text.rfind("$"), text.rfind("\\)"), text.rfind("\\]"))
    if region >= 0:
        # Only the tail can hold the last span; scanning it alone keeps this cheap.
        run: list[tuple[int, int, str]] = []
        for span in MATH_SPAN.finditer(text, max(0, region - 4100)):
            content = span_content(span)
            if not content or not any(c.isdigit() for c in content) or is_blank(content):
                continue
            gap = text[run[-1][1] : span.start()] if run else ""
            joined = (
                run
                and len(gap) <= _MAX_JOIN_GAP
                and _CONNECTIVE.search(gap)
                and _JOIN_GAP.fullmatch(gap)
            )
            run = (
                [*run, (span.start(), span.end(), content)]
                if joined
                else [(span.start(), span.end(), content)]
            )
            best = (span.end(), ", ".join(dict.fromkeys(c for _, _, c in run)))
    phrase = _last_match(_SET_PHRASE, text)
    if phrase is not None and (best is None or phrase.end() > best[0]):
        best = (phrase.end(), phrase.group(0))
    number = _last_match(_NUMBER, text)
    if number is not None and (best is None or number.end() > best[0]):
        before = text[max(0, number.start() - 1) : number.start()]
        after = text[number.end() : number.end() + 1]
        if before in ("{", "}", "^", "_", "\\") or after in ("{", "}", "^", "_", "\\"):
            return ""  # part of undelimited LaTeX: math-verify's call
        best = (number.end(), number.group(0))
    return best[1] if best else None


def _joined(text: str, boxes: list[Boxed], last: int) -> str:
    """The answer of the box at `last` with the boxes just before it that share its
    sentence (``x = \\boxed{2} or x = \\boxed{3}`` is ``2, 3``)."""
    contents = [boxes[last].content]
    index = last
    while index > 0:
        before = boxes[index - 1]
        gap = text[before.end : boxes[index].start]
        if before.content == "" or len(gap) > _MAX_JOIN_GAP or not _JOIN_GAP.fullmatch(gap):
            break
        contents.append(before.content)
        index -= 1
    distinct = list(dict.fromkeys(reversed(contents)))
    return ", ".join(distinct)


def extract_answer(text: str, no_anchor: NoAnchorPolicy = "last_number") -> Extraction:
    """Find the final answer in a model's reply.

    1. the last `\\boxed{...}` (or `\\fbox`), with the boxes right before it in the same
       sentence (``x = \\boxed{2} or x = \\boxed{3}``: the answer ``2, 3``);
    2. else the text after the last "answer is" / "answer:" / "final answer is";
    3. else, by `no_anchor`: ``"last_number"`` the last number or math span,
       ``"math_verify"`` nothing (math-verify's own extraction reads the reply),
       ``"reject"`` nothing.

    A candidate with no letter or digit in it (an empty box, the lone backslash left of
    ``$\\$12.50$`` by a naive reading) is passed over for the next one and listed in
    `skipped`. Reasoning before a closing ``</think>`` is ignored. The answer is None
    with anchor "none" when there is none; with anchor "last_number" when the last number
    sits in undelimited LaTeX (math-verify's extraction then reads the whole reply).
    """
    if not isinstance(text, str):
        raise TypeError(f"the prediction must be a str, got {type(text).__name__}")
    if no_anchor not in NO_ANCHOR_POLICIES:
        raise ValueError(f"no_anchor must be one of {NO_ANCHOR_POLICIES}, got {no_anchor!r}")
    text = strip_thinking(text)
    skipped: list[str] = []
    boxes = boxed_spans(text, limit=8)
    for index in range(len(boxes) - 1, max(-1, len(boxes) - 4), -1):
        answer = _joined(text, boxes, index) if boxes[index].content else ""
        if not is_blank(answer):
            return Extraction(answer, "boxed", tuple(skipped))
        if answer:
            skipped.append(answer)
    anchors = tail_matches(_ANSWER, text)[-3:]
    for anchor in reversed(anchors):
        found = _answer_span(text[anchor.end() : anchor.end() + 4 * MAX_BOXED])
        if found is not None and not is_blank(found):
            return Extraction(found, "answer", tuple(skipped))
        if found:
            skipped.append(found)
    if no_anchor == "last_number":
        number = _last_number(text)
        if number:
            return Extraction(number, "last_number", tuple(skipped))
        if number == "":
            return Extraction(None, "last_number", tuple(skipped))
    return Extraction(None, "none", tuple(skipped))
