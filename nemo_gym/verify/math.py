"""The math verifier: extract the final answer, compare it with the gold answer.

Two paths. The FAST path runs in-process and decides most pairs exactly, in
microseconds: rationals with `fractions.Fraction` (`_exact.exact_number`: integers,
decimals, fractions, percent, units, thousands separators in several locales, mixed
numbers, repeating decimals, scientific notation), values beyond them (radicals, pi, e,
logarithms, polynomials) and structured answers (`_forms`: tuples, intervals, sets,
vectors, matrices, inequalities and other solution sets, several solutions, words).
Only what neither can decide (trigonometry, complex numbers, decimals against
irrationals, unclear readings) goes to `math-verify` in a worker process
(`nemo_gym.verify.pool`) under a hard deadline, with guards against its known false
positives (see `_math_worker`), and with the texts rewritten to the same conventions.

Which answer is extracted: `nemo_gym.verify.extract.extract_answer` (the last
`\\boxed{}`, else "the answer is", else by `no_anchor`). Conventions: `percent`
("strip": `6\\%` is 6, as the MATH graders read it; "value": 0.06; "either") and `log`
("natural": `\\log` is ln, the competition convention; "base10").

A prediction with no extractable or unparsable answer is wrong (0.0). A failure of the
verifier itself (deadline, worker crash, a gold answer that cannot be parsed) raises
`nemo_gym.errors.VerifierError`: the runner records a verifier failure, never a 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from nemo_gym.errors import MissingDependency, VerifierError
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify._exact import (
    LOG_POLICIES,
    Conventions,
    LogPolicy,
    exact_number,
    fast_compare,
    unicode_to_latex,
)
from nemo_gym.verify._forms import compare_forms, parse_form
from nemo_gym.verify.extract import (
    NO_ANCHOR_POLICIES,
    Anchor,
    NoAnchorPolicy,
    PercentPolicy,
    check_percent_policy,
    extract_answer,
    last_boxed,
    parse_number,
    spelled_number,
)
from nemo_gym.verify.pool import WorkerError, WorkerPool

__all__ = [
    "LogPolicy",
    "MathResult",
    "MathVerifier",
    "exact_number",
    "fast_compare",
    "math_pool",
    "verify_math",
]

_POLICIES = NO_ANCHOR_POLICIES
_WORKER_MODULE = "nemo_gym.verify._math_worker"
_WORKER_CHECK = f"{_WORKER_MODULE}:check"

# ---------------------------------------------------------------------------------------
# The verifier.


@dataclass(frozen=True, slots=True)
class MathResult:
    """The verdict on one prediction.

    `extracted_answer` is None when the reply has no answer (distinct from a wrong
    one); `skipped` lists candidates passed over as empty or punctuation-only.
    """

    correct: bool
    extracted_answer: str | None
    path: Literal["fast", "math_verify"]
    anchor: Anchor
    skipped: tuple[str, ...] = ()

    def to_rewards(self) -> Rewards:
        score = 1.0 if self.correct else 0.0
        metadata: dict[str, Any] = {
            "extracted_answer": self.extracted_answer,
            "path": self.path,
            "anchor": self.anchor,
        }
        if self.skipped:
            metadata["skipped"] = list(self.skipped)
        return Rewards(reward=score, components={"accuracy": score}, metadata=metadata)


def _gold_text(gold: Any) -> str:
    if isinstance(gold, bool) or gold is None:
        raise VerifierError(f"the gold answer must be a string or a number, got {gold!r}")
    if isinstance(gold, int | Fraction):
        return str(gold)
    if isinstance(gold, float):
        if not math.isfinite(gold):
            raise VerifierError(f"the gold answer is not a finite number: {gold!r}")
        return repr(gold)
    if not isinstance(gold, str):
        raise VerifierError(
            f"the gold answer must be a string or a number, got {type(gold).__name__}"
        )
    text = gold.strip()
    boxed = last_boxed(text)
    if boxed is not None:
        text = boxed
    elif len(text) >= 2 and text[0] == "$" and text[-1] == "$":
        text = text.strip("$").strip()
    if not text:
        raise VerifierError("the gold answer is empty")
    return text


def _require_math_verify() -> None:
    try:
        import math_verify  # noqa: F401
    except ImportError as exc:
        raise MissingDependency("math-verify", "math") from exc


_PERCENT = re.compile(r"\s*(?:\\%|%|\\text\s*\{\s*percent\s*\})")
# `\sin 30^\circ`: math-verify reads the argument in radians; a degree sign inside a
# trigonometric function is converted for it.
_TRIG_DEGREES = re.compile(
    r"(\\(?:sin|cos|tan|cot|sec|csc)\s*\(?\s*)(\d+(?:\.\d+)?)\s*\^\s*\{?\s*\\circ\s*\}?"
)
_PLAIN_LOG = re.compile(r"\\log(?![A-Za-z_])(?!\s*_)")


def _for_math_verify(text: str, conventions: Conventions) -> str:
    """`text` rewritten so that math-verify reads it under `conventions`: it reads a
    percentage both ways and `\\log` in base 10 on its own."""
    text = unicode_to_latex(text)
    text = _TRIG_DEGREES.sub(lambda m: f"{m.group(1)}({m.group(2)}\\pi/180)", text)
    if conventions.percent == "strip":
        text = _PERCENT.sub("", text)
    elif conventions.percent == "value":
        text = _PERCENT.sub(r"\\cdot\\frac{1}{100}", text)
    if conventions.log == "natural":
        text = _PLAIN_LOG.sub(r"\\ln", text)
    else:
        text = _PLAIN_LOG.sub(r"\\log_{10}", text)
    return text


# Complex numbers: `i` (also `\mathrm{i}`, `\imath`, or the engineers' `j`) standing
# alone is the imaginary unit; math-verify alone reads it as a variable, so `i^7 = -i`
# and `e^{i\pi} = -1` would fail there.
_UNIT_COMMAND = re.compile(
    r"\\(?:mathrm|text|mathit|operatorname|rm)\s*\{\s*([ij])\s*\}|\\[ij]math"
)
_LONE_UNIT = re.compile(r"(?<![A-Za-z\\_])[ij](?![A-Za-z])")


def _imaginary(text: str) -> bool:
    """Whether `text` uses the imaginary unit."""
    return bool(_LONE_UNIT.search(_UNIT_COMMAND.sub("i", text)))


def _complex_form(text: str, *, last_side: bool = False) -> str:
    r"""`text` with its imaginary unit written `i`, and, for an answer, the last side of
    a chain of equalities (`i^7 = i^4 \cdot i^3 = -i` is `-i`)."""
    text = _LONE_UNIT.sub("i", _UNIT_COMMAND.sub("i", text))
    if last_side and "=" in text:
        text = text.rsplit("=", 1)[1].strip()
    return text


def check_log_policy(log: str) -> LogPolicy:
    """`log` if it is a `LogPolicy`, else a ValueError naming the choices."""
    if log not in LOG_POLICIES:
        raise ValueError(f"log must be one of {LOG_POLICIES}, got {log!r}")
    return log


def _fast_verdict(gold: str, answer: str, conventions: Conventions) -> bool | None:
    """The in-process verdict, or None when math-verify must decide."""
    # "five", "a third", `\text{four}`: a number in words is that number
    gold = spelled_number(gold) or gold
    answer = spelled_number(answer) or answer
    gold_number = exact_number(gold, conventions)
    if gold_number is not None:
        predicted = exact_number(answer, conventions)
        if predicted is not None:
            return fast_compare(gold_number, predicted)
    gold_form = parse_form(gold, conventions)
    if gold_form is None:
        return None
    predicted_form = parse_form(answer, conventions)
    if predicted_form is None:
        return None
    return compare_forms(gold_form, predicted_form)


_math_pool_instance: WorkerPool | None = None


def _question(task: Task) -> str:
    if task.prompt is not None:
        return task.prompt
    return "\n".join(m.content or "" for m in task.messages if m.role == "user")


def _restates(answer: str, question: str | None) -> bool:
    """Whether `answer` is an expression (not a lone number) written in `question`."""
    if not question or parse_number(answer) is not None:
        return False
    squeeze = "".join(answer.split())
    return len(squeeze) > 1 and squeeze in "".join(question.split())


async def verify_math(
    prediction: str,
    gold: Any,
    *,
    timeout: float = 5.0,
    no_anchor: NoAnchorPolicy = "last_number",
    percent: PercentPolicy = "strip",
    log: LogPolicy = "natural",
    pool: WorkerPool | None = None,
    question: str | None = None,
) -> MathResult:
    """Judge a model's reply against a gold answer (a bare answer: `"\\frac{1}{2}"`, `42`).

    With `question` (the task's prompt), an unanchored answer that is an expression
    copied from the question (`\\frac{3}{4} + \\frac{1}{6}` for "What is
    $\\frac{3}{4} + \\frac{1}{6}$?") is the question restated, not an answer: it has
    no answer, though it equals the gold (a policy echoing the prompt would score).

    Raises `VerifierError` when the verdict cannot be reached: the deadline passed,
    the worker crashed, or the gold answer cannot be parsed.
    """
    conventions = Conventions(check_percent_policy(percent), check_log_policy(log))
    gold_text = _gold_text(gold)
    extraction = extract_answer(prediction, no_anchor)
    answer, anchor, skipped = extraction.answer, extraction.anchor, extraction.skipped
    if anchor == "ambiguous":
        # Different answers with no commitment to one: right only if every one is right
        # (`\boxed{0.5}` or `\boxed{\frac12}`), else no answer.
        alternatives = extraction.alternatives
        if alternatives and all(
            _fast_verdict(gold_text, alt, conventions) is True for alt in alternatives
        ):
            return MathResult(True, alternatives[-1], "fast", "boxed", skipped)
        return MathResult(False, None, "fast", "ambiguous", skipped)
    if answer is None and anchor == "none" and no_anchor != "math_verify":
        return MathResult(False, None, "fast", "none", skipped)
    if anchor == "last_number" and answer is not None and _restates(answer, question):
        return MathResult(False, None, "fast", "none", (*skipped, answer))
    if answer is not None:
        verdict = _fast_verdict(gold_text, answer, conventions)
        if verdict is not None:
            return MathResult(verdict, answer, "fast", anchor, skipped)
    _require_math_verify()
    wrap = answer is not None
    gold_mv, answer_mv = gold_text, answer if wrap else prediction
    imaginary = _imaginary(gold_mv) or (wrap and _imaginary(answer_mv))  # type: ignore[arg-type]
    if imaginary:
        gold_mv, answer_mv = _complex_form(gold_mv), _complex_form(answer_mv, last_side=wrap)  # type: ignore[arg-type]
    status, correct, matched = await _call_worker(
        pool,
        _for_math_verify(gold_mv, conventions),
        _for_math_verify(answer_mv, conventions),  # type: ignore[arg-type]
        wrap,
        timeout,
        imaginary,
    )
    if status == "gold_unparsable":
        raise VerifierError(
            f"math-verify cannot parse the gold answer {gold_text[:200]!r}",
            code="gold_unparsable",
        )
    return MathResult(bool(correct), answer if wrap else matched, "math_verify", anchor, skipped)


async def _call_worker(
    pool: WorkerPool | None,
    gold: str,
    prediction: str,
    wrap: bool,
    timeout: float,
    imaginary: bool = False,
) -> tuple[str, bool, str | None]:
    if pool is None:
        pool = math_pool()
    try:
        return await pool.call(_WORKER_CHECK, gold, prediction, wrap, imaginary, timeout=timeout)
    except WorkerError as exc:
        if exc.remote_type in ("ModuleNotFoundError", "ImportError"):
            raise MissingDependency("math-verify", "math") from exc
        raise


def math_pool() -> WorkerPool:
    """The shared math pool: like `shared_pool()`, but its workers preload math-verify
    (a 1.5 s import) so that neither the first call nor a replacement pays for it."""
    global _math_pool_instance
    pool = _math_pool_instance
    if pool is None or pool.closed:
        import atexit

        pool = _math_pool_instance = WorkerPool(preload=(_WORKER_MODULE,))
        atexit.register(pool.close)
    return pool


class MathVerifier:
    """A `Verifier` for math answers: reward 1.0 if the final answer equals `task.answer`.

    `timeout` bounds the math-verify call (the fast path needs no deadline);
    `no_anchor` is the policy for a reply without `\\boxed{}` or "answer is" (see
    `nemo_gym.verify.extract.extract_answer`); `percent` reads `6\\%` as 6 ("strip", the
    default: MATH and PRM800K graders drop the sign), 0.06 ("value") or either
    ("either"); `log` reads `\\log` as ln ("natural", the default: the competition
    convention) or base 10 ("base10"). `pool` defaults to a process-wide pool that
    preloads math-verify. Rewards: `reward` and `components["accuracy"]` are 1.0 or 0.0;
    `metadata` holds `extracted_answer` (None when the reply has no answer), `path`
    ("fast" or "math_verify"), `anchor`, and `skipped` when candidates were passed over.
    """

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        no_anchor: NoAnchorPolicy = "last_number",
        percent: PercentPolicy = "strip",
        log: LogPolicy = "natural",
        pool: WorkerPool | None = None,
    ) -> None:
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if no_anchor not in _POLICIES:
            raise ValueError(f"no_anchor must be one of {_POLICIES}, got {no_anchor!r}")
        self.timeout = float(timeout)
        self.no_anchor: NoAnchorPolicy = no_anchor
        self.percent: PercentPolicy = check_percent_policy(percent)
        self.log: LogPolicy = check_log_policy(log)
        self.pool = pool

    async def check(self, prediction: str, gold: Any) -> MathResult:
        """Judge one reply against one gold answer (see `verify_math`)."""
        return await verify_math(
            prediction,
            gold,
            timeout=self.timeout,
            no_anchor=self.no_anchor,
            percent=self.percent,
            log=self.log,
            pool=self.pool,
        )

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Score the last assistant message against `task.answer`."""
        if task.answer is None:
            raise VerifierError(f"task {task.id} has no answer to verify against")
        result = await verify_math(
            trajectory.final_text,
            task.answer,
            timeout=self.timeout,
            no_anchor=self.no_anchor,
            percent=self.percent,
            log=self.log,
            pool=self.pool,
            question=_question(task),
        )
        return result.to_rewards()

    def __repr__(self) -> str:
        return (
            f"MathVerifier(timeout={self.timeout:g}, no_anchor={self.no_anchor!r}, "
            f"percent={self.percent!r}, log={self.log!r})"
        )
