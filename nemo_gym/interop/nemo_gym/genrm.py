"""NeMo Gym's GenRM pairwise scoring (`resources_servers/genrm_compare/utils.py`), exact.

A GenRM compares two replies to one prompt and answers JSON
``{"score_1": 1-5, "score_2": 1-5, "ranking": 1-6}``. A group's rewards come from
comparing its replies pairwise (`comparison_pairs`), reading each judge reply
(`parse_genrm_output`) and averaging each reply's scores over its comparisons, a tie
broken by the ranking (`aggregate_scores`). One reply's reward depends on its siblings,
so this is a rule over a group of `gym.groups(...)`, not one rollout's verify.

Where NeMo Gym substitutes its defaults (3, 3, 3.5) for a judge reply it cannot read,
`parse_genrm_output` answers None: a comparison with no verdict is left out of the
average, and a reply with no readable comparison gets no reward (a failure for the
caller to record), never a neutral 3.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from math import isfinite
from typing import Any, Literal

__all__ = [
    "RANKING_MIDPOINT",
    "Comparison",
    "Strategy",
    "aggregate_scores",
    "comparison_pairs",
    "parse_genrm_output",
]

Strategy = Literal["circular", "all_pairs"]

# Rankings run 1-6: below 3.5 response_1 is better, above it response_2.
RANKING_MIDPOINT = 3.5

# (score_1, score_2, ranking), as NeMo Gym's parser returns them.
Comparison = tuple[float, float, float]

_FENCED = re.compile(r"```json\s*([\s\S]*?)\s*```", flags=re.IGNORECASE)
_KEYS = ("score_1", "score_2", "ranking")


def comparison_pairs(strategy: Strategy, n: int) -> list[tuple[int, int]]:
    """NeMo Gym's `generate_comparison_pairs`: each reply against the next, the last
    against the first (``circular``, n comparisons), or every pair once (``all_pairs``)."""
    if strategy not in ("circular", "all_pairs"):
        raise ValueError(f"unknown comparison strategy {strategy!r}: circular or all_pairs")
    if n < 2:
        raise ValueError(f"need at least 2 replies to compare, got {n}")
    if strategy == "all_pairs":
        return list(itertools.combinations(range(n), 2))
    return [(i, (i + 1) % n) for i in range(n)]


def _scores(candidate: str, default_score: float, default_ranking: float) -> Comparison | None:
    try:
        parsed: Any = json.loads(candidate)
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    if isinstance(parsed.get("overall"), dict):
        parsed = parsed["overall"]
    if not any(k in parsed for k in _KEYS):
        return None
    try:
        # NeMo Gym's own coercion: float() of whatever is there, so "4" and true count.
        found = (
            float(parsed.get("score_1", default_score)),
            float(parsed.get("score_2", default_score)),
            float(parsed.get("ranking", default_ranking)),
        )
    except (TypeError, ValueError):
        return None
    return found if all(isfinite(v) for v in found) else None


def _objects(text: str) -> list[str]:
    """Top-level ``{...}`` spans by brace counting, strings (and their escapes) skipped;
    NeMo Gym's `_find_json_objects`, including its resumption after each closed object."""
    found: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "{":
            depth, in_string, escaped = 0, False, False
            for j in range(i, len(text)):
                ch = text[j]
                if escaped:
                    escaped = False
                    continue
                if ch == "\\" and in_string:
                    escaped = True
                    continue
                if ch == '"':
                    in_string = not in_string
                    continue
                if in_string:
                    continue
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        found.append(text[i : j + 1])
                        i = j
                        break
        i += 1
    return found


def parse_genrm_output(
    output: str, default_score: float = 3.0, default_ranking: float = 3.5
) -> Comparison | None:
    """The judge reply's scores, read as NeMo Gym reads them: the first readable object in a
    fenced ```json block, else the last readable top-level object; a key that is missing
    takes the default. None where NeMo Gym would fall back to its defaults."""
    for block in _FENCED.finditer(output):
        for candidate in _objects(block.group(1)):
            found = _scores(candidate, default_score, default_ranking)
            if found is not None:
                return found
    last: Comparison | None = None
    for candidate in _objects(output):
        found = _scores(candidate, default_score, default_ranking)
        if found is not None:
            last = found
    return last


def aggregate_scores(
    n: int, comparisons: Sequence[tuple[int, int, Comparison | None]]
) -> list[float | None]:
    """Each reply's reward: the mean of its scores over the comparisons it is in
    (NeMo Gym's ``simple_tiebreaker``). Where a pair's scores are equal the ranking breaks
    the tie: ``3.5 - ranking`` is added to response_1's score and taken from
    response_2's. A comparison whose verdict is None counts for neither reply; a reply
    with no counted comparison gets None."""
    totals = [0.0] * n
    counts = [0] * n
    for i, j, found in comparisons:
        if found is None:
            continue
        score_1, score_2, ranking = found
        if score_1 == score_2:
            adjustment = RANKING_MIDPOINT - ranking
            score_1, score_2 = score_1 + adjustment, score_2 - adjustment
        totals[i] += score_1
        totals[j] += score_2
        counts[i] += 1
        counts[j] += 1
    return [totals[k] / counts[k] if counts[k] else None for k in range(n)]
