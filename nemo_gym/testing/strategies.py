"""Hypothesis strategies for property-testing verifiers: tasks, trajectories, answers.

`answer_formats(answer)` draws the ways models actually write a final answer
(``\\boxed{42}``, ``The answer is 42.``, ``**Answer:** 42``, ``$42$``, a GSM8K
``#### 42``, reasoning before it, ...), so a verifier can be checked to accept them all:

```python
from hypothesis import given
from nemo_gym.testing import strategies as gst

@given(gst.answer_formats("42"))
async def test_accepts_every_format(text): ...
```

Needs ``hypothesis`` (a dev dependency), imported when this module is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nemo_gym.errors import require
from nemo_gym.records import Message, Task, ToolCall, Trajectory

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

st = require("hypothesis.strategies", "dev")

__all__ = [
    "ANSWER_TEMPLATES",
    "MC_TEMPLATES",
    "PLACEHOLDER",
    "answer_formats",
    "mc_answer_formats",
    "reasoning",
    "tasks",
    "trajectories",
]

PLACEHOLDER = "§"

# How models write a final answer, from math/QA evaluations: each template holds the
# answer once, as the last answer-like thing in the text. `§` stands for the answer.
ANSWER_TEMPLATES: tuple[str, ...] = (
    "§",
    "§.",
    "\\boxed{§}",
    "$\\boxed{§}$",
    "\\[\n\\boxed{§}\n\\]",
    "The answer is §.",
    "The answer is: §",
    "The final answer is §.",
    "So the final answer is \\boxed{§}.",
    "Therefore, the answer is $§$.",
    "Answer: §",
    "**Answer:** §",
    "**Answer: §**",
    "**Final Answer**\n\n\\[\n\\boxed{§}\n\\]",
    "### Final Answer\n§",
    "$§$",
    "**§**",
    "#### §",
    "<answer>§</answer>",
    "Final Answer: The final answer is $§$. I hope it is correct.",
)

# How models name a multiple-choice option. `§` is the letter.
MC_TEMPLATES: tuple[str, ...] = (
    "§",
    "§.",
    "(§)",
    "§)",
    "Answer: §",
    "Answer: (§)",
    "**Answer:** §",
    "**Answer: §**",
    "The answer is §.",
    "The answer is (§).",
    "The correct answer is §.",
    "The correct option is (§).",
    "\\boxed{§}",
    "$\\boxed{§}$",
    "**§**",
    "Final Answer: §",
    "ANSWER: §",
)

# Reasoning a model writes before its answer. Free of digits, of answer markers and of
# one-letter capitals (option letters), so the answer stays the only answer-like thing.
_REASONING_SENTENCES: tuple[str, ...] = (
    "Let me think step by step.",
    "First, restate the problem in other words.",
    "We need to be careful with the signs here.",
    "Simplifying the expression gives the result below.",
    "Checking the work once more confirms it.",
    "Okay, so the question asks for a single value.",
    "Hmm, let me reconsider that step.",
    "Putting everything together:",
)

# Words for free-form reasoning sentences (drawing from a vocabulary is far cheaper than
# drawing arbitrary text, and reads like what models write).
_VOCABULARY: tuple[str, ...] = tuple(
    """we the so then thus now note that this term both sides equation value sum product
    simplify substitute compute check carefully gives yields equals becomes remaining
    factor expand divide multiply add subtract cancel result expression step case hence
    since because clearly recall formula known assume suppose wait actually right okay
    évaluons ensuite donc étape schritt also""".split()
)


def reasoning() -> SearchStrategy[str]:
    """Reasoning text with no digits, answer markers or option letters (may be empty)."""
    free = st.lists(st.sampled_from(_VOCABULARY), min_size=1, max_size=10).map(
        lambda words: " ".join(words).capitalize() + "."
    )
    sentence = st.one_of(st.sampled_from(_REASONING_SENTENCES), free)
    separator = st.sampled_from([" ", "\n", "\n\n"])
    return st.one_of(
        st.just(""),
        st.lists(st.tuples(sentence, separator), min_size=1, max_size=4).map(
            lambda parts: "".join(s + sep for s, sep in parts)
        ),
    )


def _render(templates: tuple[str, ...], value: str) -> SearchStrategy[str]:
    # str.replace, not str.format: the answer may itself contain braces (\frac{1}{2}).
    body = st.sampled_from(templates).map(lambda t: t.replace(PLACEHOLDER, value))
    trailing = st.sampled_from(["", "", "\n", " ", "\n\n"])
    return st.tuples(reasoning(), body, trailing).map(lambda parts: "".join(parts))


def answer_formats(answer: Any) -> SearchStrategy[str]:
    """Texts that state `answer` the way models write it, with optional reasoning first.

    The answer appears verbatim (``str(answer)``) exactly as the final answer; the
    reasoning before it holds no digits, so it never competes with a numeric answer.
    """
    value = str(answer)
    if not value.strip():
        raise ValueError("answer_formats needs a non-empty answer")
    return _render(ANSWER_TEMPLATES, value)


def mc_answer_formats(letter: str) -> SearchStrategy[str]:
    """Texts that choose option `letter` (``"A"``..``"Z"``) the way models write it."""
    if not (isinstance(letter, str) and len(letter) == 1 and "A" <= letter <= "Z"):
        raise ValueError(f"mc_answer_formats needs one capital letter A-Z, got {letter!r}")
    return _render(MC_TEMPLATES, letter)


def _text(max_size: int = 80) -> SearchStrategy[str]:
    return st.text(st.characters(blacklist_categories=("Cs",)), max_size=max_size)


def tasks(
    *,
    answers: SearchStrategy[Any] | None = None,
    prompts: SearchStrategy[str] | None = None,
    with_system: bool | None = None,
) -> SearchStrategy[Task]:
    """Tasks with arbitrary prompts and answers (integers or short strings by default).

    `with_system=None` draws tasks with and without a system message.
    """
    answer_strategy = (
        answers
        if answers is not None
        else st.one_of(st.integers(-(10**6), 10**6).map(str), _text(20), st.none())
    )
    prompt_strategy = prompts if prompts is not None else _text().filter(bool)
    system = st.booleans() if with_system is None else st.just(with_system)

    def build(prompt: str, answer: Any, has_system: bool, system_text: str) -> Task:
        if has_system:
            messages = (Message.system(system_text), Message.user(prompt))
            return Task(messages=messages, answer=answer)
        return Task(prompt=prompt, answer=answer)

    return st.builds(build, prompt_strategy, answer_strategy, system, _text(40))


def _tool_turn(index: int) -> SearchStrategy[list[Message]]:
    """An assistant tool call and the tool's reply."""
    name = st.sampled_from(["search", "calculator", "lookup", "run_code"])
    arguments = st.dictionaries(
        st.sampled_from(["query", "x", "code", "id"]),
        st.one_of(st.integers(-100, 100), _text(20)),
        max_size=2,
    )

    def build(tool: str, args: dict[str, Any], output: str) -> list[Message]:
        import json

        call = ToolCall(id=f"call_{index}", name=tool, arguments=json.dumps(args))
        return [
            Message.assistant(None, tool_calls=(call,)),
            Message.tool(output, tool_call_id=call.id, name=tool),
        ]

    return st.builds(build, name, arguments, _text(40))


def trajectories(
    task: Task | None = None,
    *,
    responses: SearchStrategy[str] | None = None,
    max_tool_turns: int = 2,
) -> SearchStrategy[Trajectory]:
    """Trajectories: the task's messages, up to `max_tool_turns` tool turns, a reply.

    The final message is always an assistant reply drawn from `responses` (arbitrary
    text by default), so `trajectory.final_text` is that reply.
    """
    task_strategy = st.just(task) if task is not None else tasks()
    response_strategy = responses if responses is not None else _text(200)

    @st.composite
    def build(draw: Any) -> Trajectory:
        drawn_task: Task = draw(task_strategy)
        messages = list(drawn_task.messages)
        for index in range(draw(st.integers(0, max_tool_turns))):
            messages.extend(draw(_tool_turn(index)))
        messages.append(Message.assistant(draw(response_strategy)))
        return Trajectory(messages=messages)

    return build()
