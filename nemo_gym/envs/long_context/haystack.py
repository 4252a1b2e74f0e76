"""Filler text and needles for the long-context environments, sized in tokens.

Lengths are in tokens estimated at four characters each (a typical English rate for BPE
tokenizers); the prompt reports the estimate it was built to. Filler is made of plain
sentences drawn from small word lists, so it never contains a needle by accident.
"""

from __future__ import annotations

import random

__all__ = ["CHARS_PER_TOKEN", "filler_sentences", "key_name", "tokens"]

CHARS_PER_TOKEN = 4
_SUBJECTS = (
    "The river",
    "A quiet village",
    "The old library",
    "Every autumn",
    "The market",
    "A long road",
    "The harbour",
    "Most gardens",
    "The mountain path",
    "A small bakery",
)
_VERBS = (
    "stretches past",
    "wakes up near",
    "is known for",
    "slowly changes",
    "looks out over",
    "depends on",
    "grows beside",
    "echoes with",
    "opens onto",
    "remembers",
)
_OBJECTS = (
    "the morning fog",
    "a row of chestnut trees",
    "the sound of bells",
    "fresh bread",
    "wide fields of barley",
    "the evening tide",
    "narrow stone stairs",
    "the western hills",
    "a busy square",
    "the first snow",
)
_ADJECTIVES = (
    "sleepy",
    "brave",
    "silver",
    "quiet",
    "rapid",
    "golden",
    "tiny",
    "ancient",
    "clever",
    "misty",
    "bright",
    "gentle",
)
_NOUNS = (
    "fox",
    "river",
    "lantern",
    "falcon",
    "meadow",
    "harbor",
    "comet",
    "willow",
    "badger",
    "glacier",
    "orchid",
    "anchor",
)


def tokens(text: str) -> int:
    """The estimated token count of `text`."""
    return len(text) // CHARS_PER_TOKEN


def filler_sentences(rng: random.Random, length: int) -> list[str]:
    """Sentences adding up to about `length` tokens."""
    out, size = [], 0
    while size < length * CHARS_PER_TOKEN:
        sentence = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}."
        out.append(sentence)
        size += len(sentence) + 1
    return out


def key_name(rng: random.Random) -> str:
    """A two-word key such as 'misty-falcon'."""
    return f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
