"""IFBench-style instructions beyond IFEval's 25: the IF-RLVR training constraints
(`first_word:first_word_sent`, `count:lowercase_counting`, `copy:copying_multiple`, ...)
and a few of IFBench's out-of-distribution ones (`count:keywords_multiple`,
`format:line_indent`, ...), with the ids and argument names their datasets use.

Each checker does what its instruction says. Where the reference implementations
(AllenAI's IFBench, `verifiable_instructions`) check something else, we follow the
instruction, and say so on the function:

- keywords are counted as whole words, case-insensitively (the references count
  substrings, so "cat" is found in "category");
- `count:lowercase_counting` ("all lowercase words should appear at most N times")
  bounds how often each lowercase word appears (the reference bounds the number of
  lowercase words in the whole response);
- `keywords:palindrome` needs a palindrome of at least three letters (for the reference
  the word "a" is one, so every response passes);
- `keywords:exclude_word_harder` finds the word next to punctuation too;
- words are counted without punctuation (the reference counts NLTK tokens, so "Hi."
  is two words).
"""

from __future__ import annotations

import itertools
import re
import string
from collections import Counter
from collections.abc import Callable

from nemo_gym.verify.ifeval import checkers, text
from nemo_gym.verify.ifeval.checkers import Relation

__all__ = ["EXTENDED"]

_EDGE = string.punctuation + "“”‘’«»"


def _words(response: str) -> list[str]:
    return [w for w in (t.strip(_EDGE) for t in response.split()) if w]


def _count(keyword: str, response: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(keyword.strip())}(?!\w)", response, re.IGNORECASE))


def _sentences(response: str) -> list[str]:
    return [s for s in text.split_sentences(response) if s.strip()]


def first_word_sent(response: str, *, first_word: str) -> bool:
    """Every sentence starts with `first_word`."""
    sentences = _sentences(response)
    return bool(sentences) and all(
        (_words(s) or [""])[0].lower() == first_word.strip().lower() for s in sentences
    )


def first_word_answer(response: str, *, first_word: str) -> bool:
    """The response starts with `first_word`."""
    return (_words(response) or [""])[0].lower() == first_word.strip().lower()


def last_word_sent(response: str, *, last_word: str) -> bool:
    """Every sentence ends (before its punctuation) with `last_word`."""
    sentences = _sentences(response)
    return bool(sentences) and all(
        (_words(s) or [""])[-1].lower() == last_word.strip().lower() for s in sentences
    )


def last_word_answer(response: str, *, last_word: str) -> bool:
    """The response's last word (before punctuation) is `last_word`."""
    return (_words(response) or [""])[-1].lower() == last_word.strip().lower()


def lowercase_counting(response: str, *, N: int) -> bool:
    """No lowercase word appears more than N times (see the module doc)."""
    counts = Counter(re.findall(r"\b[a-z]+\b", response))
    return all(c <= N for c in counts.values())


def letter_counting(response: str, *, N: int, relation: Relation) -> bool:
    """The response has (less than / at least) N ASCII letters."""
    return checkers._compare(len(re.findall(r"[A-Za-z]", response)), relation, N)


def paragraphs(response: str) -> bool:
    """Exactly two paragraphs separated by the markdown divider ***."""
    return checkers.length_number_paragraphs(response, num_paragraphs=2)


def paragraphs2(response: str) -> bool:
    """Exactly two paragraphs separated by a blank line."""
    parts = [p for p in re.split(r"\n\s*\n", response.strip()) if p.strip()]
    return len(parts) == 2


def counting_composition(response: str, *, n_sent: int, n_words: int) -> bool:
    """Three ***-separated paragraphs of n_sent sentences of n_words words each."""
    parts = [p for p in re.split(r"\s*\*\s*\*\s*\*\s*", response.strip()) if p.strip()]
    return len(parts) == 3 and all(
        len(s := _sentences(p)) == n_sent and all(len(_words(x)) == n_words for x in s)
        for p in parts
    )


def count_unique(response: str) -> bool:
    """No word is used twice (case-insensitive)."""
    words = [w.lower() for w in _words(response)]
    return bool(words) and len(words) == len(set(words))


def count_increment_word(response: str, *, keyword1: str, keyword2: str) -> bool:
    """keyword1 appears exactly once and keyword2 exactly twice."""
    return _count(keyword1, response) == 1 and _count(keyword2, response) == 2


def keywords_multiple(
    response: str, *, keyword1: str, keyword2: str, keyword3: str, keyword4: str, keyword5: str
) -> bool:
    """The keywords appear exactly 1, 2, 3, 5 and 7 times."""
    wanted = zip((keyword1, keyword2, keyword3, keyword4, keyword5), (1, 2, 3, 5, 7), strict=True)
    return all(_count(k, response) == n for k, n in wanted)


def palindrome(response: str) -> bool:
    """Some word of three or more letters reads the same backwards."""
    return any(len(w) >= 3 and w.lower() == w.lower()[::-1] for w in _words(response))


def keyword_specific_position(response: str, *, keyword: str, n: int, m: int) -> bool:
    """The n-th sentence's m-th word is `keyword`."""
    sentences = _sentences(response)
    words = _words(sentences[n - 1]) if len(sentences) >= n else []
    return len(words) >= m and words[m - 1].lower() == keyword.strip().lower()


def start_end(response: str) -> bool:
    """The first and last words are the same, with nothing after the last one."""
    words = response.split()
    if len(words) < 2 or not words[-1][-1:].isalnum():
        return False
    return words[0].strip(_EDGE).lower() == words[-1].lower()


def sentence_hyphens(response: str) -> bool:
    """Sentences joined by hyphens with no spaces between them."""
    parts = response.strip().split("-")
    return (
        len(parts) >= 2
        and all(p and p == p.strip() for p in parts)
        and re.search(r"[.!?]\s", response.strip()) is None
    )


def no_adjacent_consecutive(response: str) -> bool:
    """No two adjacent words start with consecutive letters of the alphabet."""
    firsts = [w[0].lower() for w in _words(response)]
    return not any(
        a.isalpha() and b.isalpha() and ord(b) - ord(a) == 1 for a, b in itertools.pairwise(firsts)
    )


def square_brackets(response: str) -> bool:
    """Every word is enclosed in square brackets."""
    tokens = response.split()
    return bool(tokens) and all(t.startswith("[") and t.endswith("]") for t in tokens)


def word_once(response: str, *, keyword: str) -> bool:
    """`keyword` appears exactly once."""
    return _count(keyword, response) == 1


def word_count_different_numbers(
    response: str, *, keyword: str, frequency: int, relation: Relation
) -> bool:
    """`keyword` appears (less than / at least) `frequency` times."""
    return checkers._compare(_count(keyword, response), relation, frequency)


def exclude_word_harder(response: str, *, keyword: str) -> bool:
    """`keyword` does not appear as a word."""
    return _count(keyword, response) == 0


def bigram_wrapping(response: str) -> bool:
    """Every pair of words is wrapped in double angular brackets: <<I am>> <<at home>>."""
    tokens = response.split()
    return bool(tokens) and all(
        tokens[i].startswith("<<") and tokens[i + 1].endswith(">>")
        for i in range(0, len(tokens) - 1, 2)
    )


def copying_simple(response: str, *, prompt_to_repeat: str) -> bool:
    """The response is the request, repeated without change (case aside)."""
    return response.strip().lower() == prompt_to_repeat.strip().lower()


def copying_multiple(response: str, *, prompt_to_repeat: str, N: int) -> bool:
    """The request repeated N times, separated by ******."""
    copies = response.split("******")
    return len(copies) == N and all(
        copying_simple(c, prompt_to_repeat=prompt_to_repeat) for c in copies
    )


def punctuation_dot(response: str) -> bool:
    """No full stop anywhere."""
    return "." not in response


def punctuation_exclamation(response: str) -> bool:
    """No exclamation mark anywhere."""
    return "!" not in response


def line_indent(response: str) -> bool:
    """Each non-empty line is indented further than the one before ("stairs")."""
    lines = [line for line in response.split("\n") if line.strip()]
    depth = [len(line) - len(line.lstrip(" ")) for line in lines]
    return len(lines) >= 2 and all(b > a for a, b in itertools.pairwise(depth))


def word_count_range(response: str, *, min_words: int, max_words: int) -> bool:
    """Between min_words and max_words words."""
    return min_words <= text.count_words(response) <= max_words


def unique_word_count(response: str, *, N: int) -> bool:
    """At least N distinct words."""
    return len({w.lower() for w in _words(response)}) >= N


def no_whitespace(response: str) -> bool:
    """No whitespace at all."""
    return bool(response) and not any(c.isspace() for c in response)


def numbers_count(response: str, *, N: int) -> bool:
    """Exactly N numbers (a decimal or a thousands-separated number counts once)."""
    return len(re.findall(r"\d+(?:[.,]\d+)*", response)) == N


def letter_counting2(
    response: str, *, letter: str, let_frequency: int, let_relation: Relation
) -> bool:
    """`letter` appears (less than / at least) let_frequency times (IFEval's checker)."""
    return checkers.keywords_letter_frequency(
        response, letter=letter, let_frequency=let_frequency, let_relation=let_relation
    )


Params = tuple[tuple[str, str, int], ...]
_I, _S, _R = "int", "str", "relation"

EXTENDED: tuple[tuple[str, Callable[..., bool], Params], ...] = (
    ("first_word:first_word_sent", first_word_sent, (("first_word", _S, 0),)),
    ("first_word:first_word_answer", first_word_answer, (("first_word", _S, 0),)),
    ("last_word:last_word_sent", last_word_sent, (("last_word", _S, 0),)),
    ("last_word:last_word_answer", last_word_answer, (("last_word", _S, 0),)),
    ("count:lowercase_counting", lowercase_counting, (("N", _I, 0),)),
    ("letters:letter_counting", letter_counting, (("N", _I, 0), ("relation", _R, 0))),
    (
        "letters:letter_counting2",
        letter_counting2,
        (("letter", "letter", 0), ("let_frequency", _I, 0), ("let_relation", _R, 0)),
    ),
    ("paragraphs:paragraphs", paragraphs, ()),
    ("paragraphs:paragraphs2", paragraphs2, ()),
    ("count:counting_composition", counting_composition, (("n_sent", _I, 1), ("n_words", _I, 1))),
    ("count:count_unique", count_unique, ()),
    (
        "count:count_increment_word",
        count_increment_word,
        (("keyword1", _S, 0), ("keyword2", _S, 0)),
    ),
    (
        "count:keywords_multiple",
        keywords_multiple,
        tuple((f"keyword{i}", _S, 0) for i in range(1, 6)),
    ),
    ("keywords:palindrome", palindrome, ()),
    (
        "keywords:keyword_specific_position",
        keyword_specific_position,
        (("keyword", _S, 0), ("n", _I, 1), ("m", _I, 1)),
    ),
    ("keywords:start_end", start_end, ()),
    ("keywords:no_adjacent_consecutive", no_adjacent_consecutive, ()),
    ("keywords:word_once", word_once, (("keyword", _S, 0),)),
    (
        "keywords:word_count_different_numbers",
        word_count_different_numbers,
        (("keyword", _S, 0), ("frequency", _I, 0), ("relation", _R, 0)),
    ),
    ("keywords:exclude_word_harder", exclude_word_harder, (("keyword", _S, 0),)),
    ("detectable_format:sentence_hyphens", sentence_hyphens, ()),
    ("detectable_format:square_brackets", square_brackets, ()),
    ("detectable_format:bigram_wrapping", bigram_wrapping, ()),
    ("copy:copying_simple", copying_simple, (("prompt_to_repeat", _S, 0),)),
    ("copy:copying_multiple", copying_multiple, (("prompt_to_repeat", _S, 0), ("N", _I, 1))),
    ("punctuation:punctuation_dot", punctuation_dot, ()),
    ("punctuation:punctuation_exclamation", punctuation_exclamation, ()),
    ("format:line_indent", line_indent, ()),
    ("format:no_whitespace", no_whitespace, ()),
    ("count:word_count_range", word_count_range, (("min_words", _I, 0), ("max_words", _I, 0))),
    ("count:unique_word_count", unique_word_count, (("N", _I, 0),)),
    ("count:numbers", numbers_count, (("N", _I, 0),)),
)
"""(id, checker, ((argument, kind, minimum), ...)) for each extended instruction."""
