"""`litmus`: a question with one known value, the reply's answer read in the asked form.

NeMo Gym's `litmus_agent`. Each row names how its answer is written and compared:
`output_regex` (one capture group) or `answer_format` (NeMo Gym's `fmt_00`..`fmt_30`
forms: `((x))`, `\\boxed{x}`, `<final_answer>x</final_answer>`, `**Answer: x**`, ...),
`answer_type` (`float`, `bool` or `string`) and optionally `match`, a comparison rule
with its parameters (`exact`: equal once rounded; `isclose`; `abs_window`/`rel_window`
with `abs_tol`/`rel_tol`; `bool_eq`; `string_eq`: case and runs of spaces ignored).
The reply must commit to one answer: every capture of the form that reads as a value must
read as the same one; two different values (a reply listing candidates, or correcting
itself) are no answer, where NeMo Gym scores the last. Legacy rows with a `property_type`
and no `answer_type` read numbers and compare counts, fragments and booleans as rounded
integers, as NeMo Gym does. A yes/no
answer is a yes/no word or a number (0 is no); "nan" and "inf" are no answer (NeMo Gym
reads them as yes).

A row NeMo Gym would fail on at verify time (an unknown type, form or rule, a regex
without exactly one group, a gold value its rule cannot read, a rule parameter it would
silently ignore) is a load error here naming the row and field. Rows that offer the
model NeMo Gym's sandboxed `stateful_python_code_exec` tool are refused: that tool is
not ported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import SingleTurn
from nemo_gym.protocols import VerifyFunction
from nemo_gym.records import Message, Rewards, Task, Trajectory

__all__ = ["FORMATS", "RULES", "Litmus", "extract", "litmus_check", "score"]

FLOAT, BOOL, STRING = "float", "bool", "string"
_TYPES = (FLOAT, BOOL, STRING)
_LEGACY_TYPES = {"float": FLOAT, "count": FLOAT, "fragment": FLOAT, "bool": BOOL}
_LEGACY_TYPES["presence"] = BOOL
_LEGACY_DISCRETE = {"count", "fragment", "bool", "presence"}
_TRUE = {"1", "1.0", "true", "yes", "present", "t", "y"}
_FALSE = {"0", "0.0", "false", "no", "absent", "f", "n"}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")

# NeMo Gym's answer forms, each as (regex, how an answer is written in it).
FORMATS: Mapping[str, tuple[re.Pattern[str], str]] = {
    "fmt_00": (re.compile(r"\(\((.*?)\)\)", re.S), "(({}))"),
    "fmt_01": (re.compile(r"\(Answer:\s*(.+?)\)", re.S), "(Answer: {})"),
    "fmt_02": (re.compile(r"Final answer:\s*\((.+?)\)", re.S), "Final answer: ({})"),
    "fmt_03": (re.compile(r"Answer is\s*\[(.+?)\]", re.S), "Answer is [{}]"),
    "fmt_04": (re.compile(r"\[Answer:\s*(.+?)\]", re.S), "[Answer: {}]"),
    "fmt_05": (re.compile(r"\[\[(.+?)\]\]", re.S), "[[{}]]"),
    "fmt_06": (re.compile(r"Correct Answer:\s*\[(.+?)\]", re.S), "Correct Answer: [{}]"),
    "fmt_07": (re.compile(r"\\boxed\{(.+?)\}", re.S), "\\boxed{{{}}}"),
    "fmt_08": (re.compile(r"\\boxed\{(.+?)\}", re.S), "\\boxed{{{}}}"),
    "fmt_09": (re.compile(r"\{\{(.+?)\}\}", re.S), "{{{{{}}}}}"),
    "fmt_10": (re.compile(r"Answer Value:\s*\{(.+?)\}", re.S), "Answer Value: {{{}}}"),
    "fmt_11": (re.compile(r"<<(.+?)>>", re.S), "<<{}>>"),
    "fmt_12": (re.compile(r"<<(.+?)>>", re.S), "<<{}>>"),
    "fmt_13": (re.compile(r"<(.+?)>", re.S), "<{}>"),
    "fmt_14": (re.compile(r"<Answer:\s*(.+?)>", re.S), "<Answer: {}>"),
    "fmt_15": (
        re.compile(r"<final_answer>\s*(.+?)\s*</final_answer>", re.S),
        "<final_answer>{}</final_answer>",
    ),
    "fmt_16": (re.compile(r"Final Answer:\s*\|\|(.+?)\|\|", re.S), "Final Answer: ||{}||"),
    "fmt_17": (re.compile(r"The answer is:\s*\|(.+?)\|", re.S), "The answer is: |{}|"),
    "fmt_18": (re.compile(r"\*\*Answer:\s*(.+?)\*\*", re.S), "**Answer: {}**"),
    "fmt_19": (re.compile(r"\*\*Final answer is:\s*(.+?)\*\*", re.S), "**Final answer is: {}**"),
    "fmt_20": (re.compile(r"Answer:\s*\*(.+?)\*", re.S), "Answer: *{}*"),
    "fmt_21": (re.compile(r"## Answer:\s*(.+?)\s*##", re.S), "## Answer: {} ##"),
    "fmt_22": (re.compile(r"ANSWER IS\s*(.+)"), "ANSWER IS {}"),
    "fmt_23": (re.compile(r"Response:\s*(.+)"), "Response: {}"),
    "fmt_24": (re.compile(r"Final Answer\s*->\s*(.+)"), "Final Answer -> {}"),
    "fmt_25": (re.compile(r"Final value is:\s*(.+)"), "Final value is: {}"),
    "fmt_26": (re.compile(r"Correct Answer >>\s*(.+)"), "Correct Answer >> {}"),
    "fmt_27": (re.compile(r"Answer Value:\s*(.+)"), "Answer Value: {}"),
    "fmt_28": (re.compile(r"Final Answer\s*=\s*(.+)"), "Final Answer = {}"),
    "fmt_29": (re.compile(r"Correct answer is\s*(.+)"), "Correct answer is {}"),
    "fmt_30": (re.compile(r"Final Answer:\s*(.+)"), "Final Answer: {}"),
}


def _bool(text: str) -> float | None:
    token = text.strip().lower()
    if token in _TRUE:
        return 1.0
    if token in _FALSE:
        return 0.0
    number = _number(token)
    # NeMo Gym reads any number but 0 as yes, "nan" and "inf" too: those are no answer.
    if number is None or not math.isfinite(number):
        return None
    return float(number != 0.0)


def _number(text: str) -> float | None:
    """The capture as a number, else the one number it names. Two different numbers are a
    hedge, no answer (NeMo Gym takes the last: "((4 or 3))" is 3)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    found = {float(n) for n in _NUMBER.findall(text)}
    return found.pop() if len(found) == 1 else None


def _normal(value: object) -> str:
    return re.sub(r"\s+", " ", str(value).strip().lower())


# Each rule: (its parameters, predicted x expected x parameters -> reward).
RULES: Mapping[str, tuple[frozenset[str], Any]] = {
    "exact": (frozenset(), lambda p, e, k: float(round(float(p)) == round(float(e)))),
    "isclose": (
        frozenset({"rel_tol", "abs_tol"}),
        lambda p, e, k: float(
            math.isclose(float(p), float(e), rel_tol=k["rel_tol"], abs_tol=k["abs_tol"])
        ),
    ),
    "abs_window": (
        frozenset({"abs_tol"}),
        lambda p, e, k: float(abs(float(p) - float(e)) <= float(k.get("abs_tol", 0.0))),
    ),
    "rel_window": (
        frozenset({"rel_tol"}),
        lambda p, e, k: float(
            abs(float(p) - float(e)) <= abs(float(k.get("rel_tol", 0.0)) * float(e))
        ),
    ),
    "bool_eq": (frozenset(), lambda p, e, k: float(float(p) == _bool(str(e)))),
    "string_eq": (frozenset(), lambda p, e, k: float(_normal(p) == _normal(e))),
}
_DEFAULT_RULE = {FLOAT: "isclose", BOOL: "bool_eq", STRING: "string_eq"}


def litmus_check(row: Row) -> dict[str, Any]:
    """What `score` needs of a NeMo Gym `litmus_agent` row, checked: `expected`, `parse`
    (how the capture is read), `type` (as NeMo Gym reports it), `rule`, `params`, and
    `regex` or `format`."""
    tools = (row.get("responses_create_params") or {}).get("tools") or []
    if tools:
        names = sorted({str(t.get("name")) for t in tools if isinstance(t, dict)})
        raise row.bad(
            "responses_create_params.tools",
            f"offers {names}: NeMo Gym's sandboxed code tool is not ported; "
            "only rows without tools (method 'direct') run here",
        )
    expected = row.require("expected_answer", str, int, float)
    answer_type, legacy = row.get("answer_type"), row.get("property_type")
    if answer_type is not None:
        if answer_type not in _TYPES:
            raise row.bad("answer_type", f"is {answer_type!r}; one of {', '.join(_TYPES)}")
        kind = parse = answer_type
    elif legacy in _LEGACY_TYPES:
        kind = _LEGACY_TYPES[legacy]
        parse = FLOAT if legacy in _LEGACY_DISCRETE else kind
    else:
        raise row.bad(
            "answer_type", f"is missing and property_type {legacy!r} names no answer type"
        )
    match = row.data.get("match")
    if match is None and answer_type is None and legacy in _LEGACY_DISCRETE:
        match = {"rule": "exact"}
    # An empty `match` is NeMo Gym's "no override": the type's own rule.
    if match and (not isinstance(match, dict) or not match.get("rule")):
        raise row.bad("match", f"is {match!r}; an object with a 'rule'")
    rule = match["rule"] if match else _DEFAULT_RULE[kind]
    if rule not in RULES:
        raise row.bad("match", f"names rule {rule!r}; one of {', '.join(RULES)}")
    params = {k: v for k, v in (match or {}).items() if k != "rule"}
    # NeMo Gym ignores a parameter its rule does not take: a misspelt tolerance would be
    # a silent exact comparison.
    unknown = sorted(set(params) - RULES[rule][0])
    if unknown:
        raise row.bad("match", f"gives {unknown}, which rule {rule!r} does not take")
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise row.bad(f"match.{key}", f"is {value!r}; a number")
    if (
        rule in ("exact", "isclose", "abs_window", "rel_window")
        and _number_or_none(expected) is None
    ):
        raise row.bad("expected_answer", f"is {expected!r}; rule {rule!r} compares numbers")
    if rule == "bool_eq" and _bool(str(expected)) is None:
        raise row.bad("expected_answer", f"is {expected!r}; rule 'bool_eq' reads a yes or no")
    found: dict[str, Any] = {
        "expected": expected,
        "type": kind,
        "parse": parse,
        "rule": rule,
        "params": params,
    }
    regex = row.get("output_regex")
    if regex is not None:
        try:
            groups = re.compile(regex, re.S).groups
        except (re.error, TypeError) as exc:
            raise row.bad("output_regex", f"does not compile: {exc}") from None
        if groups != 1:
            raise row.bad("output_regex", f"has {groups} capture groups; exactly one")
        found["regex"] = regex
        return found
    form = row.get("answer_format") or ("fmt_07" if row.get("use_box_format") else "fmt_00")
    if form not in FORMATS:
        raise row.bad("answer_format", f"is {form!r}; one of fmt_00 to fmt_30")
    found["format"] = form
    return found


def _number_or_none(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def extract(text: str, check: Mapping[str, Any]) -> float | str | None:
    """The reply's answer: the one value the captures of the row's regex read as, or None."""
    pattern = re.compile(check["regex"], re.S) if "regex" in check else FORMATS[check["format"]][0]
    values: dict[Any, float | str] = {}
    for found in pattern.findall(text.strip()):
        if isinstance(found, tuple):  # a format with nested groups: the first non-empty one
            found = next((group for group in found if group), "")
        raw = found.strip()
        value: float | str | None
        if check["parse"] == STRING:
            value = raw
        else:
            value = _bool(raw) if check["parse"] == BOOL else _number(raw)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            values[_normal(value) if isinstance(value, str) else value] = value
    # Answers that differ are a hedge (a list of candidates), no answer; NeMo Gym scores the
    # last, so listing guesses with the gold last would earn the reward. The same answer
    # repeated, or a template echoed beside it ("\boxed{...}"), is one answer.
    return next(iter(values.values())) if len(values) == 1 else None


def score(
    predicted: float | str | None,
    check: Mapping[str, Any],
    *,
    rel_tol: float = 1e-6,
    abs_tol: float = 1e-6,
) -> float:
    """1.0 when the rule finds `predicted` equal to the row's value, else 0.0."""
    if predicted is None or (isinstance(predicted, float) and math.isnan(predicted)):
        return 0.0
    params = {"rel_tol": rel_tol, "abs_tol": abs_tol, **check["params"]}
    try:
        return float(RULES[check["rule"]][1](predicted, check["expected"], params))
    except (TypeError, ValueError, OverflowError):
        # A string capture under a numeric rule (an output_regex row typed `string`
        # with rule `exact`): NeMo Gym's server errors; the reply gave no number.
        return 0.0


def _verifier(rel_tol: float, abs_tol: float) -> VerifyFunction:
    async def verify_litmus(task: Task, trajectory: Trajectory) -> Rewards:
        check = task.metadata["litmus"]
        # NeMo Gym reads every assistant message of the response (not the prompt's),
        # thinking included.
        reply = trajectory.messages[len(task.messages) :]
        texts = [m.content for m in reply if m.role == "assistant" and m.content]
        predicted = extract("\n".join(texts), check)
        reward = score(predicted, check, rel_tol=rel_tol, abs_tol=abs_tol)
        return Rewards(
            reward=reward,
            components={"answer_found": float(predicted is not None)},
            metadata={"predicted": predicted, "type": check["type"], "rule": check["rule"]},
        )

    return verify_litmus


def _template(check: Mapping[str, Any]) -> str | None:
    """How an answer is written for the row: its format's, or for a free regex the first of
    the known forms (or the bare value) that the regex reads back whole."""
    if "format" in check:
        return FORMATS[check["format"]][1]
    probe = "7.25"
    for form in ("{}", *(template for _, template in FORMATS.values())):
        if extract(form.format(probe), {**check, "parse": STRING}) == probe:
            return form
    return None


def _written(value: Any, check: Mapping[str, Any]) -> str:
    template = _template(check)
    return (template or "{}").format(value)


class Litmus(DatasetEnv):
    """One known value per question, read from the reply in the asked form (see the
    module doc). Rows are NeMo Gym's `litmus_agent` layout; ships 4 rows written by us.

    `rel_tol` and `abs_tol` are the `isclose` rule's tolerances (NeMo Gym's
    `float_rel_tol`/`float_abs_tol`, 1e-6 each); a row's `match` overrides them."""

    name = "litmus"
    version = "1"
    domain = "knowledge"
    verification = "the one answer in the row's form, compared by the row's rule"
    source = "4 chemistry rows written by us; NeMo Gym's litmus_agent layout"
    license = "Apache-2.0"
    sample = "knowledge/data/litmus.jsonl"

    def __init__(
        self,
        *,
        path: str | None = None,
        tasks: Sequence[Task] | None = None,
        rel_tol: float = 1e-6,
        abs_tol: float = 1e-6,
    ) -> None:
        super().__init__(_verifier(rel_tol, abs_tol), path=path, tasks=tasks, harness=SingleTurn())
        self.rel_tol, self.abs_tol = rel_tol, abs_tol

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        check = litmus_check(row)
        messages, _ = prompt_of(row)
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            answer=str(check["expected"]),
            metadata={"litmus": check},
        )

    def oracle(self, task: Task) -> Turns | None:
        check = task.metadata["litmus"]
        if _template(check) is None:
            return None  # a regex none of the known forms satisfies
        return [Message.assistant(f"Reasoning done.\n{_written(check['expected'], check)}")]

    def wrong(self, task: Task) -> Turns:
        check = task.metadata["litmus"]
        value: Any
        if check["rule"] == "bool_eq" or check["parse"] == BOOL:
            value = "no" if _bool(str(check["expected"])) else "yes"
        elif check["rule"] == "string_eq":
            value = f"not {check['expected']}"
        else:
            value = f"{float(check['expected']) * 2 + 7:g}"
        return [Message.assistant(_written(value, check))]
