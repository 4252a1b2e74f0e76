"""The IFBench-style instructions: each checker on a following and a breaking response,
and the places where we follow the instruction rather than the reference checker."""

from __future__ import annotations

import pytest

from nemo_gym.errors import VerifierError
from nemo_gym.verify.ifeval import EXTENDED_INSTRUCTIONS, INSTRUCTIONS, make_instruction

CASES = [
    (
        "first_word:first_word_sent",
        {"first_word": "Tea"},
        "Tea is hot. Tea is good.",
        "Tea is hot. It is good.",
    ),
    ("first_word:first_word_answer", {"first_word": "yes"}, "Yes, indeed.", "Indeed, yes."),
    ("last_word:last_word_sent", {"last_word": "now"}, "Go now. Stop now!", "Go now. Stop."),
    ("last_word:last_word_answer", {"last_word": "end"}, "This is the end.", "The end is near."),
    ("count:lowercase_counting", {"N": 2}, "the cat and the dog", "the the the"),
    ("letters:letter_counting", {"N": 5, "relation": "less than"}, "abc", "abcdef"),
    (
        "letters:letter_counting2",
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
        "zz",
        "z",
    ),
    ("paragraphs:paragraphs", {}, "One.\n***\nTwo.", "One.\n\nTwo."),
    ("paragraphs:paragraphs2", {}, "One.\n\nTwo.", "One."),
    (
        "count:counting_composition",
        {"n_sent": 1, "n_words": 2},
        "Red cat.\n***\nBlue dog.\n***\nGreen bird.",
        "Red cat.\n***\nBlue dog.",
    ),
    ("count:count_unique", {}, "every word once", "word word"),
    ("count:count_increment_word", {"keyword1": "a1", "keyword2": "b2"}, "a1 b2 b2", "a1 b2"),
    (
        "count:keywords_multiple",
        {"keyword1": "k1", "keyword2": "k2", "keyword3": "k3", "keyword4": "k4", "keyword5": "k5"},
        " ".join(["k1"] + ["k2"] * 2 + ["k3"] * 3 + ["k4"] * 5 + ["k5"] * 7),
        "k1 k2",
    ),
    ("keywords:palindrome", {}, "We saw a racecar.", "A cat."),
    (
        "keywords:keyword_specific_position",
        {"keyword": "blue", "n": 2, "m": 3},
        "Hi there. The sky blue today.",
        "Hi there. Blue sky.",
    ),
    ("keywords:start_end", {}, "Hello to all, hello", "Hello to all."),
    ("keywords:no_adjacent_consecutive", {}, "cat fox hen", "ant bee"),
    ("keywords:word_once", {"keyword": "tea"}, "I drink tea.", "tea and tea"),
    (
        "keywords:word_count_different_numbers",
        {"keyword": "go", "frequency": 2, "relation": "at least"},
        "go go",
        "go",
    ),
    ("keywords:exclude_word_harder", {"keyword": "bad"}, "All good.", "That is bad."),
    ("detectable_format:sentence_hyphens", {}, "I run.-You walk.-We rest.", "I run. You walk."),
    ("detectable_format:square_brackets", {}, "[every] [word]", "[every] word"),
    ("detectable_format:bigram_wrapping", {}, "<<I am>> <<at home>>", "I am at home"),
    ("copy:copying_simple", {"prompt_to_repeat": "Say hi."}, "say hi.", "Hi!"),
    (
        "copy:copying_multiple",
        {"prompt_to_repeat": "Say hi.", "N": 2},
        "Say hi.******Say hi.",
        "Say hi.",
    ),
    ("punctuation:punctuation_dot", {}, "No dots here", "A dot."),
    ("punctuation:punctuation_exclamation", {}, "Calm.", "Wow!"),
    ("format:line_indent", {}, "a\n b\n  c", "a\nb"),
    ("format:no_whitespace", {}, "nowhitespace", "some space"),
    ("count:word_count_range", {"min_words": 2, "max_words": 3}, "two words", "one"),
    ("count:unique_word_count", {"N": 3}, "a b c", "a a a"),
    ("count:numbers", {"N": 2}, "1 and 2,000", "just 1"),
]


def test_every_extended_instruction_is_covered() -> None:
    assert {c[0] for c in CASES} == set(EXTENDED_INSTRUCTIONS)
    assert not set(EXTENDED_INSTRUCTIONS) & set(INSTRUCTIONS)


@pytest.mark.parametrize(("iid", "kwargs", "follows", "breaks"), CASES, ids=[c[0] for c in CASES])
def test_checkers(iid: str, kwargs: dict, follows: str, breaks: str) -> None:
    instruction = make_instruction(iid, kwargs)
    assert instruction(follows) and not instruction(breaks)


def test_we_follow_the_instruction_where_the_reference_checks_something_else() -> None:
    # "all lowercase words should appear at most 3 times": each word, not their total
    assert make_instruction("count:lowercase_counting", {"N": 3})(
        "the cat saw the dog and the bird"
    )
    # a one-letter word is no palindrome worth asking for
    assert not make_instruction("keywords:palindrome", {})("I saw a cat")
    # keywords are whole words: "cat" is not in "category"
    assert not make_instruction("keywords:word_once", {"keyword": "cat"})("a category")
    # a forbidden word next to punctuation is still there
    assert not make_instruction("keywords:exclude_word_harder", {"keyword": "bad"})("bad.")


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(VerifierError, match="'N' is required"):
        make_instruction("count:lowercase_counting", {})
    with pytest.raises(VerifierError, match="'n' must be >= 1"):
        make_instruction("keywords:keyword_specific_position", {"keyword": "x", "n": 0, "m": 1})
