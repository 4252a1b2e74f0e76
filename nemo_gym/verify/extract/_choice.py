"""Multiple-choice answers: the letter a reply commits to.

`extract_choice` reads the letter a model committed to, from free text:

1. explicit statements, the last one in the text winning (a final answer after a
   draft): ``\\boxed{D}``, ``Answer: D``, ``**Answer:** (D)``, ``the correct option is
   D``, ``Option D is correct``, ``(D) is the right answer``, the same in 24 other
   languages (``答案是 D``, ``La bonne réponse est D``; `_lang.PHRASES`), answer tags
   (``<choice>D</choice>``, ``<answer>D</answer>``);
2. lenient mode only: a committing closing (``... so it's D.``, ``Hence (D).``), the
   option marked correct in a per-option verdict list, a bold letter opening the reply,
   a lone letter that is the whole reply, its last line (``(D) 42``) or its first line;
3. with `options`, the option text where no letter is found (``The answer is Paris``).

An ambiguous final statement (``A or B``, ``A/B``, ``A and C``), an echo of the options
(all of them restated), boxes or tags naming different letters without words of
commitment (`_commit.committed`), or a letter outside `letters` gives None: no guess.
Mentions of options that are not answer statements (``Option A is wrong because ...``)
are never picked. All patterns have bounded repetition, so the cost is linear in the
length of the text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from nemo_gym.errors import ConfigError
from nemo_gym.verify.extract._commit import committed
from nemo_gym.verify.extract._lang import PHRASES

Method = Literal["boxed", "statement", "lenient", "option_text"]

# Statements are found from literal anchors searched from the end of the lowercased text
# (`str.rfind`, C speed); each anchor is then checked by a regex matched at that spot only.
# Scanning every position with one big case-insensitive regex cost ~100x more.
_NOUN_STATEMENT = re.compile(
    r"""
    (?:answer|choice|option|selection)
    (?:\s{1,3}(?:choice|option|letter))?
    (?:\s{1,3}(?:here|then|therefore|thus|overall))?
    [*_"']{0,3}
    (?:
       \s{0,3}(?:[:=→]|[-–—]{1,2}(?!\d)|\|(?![\s|:-]*\n))
     | \s{1,3}(?:is|would\s{1,3}be|should\s{1,3}be|must\s{1,3}be|will\s{1,3}be)(?![a-z'’])
     | (?P<heading>[*_\#\ \t]{0,6}\n)
    )
    """,
    re.VERBOSE,
)
# A keyword that ends its line is a heading ("## Final Answer", "**Answer:**") only when it
# opens the line: "... so that settles the answer" then "B is too large ..." is prose.
_HEADING_LEAD = re.compile(
    r"[\s*_#>|-]*(?:\d{1,2}[.)]\s{1,3})?[*_\s]*"
    r"(?:(?:the|my|your|our|final|correct|best|selected|chosen|right)[*_\s]{1,4})*",
    re.IGNORECASE,
)
_ANCHORS: dict[str, re.Pattern[str]] = {
    "answer": _NOUN_STATEMENT,
    "option": _NOUN_STATEMENT,
    "choice": _NOUN_STATEMENT,
    "selection": _NOUN_STATEMENT,
    "答案": re.compile(r"答案\s{0,2}(?:应该是|应为|應為|是|为|為|:)"),
    "选": re.compile(r"选择?(?=[ \t]{0,2}[a-z(\[])"),
    "choose": re.compile(r"choose\s"),
    "select": re.compile(r"select\s"),
    "pick": re.compile(r"pick\s"),
    "go with": re.compile(r"go with\s"),
    "correspond": re.compile(r"correspond(?:s|ing)?\s{1,3}to\s{1,3}(?=option|choice)"),
    "match": re.compile(r"match(?:es|ing)?\s{1,3}(?=option|choice)"),
    # `<answer>C</answer>`, `<choice>C</choice>` (NeMo Gym's XML-choice prompts)
    "<answer": re.compile(r"<answer\s{0,3}>\s{0,3}"),
    "<choice": re.compile(r"<choice\s{0,3}>\s{0,3}"),
    "<final_answer": re.compile(r"<final_answer\s{0,3}>\s{0,3}"),
    "<response": re.compile(r"<response\s{0,3}>\s{0,3}"),
}
# The answer statements of the other languages; a stem shared with an English anchor
# ("option") keeps both readings, English first. They are read in NFKC like the reply
# (which turns the Thai "ำ" into two characters).
_MORE_ANCHORS: dict[str, list[re.Pattern[str]]] = {}
for _phrase in PHRASES:
    _MORE_ANCHORS.setdefault(unicodedata.normalize("NFKC", _phrase.stem).lower(), []).append(
        re.compile(unicodedata.normalize("NFKC", _phrase.pattern.pattern), re.I)
    )
for _stem in _MORE_ANCHORS:
    _ANCHORS.setdefault(_stem, _MORE_ANCHORS[_stem].pop(0))
_TAGS = frozenset(("<answer", "<choice", "<final_answer", "<response"))
# "I choose B", "I'd go with B": a verb anchor counts only after a first person
_FIRST_PERSON = re.compile(
    r"(?<![a-z])(?:i|we)(?:'ll|’ll|'d|’d|\s{1,3}will|\s{1,3}would)?\s{1,3}\Z"
)
_VERBS = frozenset(("choose", "select", "pick", "go with"))
# "Option D is correct", "(D) is the right answer", "D is the correct answer": found
# from the adjective, the letter read from the 48 characters before it.
_VERDICT_WORDS = ("correct", "right", "best")
_VERDICT_AT = re.compile(
    r"(?:correct|right|best)(?![a-z])(?P<noun>\s{1,3}(?:answer|option|choice)(?![a-z]))?"
)
_VERDICT_BEFORE = re.compile(
    r"""
    (?:(?<![a-z])(?P<noun>option|choice|answer)\s{0,3})?
    (?P<open>\*\*[(\[]|\*\*|__|\$|[(\[]|)
    (?<![a-z0-9'’])(?P<letter>[a-z])
    (?P<close>[)\]]\*\*|\*\*|__|\$|[)\]]|)
    \s{1,3}(?:is|would\s{1,3}be|must\s{1,3}be|should\s{1,3}be|seems\s{1,3}to\s{1,3}be)
    \s{1,3}(?:the\s{1,3})?(?:(?:definitely|clearly)\s{1,3})?(?:(?:most|only|single)\s{1,3})?\Z
    """,
    re.VERBOSE,
)
_BOX_ANCHORS = ("\\boxed", "\\fbox")
_BOX = re.compile(r"\\(?:boxed|fbox)\s{0,2}\{")

# Wrappers, separators and filler words allowed between a keyword and its letter.
_LEAD = re.compile(
    r"""
    [\s*_$`'"(\[{【「<:=~>|\-–—→]{1,12}
    | \\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|boxed|fbox|bf|it)\s{0,2}\{?
    | (?:therefore|thus|hence|clearly|definitely|certainly|probably|likely|most|indeed|obviously
        |simply|then|so|option|choice|letter|answer|final|correct|the|is|be|would|should|just
        |choose|choosing|pick|select|go|with|to
        |la|el|le|les|die|der|das|het|il|lo|de|opci[oó]n|opção|opcao|alternativa|letra|lettre
        |buchstabe|opzione|variante|вариант|варіант|это|це|şık|seçenek|pilihan|opsi)(?![A-Za-z])
    """,
    re.IGNORECASE | re.VERBOSE,
)
_TURKISH_COPULA = re.compile(r"['’][dt][ıiuü]r(?!\w)")
_CLOSERS = ")]}*_$`'\"】」><"
_OPENERS = frozenset("([{*$【「\\")
_TERMINATORS = frozenset(".,;:!?\n\r)。，；！？")
# Words that may follow a bare letter answer; "A good way", "I think" are prose instead.
_CONTINUATIONS = frozenset(
    "because since as is was which with for here there it this that from given due in on "
    "per according hence so thus therefore".split()
)
_AMBIGUOUS = re.compile(
    r"\s{0,3}(?:,|/|\||&|\+|、|或|和|及|(?i:and/or|or|and)(?![A-Za-z]))\s{0,3}"
    r"(?i:(?:option|choice)\s{1,3})?[(\[*$\"']{0,3}\s{0,2}(?P<letter>[A-Za-z])(?![A-Za-z0-9'’])"
)
_LABEL = re.compile(r"[(\[]([A-Z])[)\]]|(?<![^\s*])([A-Z])[).:](?=\s)")
# A letter that is an end of a range ("(A)-(D)", "A–J", "A through D") names no answer.
_RANGE_LINK = r"\s{0,2}(?:[-–—~]|\.\.\.?|…|to|through|thru)\s{0,2}"
_RANGE_AFTER = re.compile(r"[)\]]?" + _RANGE_LINK + r"[(\[]?[A-Za-z](?![A-Za-z])")
_RANGE_BEFORE = re.compile(r"(?<![A-Za-z])[A-Za-z][)\]]?" + _RANGE_LINK + r"[(\[]?\Z")
# Nor does a negated one: "Neither (A) nor (B) is correct", "everything except B", also
# through a list ("rule out A and B"). The scope ends at a clause boundary.
_NEGATED = re.compile(
    r"(?<![a-z])(?:not|neither|nor|never|none|no|except|excluding|exclude|eliminate[ds]?"
    r"|eliminating|rule[ds]?\s{1,3}out|ruling\s{1,3}out|rather\s{1,3}than|instead\s{1,3}of"
    r"|other\s{1,3}than|isn't|isnt|aren't|cannot\s{1,3}be|can't\s{1,3}be)"
    r"(?:\s{1,3}(?:of|the|options?|choices?|answers?|letters?|is|it|be|can|was)(?![a-z]))*"
    r"(?:[\s(\[*$]{1,6}[a-z][)\]*$]{0,2}\s{0,2}(?:,|/|&|and|or|nor)(?![a-z]))*"
    r"[\s(\[*$]{0,6}\Z"
)
# "The answer is not (A) but (C)": the letter after the correction is the answer.
_NOT_BUT = re.compile(
    r"[\s*_]{0,3}(?:(?:definitely|certainly|clearly)\s{1,3})?not\s{1,3}[(\[*$]{0,2}[A-Za-z]"
    r"[)\]*$]{0,2}\s{0,3}[,;]?\s{0,3}(?:but|rather|instead|it\s{1,3}is|it's|it’s)\s{1,3}",
    re.IGNORECASE,
)
_CLAUSE_END = re.compile(r"[.;!?\n:](?=[^.;!?\n:]*\Z)")
# Words after which a bare capital starts a clause: "So D is correct".
_CLAUSE_STARTERS = frozenset(
    "so thus therefore hence but and then only clearly because since yes no instead".split()
)
_WORD = re.compile(r"[ \t]{1,3}([A-Za-z]+)")

_LONE = re.compile(r"[(\[【]?\s{0,2}([A-Za-z])\s{0,2}(?:[)\]】.:]{1,2}(?:\s.*)?)?", re.DOTALL)
_TRAILING = re.compile(
    r"(?:(?<![A-Za-z])(?i:is|be|it's|its|choose|pick|select|go\s{1,3}with|option|choice"
    r"|hence|thus|therefore|so|only|leaves|leaving|left\s{1,3}with|actually|elimination)|:)"
    r"[\s*_$(\[:]{1,8}([A-Za-z])[)\]*_$]{0,6}[.!]?\s{0,8}\Z"
)

_MAX_STATEMENTS = 64  # only the last ones matter; bounds the cost of a pathological text
_TAIL = 120
_NEAR_END = 1024
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_BOX = re.compile(r"\\(?:boxed|fbox)\s{0,2}\{")
_LATEX_CMD = re.compile(r"\\[A-Za-z]{1,20}\s{0,2}")
_MARKDOWN_EDGE = re.compile(r"^[\s*_#>`$]+|[\s*_`$]+$")
PUNCT_EDGE = " \t\r\n.,;:!?*_`$\"'()[]"


@dataclass(frozen=True, slots=True)
class ChoiceExtraction:
    """What `extract_choice_details` found: the letter (or None), how, and why not."""

    letter: str | None
    method: Method | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class _Found:
    kind: Literal["letter", "ambiguous", "invalid", "echo"]
    letter: str = ""


def normalize_choice_text(text: str) -> str:
    # NFKC folds full-width forms: （Ｄ） -> (D), ： -> :, Ｄ -> D.
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def _read_letter(tail: str, letters: frozenset[str]) -> _Found | None:
    """Read the answer letter at the start of `tail` (after a statement keyword)."""
    pos = 0
    for _ in range(12):
        m = _LEAD.match(tail, pos)
        if m is None:
            break
        pos = m.end()
    wrapped_open = not _OPENERS.isdisjoint(tail[:pos])
    if pos >= len(tail):
        return None
    char = tail[pos]
    if not ("A" <= char <= "Z" or "a" <= char <= "z"):
        return None
    rest = tail[pos + 1 :]
    nxt = rest[:1]
    if nxt and nxt.isascii() and nxt.isalnum():
        return None  # a word, not a letter
    if nxt in ("'", "’", "-") and rest[1:2].isalpha() and not _TURKISH_COPULA.match(rest):
        return None  # "I'm", "A-level" (but "D'dir": "is D")
    if _RANGE_AFTER.match(rest):
        return None  # "A–D", "(A)-(D)": a range of options, not one
    # "(I)", "**A**": a closing wrapper right after the letter makes it a label, not prose
    wrapped = bool(nxt) and nxt in _CLOSERS and (nxt not in "'\"" or wrapped_open)
    after = rest.lstrip(_CLOSERS)
    amb = _AMBIGUOUS.match(after)
    if amb is not None:
        other = amb.group("letter")
        if other.upper() in letters and (other.isupper() or char.islower()):
            return _Found("ambiguous")
    # "(A) 5 (B) 6 (C) 7": an echo of the options in order, not an answer
    labels = [a or b for a, b in _LABEL.findall(after.split("\n", 1)[0][:200])]
    following = [chr(ord(char.upper()) + 1), chr(ord(char.upper()) + 2)]
    if labels[:2] == following:
        return None
    word = _WORD.match(after)
    follow = word.group(1).lower() if word else None
    upper = char.upper()
    if char.isupper():
        if not wrapped and upper in "AI" and follow is not None:
            if follow not in _CONTINUATIONS and not word.group(1)[0].isupper():  # type: ignore[union-attr]
                return None  # "A good way ...", "I think ..."
        return _Found("letter", upper) if upper in letters else _Found("invalid", upper)
    # lowercase: only when it cannot be the article "a" or other prose
    ok = wrapped or not after or after[0] in _TERMINATORS
    ok = ok or (follow in _CONTINUATIONS) or (after[:1] in " \t" and after.strip()[:1] in "(\n|")
    if ok and upper in letters:
        return _Found("letter", upper)
    return None


def _boxed_content(text: str, start: int) -> str:
    """The brace-balanced argument of the ``\\boxed{`` whose brace ends at `start`."""
    depth = 1
    end = min(len(text), start + 400)
    for i in range(start, end):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return text[start:end]


def _clean_boxed(content: str) -> str:
    content = _LATEX_CMD.sub(" ", content).replace("{", " ").replace("}", " ").replace("~", " ")
    return " ".join(content.split())


def option_key(text: str) -> str:
    text = normalize_choice_text(text)
    text = _LATEX_CMD.sub(" ", text).replace("{", "").replace("}", "")
    return " ".join(text.casefold().split()).strip(PUNCT_EDGE)


def _match_option(phrase: str, keys: Sequence[str], letters: str) -> _Found | None:
    """The option whose text is `phrase`, or the only option named in it."""
    key = option_key(phrase)
    if not key:
        return None
    exact = [i for i, option in enumerate(keys) if option and option == key]
    if len(exact) == 1:
        return _Found("letter", letters[exact[0]])
    if len(key) > 600:  # a paragraph, not an answer phrase
        return None
    found = [
        i
        for i, option in enumerate(keys)
        if option and re.search(r"(?<!\w)" + re.escape(option) + r"(?!\w)", key)
    ]
    # "10" inside "100 or 10" is one mention; an option contained in another is dropped
    found = [i for i in found if not any(j != i and keys[i] in keys[j] for j in found)]
    if len(found) == 1:
        return _Found("letter", letters[found[0]])
    if len(found) > 1:
        return _Found("ambiguous")
    return None


def _phrase_after(text: str, start: int) -> str:
    """The clause after a statement keyword: up to the end of the line or sentence."""
    piece = text[start : start + 300].lstrip(" \t*_:")
    piece = piece.split("\n", 1)[0]
    cut = re.search(r"[.!?](?:\s|$)", piece)
    return piece[: cut.start()] if cut else piece


def _result(found: _Found, method: Method) -> ChoiceExtraction:
    if found.kind == "letter":
        return ChoiceExtraction(found.letter, method)
    if found.kind == "ambiguous":
        return ChoiceExtraction(None, method, "ambiguous: more than one option stated")
    if found.kind == "echo":
        return ChoiceExtraction(None, method, "echo: the reply lists the options, choosing none")
    return ChoiceExtraction(None, method, f"stated letter {found.letter!r} is not an option")


def validate_letters(letters: str) -> frozenset[str]:
    if (
        not letters
        or not all("A" <= c <= "Z" for c in letters)
        or len(set(letters)) != len(letters)
    ):
        raise ConfigError(f"letters must be distinct capitals A-Z, got {letters!r}")
    return frozenset(letters)


def extract_choice_details(
    text: str,
    *,
    letters: str = "ABCD",
    strict: bool = False,
    options: Sequence[str] | None = None,
) -> ChoiceExtraction:
    """Like `extract_choice`, and says how the letter was found or why none was."""
    allowed = validate_letters(letters)
    if options is not None and len(options) > len(letters):
        raise ConfigError(f"{len(options)} options but only {len(letters)} letters ({letters})")
    text = normalize_choice_text(text)
    # ASCII-only lowering keeps offsets aligned ("İ".lower() is two characters)
    low = text.lower()
    if len(low) != len(text):  # "İ".lower() is two characters: keep offsets aligned
        low = text.translate(_ASCII_LOWER)
    keys = [option_key(o) for o in options] if options else None

    # Explicit statements and \boxed{}: the last one that names something decides.
    # The answer is nearly always near the end: look there first, then at the rest.
    tables = "|" in text  # a Markdown table can hold the answer (one scan, not per anchor)
    split = max(0, len(text) - _NEAR_END)
    windows = ((split, len(text)), (0, split)) if split else ((0, len(text)),)
    budget = _MAX_STATEMENTS
    for start, end in windows:
        for at, kind in _candidates(text, low, start, end)[:budget]:
            budget -= 1
            decided = _statement(text, low, at, kind, allowed, letters, keys, tables)
            if decided is not None:
                return decided

    if not strict:
        found = _lenient(text, allowed)
        if found is not None:
            return _result(found, "lenient")
        if keys:
            lines = [line for line in text.splitlines() if line.strip()]
            for phrase in (text, lines[-1] if lines else ""):
                found = _match_option(phrase, keys, letters) if len(phrase) <= 600 else None
                if found is not None:
                    return _result(found, "option_text")
    return ChoiceExtraction(None, None, "no answer letter found")


def _statement(
    text: str,
    low: str,
    at: int,
    kind: str,
    allowed: frozenset[str],
    letters: str,
    keys: list[str] | None,
    tables: bool,
) -> ChoiceExtraction | None:
    """What the candidate statement at `at` decides, or None when it names nothing."""
    if kind == "verdict":
        found = _verdict(text, low, at, allowed)
        return _result(found, "statement") if found is not None else None
    if kind == "boxed":
        m = _BOX.match(text, at)
        if m is None:
            return None
        raw = _boxed_content(text, m.end())
        found = _read_letter(_clean_boxed(raw), allowed)
        if found is None and keys:
            found = _match_option(_clean_boxed(raw), keys, letters)
            method: Method = "option_text"
        else:
            method = "boxed"
        if found is None:
            return None
        return _result(_commitment(text, low, at, m.end() + len(raw), found, allowed), method)
    if kind in _TAGS:
        return _tag(text, low, at, allowed, letters, keys)
    if at > 0 and "a" <= low[at - 1] <= "z":
        return None  # inside a word: "reanswer", "adoption"
    column = _table_column(text, at) if tables and kind in _NOUNS else None
    if column is not None:  # the anchor heads a Markdown table column
        found = _read_letter(column, allowed)
        return _result(found, "statement") if found is not None else None
    m = _ANCHORS[kind].match(low, at)
    for extra in _MORE_ANCHORS.get(kind, ()) if m is None else ():
        m = extra.match(low, at)
        if m is not None:
            break
    if m is None or (kind in _VERBS and not _FIRST_PERSON.search(low, max(0, at - 12), at)):
        return None
    if "heading" in m.re.groupindex and m.group("heading") is not None:
        if not _HEADING_LEAD.fullmatch(text, text.rfind("\n", 0, at) + 1, at):
            return None
    tail = text[m.end() : m.end() + _TAIL]
    found = _read_letter(tail, allowed)
    if found is None and (correction := _NOT_BUT.match(tail)) is not None:
        found = _read_letter(tail[correction.end() :], allowed)  # "not (A) but (C)"
    if found is not None:
        return _result(found, "statement")
    found = _match_option(_phrase_after(text, m.end()), keys, letters) if keys else None
    return _result(found, "option_text") if found is not None else None


_NOUNS = frozenset(("answer", "option", "choice", "selection"))
_MAX_BOXES = 16
_TABLE_RULE = re.compile(r"\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*")
# A header that names the chosen option (not a column listing the options).
_ANSWER_HEADER = re.compile(
    r"[*_\s]*(?:(?:final|correct|your|my|selected|best)\s+)?(?:answer(?:\s+choice)?|choice"
    r"|selection|selected(?:\s+option)?|correct\s+option)[*_:\s]*"
)


def _rival(
    text: str, low: str, at: int, letter: str, allowed: frozenset[str]
) -> tuple[int, int, str] | None:
    """The nearest earlier `\\boxed{}` or answer tag naming another option than `letter`:
    its span and letter."""
    end = at
    for _ in range(_MAX_BOXES):
        other = max(
            text.rfind("\\boxed", 0, end),
            text.rfind("\\fbox", 0, end),
            *(low.rfind(tag, max(0, end - 4000), end) for tag in ("<answer", "<choice")),
        )
        if other < 0:
            return None
        end = other
        m = _BOX.match(text, other)
        if m is not None:
            raw = _boxed_content(text, m.end())
            found = _read_letter(_clean_boxed(raw), allowed)
            stop = m.end() + len(raw)
        else:
            tag = _TAG.match(text, other)
            if tag is None or _in_choices_block(low, other):
                continue
            found = _read_letter(_clean_boxed(tag.group(2)), allowed)
            stop = tag.end()
        if found is not None and found.kind == "letter" and found.letter != letter:
            return other, stop, found.letter
    return None


def _commitment(
    text: str, low: str, at: int, end: int, found: _Found, allowed: frozenset[str]
) -> _Found:
    """`found` (read at `at`) unless an earlier box or tag names another option and the
    words between them commit to neither: `\\boxed{B}\\boxed{C}` and `\\boxed{B} or maybe
    \\boxed{C}` are ambiguous; "At first I thought \\boxed{B}, but ... the answer is
    \\boxed{C}" is C; a hypothetical last box ("if it were reversible, \\boxed{B}")
    leaves the earlier one."""
    if found.kind != "letter":
        return found
    rival = _rival(text, low, at, found.letter, allowed)
    if rival is None:
        return found
    choice = committed(text, (rival[0], rival[1]), (at, end))
    if choice == "last":
        return found
    if choice == "earlier":
        return _Found("letter", rival[2])
    return _Found("ambiguous")


# `<answer>C</answer>`, `<choice>(C)</choice>`: NeMo Gym's XML answer tags. A `<choice>`
# inside a `<choices>` block lists an option, it does not answer.
_TAG = re.compile(
    r"<\s{0,2}(answer|choice|response|final_answer|final-answer)\b[^>]{0,100}>\s{0,20}"
    r"(.{0,400}?)\s{0,20}<\s{0,2}/\s{0,2}\1\s{0,2}>",
    re.I | re.S,
)


def _in_choices_block(low: str, at: int) -> bool:
    opened = low.rfind("<choices", 0, at)
    return opened >= 0 and low.rfind("</choices", opened, at) < 0


def _tag(
    text: str,
    low: str,
    at: int,
    allowed: frozenset[str],
    letters: str,
    keys: list[str] | None,
) -> ChoiceExtraction | None:
    m = _TAG.match(text, at)
    if m is None or _in_choices_block(low, at):
        return None
    content = _clean_boxed(m.group(2))
    found = _read_letter(content, allowed)
    method: Method = "statement"
    if found is None and keys:
        found, method = _match_option(content, keys, letters), "option_text"
    if found is None:
        return None
    return _result(_commitment(text, low, at, m.end(), found, allowed), method)


def _table_column(text: str, at: int) -> str | None:
    """The last row's cell under a header cell that holds the anchor at `at`, when the
    anchor heads a Markdown table column (``| Question | Answer |``, a rule, rows)."""
    line_start = text.rfind("\n", 0, at) + 1
    line_end = text.find("\n", at)
    if line_end < 0 or not text[line_start:at].lstrip().startswith("|"):
        return None
    header = text[line_start:line_end]
    rule_end = text.find("\n", line_end + 1)
    rule = text[line_end + 1 : rule_end if rule_end >= 0 else len(text)]
    if not _TABLE_RULE.fullmatch(rule):
        return None
    column = header[: at - line_start].count("|") - (1 if header.lstrip().startswith("|") else 0)
    header_cells = header.strip().strip("|").split("|")
    if not (0 <= column < len(header_cells)):
        return None
    if not _ANSWER_HEADER.fullmatch(header_cells[column].lower()):
        return None  # `| Option | Verdict |` lists the options: not an answer column
    last_row = None
    position = rule_end
    for _ in range(200):
        if position < 0:
            break
        next_end = text.find("\n", position + 1)
        line = text[position + 1 : next_end if next_end >= 0 else len(text)]
        if not line.lstrip().startswith("|"):
            break
        last_row = line
        position = next_end
    if last_row is None:
        return None
    cells = last_row.strip().strip("|").split("|")
    return cells[column].strip() if 0 <= column < len(cells) else None


# (needle, kind, search the original text rather than the lowered one); the needles of
# other scripts are searched only in a reply that is not ASCII.
_NEEDLES: list[tuple[str, str, bool, int]] = [
    *((word, word, False, len(word) - 1) for word in _ANCHORS if word.isascii()),
    *((word, "verdict", False, len(word) - 1) for word in _VERDICT_WORDS),
    *((word, "boxed", True, len(word) - 1) for word in _BOX_ANCHORS),
]
_SCRIPT_NEEDLES: list[tuple[str, str, bool, int]] = [
    (word, word, False, len(word) - 1) for word in _ANCHORS if not word.isascii()
]


def _candidates(text: str, low: str, start: int, end: int) -> list[tuple[int, str]]:
    """Where statements may start within [start, end), last first (at most 64)."""
    found: list[tuple[int, str]] = []
    needles = _NEEDLES if text.isascii() else _NEEDLES + _SCRIPT_NEEDLES
    for needle, kind, original, extra in needles:
        haystack = text if original else low
        at = haystack.rfind(needle, start, end + extra)  # an anchor starting before `end`
        count = 0
        while at >= 0 and count < _MAX_STATEMENTS:  # only the last ones matter
            found.append((at, kind))
            count += 1
            at = haystack.rfind(needle, start, at)
    found.sort(reverse=True)
    return found[:_MAX_STATEMENTS]


def _verdict(text: str, low: str, at: int, allowed: frozenset[str]) -> _Found | None:
    """A letter named before "is (the) correct/right/best" starting at `at`."""
    if at > 0 and "a" <= low[at - 1] <= "z":
        return None  # "incorrect", "upright"
    after = _VERDICT_AT.match(low, at)
    if after is None:
        return None
    m = _VERDICT_BEFORE.search(low, max(0, at - 48), at)
    if m is None:
        return None
    start = m.start("letter")
    letter = text[start]
    if _excluded(low, m.start()):
        return None
    labelled = bool(m.group("noun") or m.group("open") or m.group("close"))
    # a bare capital needs the noun after it or to open a clause: "Statement I is
    # correct" names no choice, "Not A; B is correct" and "So D is correct" do
    if not labelled and not (
        letter.isupper() and (after.group("noun") or _opens_clause(low, m.start()))
    ):
        return None
    upper = letter.upper()
    return _Found("letter", upper) if upper in allowed else None


def _excluded(low: str, at: int) -> bool:
    """Whether the letter named at `at` is negated or a range's end, by what precedes it."""
    before = low[max(0, at - 60) : at]
    cut = _CLAUSE_END.search(before)
    clause = before[cut.end() :] if cut else before
    return bool(_NEGATED.search(clause) or _RANGE_BEFORE.search(before))


def _opens_clause(low: str, at: int) -> bool:
    before = low[max(0, at - 24) : at].rstrip(" \t*_")
    if not before or before[-1] in ".;:!?\n(,":
        return True
    words = before.split()
    return bool(words) and words[-1] in _CLAUSE_STARTERS


_MATH_WRAP = re.compile(
    r"\\[()\[\]]|\\(?:text|textbf|textrm|textit|mathrm|mathbf|mathit|bf)\s{0,2}\{|[{}]"
)


def _unwrap_math(line: str) -> str:
    """`$\\text{(D)}$`, `\\(\\mathbf{D}\\)`: a line's letter without its math wrapping."""
    if "\\" not in line and "{" not in line:
        return line
    return _MATH_WRAP.sub("", line)


# One line of an option list: "(B) 6", "- **C:** correct", "D. 8 ✗", a bare "A".
_OPTION_LINE = re.compile(
    r"[ \t\-*•>]{0,6}(?:\*\*|__)?(?i:(?:option|choice)[ \t]{1,3})?[(\[]?([A-Z])[)\]]?"
    r"(?:\*\*|__)?[ \t]{0,3}(?:[:.)\-–—][ \t]*(?:\*\*|__)?|[ \t]+|(?=$))(.*)"
)
_NEGATIVE = re.compile(
    r"(?i)(?<![a-z])(?:incorrect|wrong|false|not\s+(?:correct|right|true)|invalid|eliminated?"
    r"|ruled\s+out|no)(?![a-z])|[✗✘❌×]"
)
_POSITIVE = re.compile(r"(?i)(?<![a-z])(?:correct|right|true|valid|yes)(?![a-z])|[✓✔✅]")


# A reply that opens with its letter in bold: "**D.** 12", "**(B)**" on a line of its own.
_BOLD_OPENING = re.compile(
    r"(?:\*\*|__)[ \t]{0,2}(?:[(\[]([A-Z])[)\]]|([A-Z])[.:)])[ \t]{0,2}(?:\*\*|__)"
    r"|(?:\*\*|__)[ \t]{0,2}([A-Z])[ \t]{0,2}(?:\*\*|__)[ \t]*(?=\n|$)"
)


def _option_lines(text: str, allowed: frozenset[str]) -> list[tuple[int, str, str]]:
    """The option-list lines of the reply's tail: (line number, letter, what follows)."""
    found = []
    for number, line in enumerate(text[-2000:].splitlines()):
        m = _OPTION_LINE.fullmatch(line.rstrip())
        if m is not None and m.group(1) in allowed:
            found.append((number, m.group(1), m.group(2)))
    return found


def _option_list(text: str, allowed: frozenset[str]) -> _Found | None:
    """What a list of the options says: the one marked correct in a per-option verdict
    list ("A: incorrect / B: incorrect / C: correct"), or an echo (the options restated
    with no choice), which is never an answer."""
    listed = _option_lines(text, allowed)
    if len({letter for _, letter, _ in listed}) < min(3, len(allowed)):
        return None
    verdicts: dict[str, bool] = {}
    for _, letter, rest in listed:
        head = rest[:80]
        negative, positive = _NEGATIVE.search(head), _POSITIVE.search(head)
        if negative is not None and (positive is None or negative.start() <= positive.start()):
            verdicts[letter] = False
        elif positive is not None:
            verdicts[letter] = True
    if len(verdicts) >= 2:
        chosen = [letter for letter, good in verdicts.items() if good]
        if len(chosen) == 1:
            return _Found("letter", chosen[0])
        return _Found("ambiguous") if chosen else _Found("echo")
    lines = [line for line in text[-2000:].splitlines()]
    last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
    tail = [item for item in listed if item[0] == last]
    if not tail:
        return None
    _, letter, rest = tail[0]
    previous = [item for item in listed if item[0] == last - 1]
    # The last line continues the list (the option before it on the line before it), or
    # restates an option with its text after other options did the same.
    if previous and ord(previous[0][1]) == ord(letter) - 1:
        return _Found("echo")
    if rest.strip() and sum(1 for _, _, r in listed if r.strip()) >= 3:
        return _Found("echo")
    return None


def _lenient(text: str, allowed: frozenset[str]) -> _Found | None:
    """A lone letter: the whole reply, a closing "... it's D.", the last or first line;
    or the option a verdict list marks correct. An echo of the options is no answer."""
    stripped = text.strip()
    if not stripped:
        return None
    tail = stripped[-60:]
    m = _TRAILING.search(tail)
    if m is not None:
        found = _read_letter(tail[m.start(1) - 1 :], allowed)
        if found is not None:
            return found
    listed = _option_list(stripped, allowed)
    if listed is not None:
        return listed
    bold = _BOLD_OPENING.match(stripped)
    if bold is not None:
        letter = bold.group(1) or bold.group(2) or bold.group(3)
        if letter in allowed:
            return _Found("letter", letter)
    lines = [line for line in stripped[-2000:].splitlines() if line.strip()]
    head = [line for line in stripped[:2000].splitlines() if line.strip()]
    for line, whole in ((lines[-1], False), (head[0], True)):
        line = _MARKDOWN_EDGE.sub("", _unwrap_math(line[:300]))
        m = _LONE.fullmatch(line)
        if m is None:
            continue
        letter = m.group(1)
        if whole and line[m.end(1) :].strip(" )]】.:"):
            continue  # the first line must be the letter alone
        found = _read_letter(line, allowed)
        if found is not None and (letter.isupper() or len(line) <= 3):
            return found
    return None


def extract_choice(
    text: str,
    *,
    letters: str = "ABCD",
    strict: bool = False,
    options: Sequence[str] | None = None,
) -> str | None:
    """The option letter a model's reply commits to, or None when it commits to none.

    `letters` are the valid choices in order (``"ABCDEFGHIJ"`` for ten options).
    `strict` accepts only explicit answer statements and ``\\boxed{}``; the default
    also takes a lone letter ending or opening the reply. `options`, the option texts
    in letter order, let an answer given as text (``The answer is Paris``) count.
    """
    return extract_choice_details(text, letters=letters, strict=strict, options=options).letter
