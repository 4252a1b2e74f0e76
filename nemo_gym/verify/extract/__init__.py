"""Answer extraction: the one place that reads an answer out of a model's reply.

Every verifier and built-in environment reads answers through these functions, so a
fix to how a form is read (a boxed answer, a price in math delimiters, a negated
option letter) reaches all of them at once.

- Where answers sit: `strip_thinking` (drop ``<think>...</think>``), `boxed_answer`
  (the box a reply commits to; several different boxes with no commitment are no
  answer), `last_boxed` (the last box as written),
  `boxed_spans`, `MATH_SPAN` (``$...$``, ``\\(...\\)``, ``\\[...\\]``; an escaped
  ``\\$`` is content), `fenced_blocks` (Markdown code fences).
- Math answers: `extract_answer` (``\\boxed{}`` > "the answer is" > last number, with
  fallback past empty or punctuation-only candidates) -> `Extraction`.
- Numbers: `parse_number`, `extract_number` -> `ParsedNumber`; `last_number`;
  `final_integer` -> `IntegerAnswer`; the percent policy `PercentPolicy`.
- Numbers in words: `spelled_number` ("one hundred and twenty" -> "120", "a third").
- Languages of the answer statements both readers know: `LANGUAGES`.
- Multiple choice: `extract_choice`, `extract_choice_details` -> `ChoiceExtraction`.

Pure Python and `re`: importing this costs nothing, and every scan is linear in the
length of the reply. See docs/extract.md.
"""

from __future__ import annotations

from nemo_gym.verify.extract._choice import (
    ChoiceExtraction,
    extract_choice,
    extract_choice_details,
)
from nemo_gym.verify.extract._lang import LANGUAGES
from nemo_gym.verify.extract._math import (
    NO_ANCHOR_POLICIES,
    Anchor,
    Extraction,
    NoAnchorPolicy,
    boxed_answer,
    extract_answer,
    is_blank,
)
from nemo_gym.verify.extract._numbers import (
    PERCENT_POLICIES,
    IntegerAnswer,
    ParsedNumber,
    PercentPolicy,
    check_percent_policy,
    extract_number,
    final_integer,
    last_number,
    normalize_text,
    parse_number,
)
from nemo_gym.verify.extract._spans import (
    MATH_SPAN,
    MAX_BOXED,
    Boxed,
    FencedBlock,
    boxed_spans,
    fenced_blocks,
    last_boxed,
    span_content,
    strip_thinking,
    tail_matches,
)
from nemo_gym.verify.extract._words import spelled_number

__all__ = [
    "LANGUAGES",
    "MATH_SPAN",
    "MAX_BOXED",
    "NO_ANCHOR_POLICIES",
    "PERCENT_POLICIES",
    "Anchor",
    "Boxed",
    "ChoiceExtraction",
    "Extraction",
    "FencedBlock",
    "IntegerAnswer",
    "NoAnchorPolicy",
    "ParsedNumber",
    "PercentPolicy",
    "boxed_answer",
    "boxed_spans",
    "check_percent_policy",
    "extract_answer",
    "extract_choice",
    "extract_choice_details",
    "extract_number",
    "fenced_blocks",
    "final_integer",
    "is_blank",
    "last_boxed",
    "last_number",
    "normalize_text",
    "parse_number",
    "span_content",
    "spelled_number",
    "strip_thinking",
    "tail_matches",
]
