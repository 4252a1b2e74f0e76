"""Small answer extractors shared by the built-in environments."""

from __future__ import annotations

import re

from nemo_gym.verify.common import last_boxed

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str) -> str | None:
    """The last number written in `text` (thousands commas removed), or None."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def final_integer(text: str) -> tuple[int | None, bool]:
    """The answer as an integer, from the last `\\boxed{}` or else the last number.

    Returns (value, boxed): `boxed` says whether the answer came from `\\boxed{}`.
    """
    boxed = last_boxed(text)
    if boxed is not None:
        # The whole box must be one number: \\boxed{\\frac{1}{2}} is not the integer 2.
        inner = boxed.strip().strip("${} ").replace(",", "")
        candidate = inner if _NUMBER.fullmatch(inner) else None
    else:
        candidate = last_number(text)
    if candidate is None:
        return None, boxed is not None
    try:
        value = float(candidate)
    except ValueError:
        return None, boxed is not None
    return (int(value) if value.is_integer() else None), boxed is not None
