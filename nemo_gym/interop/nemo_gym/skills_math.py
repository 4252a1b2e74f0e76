"""NeMo Skills' `math_equal`, as NeMo Gym 0.7.0's `imo_proofbench_judge` mirrors it (its
app.py, Apache-2.0, NVIDIA): an MCQ letter short-circuit, a percentage and trailing
`.`/`\\` dropped, latex2sympy2's `normalize_latex` and a literal match, two plain-text
answers compared as text only, else math-verify's parse and verify of both (wrapped in
`$...$` when bare).

It is not our `MathVerifier` on purpose: that one reads the reply's final answer with our
extractor and guards math-verify's false positives (a bare `x` matching `x = 3`, ...),
so on IMO ProofBench's rows it would differ from NeMo Gym both ways: `math_equal` takes
the boxed text whole, normalises it with NeMo Skills' rules (`$f(x)=0$` against
`f(x) = 0`), and accepts whatever math-verify accepts. The server's `symbolic_correct`
must be NeMo Skills', so the port is kept as it is (tests/interop compares it).

`math_equal` runs in a worker of the math pool (`nemo_gym.verify.math`): sympy on a
policy's text can run for minutes, and the pool's deadline replaces math-verify's
signal-based timeouts (5 s each in NeMo Gym), which would clobber the worker's timer. A
comparison past the deadline is "not equal", as a math-verify timeout is in NeMo Gym.
"""

from __future__ import annotations

import logging
import re

__all__ = ["math_equal", "search_boxed", "symbolically_equal"]

_MCQ_OPTIONS = "ABCDEFGHIJ"
_MCQ = re.compile("|".join(_MCQ_OPTIONS))
_PERCENTAGE = re.compile(r"^(\d+\.?\d*)(?:\\%|%)$")
_TEXT_LITERAL = re.compile(r"[a-zA-Z ,]+")
_LATEX_ENV = re.compile(r"\$.*\$|\\\(.*\\\)|\\\[.*\\\]|\\boxed\{", re.DOTALL)
_TIMEOUT = 20.0


def _additional_normalization(expr: str) -> str:
    match = _PERCENTAGE.fullmatch(expr)
    if match:
        expr = match.group(1)
    return expr.rstrip(".\\")


def math_equal(gt_answer: str | None, predicted_answer: str | None) -> bool:
    """NeMo Skills' `math_equal(gt, predicted)`; any error inside is "not equal". Runs
    math-verify without its signal timeouts: call it in a pool worker
    (`symbolically_equal`), not in the event loop's thread."""
    from latex2sympy2_extended import NormalizationConfig, normalize_latex
    from math_verify import LatexExtractionConfig, StringExtractionConfig, parse, verify

    if predicted_answer is None or predicted_answer == "":
        return False
    gt, pred = str(gt_answer), str(predicted_answer)
    try:
        if _MCQ.fullmatch(gt.strip()):
            letters = [StringExtractionConfig(strings=tuple(_MCQ_OPTIONS))]
            gold = parse(gt, letters, parsing_timeout=None)
            said = parse(pred, letters, parsing_timeout=None)
            if verify(gold, said, timeout_seconds=None):
                return True
        gt, pred = _additional_normalization(gt), _additional_normalization(pred)
        normal_gt = normalize_latex(gt, NormalizationConfig)
        normal_pred = normalize_latex(pred, NormalizationConfig)
        if normal_gt.replace(" ", "") == normal_pred.replace(" ", ""):
            return True
        if _TEXT_LITERAL.fullmatch(normal_gt) and _TEXT_LITERAL.fullmatch(normal_pred):
            return False
        gold = parse(
            gt if _LATEX_ENV.search(gt) else f"${gt}$",
            [LatexExtractionConfig()],
            parsing_timeout=None,
        )
        said = parse(
            pred if _LATEX_ENV.search(pred) else f"${pred}$",
            [LatexExtractionConfig()],
            parsing_timeout=None,
        )
        return bool(verify(gold, said, timeout_seconds=None))
    except Exception as exc:  # NeMo Skills' best effort: an error is not a match
        logging.getLogger(__name__).debug("math_equal(%r, %r) raised %r", gt, pred, exc)
        return False


async def symbolically_equal(gt_answer: str, predicted_answer: str) -> bool:
    """`math_equal` in a math-pool worker; past its deadline, not equal."""
    from nemo_gym.verify.math import math_pool
    from nemo_gym.verify.pool import WorkerError, WorkerTimeout

    try:
        found = await math_pool().call(
            "nemo_gym.interop.nemo_gym.skills_math:math_equal",
            gt_answer,
            predicted_answer,
            timeout=_TIMEOUT,
        )
    except WorkerTimeout:
        return False
    except WorkerError as exc:
        if exc.remote_type in ("ModuleNotFoundError", "ImportError"):
            from nemo_gym.errors import MissingDependency

            raise MissingDependency("math-verify", "math") from exc
        raise
    return bool(found)


def search_boxed(text: str) -> str | None:
    """NeMo Skills' `search_boxed` as imo_proofbench_judge has it: the inside of the last
    `\\boxed{...}`, braces balanced from that `\\boxed`; None without one."""
    if not text or "\\boxed" not in text:
        return None
    start = text.rfind("\\boxed")
    depth = 0
    for at in range(start, len(text)):
        if text[at] == "{":
            depth += 1
        elif text[at] == "}":
            depth -= 1
            if depth == 0:
                found = text[start : at + 1]
                return found[len("\\boxed{") : -1] if found.startswith("\\boxed{") else None
    return None
