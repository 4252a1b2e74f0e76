"""`translation`: translate a sentence; scored by chrF (or spBLEU) against the reference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task

NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "ja": "Japanese",
    "zh": "Chinese",
    "ru": "Russian",
    "ar": "Arabic",
    "hi": "Hindi",
    "ko": "Korean",
    "tr": "Turkish",
    "pl": "Polish",
    "cs": "Czech",
    "uk": "Ukrainian",
    "sv": "Swedish",
}
_ISO3 = {
    "eng": "en",
    "deu": "de",
    "fra": "fr",
    "spa": "es",
    "ita": "it",
    "por": "pt",
    "nld": "nl",
    "jpn": "ja",
    "zho": "zh",
    "cmn": "zh",
    "rus": "ru",
    "arb": "ar",
    "hin": "hi",
    "kor": "ko",
    "tur": "tr",
    "pol": "pl",
    "ces": "cs",
    "ukr": "uk",
    "swe": "sv",
}


def language_name(code: str) -> str:
    """'de', 'de_DE', 'deu_Latn' as 'German' (the code itself when unknown)."""
    short = code.split("_")[0].split("-")[0].lower()
    return NAMES.get(_ISO3.get(short, short), code)


class Translation(DatasetEnv):
    """Sentence translation, scored by sentence chrF / 100 (`metric="spbleu"`: spBLEU on
    FLORES-200 pieces, which needs sacrebleu's SentencePiece model file).

    Rows: our layout (source_lang, target_lang, source, target); WMT's
    ({"translation": {xx: ..., yy: ...}}) and FLORES' pair configs
    ({"sentence_xxx_Xxxx": ...}) with `source_lang=` / `target_lang=` naming the keys.
    Ships 14 sentence pairs written by us.
    """

    name = "translation"
    version = "1"
    domain = "translation"
    verification = "sentence chrF (or spBLEU) against the reference, / 100"
    source = "14 sentence pairs written by us; WMT and FLORES layouts via dataset= or path="
    license = "Apache-2.0 (sample); FLORES-200 is CC BY-SA 4.0"
    requires = ("extra:translation",)
    sample = "translation/data/translation.jsonl"
    public = "openlanguagedata/flores_plus"

    def __init__(
        self,
        *,
        metric: str = "chrf",
        source_lang: str | None = None,
        target_lang: str | None = None,
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        from nemo_gym.verify.translation import ChrF, SpBLEU

        if metric not in ("chrf", "spbleu"):
            raise ConfigError(f"translation: metric is 'chrf' or 'spbleu', got {metric!r}")
        super().__init__(
            ChrF() if metric == "chrf" else SpBLEU(),
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=SingleTurn(),
        )
        self.metric, self.source_lang, self.target_lang = metric, source_lang, target_lang

    def _pair(self, row: Row) -> tuple[str, str, str, str]:
        src, tgt = (
            row.get("source_lang", self.source_lang),
            row.get("target_lang", self.target_lang),
        )
        if src is None or tgt is None:
            raise ConfigError(f"{row.where}: give source_lang= and target_lang= for this layout")
        if "translation" in row.data:  # WMT
            pair = row.require("translation", dict)
            return src, tgt, str(pair[src]), str(pair[tgt])
        if f"sentence_{src}" in row.data:  # FLORES pair configs
            return (
                src,
                tgt,
                row.require(f"sentence_{src}", str),
                row.require(f"sentence_{tgt}", str),
            )
        return src, tgt, row.require("source", str), row.require("target", str)

    def task_from_row(self, row: Row, split: str) -> Task:
        src, tgt, source, target = self._pair(row)
        prompt = (
            f"Translate the following {language_name(src)} text into {language_name(tgt)}. "
            f"Reply with the translation only.\n\n{source}"
        )
        return Task(
            id=self.task_id(row, split, "id"),
            prompt=prompt,
            answer=target,
            metadata={"source": source, "source_lang": src, "target_lang": tgt},
        )

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(task.answer)]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(task.metadata["source"])]
