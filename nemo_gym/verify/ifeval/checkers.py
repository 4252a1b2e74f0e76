"""The 25 IFEval instruction checkers, one function each: `check(response, **kwargs) -> bool`.

Each follows the semantics of Google's IFEval reference implementation
(`instructions.py`), with the keyword arguments named as in the dataset rows. Where we
deliberately differ it is said on the function; the common differences are:

- keywords, markers and section splitters are matched literally (IFEval pastes them into
  a regular expression unescaped, so a keyword such as "c++" would crash it);
- sentence counting and word tokenization use our own rules (see `text.py`);
- patterns IFEval wrote with unbounded backtracking are rewritten to give the same
  result in linear time, so that a 1 MB response cannot stall a verifier.

Arguments are validated by the registry (`registry.py`) before a checker is called.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Literal

from nemo_gym.verify.ifeval import text

Relation = Literal["less than", "at least"]

CONSTRAINED_RESPONSE_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def _compare(actual: int, relation: Relation, threshold: int) -> bool:
    if relation == "less than":
        return actual < threshold
    return actual >= threshold


# keywords:* -----------------------------------------------------------------------------


def keywords_existence(response: str, *, keywords: Sequence[str]) -> bool:
    """Every keyword appears somewhere in the response (case-insensitive substring)."""
    return all(re.search(re.escape(k), response, flags=re.IGNORECASE) for k in keywords)


def keywords_frequency(response: str, *, keyword: str, frequency: int, relation: Relation) -> bool:
    """The keyword occurs `relation` `frequency` times (case-insensitive, as a substring).

    As in IFEval, occurrences are substrings, not whole words: "cat" counts in "category".
    """
    pattern = re.compile(re.escape(keyword.strip()), flags=re.IGNORECASE)
    return _compare(len(pattern.findall(response)), relation, frequency)


def keywords_forbidden_words(response: str, *, forbidden_words: Sequence[str]) -> bool:
    """None of the words appears as a whole word (case-insensitive)."""
    return not any(
        re.search(r"\b" + re.escape(word) + r"\b", response, flags=re.IGNORECASE)
        for word in forbidden_words
    )


def keywords_letter_frequency(
    response: str, *, letter: str, let_frequency: int, let_relation: Relation
) -> bool:
    """The letter (case-insensitive) occurs `let_relation` `let_frequency` times."""
    return _compare(response.lower().count(letter.lower()), let_relation, let_frequency)


# language:* -----------------------------------------------------------------------------


def language_response_language(response: str, *, language: str) -> bool:
    """langdetect says the response is in `language` (ISO 639-1 code).

    As in IFEval, a response whose language cannot be detected at all (no letters)
    counts as followed.
    """
    detected = text.detect_language(response)
    return detected is None or detected == language


# length_constraints:* -------------------------------------------------------------------


def length_number_sentences(response: str, *, num_sentences: int, relation: Relation) -> bool:
    """The number of sentences is `relation` `num_sentences` (see `text.split_sentences`)."""
    return _compare(text.count_sentences(response), relation, num_sentences)


def length_number_paragraphs(response: str, *, num_paragraphs: int) -> bool:
    """Exactly `num_paragraphs` paragraphs separated by the markdown divider `***`.

    Empty text before the first or after the last divider is ignored; an empty
    paragraph between two dividers fails the instruction.
    """
    paragraphs = re.split(r"\s?\*\*\*\s?", response)
    count = len(paragraphs)
    for index, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if index in (0, len(paragraphs) - 1):
                count -= 1
            else:
                return False
    return count == num_paragraphs


def length_number_words(response: str, *, num_words: int, relation: Relation) -> bool:
    """The number of `\\w+` words is `relation` `num_words`."""
    return _compare(text.count_words(response), relation, num_words)


def length_nth_paragraph_first_word(
    response: str, *, num_paragraphs: int, nth_paragraph: int, first_word: str
) -> bool:
    """Exactly `num_paragraphs` paragraphs separated by blank lines (`\\n\\n`), and
    paragraph `nth_paragraph` (1-based) starts with `first_word` (case-insensitive).

    As in IFEval, the paragraph count ignores empty chunks but the n-th paragraph is
    taken from the raw `\\n\\n` split, and the first word is read up to the first
    `. , ? ! ' "` after leading quotes are removed.
    """
    paragraphs = response.split("\n\n")
    count = sum(1 for paragraph in paragraphs if paragraph.strip())
    if nth_paragraph > count:
        return False
    paragraph = paragraphs[nth_paragraph - 1].strip()
    if not paragraph:
        return False
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    found = []
    for letter in word:
        if letter in {".", ",", "?", "!", "'", '"'}:
            break
        found.append(letter.lower())
    return count == num_paragraphs and "".join(found) == first_word.lower()


# detectable_content:* -------------------------------------------------------------------


def content_number_placeholders(response: str, *, num_placeholders: int) -> bool:
    """At least `num_placeholders` square-bracket placeholders such as `[address]`.

    Counts what IFEval's `re.findall(r"\\[.*?\\]")` counts (a `[` closed by the next `]`
    on the same line), in linear time.
    """
    count = 0
    position = 0
    closing = -1
    while (opening := response.find("[", position)) >= 0:
        if closing <= opening:
            # No `]` lies between an earlier `[` and `closing`, so it is reused.
            closing = response.find("]", opening + 1)
            if closing < 0:
                break
        newline = response.find("\n", opening + 1, closing)
        if newline >= 0:
            position = newline + 1
            continue
        count += 1
        position = closing + 1
    return count >= num_placeholders


def content_postscript(response: str, *, postscript_marker: str) -> bool:
    """The response contains a postscript starting with the marker (case-insensitive).

    "P.S." and "P.P.S" also match spaced forms ("P. S.", "P. P. S"), as in IFEval.
    """
    marker = postscript_marker.strip()
    if marker == "P.P.S":
        pattern = r"p\.\s?p\.\s?s"
    elif marker == "P.S.":
        pattern = r"p\.\s?s\."
    else:
        pattern = re.escape(marker.lower())
    # IFEval's pattern starts with `\s*`, which cannot change whether there is a match
    # but makes a search over long whitespace quadratic; it is left out.
    return re.search(pattern, response.lower()) is not None


# detectable_format:* --------------------------------------------------------------------

# IFEval writes `^\s*\*[^\*].*$`; `[^\S\n]*` finds the same bullets (a bullet line is a
# line start of its own) without rescanning runs of blank lines from every line start.
_STAR_BULLET = re.compile(r"^[^\S\n]*\*[^\*].*$", flags=re.MULTILINE)
_DASH_BULLET = re.compile(r"^[^\S\n]*-.*$", flags=re.MULTILINE)


def format_number_bullet_lists(response: str, *, num_bullets: int) -> bool:
    """Exactly `num_bullets` markdown bullet points (lines starting with `* ` or `-`)."""
    count = len(_STAR_BULLET.findall(response)) + len(_DASH_BULLET.findall(response))
    return count == num_bullets


def format_constrained_response(response: str) -> bool:
    """The response contains "My answer is yes.", "My answer is no." or "... maybe."."""
    response = response.strip()
    return any(option in response for option in CONSTRAINED_RESPONSE_OPTIONS)


_SINGLE_HIGHLIGHT = re.compile(r"\*([^\n\*]*)\*")
_DOUBLE_HIGHLIGHT = re.compile(r"\*\*([^\n\*]*)\*\*")


def format_number_highlighted_sections(response: str, *, num_highlights: int) -> bool:
    """At least `num_highlights` non-empty markdown highlights (`*text*` or `**text**`).

    `*x*` counts once; `**x**` also counts once (its `*` pattern matches are the empty
    `**` pairs, which are not counted), as in IFEval.
    """
    # The text between the stars has no `*`, so IFEval's `strip("*")` (and removing the
    # `**` prefix and suffix) leaves exactly the captured group.
    single = _SINGLE_HIGHLIGHT.findall(response)
    double = _DOUBLE_HIGHLIGHT.findall(response)
    return sum(not inner.isspace() for inner in filter(None, single + double)) >= num_highlights


def format_multiple_sections(response: str, *, section_spliter: str, num_sections: int) -> bool:
    """At least `num_sections` section headers "<section_spliter> <number>" (case-sensitive)."""
    pattern = r"\s?" + re.escape(section_spliter.strip()) + r"\s?\d+\s?"
    return len(re.split(pattern, response)) - 1 >= num_sections


def format_json_format(response: str) -> bool:
    """The whole response is valid JSON, optionally inside a ```json fence.

    JSON nested too deeply for Python's parser counts as not followed.
    """
    value = (
        response.strip()
        .removeprefix("```json")
        .removeprefix("```Json")
        .removeprefix("```JSON")
        .removeprefix("```")
        .removesuffix("```")
        .strip()
    )
    try:
        json.loads(value)
    except (ValueError, RecursionError):
        return False
    return True


def format_title(response: str) -> bool:
    """The response has a non-empty title in double angular brackets, like `<<joy>>`.

    Same result as IFEval's `re.findall(r"<<[^\\n]+>>")` (greedy, one line), in linear
    time: on each line the first `<<` pairs with the last `>>`.
    """
    position = 0
    while (opening := response.find("<<", position)) >= 0:
        line_end = response.find("\n", opening)
        if line_end < 0:
            line_end = len(response)
        closing = response.rfind(">>", opening, line_end)
        if closing >= opening + 3:
            if response[opening : closing + 2].lstrip("<").rstrip(">").strip():
                return True
        position = line_end + 1
    return False


# combination:* --------------------------------------------------------------------------


def combination_two_responses(response: str) -> bool:
    """Two different responses separated by six asterisks `******`, and nothing else."""
    valid = []
    parts = response.split("******")
    for index, part in enumerate(parts):
        if not part.strip():
            if index not in (0, len(parts) - 1):
                return False
        else:
            valid.append(part)
    return len(valid) == 2 and valid[0].strip() != valid[1].strip()


def combination_repeat_prompt(response: str, *, prompt_to_repeat: str) -> bool:
    """The response starts by repeating `prompt_to_repeat` word for word (ignoring case)."""
    return response.strip().lower().startswith(prompt_to_repeat.strip().lower())


# startend:* -----------------------------------------------------------------------------


def startend_end_checker(response: str, *, end_phrase: str) -> bool:
    """The response ends with `end_phrase` (ignoring case, outer spaces and quotes)."""
    return response.strip().strip('"').lower().endswith(end_phrase.strip().lower())


def startend_quotation(response: str) -> bool:
    """The whole response is wrapped in double quotation marks."""
    response = response.strip()
    return len(response) > 1 and response[0] == '"' and response[-1] == '"'


# change_case:* --------------------------------------------------------------------------


def case_capital_word_frequency(
    response: str, *, capital_frequency: int, capital_relation: Relation
) -> bool:
    """Words in all capitals occur `capital_relation` `capital_frequency` times.

    Words are split as in `text.word_tokens` (close to `nltk.word_tokenize`).
    """
    return _compare(text.count_capital_words(response), capital_relation, capital_frequency)


def case_english_capital(response: str) -> bool:
    """The response is all capitals and langdetect says English.

    As in IFEval, a response whose language cannot be detected passes the language part.
    """
    if not response.isupper():
        return False
    detected = text.detect_language(response)
    return detected is None or detected == "en"


def case_english_lowercase(response: str) -> bool:
    """The response is all lowercase and langdetect says English (undetectable passes)."""
    if not response.islower():
        return False
    detected = text.detect_language(response)
    return detected is None or detected == "en"


# punctuation:* --------------------------------------------------------------------------


def punctuation_no_comma(response: str) -> bool:
    """The response contains no ASCII comma."""
    return "," not in response
