"""The multiple-choice verifier: the letter a reply commits to against the gold letter.

The extractor (`extract_choice`) lives in `nemo_gym.verify.extract`, with every other
answer extractor; see docs/verify-text.md for what it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import GoldFn, get_gold, response_text
from nemo_gym.verify.extract import extract_choice_details
from nemo_gym.verify.extract._choice import (
    PUNCT_EDGE,
    normalize_choice_text,
    option_key,
    validate_letters,
)

__all__ = ["MultipleChoiceVerifier"]


OptionsFn = Callable[[Task], Sequence[str] | Mapping[str, str] | None]


def _default_options(task: Task) -> Sequence[str] | Mapping[str, str] | None:
    return task.metadata.get("options") or task.metadata.get("choices")


class MultipleChoiceVerifier:
    """Scores a multiple-choice reply: accuracy 1.0 when the extracted letter is the gold.

    The gold (`task.answer`, or `gold(task)`) is a letter (``"C"``, ``"(c)"``), a
    0-based index, or the text of one option. Options are read from
    ``task.metadata["options"]`` (or ``"choices"``): a list in letter order or a
    ``{letter: text}`` mapping; `letters` defaults to as many as there are options
    (``"ABCD"`` without options).

    Components: ``accuracy`` and ``format`` (1.0 when the answer was stated explicitly:
    a statement or ``\\boxed{}``). `reward` is their weighted sum, by default
    ``{"accuracy": 1.0}``.
    """

    def __init__(
        self,
        letters: str | None = None,
        *,
        strict: bool = False,
        match_option_text: bool = True,
        gold: GoldFn | None = None,
        options: OptionsFn | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        if letters is not None:
            validate_letters(letters)
        self.letters = letters
        self.strict = strict
        self.match_option_text = match_option_text
        self.gold = gold
        self.options = options or _default_options
        self.weights = dict(weights) if weights is not None else {"accuracy": 1.0}

    def _options(self, task: Task) -> tuple[str, list[str] | None]:
        try:
            raw = self.options(task)
        except Exception as exc:
            raise VerifierError(f"task {task.id}: the options= callable failed: {exc!r}") from exc
        texts: list[str] | None = None
        letters = self.letters
        if isinstance(raw, Mapping):
            keys = "".join(str(k).strip().upper() for k in raw)
            letters = letters or keys
            texts = [str(raw.get(c, raw.get(c.lower(), ""))) for c in letters]
        elif raw is not None:
            if isinstance(raw, str) or not isinstance(raw, Sequence):
                raise VerifierError(
                    f"task {task.id}: options must be a list or a mapping, got {type(raw).__name__}"
                )
            texts = [str(o) for o in raw]
            if letters is None:
                if len(texts) > 26:
                    raise VerifierError(f"task {task.id}: {len(texts)} options, at most 26")
                letters = "".join(chr(ord("A") + i) for i in range(len(texts)))
        letters = letters or "ABCD"
        try:
            validate_letters(letters)
        except ConfigError as exc:
            raise VerifierError(f"task {task.id}: {exc}") from exc
        if texts is not None and len(texts) > len(letters):
            raise VerifierError(
                f"task {task.id}: {len(texts)} options but only {len(letters)} letters"
            )
        return letters, texts

    def _gold_letter(self, task: Task, letters: str, texts: list[str] | None) -> str:
        value: Any = get_gold(task, self.gold)
        if isinstance(value, int) and not isinstance(value, bool):
            if 0 <= value < len(letters):
                return letters[value]
            raise VerifierError(f"task {task.id}: gold index {value} is out of range {letters}")
        if not isinstance(value, str):
            raise VerifierError(
                f"task {task.id}: the gold must be a letter, an index or an option text, "
                f"got {type(value).__name__}"
            )
        bare = normalize_choice_text(value).strip(PUNCT_EDGE)
        if len(bare) == 1 and bare.upper() in letters:
            return bare.upper()
        if texts:
            key = option_key(value)
            matches = [i for i, t in enumerate(texts) if option_key(t) == key]
            if len(matches) == 1:
                return letters[matches[0]]
        raise VerifierError(f"task {task.id}: gold {value!r} is not one of the letters {letters}")

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Extract the letter from the final reply and compare it with the gold."""
        letters, texts = self._options(task)
        gold = self._gold_letter(task, letters, texts)
        found = extract_choice_details(
            response_text(trajectory),
            letters=letters,
            strict=self.strict,
            options=texts if self.match_option_text else None,
        )
        components = {
            "accuracy": float(found.letter == gold),
            "format": float(found.method in ("boxed", "statement")),
        }
        return Rewards.weighted(
            components,
            self.weights,
            extracted_answer=found.letter,
            gold=gold,
            method=found.method,
            reason=found.reason,
        )
