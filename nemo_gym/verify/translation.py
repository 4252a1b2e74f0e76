"""Translation metrics via sacrebleu: chrF / chrF++ and spBLEU. Reward = score / 100.

The gold is the reference translation, or a list of references. Scores are
sentence-level (one reply against its references).

spBLEU is BLEU on SentencePiece pieces of the FLORES-200 model. sacrebleu downloads
that model on first use (to ``$SACREBLEU/models/flores200sacrebleuspm``, default
``~/.sacrebleu``); `SpBLEU` never downloads unless ``allow_download=True``: it uses
`spm_model` when given, else the file at sacrebleu's path, else raises `ConfigError`
naming the path. With the model file present it gives exactly sacrebleu's
``BLEU(tokenize="flores200")`` sentence score.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from nemo_gym.errors import ConfigError, VerifierError, require
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import GoldFn, get_gold, gold_strings, response_text

log = logging.getLogger(__name__)

__all__ = ["FLORES200_SPM_URL", "ChrF", "SpBLEU", "flores200_model_path"]

FLORES200_SPM_URL = "https://tinyurl.com/flores200sacrebleuspm"


def flores200_model_path() -> Path:
    """Where sacrebleu keeps the FLORES-200 SentencePiece model (``$SACREBLEU``)."""
    root = os.environ.get("SACREBLEU", os.path.join(os.path.expanduser("~"), ".sacrebleu"))
    return Path(root) / "models" / "flores200sacrebleuspm"


class _SentenceMetric:
    def __init__(self, gold: GoldFn | None) -> None:
        self.gold = gold
        self._metric: Any = None

    def _score(self, hypothesis: str, references: list[str]) -> float:
        raise NotImplementedError

    async def _ready(self) -> None:
        """Prepare anything slow (a download) off the event loop."""

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Score the reply against the reference(s); reward = score / 100."""
        references = gold_strings(task, get_gold(task, self.gold))
        hypothesis = response_text(trajectory).strip()
        try:
            await self._ready()
            score = self._score(hypothesis, references)
        except (ConfigError, VerifierError):
            raise
        except Exception as exc:  # sacrebleu/sentencepiece internals
            raise VerifierError(f"task {task.id}: scoring failed: {exc!r}") from exc
        reward = max(0.0, min(1.0, score / 100.0))
        name = type(self).__name__.lower()
        return Rewards(
            reward=reward,
            components={name: reward},
            metadata={"extracted_answer": hypothesis or None, "score": score},
        )


class ChrF(_SentenceMetric):
    """Sentence chrF (``word_order=0``) or chrF++ (``word_order=2``) via sacrebleu."""

    def __init__(
        self,
        *,
        word_order: int = 0,
        char_order: int = 6,
        beta: int = 2,
        lowercase: bool = False,
        gold: GoldFn | None = None,
    ) -> None:
        super().__init__(gold)
        metrics = require("sacrebleu.metrics", "translation")
        self._metric = metrics.CHRF(
            char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase
        )

    def _score(self, hypothesis: str, references: list[str]) -> float:
        return float(self._metric.sentence_score(hypothesis, references).score)


class SpBLEU(_SentenceMetric):
    """Sentence BLEU on FLORES-200 SentencePiece pieces (spBLEU) via sacrebleu.

    `spm_model` is a path to a SentencePiece ``.model`` file; by default sacrebleu's
    cached FLORES-200 model (`flores200_model_path`). A missing model raises
    `ConfigError` unless `allow_download` lets sacrebleu fetch it (on the first verify).
    Needs ``sacrebleu`` and ``sentencepiece``.
    """

    def __init__(
        self,
        spm_model: str | os.PathLike[str] | None = None,
        *,
        lowercase: bool = False,
        allow_download: bool = False,
        gold: GoldFn | None = None,
    ) -> None:
        super().__init__(gold)
        metrics = require("sacrebleu.metrics", "translation")
        path = Path(spm_model) if spm_model is not None else flores200_model_path()
        self.lowercase = lowercase
        self._sp: Any = None
        if path.is_file():
            spm = require("sentencepiece", "translation")
            self._sp = spm.SentencePieceProcessor()
            try:
                loaded = self._sp.Load(str(path))
            except (OSError, RuntimeError) as exc:
                raise ConfigError(f"SpBLEU: {path} is not a SentencePiece model: {exc}") from exc
            if not loaded:
                raise ConfigError(f"SpBLEU: {path} is not a SentencePiece model")
            self.model_path: Path | None = path
            # the pieces are made here, exactly as sacrebleu's SPM tokenizer makes them
            self._metric = metrics.BLEU(tokenize="none", effective_order=True)
        elif spm_model is None and allow_download:
            require("sentencepiece", "translation")
            self.model_path = None
            self._metrics = metrics
        else:
            raise ConfigError(
                f"SpBLEU: no SentencePiece model at {path}. Download the FLORES-200 model "
                f"from {FLORES200_SPM_URL} to {flores200_model_path()}, pass spm_model=, "
                "or pass allow_download=True to let sacrebleu fetch it"
            )

    async def _ready(self) -> None:
        if self._sp is None and self._metric is None:  # sacrebleu downloads the model here
            self._metric = await asyncio.to_thread(
                self._metrics.BLEU,
                tokenize="flores200",
                effective_order=True,
                lowercase=self.lowercase,
            )

    def _pieces(self, line: str) -> str:
        if self.lowercase:
            line = line.lower()
        return " ".join(self._sp.EncodeAsPieces(line.rstrip()))

    def _score(self, hypothesis: str, references: list[str]) -> float:
        if self._sp is None:
            return float(self._metric.sentence_score(hypothesis, references).score)
        pieces = [self._pieces(r) for r in references]
        return float(self._metric.sentence_score(self._pieces(hypothesis), pieces).score)
