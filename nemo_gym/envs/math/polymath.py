"""`polymath`: multilingual math (PolyMath layout), the instruction in the question's language."""

from __future__ import annotations

from nemo_gym.envs.math.base import MathDatasetEnv
from nemo_gym.envs.prompts import join
from nemo_gym.envs.rows import Row

INSTRUCTIONS = {
    "en": "Please reason step by step, and put your final answer within \\boxed{}.",
    "zh": "请逐步推理，并将最终答案放在 \\boxed{} 中。",
    "de": "Denke Schritt für Schritt und schreibe deine endgültige Antwort in \\boxed{}.",
    "fr": "Raisonne étape par étape et mets ta réponse finale dans \\boxed{}.",
    "es": "Razona paso a paso y pon tu respuesta final dentro de \\boxed{}.",
    "ja": "段階的に考え、最終的な答えを \\boxed{} の中に書いてください。",
    "ru": "Рассуждай шаг за шагом и запиши окончательный ответ в \\boxed{}.",
    "ar": "فكّر خطوة بخطوة، وضع إجابتك النهائية داخل \\boxed{}.",
}


class PolyMath(MathDatasetEnv):
    """Math in many languages, the instruction in the question's language.

    Ships 12 problems written by us in six languages (their `difficulty` low, medium or
    high); PolyMath itself reads through `dataset="Qwen/PolyMath", dataset_name=
    "<language>"`, whose splits are its difficulty levels (low, medium, high, top).
    """

    name = "polymath"
    version = "1"
    domain = "math"
    source = "12 problems written by us in 6 languages; PolyMath layout (Qwen/PolyMath)"
    license = "Apache-2.0 (sample)"
    sample = "math/data/polymath.jsonl"
    public = "Qwen/PolyMath"
    question_fields = ("question",)

    def prompt(self, row: Row, question: str) -> str:
        language = str(row.get("language", self.dataset_name or "en"))
        return join(question, INSTRUCTIONS.get(language, INSTRUCTIONS["en"]))
