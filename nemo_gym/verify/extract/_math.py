"""The final answer of a math reply (the anchor policy of `extract_answer`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from nemo_gym.verify.extract._commit import committed, is_hypothetical
from nemo_gym.verify.extract._lang import decimal_commas, last_phrases
from nemo_gym.verify.extract._spans import (
    MATH_SPAN,
    MAX_BOXED,
    Boxed,
    boxed_spans,
    span_content,
    strip_thinking,
    tail_matches,
)
from nemo_gym.verify.extract._words import last_spelled_number

NoAnchorPolicy = Literal["last_number", "math_verify", "reject"]
Anchor = Literal["boxed", "answer", "last_number", "none", "ambiguous"]
NO_ANCHOR_POLICIES: tuple[NoAnchorPolicy, ...] = ("last_number", "math_verify", "reject")

_ANSWER = re.compile(
    r"(?i)(?<![a-z])(?:final\s+answer|answer)"
    r"(?:\s+(?:is|was|would\s+be|should\s+be|will\s+be|equals)(?:\s+(?:therefore|thus|then))?"
    r"|(?:\*\*|__)?\s*[:=|]|(?P<heading>[ \t]*(?:\*\*|__)?[ \t:]*(?:\*\*|__)?[ \t]*\n))"
    r"\s*(?:\*\*|__)?\s*(?::\s*)?"
)
# A heading anchor (`### Final Answer`, `**Answer**` on a line of its own, the answer on
# the next) counts only when nothing but Markdown precedes it on its line: "we need
# the answer\n" is prose. Checked per match, so the regex keeps its literal prefix.
_HEADING_LEAD = re.compile(r"(?i)[ \t]*(?:\#{1,6}[ \t]*)?(?:\*\*|__)?[ \t]*(?:the[ \t]+)?")
# "I cannot solve this", "cannot be determined": a refusal, even one that repeats a
# number of the question, states no answer.
_REFUSAL = re.compile(
    r"(?i)(?<![a-z])(?:i\s+(?:cannot|can\s*not|can't|can’t|am\s+unable\s+to|am\s+not\s+able\s+to"
    r"|do\s+not\s+know|don't\s+know)|i'm\s+unable\s+to|i'm\s+sorry|i\s+apologi[sz]e"
    r"|(?:cannot|can't|can\s+not)\s+be\s+(?:determined|solved|answered|computed|found)"
    r"|(?:unable|impossible)\s+to\s+(?:determine|solve|answer|compute|tell)"
    r"|(?:not\s+enough|insufficient)\s+(?:information|data)"
    r"|no\s+way\s+to\s+(?:determine|know|tell)|(?:is|are)\s+(?:undetermined|indeterminate))"
    r"(?![a-z])"
)
# A correction after the last box that restates the answer: "hold on, it is -3".
_RESTATE = re.compile(
    r"(?i)(?<![a-z])(?:answer\s+(?:is|should\s+be)|it\s+is|it's|it’s|should\s+be|must\s+be"
    r"|is\s+actually|is\s+really|(?:correct|right|true)\s+(?:answer|value|result|count)\s+is)"
    r"(?![a-z])[ \t:]*"
)
# What follows a closing statement without restating it: a check, a unit conversion, a
# note, a remark in parentheses.
_REMARK = re.compile(
    r"(?i)[(\[]|[ \t*_]*(?:check(?:ing)?|verif(?:y|ying|ication)|sanity[ \t]+check"
    r"|double[- ]check(?:ing)?|to[ \t]+confirm|confirm(?:ing|ation)?|proof|note|remark"
    r"|that[ \t]+is|i\.e\.|equivalently|in[ \t]+(?:cents|minutes|seconds|hours|meters"
    r"|centimeters|grams|kilograms|percent)|indeed|as[ \t]+a[ \t]+check)(?![a-z])"
)
_REVISION_START = re.compile(
    r"(?i)(?<![a-z])(?:wait|hold\s+on|hang\s+on|actually|oops|whoops|on\s+second\s+thought"
    r"|correction|i\s+made\s+(?:a|an)\s+(?:mistake|error)|i\s+dropped|i\s+forgot|scratch\s+that"
    r"|let\s+me\s+(?:fix|correct))(?![a-z])"
)
_SENTENCES = re.compile(r"(?:[^\n.!?]|[.!?](?![)\]\"'”]*(?:\s|$)))+[.!?]*[)\]\"'”]*")
# A number not glued to a word or a dot ("x2", ".5" are not numbers here). It opens with
# a character class, not a lookbehind, so that re can skip ahead fast (4x on 1 MB).
_NUMBER = re.compile(
    r"[-\d](?<![\w.][-\d])(?:(?<=-)\d+|(?<=\d)\d*)"
    r"(?:,\d{3}|(?<![\d,.]\d{4})(?<=\d)[ \u00a0\u202f\u2009]\d{3}(?![\w-]))*"
    r"(?:\.\d+)?(?:\s*/\s*\d+)?(?:\s*\\?%)?"
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
    punctuation-only box or span, such as the lone backslash of a cut price). With anchor
    "ambiguous" the answer is None and `alternatives` holds the answers the reply stated
    without committing to one (a verifier may accept them only when all are right).
    """

    answer: str | None
    anchor: Anchor
    skipped: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()


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
    tail = tail.lstrip(":：").lstrip()
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
    line = _TURKISH_COPULA.sub("", line)  # "42'dir": "is 42"
    line = re.split(
        r"\*\*|__|\||(?<=[^\d\s])\.|\.(?=\s|$)|[;。।]|\s+(?:because|since|as|which)\s"
        r"|\s+\((?=[^)]*\d)|(?<=\d)\s+(?=[^\W\d_]+\s*[:：])",
        line,
    )[0]
    line = line.strip().rstrip(".,:;").strip()
    if not line:
        return None
    number = _NUMBER.match(line)
    # "12 apples" -> "12": a number followed by words only ("2.5 million" stays).
    rest = line[number.end() :] if number else ""
    # Letters of any script are words: "42 है", "42'dir", "42 yuan".
    if number and _WORDS.fullmatch(rest) and not _MULTIPLIER_WORD.match(rest):
        return line[: number.end()].strip()
    return line[:MAX_BOXED]


_TURKISH_COPULA = re.compile(r"(?<=\d)['’][dt][ıiuü]r(?!\w)")
_WORDS = re.compile(r"(?:[\s'’\u0300-\u036f\u0900-\u0dff\u0e00-\u0e7f]|[^\W\d_])*")


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


def _joined(text: str, boxes: list[Boxed], last: int) -> tuple[str, int]:
    """The answer of the box at `last` with the boxes just before it that share its
    sentence (``x = \\boxed{2} or x = \\boxed{3}`` is ``2, 3``), and the index of the
    first box of that run."""
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
    return ", ".join(distinct), index


def _same(a: str, b: str) -> bool:
    return "".join(a.split()) == "".join(b.split())


def _boxed(text: str, boxes: list[Boxed], skipped: list[str]) -> Extraction | None:
    """The boxed answer the reply commits to.

    The last box (with the boxes of its sentence) is the answer unless an earlier box
    states a different one: then the words around them decide (`committed`): a
    correction or a committing lead-in picks the last, a hypothetical last box ("had
    the endpoints counted it would be \\boxed{14}") the earlier one, and a hedge or no
    words at all leave the reply ambiguous.
    """
    for index in range(len(boxes) - 1, max(-1, len(boxes) - 4), -1):
        answer, first = _joined(text, boxes, index) if boxes[index].content else ("", index)
        if is_blank(answer):
            if answer:
                skipped.append(answer)
            continue
        span = (boxes[first].start, boxes[index].end)
        for earlier in range(first - 1, -1, -1):
            other, other_first = _joined(text, boxes, earlier)
            if is_blank(other) or _same(other, answer):
                continue
            choice = committed(text, (boxes[other_first].start, boxes[earlier].end), span)
            if choice == "earlier":
                return Extraction(other, "boxed", tuple(skipped))
            if choice == "ambiguous":
                return Extraction(None, "ambiguous", tuple(skipped), (other, answer))
            break
        return Extraction(answer, "boxed", tuple(skipped))
    return None


def boxed_answer(text: str, *, single: bool = False) -> Extraction | None:
    """The box a reply commits to, under `extract_answer`'s commitment rule; None when
    the reply has no box.

    The answer is None (anchor "ambiguous") when several boxes state different answers
    with no words that commit to one: a reply that boxes every candidate has no answer,
    never its last box. With `single`, boxes of one sentence joined into a list
    ("\\boxed{2} and \\boxed{3}") are no answer either: readers of one number or one
    short answer use that, rather than `last_boxed`, which reads the text as it is.
    """
    boxes = boxed_spans(text)
    if not boxes:
        return None
    found = _boxed(text, boxes, [])
    if single and found is not None and found.answer is not None:
        contents = tuple(dict.fromkeys(box.content for box in boxes if box.content))
        if found.answer not in contents:
            return Extraction(None, "ambiguous", found.skipped, contents)
    return found


def _correction(text: str, end: int) -> str | None:
    """An unboxed correction after the last box: "\\boxed{5}. Hold on, I dropped a
    sign; it is -3." gives -3 (a hypothetical "if ..., it would be 7" does not)."""
    after = text[end : end + 600]
    revision = _REVISION_START.search(after)
    if revision is None:
        return None
    restated = None
    for restated in _RESTATE.finditer(after, revision.start()):  # noqa: B007 (the last)
        pass
    if restated is None or is_hypothetical(after, restated.start()):
        return None
    found = _answer_span(after[restated.end() :])
    if found is None or is_blank(found) or not any(c.isdigit() for c in found):
        return None
    return found


def _refused(tail: str) -> bool:
    return bool(_REFUSAL.search(tail[:120].split("\n", 1)[0]))


def _closing(text: str) -> str:
    """`text` without the remarks after its closing statement: "..., so she pays $48
    altogether. (Check: 4 x 12 = 48; that is 4800 cents.)" ends at "altogether."

    Sentences are dropped from the end while they are remarks (a check, a unit
    conversion, a note, a parenthesis) and a statement with a number remains before them.
    """
    region = text[-1500:]
    offset = len(text) - len(region)
    sentences = [m for m in _SENTENCES.finditer(region) if m.group().strip()]
    cut = None
    for sentence in reversed(sentences[-6:]):
        body = sentence.group()
        if _REMARK.match(body.lstrip()) or "✓" in body or "✔" in body:
            cut = sentence.start()
            continue
        if cut is not None and _NUMBER.search(body):
            return text[: offset + cut]
        break
    return text


def extract_answer(text: str, no_anchor: NoAnchorPolicy = "last_number") -> Extraction:
    """Find the final answer in a model's reply.

    1. the `\\boxed{...}` (or `\\fbox`) the reply commits to, with the boxes right before
       it in the same sentence (``x = \\boxed{2} or x = \\boxed{3}``: the answer ``2, 3``):
       the last, unless a hypothetical or an unboxed correction says otherwise; several
       different boxes with no words of commitment are "ambiguous" (no answer);
    2. else the text after the last answer statement: "answer is", "answer:", a
       ``### Answer`` heading, a table cell, or one of the languages of
       `nemo_gym.verify.extract._lang` ("la respuesta es", "答案是", "Ответ:");
    3. else, by `no_anchor`: ``"last_number"`` the last number or math span of the
       closing statement (checks and remarks after it are not the answer),
       ``"math_verify"`` nothing (math-verify's own extraction reads the reply),
       ``"reject"`` nothing.

    A refusal ("I cannot determine this", "cannot be determined from 17 apples") is no
    answer. A candidate with no letter or digit in it (an empty box, the lone backslash
    left of ``$\\$12.50$`` by a naive reading) is passed over for the next one and listed
    in `skipped`. Reasoning before a closing ``</think>`` is ignored. The answer is None
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
    found_box = _boxed(text, boxes, skipped) if boxes else None
    if found_box is not None:
        if found_box.answer is not None:
            corrected = _correction(text, boxes[-1].end)
            if corrected is not None:
                return Extraction(corrected, "answer", found_box.skipped)
        return found_box
    anchors = [
        (m.start(), m.end(), False)
        for m in tail_matches(_ANSWER, text)
        if m.group("heading") is None
        or _HEADING_LEAD.fullmatch(text, text.rfind("\n", 0, m.start()) + 1, m.start())
    ][-3:]
    for start, end, phrase in last_phrases(text):
        anchors.append((start, end, phrase.decimal_comma))
    anchors.sort()
    for _, end, comma in reversed(anchors[-3:]):
        tail = text[end : end + 4 * MAX_BOXED]
        if _refused(tail.lstrip(" \t:：*_")):
            return Extraction(None, "none", tuple(skipped))
        found = _answer_span(tail)
        if found is not None and not is_blank(found):
            return Extraction(decimal_commas(found) if comma else found, "answer", tuple(skipped))
        if found:
            skipped.append(found)
    if no_anchor == "last_number":
        closing = _closing(text)
        if _refused_in(closing):
            return Extraction(None, "none", tuple(skipped))
        number = _last_number(closing)
        if number is None:
            # "So she has twelve apples left.": a closing sentence with no digits
            sentences = [
                m.group() for m in _SENTENCES.finditer(closing[-600:]) if m.group().strip()
            ]
            number = last_spelled_number(sentences[-1]) if sentences else None
        if number:
            return Extraction(number, "last_number", tuple(skipped))
        if number == "":
            return Extraction(None, "last_number", tuple(skipped))
    return Extraction(None, "none", tuple(skipped))


def _refused_in(text: str) -> bool:
    """Whether the closing of an unanchored reply refuses ("I cannot determine ...")."""
    return bool(_REFUSAL.search(text[-400:]))
