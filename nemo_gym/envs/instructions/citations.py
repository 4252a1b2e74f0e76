"""`citations`: answer from retrieved pages, citing them in the row's citation grammar.

A port of NeMo Gym's `citation_if` scorer (its gates, grammars and defaults), which
grades the citations only, never what the answer says. Cite mode, in order:

0. structure: some text and no tool call (the search is over; a call scores 0);
0b. an answer: a word character outside the citation markup (a wrapped claim counts);
1. strict form: with the well-formed spans blanked, no `citation_...` token may remain
   (raw IDs, "Sources:" trailers, a wrong grammar); tag grammars need as many opening
   and closing tags as parsed spans;
2. at least `min_valid_citations` cited IDs from `valid_id_set`;
3. no cited ID outside `valid_id_set` (the prompt's example `citation_xmpl` is never in it);
4. with `expected_ids`: each of them cited, and at most `len(expected_ids) + expected_slack`
   cited in all (citing every page to be safe scores 0).

No-cite mode: 1 when the reply has no `citation_...` token and none of the grammar's markup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.tools.declared import declared_tools
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Rewards, Task, Trajectory

__all__ = ["Citations", "citation_check", "score_citations"]

# Every `citation_...` token, whatever the row's ID scheme: a superset of each row's
# `id_regex`, so numeric-style leakage on a random-ID row is still caught.
_ATTEMPT = re.compile(r"citation_[A-Za-z0-9_:]+", re.IGNORECASE)
_DEFAULT_ID_REGEX = {
    "full_source": r"citation_[0-9]+",
    "snippet": r"citation_[0-9]+:snippet_[0-9]+",
}
# What a search tool call gets back (NeMo Gym's agent stops after one step).
TERMINAL = "No further tool results are available. Provide your final answer."


@dataclass(frozen=True)
class _Grammar:
    template: str  # "{IDS}" is the row's ID pattern; group 1 holds the ID(s)
    multi: bool = False  # a comma-separated ID list inside one span
    claim_group: int | None = None  # the wrapped claim (an empty one is not a citation)
    tags: bool = False  # `<cite` / `</cite>` counts must equal the parsed spans
    flags: int = 0


_OPEN = re.compile(r"<cite\b", re.IGNORECASE)
_CLOSE = re.compile(r"</cite\s*>", re.IGNORECASE)

# NeMo Gym's trained grammars and its two holdout ones (curly_double, angle_pipe).
GRAMMARS: dict[str, _Grammar] = {
    "cite_xml": _Grammar(r"<cite>({IDS})</cite>", multi=True, tags=True),
    # Not a markdown link [citation_1](url).
    "ascii_brackets": _Grammar(r"\[({IDS})\](?!\()"),
    "claim_wrap_xml": _Grammar(
        r'<cite index="({IDS})">(.*?)</cite>', multi=True, claim_group=2, tags=True, flags=re.S
    ),
    "fullwidth_brackets": _Grammar(r"【({IDS})】"),
    "ref_colon": _Grammar(r"\[ref:({IDS})\]"),
    "double_angle": _Grammar(r"<<({IDS})>>"),
    "web_brackets": _Grammar(r"\[web:({IDS})\]"),
    "paren_part": _Grammar(r"\(({IDS})\)"),
    "markdown_footnote": _Grammar(r"\[\^({IDS})\]"),
    "curly_double": _Grammar(r"\{\{({IDS})\}\}"),
    "angle_pipe": _Grammar(r"<ref\|({IDS})>"),
}


@lru_cache(maxsize=512)
def _pattern(grammar: str, id_regex: str) -> re.Pattern[str]:
    entry = GRAMMARS[grammar]
    ids = rf"(?:{id_regex})(?:,(?:{id_regex}))*" if entry.multi else rf"(?:{id_regex})"
    # str.replace: templates hold literal regex braces.
    return re.compile(entry.template.replace("{IDS}", ids), entry.flags)


def _blank(text: str, spans: Sequence[re.Match[str]], keep_claim: int | None) -> str:
    """`text` with each span blanked (offsets kept), except its claim group if `keep_claim`."""
    out = list(text)
    for m in spans:
        keep = (
            m.span(keep_claim) if keep_claim and m.lastindex and keep_claim <= m.lastindex else None
        )
        for i in range(m.start(), m.end()):
            if not (keep and keep[0] <= i < keep[1]):
                out[i] = " "
    return "".join(out)


def score_citations(
    text: str, tool_calls: int, check: Mapping[str, Any]
) -> tuple[float, str | None]:
    """(reward, the failed gate or None) for a reply under a row's `verifier` (see the module)."""
    grammar = GRAMMARS[check["grammar"]]
    id_regex = check["id_regex"]
    if not text.strip() or tool_calls:
        return 0.0, "structural"
    spans = [
        m
        for m in _pattern(check["grammar"], id_regex).finditer(text)
        if grammar.claim_group is None or (m.group(grammar.claim_group) or "").strip()
    ]
    cited = list(dict.fromkeys(i for m in spans for i in m.group(1).split(",")))
    valid = set(check["valid_id_set"])
    valid_cited = [i for i in cited if i in valid]
    if check["mode"] == "no_cite":
        markup = bool(spans) or (grammar.tags and bool(_OPEN.search(text)))
        return (0.0, "no_cite") if _ATTEMPT.search(text) or markup else (1.0, None)
    if not re.search(r"\w", _blank(text, spans, grammar.claim_group)):
        return 0.0, "no_answer"
    balanced = not grammar.tags or (
        len(_OPEN.findall(text)) == len(spans) == len(_CLOSE.findall(text))
    )
    if _ATTEMPT.search(_blank(text, spans, None)) or not balanced:
        return 0.0, "malformed_attempt"
    if len(valid_cited) < check["min_valid_citations"]:
        return 0.0, "must_cite"
    if len(valid_cited) < len(cited):
        return 0.0, "no_hallucination"
    expected = check["expected_ids"]
    if expected is not None:
        if set(expected) - set(valid_cited):
            return 0.0, "correctness_missed_gold"
        if len(valid_cited) > len(set(expected)) + check["expected_slack"]:
            return 0.0, "correctness_over_cap"
    return 1.0, None


async def verify_citations(task: Task, trajectory: Trajectory) -> Rewards:
    """The reply's text (its assistant messages joined) and tool calls, scored by gates."""
    added = [m for m in trajectory.messages[len(task.messages) :] if m.role == "assistant"]
    text = "\n".join(m.content for m in added if m.content).strip()
    calls = sum(len(m.tool_calls) for m in added)
    reward, gate = score_citations(text, calls, task.metadata["verifier"])
    return Rewards(reward=reward, metadata={"gate_failed": gate})


def citation_check(row: Row) -> dict[str, Any]:
    """The row's `verifier` object, checked and with NeMo Gym's defaults filled in."""
    given = row.require("verifier", dict)
    mode = given.get("mode", "cite")
    if mode not in ("cite", "no_cite"):
        raise row.bad("verifier", f"mode must be 'cite' or 'no_cite', not {mode!r}")
    grammar = given.get("grammar")
    if grammar not in GRAMMARS:
        raise row.bad("verifier", f"grammar {grammar!r} is not one of {sorted(GRAMMARS)}")
    kind = given.get("id_kind", "full_source")
    if kind not in _DEFAULT_ID_REGEX:
        raise row.bad("verifier", f"id_kind must be 'full_source' or 'snippet', not {kind!r}")
    id_regex = given.get("id_regex") or _DEFAULT_ID_REGEX[kind]
    try:
        re.compile(id_regex)
    except (re.error, TypeError) as e:
        raise row.bad("verifier", f"id_regex {id_regex!r} is not a regular expression: {e}") from e
    valid = given.get("valid_id_set") or []
    expected = given.get("expected_ids")
    for key, ids in (("valid_id_set", valid), ("expected_ids", expected or [])):
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise row.bad("verifier", f"{key} must be a list of strings")
    numbers = {}
    for key, default in (("expected_slack", 1), ("min_valid_citations", 1)):
        value = given.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise row.bad("verifier", f"{key} must be a non-negative integer, not {value!r}")
        numbers[key] = value
    return {
        "mode": mode,
        "grammar": grammar,
        "id_regex": id_regex,
        "valid_id_set": valid,
        "expected_ids": expected,
        **numbers,
    }


def _cite(check: Mapping[str, Any], ids: Sequence[str]) -> str:
    """`ids` written in the row's grammar."""
    forms = {
        "cite_xml": "<cite>{}</cite>",
        "ascii_brackets": "[{}]",
        "claim_wrap_xml": '<cite index="{}">the retrieved page says so</cite>',
        "fullwidth_brackets": "【{}】",
        "ref_colon": "[ref:{}]",
        "double_angle": "<<{}>>",
        "web_brackets": "[web:{}]",
        "paren_part": "({})",
        "markdown_footnote": "[^{}]",
        "curly_double": "{{{{{}}}}}",
        "angle_pipe": "<ref|{}>",
    }
    return " ".join(forms[check["grammar"]].format(i) for i in ids)


class Citations(DatasetEnv):
    """Answer after a finished web search, citing the pages in the row's grammar
    (`score_citations`: the citations' form and IDs; the answer's content is not graded).

    Rows are NeMo Gym's `citation_if` layout: `responses_create_params` (the question and
    the search calls already made, with their results) and `verifier` (`mode`, `grammar`,
    `id_regex`, `valid_id_set`, `expected_ids`, `expected_slack`, `min_valid_citations`).
    A search call in the reply gets "no further results" and scores 0. Ships 4 questions
    written by us.
    """

    name = "citations"
    version = "1"
    domain = "instructions"
    verification = "gates on the citations: form in the row's grammar, IDs retrieved, gold cited"
    source = "4 questions written by us; NeMo Gym's citation_if layout"
    license = "Apache-2.0"
    sample = "instructions/data/citations.jsonl"

    def __init__(self, *, path: str | None = None, tasks: Sequence[Task] | None = None) -> None:
        super().__init__(verify_citations, path=path, tasks=tasks, harness=ToolLoop(max_turns=1))

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, tools = prompt_of(row)
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            metadata={"tools": tools, "verifier": citation_check(row)},
        )

    async def open(self, task: Task) -> BasicEpisode:
        specs = task.metadata.get("tools") or []
        return BasicEpisode(declared_tools(specs, {s["name"]: TERMINAL for s in specs}))

    def oracle(self, task: Task) -> Turns:
        check = task.metadata["verifier"]
        if check["mode"] == "no_cite":
            return [Message.assistant("The retrieved pages do not say.")]
        ids = check["expected_ids"] or check["valid_id_set"][: max(1, check["min_valid_citations"])]
        return [Message.assistant(f"From the retrieved pages: yes {_cite(check, ids)}.")]

    def wrong(self, task: Task) -> Turns:
        check = task.metadata["verifier"]
        if check["mode"] == "no_cite":
            ids = check["valid_id_set"][:1] or ["citation_1"]
            return [Message.assistant(f"From the retrieved pages: yes {_cite(check, ids)}.")]
        ids = check["expected_ids"] or check["valid_id_set"][:1] or ["citation_1"]
        # The right pages, but as a trailer outside the grammar: a malformed attempt.
        return [Message.assistant(f"From the retrieved pages: yes. Sources: {', '.join(ids)}")]
