"""Verifiers. Each returns `Rewards`; every internal failure raises `VerifierError`.

Names load on first use, so importing this package costs nothing until a verifier is
needed (math-verify, sacrebleu, jsonschema and langdetect stay unimported).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nemo_gym.verify.code import CodeVerifier
    from nemo_gym.verify.extract import extract_answer, extract_choice, extract_number
    from nemo_gym.verify.ifeval import IFEvalVerifier, ifeval_metrics, ifeval_task, score_response
    from nemo_gym.verify.judge import JudgeVerifier, PairwiseJudge
    from nemo_gym.verify.math import MathResult, MathVerifier, verify_math
    from nemo_gym.verify.mcqa import MultipleChoiceVerifier
    from nemo_gym.verify.pool import WorkerPool, shared_pool
    from nemo_gym.verify.sql import SQLVerifier
    from nemo_gym.verify.structured import JSONMatch, JSONSchemaVerifier, ToolCallMatch
    from nemo_gym.verify.text import ExactMatch, NormalizedMatch, NumericMatch, RegexMatch, TokenF1
    from nemo_gym.verify.translation import ChrF, SpBLEU

_LAZY = {
    "CodeVerifier": "code",
    "IFEvalVerifier": "ifeval",
    "ifeval_metrics": "ifeval",
    "ifeval_task": "ifeval",
    "score_response": "ifeval",
    "JudgeVerifier": "judge",
    "PairwiseJudge": "judge",
    "MathVerifier": "math",
    "MathResult": "math",
    "verify_math": "math",
    "extract_answer": "extract",
    "MultipleChoiceVerifier": "mcqa",
    "extract_choice": "extract",
    "extract_number": "extract",
    "WorkerPool": "pool",
    "shared_pool": "pool",
    "SQLVerifier": "sql",
    "JSONMatch": "structured",
    "JSONSchemaVerifier": "structured",
    "ToolCallMatch": "structured",
    "ExactMatch": "text",
    "NormalizedMatch": "text",
    "NumericMatch": "text",
    "RegexMatch": "text",
    "TokenF1": "text",
    "ChrF": "translation",
    "SpBLEU": "translation",
}

__all__ = [
    "ChrF",
    "CodeVerifier",
    "ExactMatch",
    "IFEvalVerifier",
    "JSONMatch",
    "JSONSchemaVerifier",
    "JudgeVerifier",
    "MathResult",
    "MathVerifier",
    "MultipleChoiceVerifier",
    "NormalizedMatch",
    "NumericMatch",
    "PairwiseJudge",
    "RegexMatch",
    "SQLVerifier",
    "SpBLEU",
    "TokenF1",
    "ToolCallMatch",
    "WorkerPool",
    "extract_answer",
    "extract_choice",
    "extract_number",
    "ifeval_metrics",
    "ifeval_task",
    "score_response",
    "shared_pool",
    "verify_math",
]


def __getattr__(name: str) -> Any:
    if name == "extract":  # the answer-extraction module, `gym.verify.extract`
        return importlib.import_module("nemo_gym.verify.extract")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nemo_gym.verify' has no attribute {name!r}")
    return getattr(importlib.import_module(f"nemo_gym.verify.{module}"), name)
