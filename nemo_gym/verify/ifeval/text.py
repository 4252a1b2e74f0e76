"""Text utilities for the IFEval checkers: words, sentences, capital words, language.

IFEval's reference code counts sentences with nltk's pretrained punkt model and capital
words with `nltk.word_tokenize`. We depend on neither (no nltk, no downloads) and use the
small rule-based versions below instead. Where they differ from nltk it is noted on the
function; the differences only move counts in unusual text (abbreviations punkt learned
from its training corpus, numbered lists, contractions outside the common ones).

Every function here is linear in the length of its input: a checker must return quickly
on a 1 MB response, so no regular expression here can backtrack over the whole text.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from typing import Any

from nemo_gym.errors import require

logger = logging.getLogger(__name__)

# `\w+` is exactly what IFEval counts as a word (nltk's RegexpTokenizer(r"\w+")).
_WORD = re.compile(r"\w+")

# Closing marks that may follow a sentence terminator and still belong to the sentence
# ('He said "no." Then' ends after the quote), as punkt realigns them.
_CLOSERS = "\"'”’)]}*»"

# Abbreviations after which a period does not end a sentence (lowercase, without the
# final period). punkt learned a longer list from its corpus; these are the common ones.
_ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al approx dept est fig figs inc
    ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec vol vols pp ed eds
    gen col lt sgt capt rev hon gov sen rep ave blvd rd p.m a.m u.s u.k u.n ph.d
    """.split()
)

# Abbreviations that close a sentence when the next word is capitalized ("... and so on,
# etc. The next one"), as punkt's orthographic heuristic usually decides for them.
_MAY_END = frozenset({"etc", "al", "inc", "ltd", "co", "corp", "p.m", "a.m", "u.s", "u.k"})

_LIST_MARKER = re.compile(r"\d{1,3}|[ivx]{1,4}|[a-z]", re.IGNORECASE)


def count_words(text: str) -> int:
    """The number of `\\w+` runs in `text`: exactly IFEval's word count."""
    return len(_WORD.findall(text))


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences with rules close to nltk's English punkt model.

    A sentence ends at a run of `.`, `?` or `!` (optionally followed by closing quotes or
    brackets) that is followed by whitespace or the end of the text. A period does not
    end a sentence after a known abbreviation ("Dr.", "e.g."), a single-letter initial
    ("J. K. Rowling"), a list marker at the start of a line ("1.", "a."), or an ellipsis
    or an abbreviation like "etc." followed by a lowercase word. Newlines alone never end
    a sentence (as in punkt): a heading without final punctuation joins the next sentence.

    Differences from punkt: punkt's abbreviation list and its orthographic statistics
    (which capitalized words usually start sentences) were learned from a corpus, so on
    rare abbreviations or an abbreviation followed by a capitalized word the two can
    disagree by one sentence.
    """
    sentences = []
    start = 0
    for end in _sentence_ends(text):
        sentences.append(text[start:end].strip())
        start = end
    rest = text[start:].strip()
    if rest:
        sentences.append(rest)
    return sentences


def count_sentences(text: str) -> int:
    """The number of sentences in `text` (see `split_sentences`)."""
    count = 0
    last_end = 0
    for last_end in _sentence_ends(text):  # noqa: B007 - the last end is used below
        count += 1
    return count + (_NON_SPACE.search(text, last_end) is not None)


# A whitespace-delimited token ending in a terminator and optional closers. The
# lookbehind anchors it at a token start, so the greedy `\S*` backtracks only over its
# own token: linear in the text.
_CANDIDATE = re.compile(r"(?<!\S)\S*[.?!][" + re.escape(_CLOSERS) + r"]*(?=\s|\Z)")
_NEXT_TOKEN = re.compile(r"\s*(\S*)")
_NON_SPACE = re.compile(r"\S")
_OPENERS = "\"'“‘([{*_"


def _sentence_ends(text: str) -> Iterator[int]:
    """The offsets just past each sentence-ending token, in order.

    The last token of the text need not be reported: callers treat whatever follows the
    last reported end as one more sentence. The checks run cheapest first, since a 1 MB
    response can hold hundreds of thousands of candidates.
    """
    for match in _CANDIDATE.finditer(text):
        core = match.group().rstrip(_CLOSERS)
        if core[-1] != ".":
            yield match.end()  # `?` and `!` always end a sentence
            continue
        word = core[:-1].lstrip(_OPENERS).lower()
        if not word or (word.isalpha() and len(word) > 1 and word not in _ABBREVIATIONS):
            yield match.end()  # the common case: an ordinary word and a period
            continue
        if len(word) == 1 and word.isalpha():
            continue  # an initial ("J. K. Rowling") or a list marker ("a. first item")
        if _LIST_MARKER.fullmatch(word):
            if not _first_on_line(text, match.start()):
                yield match.end()  # "in 1990. Then": a number ends the sentence
            continue  # "1. Apples": a list marker at the start of a line
        if core.endswith("..") or word in _ABBREVIATIONS or _is_acronym(word):
            # An ellipsis, "etc." or "U.S." ends a sentence before a capitalized word;
            # titles such as "Dr." never do.
            if word in _ABBREVIATIONS and word not in _MAY_END and not core.endswith(".."):
                continue
            next_match = _NEXT_TOKEN.match(text, match.end())
            next_word = next_match.group(1).lstrip(_OPENERS) if next_match else ""
            if next_word and (next_word[0].isupper() or not next_word[0].isalpha()):
                yield match.end()
            continue
        yield match.end()


def _is_acronym(word: str) -> bool:
    """A dotted acronym such as "u.s.a" or "e.g" (letters in runs of one or two)."""
    return "." in word and all(part.isalpha() and len(part) <= 2 for part in word.split("."))


def _first_on_line(text: str, position: int) -> bool:
    """Whether only whitespace since a newline (or the text's start) precedes `position`."""
    index = position - 1
    while index >= 0 and text[index].isspace():
        if text[index] == "\n":
            return True
        index -= 1
    return index < 0


# Characters nltk's Treebank tokenizer always splits off a word (it keeps `-`, `/`, `.`
# and `'` inside words).
_WORD_TOKEN = re.compile(r"[^\s,;:@#$%&?!()\[\]{}<>\"“”«»]+")
_APOSTROPHE = re.compile("['’]")
_CONTRACTION = re.compile(r"(?i)^(.+?)(n['’]t|['’](?:s|m|d|ll|re|ve))$")


def word_tokens(text: str) -> list[str]:
    """Split `text` into words roughly as `nltk.word_tokenize` does.

    Punctuation that nltk splits off (commas, colons, brackets, quotes, `?`, `!`) is
    dropped, words keep inner hyphens, slashes, periods and apostrophes, and the common
    English contractions are split as nltk does ("DON'T" -> "DO", "N'T"; "I'M" -> "I",
    "'M"). Unlike nltk, a trailing period stays on its word ("END." rather than "END",
    "."); it does not change whether a word is all capitals.
    """
    tokens: list[str] = []
    for token in _WORD_TOKEN.findall(text):
        contraction = _CONTRACTION.match(token) if _APOSTROPHE.search(token) else None
        if contraction is None:
            tokens.append(token)
        else:
            tokens.extend(contraction.groups())
    return tokens


def count_capital_words(text: str) -> int:
    """The number of words written in all capitals (`str.isupper`), as IFEval counts them.

    Same count as `sum(w.isupper() for w in word_tokens(text))`, with the per-word work
    done in C so that a 1 MB response stays fast.
    """
    tokens = _WORD_TOKEN.findall(text)
    count = sum(map(str.isupper, tokens))
    for token in filter(_APOSTROPHE.search, tokens):
        contraction = _CONTRACTION.match(token)
        if contraction is not None:
            head, tail = contraction.groups()
            count += head.isupper() + tail.isupper() - token.isupper()
    return count


# langdetect keeps its profiles in a module-global factory that it loads lazily without a
# lock, and its seed is a class attribute other code may change. We load our own factory
# instance once, under a lock, seeded with 0 (what `DetectorFactory.seed = 0` does for the
# global one) so that detection is deterministic and leaves langdetect's globals alone.
_factory_lock = threading.Lock()
_factory: Any = None

LANGDETECT_LANGUAGES = frozenset(
    """
    af ar bg bn ca cs cy da de el en es et fa fi fr gu he hi hr hu id it ja kn ko lt lv
    mk ml mr ne nl no pa pl pt ro ru sk sl so sq sv sw ta te th tl tr uk ur vi zh-cn zh-tw
    """.split()
)
"""The language codes langdetect 1.0.9 can return (ISO 639-1, plus zh-cn and zh-tw)."""


_LANGDETECT_INPUT_CHARS = 100_000


def _detector_factory() -> Any:
    global _factory
    if _factory is None:
        detector_factory = require("langdetect.detector_factory", "ifeval")
        factory = detector_factory.DetectorFactory()
        factory.load_profile(detector_factory.PROFILES_DIRECTORY)
        factory.seed = 0
        _factory = factory
    return _factory


def detect_language(text: str) -> str | None:
    """The language code langdetect gives `text`, or None when it cannot tell.

    Deterministic (seed 0). langdetect reads at most the first 10,000 characters.
    Raises `MissingDependency` (extra "ifeval") when langdetect is not installed.
    """
    lang_detect_exception = require("langdetect.lang_detect_exception", "ifeval")
    with _factory_lock:
        factory = _detector_factory()
        detector = factory.create()
        try:
            # langdetect reads only the first 10,000 characters left after it removes
            # URLs and e-mail addresses; cutting first keeps a 1 MB response cheap.
            detector.append(text[:_LANGDETECT_INPUT_CHARS])
            return str(detector.detect())
        except lang_detect_exception.LangDetectException as exc:
            logger.debug("langdetect cannot tell the language of a response: %s", exc)
            return None
