"""Multi-agent harness patterns as LangGraph graphs: reflection, orchestrator with
sub-agents, parallel thinking, ReWOO.

Each pattern is a graph builder (`reflection_graph(llm, tools, ...)`, ...: fork it,
it is a plain LangGraph `StateGraph`) and a harness over it (`Reflection(...)`, ...;
registered as `reflection`, `orchestrator`, `parallel_thinking`, `rewoo`). Every model
call goes through the runner's recording model and names its agent
(`ModelRequest.agent`): each agent's calls continue one conversation, so
`trajectory.token_traces()` gives one exact token sequence per agent, ready for a
trainer. The trajectory's messages are the task's, then the main agent's conversation,
ending with the final answer (reflection: the actor's drafts and the critiques it was
shown; orchestrator: its delegations and their results; parallel thinking and ReWOO:
the final answer alone).

| pattern | agents |
|---|---|
| `Reflection` | `actor` (drafts, revises), `critic` (reviews each draft) |
| `Orchestrator` | `orchestrator` (delegates through its `delegate` tool), `worker/0`, ... |
| `ParallelThinking` | `thinker/0` ... `thinker/{n-1}` (concurrent), `aggregator` |
| `ReWOO` | `planner` (plans every tool call up front), `solver` (answers from the evidence) |

Needs the `langgraph` extra.
"""

from __future__ import annotations

import asyncio
import json
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypedDict

from nemo_gym.errors import MissingDependency
from nemo_gym.interop.langgraph import ChatNemoGym, LangGraphAgent, ToolRun, from_langchain
from nemo_gym.records import Sampling, ToolCall, ToolSpec
from nemo_gym.tools import Tool

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.tools import BaseTool
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.types import Send
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependency("langgraph", "langgraph") from exc

__all__ = [
    "Orchestrator",
    "ParallelThinking",
    "PlanStep",
    "ReWOO",
    "Reflection",
    "orchestrator_graph",
    "parallel_thinking_graph",
    "parse_plan",
    "reflection_graph",
    "rewoo_graph",
]

CRITIC_PROMPT = (
    "You review answers. Point out every error or gap in the answer to the task, "
    "briefly. If the answer is correct and complete, reply with exactly {approve}."
)
FEEDBACK = "A reviewer's feedback on your answer:\n\n{critique}\n\nRevise your answer."
WORKER_PROMPT = (
    "You are a sub-agent. Carry out the task you are given, using the tools if they "
    "help, and reply with the result alone."
)
DELEGATE = ToolSpec(
    name="delegate",
    description=(
        "Hand a self-contained sub-task to a sub-agent that has the environment's tools; "
        "returns its result. Several delegate calls in one turn run in parallel."
    ),
    parameters={
        "type": "object",
        "properties": {"task": {"type": "string", "description": "the sub-task, in full"}},
        "required": ["task"],
    },
)
THINKER_HINT = "You are thinker {number} of {n}: reason independently, then answer."
AGGREGATOR_PROMPT = (
    "Several independent attempts at the same task follow. Compare them, settle where "
    "they disagree, and give the single best final answer."
)
PLANNER_PROMPT = """\
Make a plan to solve the task with the tools below, before any tool runs. For each \
step write one line of reasoning, then the tool call whose result is stored as \
evidence #E1, #E2, ...:

Plan: <reasoning>
#E1 = tool_name[{{"argument": "value"}}]
Plan: <reasoning, may use #E1>
#E2 = tool_name[{{"argument": "#E1"}}]

Arguments are a JSON object; a later step may refer to earlier evidence as #En \
inside a string. Write the plan only, not the answer.

Tools:
{tools}"""
SOLVER_PROMPT = (
    "Solve the task. A plan was made and its tool calls were run: use their results "
    "(the evidence) and answer the task directly."
)


# -- shared pieces --------------------------------------------------------------------


def _task_text(messages: Sequence[BaseMessage]) -> str:
    return "\n\n".join(
        from_langchain(m).content or "" for m in messages if isinstance(m, HumanMessage)
    )


async def _react(
    llm: ChatNemoGym,
    conversation: list[BaseMessage],
    *,
    agent: str,
    tools: Sequence[BaseTool] | Sequence[ToolSpec] = (),
    table: dict[str, Tool] | None = None,
    max_turns: int = 10,
) -> list[BaseMessage]:
    """One agent's tool loop; returns the messages it added (replies and tool results)."""
    bound = llm.bind_tools(list(tools)).bind(agent=agent) if tools else llm.bind(agent=agent)
    run: ToolRun = llm.tool_run
    added: list[BaseMessage] = []
    for _ in range(max_turns):
        reply = await bound.ainvoke(conversation + added)
        added.append(reply)
        calls = from_langchain(reply).tool_calls
        if not calls:
            break
        results = await asyncio.gather(*(run.run(call, table) for call in calls))
        added.extend(
            ToolMessage(content=r.output, tool_call_id=r.call_id, name=r.name) for r in results
        )
    return added


def _answer(messages: Sequence[BaseMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return from_langchain(message).content or ""
    return ""


def _with_hint(messages: Sequence[BaseMessage], hint: str) -> list[BaseMessage]:
    """`messages` with `hint` added to their system prompt (or as one)."""
    out = list(messages)
    if out and isinstance(out[0], SystemMessage):
        out[0] = SystemMessage(content=f"{from_langchain(out[0]).content}\n\n{hint}")
    else:
        out.insert(0, SystemMessage(content=hint))
    return out


class _Pattern(LangGraphAgent):
    """A LangGraphAgent whose graph is one of this module's builders."""

    def __init__(
        self,
        *,
        system_prompt: str | None,
        sampling: Sampling | None,
        recursion_limit: int,
        tool_timeout: float | None,
        tool_errors: Literal["model", "fail"],
    ) -> None:
        super().__init__(
            graph=self.build_graph,
            system_prompt=system_prompt,
            sampling=sampling,
            recursion_limit=recursion_limit,
            tool_timeout=tool_timeout,
            tool_errors=tool_errors,
        )


# -- reflection -----------------------------------------------------------------------


class ReflectionState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    critic: list[BaseMessage]
    rounds: int
    approved: bool


def reflection_graph(
    llm: ChatNemoGym,
    tools: list[BaseTool],
    *,
    max_rounds: int = 2,
    approve: str = "APPROVED",
    critic_prompt: str = CRITIC_PROMPT,
    max_turns: int = 10,
) -> Any:
    """Actor drafts (with the tools), critic reviews, actor revises; `max_rounds` reviews.

    Stops early when a review contains `approve`. The critic keeps one conversation
    (each later draft is a new user turn), and so does the actor (each review is shown
    to it as a user turn), so both agents' token sequences continue exactly.
    """

    async def generate(state: ReflectionState) -> dict[str, Any]:
        added = await _react(
            llm, state["messages"], agent="actor", tools=tools, max_turns=max_turns
        )
        return {"messages": added}

    async def reflect(state: ReflectionState) -> dict[str, Any]:
        draft = _answer(state["messages"])
        critic = list(state.get("critic") or [])
        if not critic:
            critic = [
                SystemMessage(content=critic_prompt.format(approve=approve)),
                HumanMessage(content=f"Task:\n{_task_text(state['messages'])}\n\nAnswer:\n{draft}"),
            ]
        else:
            critic.append(HumanMessage(content=f"Revised answer:\n{draft}"))
        review = await llm.bind(agent="critic").ainvoke(critic)
        critique = from_langchain(review).content or ""
        critic.append(review)
        approved = approve in critique
        update: dict[str, Any] = {
            "critic": critic,
            "rounds": state.get("rounds", 0) + 1,
            "approved": approved,
        }
        if not approved:
            update["messages"] = [HumanMessage(content=FEEDBACK.format(critique=critique))]
        return update

    def after_generate(state: ReflectionState) -> str:
        return "reflect" if state.get("rounds", 0) < max_rounds else END

    def after_reflect(state: ReflectionState) -> str:
        return END if state["approved"] else "generate"

    graph = StateGraph(ReflectionState)
    graph.add_node("generate", generate)
    graph.add_node("reflect", reflect)
    graph.add_edge(START, "generate")
    graph.add_conditional_edges("generate", after_generate, ["reflect", END])
    graph.add_conditional_edges("reflect", after_reflect, ["generate", END])
    return graph.compile()


class Reflection(_Pattern):
    """Reflection: draft, review, revise (`max_rounds` reviews at most).

    The answer is the actor's last draft; a review containing `approve` ends it early.
    """

    spec_kind = "harness"

    def __init__(
        self,
        *,
        max_rounds: int = 2,
        approve: str = "APPROVED",
        critic_prompt: str = CRITIC_PROMPT,
        max_turns: int = 10,
        system_prompt: str | None = None,
        sampling: Sampling | None = None,
        recursion_limit: int = 50,
        tool_timeout: float | None = None,
        tool_errors: Literal["model", "fail"] = "model",
    ) -> None:
        if max_rounds < 0:
            raise ValueError("max_rounds must be >= 0")
        self.max_rounds = max_rounds
        self.approve = approve
        self.critic_prompt = critic_prompt
        self.max_turns = max_turns
        super().__init__(
            system_prompt=system_prompt,
            sampling=sampling,
            recursion_limit=recursion_limit,
            tool_timeout=tool_timeout,
            tool_errors=tool_errors,
        )

    def build_graph(self, llm: ChatNemoGym, tools: list[BaseTool]) -> Any:
        return reflection_graph(
            llm,
            tools,
            max_rounds=self.max_rounds,
            approve=self.approve,
            critic_prompt=self.critic_prompt,
            max_turns=self.max_turns,
        )


# -- orchestrator with sub-agents -----------------------------------------------------


class OrchestratorState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def orchestrator_graph(
    llm: ChatNemoGym,
    tools: list[BaseTool],
    *,
    max_subagents: int = 8,
    worker_prompt: str = WORKER_PROMPT,
    max_turns: int = 10,
    worker_max_turns: int = 10,
    direct_tools: bool = False,
) -> Any:
    """An orchestrator that hands sub-tasks to sub-agents through a `delegate` tool.

    Each `delegate(task)` call starts a fresh sub-agent (`worker/k`, k counting from 0
    in the order the calls were made) with the environment's tools and its own
    conversation; its final reply is the tool's result. Calls made in one turn run
    concurrently. Past `max_subagents` the tool refuses (the model is told). With
    `direct_tools` the orchestrator may also call the environment's tools itself.
    """
    run: ToolRun = llm.tool_run
    count = {"started": 0}

    async def delegate(task: str) -> str:
        if count["started"] >= max_subagents:
            raise RuntimeError(f"the sub-agent limit ({max_subagents}) is reached")
        index = count["started"]
        count["started"] += 1
        conversation: list[BaseMessage] = [
            SystemMessage(content=worker_prompt),
            HumanMessage(content=task),
        ]
        added = await _react(
            llm, conversation, agent=f"worker/{index}", tools=tools, max_turns=worker_max_turns
        )
        answer = _answer(added)
        if not answer or (added and isinstance(added[-1], ToolMessage)):
            return (
                f"(sub-agent worker/{index} stopped after {worker_max_turns} turns "
                "without a result)"
            )
        return answer

    table: dict[str, Tool] = {"delegate": Tool(spec=DELEGATE, fn=delegate)}
    offered: list[Any] = [DELEGATE]
    if direct_tools:
        table.update(run.table)
        offered.extend(tools)

    async def orchestrate(state: OrchestratorState) -> dict[str, Any]:
        reply = await llm.bind_tools(offered).bind(agent="orchestrator").ainvoke(state["messages"])
        return {"messages": [reply]}

    async def act(state: OrchestratorState) -> dict[str, Any]:
        calls = from_langchain(state["messages"][-1]).tool_calls
        results = await asyncio.gather(*(run.run(call, table) for call in calls))
        return {
            "messages": [
                ToolMessage(content=r.output, tool_call_id=r.call_id, name=r.name) for r in results
            ]
        }

    turns = {"n": 0}

    def route(state: OrchestratorState) -> str:
        turns["n"] += 1
        last = state["messages"][-1]
        if (
            isinstance(last, AIMessage)
            and from_langchain(last).tool_calls
            and turns["n"] < max_turns
        ):
            return "act"
        return END

    graph = StateGraph(OrchestratorState)
    graph.add_node("orchestrate", orchestrate)
    graph.add_node("act", act)
    graph.add_edge(START, "orchestrate")
    graph.add_conditional_edges("orchestrate", route, ["act", END])
    graph.add_edge("act", "orchestrate")
    return graph.compile()


class Orchestrator(_Pattern):
    """An orchestrator agent with sub-agents it starts through a `delegate` tool."""

    spec_kind = "harness"

    def __init__(
        self,
        *,
        max_subagents: int = 8,
        worker_prompt: str = WORKER_PROMPT,
        max_turns: int = 10,
        worker_max_turns: int = 10,
        direct_tools: bool = False,
        system_prompt: str | None = None,
        sampling: Sampling | None = None,
        recursion_limit: int = 50,
        tool_timeout: float | None = None,
        tool_errors: Literal["model", "fail"] = "model",
    ) -> None:
        self.max_subagents = max_subagents
        self.worker_prompt = worker_prompt
        self.max_turns = max_turns
        self.worker_max_turns = worker_max_turns
        self.direct_tools = direct_tools
        super().__init__(
            system_prompt=system_prompt,
            sampling=sampling,
            recursion_limit=recursion_limit,
            tool_timeout=tool_timeout,
            tool_errors=tool_errors,
        )

    def build_graph(self, llm: ChatNemoGym, tools: list[BaseTool]) -> Any:
        return orchestrator_graph(
            llm,
            tools,
            max_subagents=self.max_subagents,
            worker_prompt=self.worker_prompt,
            max_turns=self.max_turns,
            worker_max_turns=self.worker_max_turns,
            direct_tools=self.direct_tools,
        )


# -- parallel thinking ----------------------------------------------------------------


class ParallelState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    candidates: Annotated[list[tuple[int, str]], operator.add]


class _ThinkInput(TypedDict):
    index: int
    messages: list[BaseMessage]


def parallel_thinking_graph(
    llm: ChatNemoGym,
    tools: list[BaseTool],
    *,
    n: int = 4,
    aggregator_prompt: str = AGGREGATOR_PROMPT,
    hint: str | None = THINKER_HINT,
) -> Any:
    """`n` thinkers answer the task concurrently (a `Send` each); an aggregator reads
    every attempt and gives the final answer.

    Thinkers get no tools (concurrent calls on one stateful tool world would race).
    `hint` (with `{number}` and `{n}`) is added to each thinker's system prompt, so the
    thinkers are told apart in their own context (each call also gets a seed of its own
    from the runner; `hint=None` leaves the prompts identical).
    """
    if n < 1:
        raise ValueError("n must be >= 1")

    def fan_out(state: ParallelState) -> list[Send]:
        return [Send("think", {"index": i, "messages": state["messages"]}) for i in range(n)]

    async def think(state: _ThinkInput) -> dict[str, Any]:
        index = state["index"]
        conversation = list(state["messages"])
        if hint:
            conversation = _with_hint(conversation, hint.format(number=index + 1, n=n))
        reply = await llm.bind(agent=f"thinker/{index}").ainvoke(conversation)
        return {"candidates": [(index, from_langchain(reply).content or "")]}

    async def aggregate(state: ParallelState) -> dict[str, Any]:
        attempts = "\n\n".join(
            f"Attempt {index + 1}:\n{text}" for index, text in sorted(state["candidates"])
        )
        conversation: list[BaseMessage] = [
            SystemMessage(content=aggregator_prompt),
            HumanMessage(content=f"Task:\n{_task_text(state['messages'])}\n\n{attempts}"),
        ]
        reply = await llm.bind(agent="aggregator").ainvoke(conversation)
        return {"messages": [reply]}

    graph = StateGraph(ParallelState)
    graph.add_node("think", think)
    graph.add_node("aggregate", aggregate)
    graph.add_conditional_edges(START, fan_out, ["think"])
    graph.add_edge("think", "aggregate")
    graph.add_edge("aggregate", END)
    return graph.compile()


class ParallelThinking(_Pattern):
    """`n` independent attempts in parallel, then an aggregator's final answer."""

    spec_kind = "harness"

    def __init__(
        self,
        *,
        n: int = 4,
        aggregator_prompt: str = AGGREGATOR_PROMPT,
        hint: str | None = THINKER_HINT,
        system_prompt: str | None = None,
        sampling: Sampling | None = None,
        recursion_limit: int = 50,
    ) -> None:
        if n < 1:
            raise ValueError("n must be >= 1")
        self.n = n
        self.aggregator_prompt = aggregator_prompt
        self.hint = hint
        super().__init__(
            system_prompt=system_prompt,
            sampling=sampling,
            recursion_limit=recursion_limit,
            tool_timeout=None,
            tool_errors="model",
        )

    def build_graph(self, llm: ChatNemoGym, tools: list[BaseTool]) -> Any:
        return parallel_thinking_graph(
            llm, tools, n=self.n, aggregator_prompt=self.aggregator_prompt, hint=self.hint
        )


# -- ReWOO ----------------------------------------------------------------------------

_STEP = re.compile(r"^\s*#E(\d+)\s*=\s*([A-Za-z_][\w.\-]*)\s*\[(.*)\]\s*$")
_PLAN = re.compile(r"^\s*Plan\s*:\s*(.*)$", re.IGNORECASE)
_REF = re.compile(r"#E(\d+)")


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One planned tool call: `#E{n} = tool[arguments]`, with the reasoning before it."""

    evidence: int
    tool: str
    arguments: str
    reasoning: str = ""


def parse_plan(text: str) -> list[PlanStep]:
    """The steps of a ReWOO plan, in order; lines that are neither are ignored.

    A step line is `#E<n> = <tool>[<arguments>]` (the arguments run to the line's last
    `]`); the `Plan:` lines before it are its reasoning. Never raises.
    """
    steps: list[PlanStep] = []
    reasoning: list[str] = []
    for line in text.splitlines():
        step = _STEP.match(line)
        if step is not None:
            steps.append(
                PlanStep(
                    evidence=int(step.group(1)),
                    tool=step.group(2),
                    arguments=step.group(3).strip(),
                    reasoning=" ".join(reasoning),
                )
            )
            reasoning = []
            continue
        plan = _PLAN.match(line)
        if plan is not None:
            reasoning.append(plan.group(1).strip())
    return steps


def _substitute(value: Any, evidence: dict[int, str]) -> Any:
    if isinstance(value, str):
        whole = _REF.fullmatch(value.strip())
        if whole is not None and int(whole.group(1)) in evidence:
            return evidence[int(whole.group(1))]
        return _REF.sub(lambda m: evidence.get(int(m.group(1)), m.group(0)), value)
    if isinstance(value, list):
        return [_substitute(v, evidence) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, evidence) for k, v in value.items()}
    return value


def _step_arguments(step: PlanStep, spec: ToolSpec | None, evidence: dict[int, str]) -> str:
    """The JSON arguments of a step, earlier evidence substituted.

    A JSON object is used as written. Anything else goes to a tool's single parameter:
    a JSON value as that value (`add[3]`), other text as a string (`search[capital of
    France]`). Otherwise the raw text is passed on, and the tool call reports it as
    invalid arguments (shown to the solver as that step's evidence).
    """
    value: Any = step.arguments
    try:
        value = json.loads(step.arguments) if step.arguments else {}
    except ValueError:
        pass
    if isinstance(value, dict):
        return json.dumps(_substitute(value, evidence), ensure_ascii=False)
    properties = list((spec.parameters.get("properties") or {}) if spec else [])
    if len(properties) == 1:
        return json.dumps({properties[0]: _substitute(value, evidence)}, ensure_ascii=False)
    return step.arguments


class ReWOOState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    plan: str
    evidence: list[tuple[int, str, str]]


def rewoo_graph(
    llm: ChatNemoGym,
    tools: list[BaseTool],
    *,
    planner_prompt: str = PLANNER_PROMPT,
    solver_prompt: str = SOLVER_PROMPT,
    max_steps: int = 10,
) -> Any:
    """ReWOO (reasoning without observation): a planner writes every tool call up front
    (`#E1 = tool[{...}]`, later steps citing earlier evidence as `#En`), the steps run in
    order without a model call between them, and a solver answers from the evidence.
    At most `max_steps` steps run; a step whose tool fails records the error as its
    evidence.
    """
    run: ToolRun = llm.tool_run
    specs = {t.spec.name: t.spec for t in run.table.values()}

    async def plan(state: ReWOOState) -> dict[str, Any]:
        catalogue = "\n".join(
            f"- {s.name}: {s.description} (arguments: {json.dumps(s.parameters)})"
            for s in specs.values()
        )
        conversation: list[BaseMessage] = [
            SystemMessage(content=planner_prompt.format(tools=catalogue or "(none)")),
            HumanMessage(content=_task_text(state["messages"])),
        ]
        reply = await llm.bind(agent="planner").ainvoke(conversation)
        return {"plan": from_langchain(reply).content or ""}

    async def work(state: ReWOOState) -> dict[str, Any]:
        evidence: dict[int, str] = {}
        rows: list[tuple[int, str, str]] = []
        for index, step in enumerate(parse_plan(state["plan"])[:max_steps]):
            arguments = _step_arguments(step, specs.get(step.tool), evidence)
            call = ToolCall(id=f"rewoo-{index}", name=step.tool, arguments=arguments)
            result = await run.run(call)
            evidence[step.evidence] = result.output
            rows.append((step.evidence, f"{step.tool}[{arguments}]", result.output))
        return {"evidence": rows}

    async def solve(state: ReWOOState) -> dict[str, Any]:
        found = "\n".join(f"#E{n} = {call}\nResult: {out}" for n, call, out in state["evidence"])
        conversation: list[BaseMessage] = [
            SystemMessage(content=solver_prompt),
            HumanMessage(
                content=(
                    f"Task:\n{_task_text(state['messages'])}\n\nPlan:\n{state['plan']}\n\n"
                    f"Evidence:\n{found or '(no tool was called)'}"
                )
            ),
        ]
        reply = await llm.bind(agent="solver").ainvoke(conversation)
        return {"messages": [reply]}

    graph = StateGraph(ReWOOState)
    graph.add_node("plan", plan)
    graph.add_node("work", work)
    graph.add_node("solve", solve)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "work")
    graph.add_edge("work", "solve")
    graph.add_edge("solve", END)
    return graph.compile()


class ReWOO(_Pattern):
    """ReWOO: plan every tool call first, run them, answer from the evidence."""

    spec_kind = "harness"

    def __init__(
        self,
        *,
        planner_prompt: str = PLANNER_PROMPT,
        solver_prompt: str = SOLVER_PROMPT,
        max_steps: int = 10,
        system_prompt: str | None = None,
        sampling: Sampling | None = None,
        recursion_limit: int = 50,
        tool_timeout: float | None = None,
        tool_errors: Literal["model", "fail"] = "model",
    ) -> None:
        self.planner_prompt = planner_prompt
        self.solver_prompt = solver_prompt
        self.max_steps = max_steps
        super().__init__(
            system_prompt=system_prompt,
            sampling=sampling,
            recursion_limit=recursion_limit,
            tool_timeout=tool_timeout,
            tool_errors=tool_errors,
        )

    def build_graph(self, llm: ChatNemoGym, tools: list[BaseTool]) -> Any:
        return rewoo_graph(
            llm,
            tools,
            planner_prompt=self.planner_prompt,
            solver_prompt=self.solver_prompt,
            max_steps=self.max_steps,
        )
