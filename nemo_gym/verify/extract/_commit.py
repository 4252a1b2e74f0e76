"""Which of several stated answers a reply commits to: revisions, hypotheticals, hedges.

A reply that states two different answers commits to one of them only when its text
says which: a correction between them ("wait", "actually", "I made a mistake"), a
draft before them ("At first I thought A"), a hypothetical around one of them ("had
the endpoints counted it would be 14"), or a committing lead-in before the last ("the
answer is", "therefore"). Without such words, or with a hedge ("or maybe", "perhaps"),
the reply has no answer: several different boxes are never read as the last one, which
a policy could otherwise game by boxing every candidate.
"""

from __future__ import annotations

import re
from typing import Literal

Choice = Literal["last", "earlier", "ambiguous"]

# A correction of what came before.
_REVISION = re.compile(
    r"(?i)(?<![a-z])(?:wait|hold\s+on|hang\s+on|actually|oops|whoops|hmm|on\s+second\s+thought"
    r"|correction|corrected|correcting|let\s+me\s+(?:re|double|fix|correct)|re-?check"
    r"|re-?examin|re-?consider|re-?calculat|re-?comput|mistake|error|typo|miscalculat|misread"
    r"|dropped|forgot|wrong|instead|rather|scratch\s+that|no,|however|but)(?![a-z])"
)
# A draft the reply moves on from ("At first I thought \boxed{A}").
_DRAFT = re.compile(
    r"(?i)(?<![a-z])(?:at\s+first|initially|first\s+i\s+thought|i\s+(?:first\s+)?thought"
    r"|my\s+first\s+(?:guess|answer|attempt)|naively|a\s+first\s+guess|tentatively"
    r"|one\s+might\s+(?:think|guess)|it\s+(?:seems|looks)\s+like)(?![a-z])"
)
# A hypothetical: the answer of another question than the one asked.
_HYPOTHETICAL = re.compile(
    r"(?i)(?<![a-z])(?:would|if|had|were|suppose|supposing|assuming|assume"
    r"|hypothetically|otherwise|in\s+case|were\s+it|unless)(?![a-z])"
)
# A hedge between two answers: no commitment.
_HEDGE = re.compile(
    r"(?i)(?<![a-z])(?:or|maybe|perhaps|possibly|alternatively|either|probably|likely|could"
    r"|might|not\s+sure|unsure|i\s+guess)(?![a-z])"
)
# A lead-in that commits to what follows it.
_COMMIT = re.compile(
    r"(?i)(?<![a-z])(?:answer|final|finally|therefore|thus|hence|so|conclude|conclusion"
    r"|result|total|altogether|in\s+all|overall|correct|as\s+stated|indeed)(?![a-z])|∴"
)
_CLAUSE = re.compile(r"[.;!?\n:](?=[^.;!?\n:]*\Z)")


_MARKUP_TAIL = re.compile(r"[\s*_#$\\()\[\]{}:|>`]*\Z")


def clause_before(text: str, at: int, window: int = 160, start: int = 0) -> str:
    """The clause that leads up to position `at` (from the last sentence boundary, and
    from `start` at the earliest), read past the markup right before `at`: the lead-in
    of ``**Final Answer**\\n\\[\\boxed{5}`` is "**Final Answer"."""
    before = text[max(start, at - window) : at]
    before = before[: _MARKUP_TAIL.search(before).start()]  # type: ignore[union-attr]
    cut = _CLAUSE.search(before)
    return before[cut.end() :] if cut else before


def is_hypothetical(text: str, at: int) -> bool:
    """Whether the answer at `at` is stated as a hypothetical ("it would be ...")."""
    return bool(_HYPOTHETICAL.search(clause_before(text, at)))


def has_revision(between: str) -> bool:
    """Whether `between` (the text between two answers) corrects the first."""
    return bool(_REVISION.search(between))


def committed(text: str, earlier: tuple[int, int], last: tuple[int, int]) -> Choice:
    """Which of two different answers, at spans `earlier` and `last` of `text`, the reply
    commits to (`"ambiguous"`: neither)."""
    last_clause = clause_before(text, last[0], start=earlier[1])
    earlier_clause = clause_before(text, earlier[0])
    between = text[earlier[1] : last[0]]
    last_hypothetical = bool(_HYPOTHETICAL.search(last_clause))
    earlier_hypothetical = bool(_HYPOTHETICAL.search(earlier_clause))
    if last_hypothetical and not earlier_hypothetical:
        return "earlier"
    if earlier_hypothetical and not last_hypothetical:
        return "last"
    if last_hypothetical:
        return "ambiguous"
    if _DRAFT.search(earlier_clause) or has_revision(between):
        return "last"
    if _HEDGE.search(between) or _HEDGE.search(last_clause):
        return "ambiguous"
    if _COMMIT.search(last_clause):
        return "last"
    return "ambiguous"
