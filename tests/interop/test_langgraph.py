"""The LangChain chat-model adapter and LangGraphAgent, against the real langgraph."""

from __future__ import annotations

import json

import pytest

import nemo_gym as gym
from nemo_gym.errors import ToolError
from nemo_gym.records import Message, ModelRequest, ToolCall

pytest.importorskip("langgraph")
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool as lc_tool  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402

from nemo_gym.interop.langgraph import (  # noqa: E402
    MESSAGE_KEY,
    ChatNemoGym,
    LangGraphAgent,
    from_langchain,
    to_langchain,
)
from tests.interop.tokenmodel import TokenModel  # noqa: E402


class Counter(gym.Env):
    name = "counter"

    def __init__(self, *, fail_with: str | None = None) -> None:
        super().__init__(self.check)
        self.fail_with = fail_with

    def tasks(self, split: str = "test", limit: int | None = None) -> list[gym.Task]:
        return [gym.Task(id="c", prompt="Add 2, then 3.", answer=5)]

    async def open(self, task: gym.Task) -> gym.BasicEpisode:
        state = {"total": 0}
        fail_with = self.fail_with

        @gym.tool
        async def add(amount: int) -> int:
            """Add to the total."""
            if fail_with == "value" and amount == 3:
                raise ValueError("three is not allowed")
            if fail_with == "tool":
                raise ToolError("the counter broke")
            state["total"] += amount
            return state["total"]

        return gym.BasicEpisode([add], state=state)

    async def check(self, task: gym.Task, trajectory: gym.Trajectory) -> float:
        return float(trajectory.final_state["total"] == task.answer)


def _call(call_id: str, amount: int, spacing: str = "") -> ToolCall:
    # Raw argument text the model wrote, spaced its own way: it must survive the trip.
    return ToolCall(id=call_id, name="add", arguments=f'{{"amount":{spacing}{amount}}}')


def react_script(request: ModelRequest) -> Message:
    tool_messages = [m for m in request.messages if m.role == "tool"]
    if not tool_messages:
        return Message.assistant(None, tool_calls=(_call("a1", 2, "  "),), reasoning="first 2")
    if len(tool_messages) == 1:
        return Message.assistant("now 3", tool_calls=(_call("a2", 3),))
    return Message.assistant(f"total is {tool_messages[-1].content}")


def build_react(llm: ChatNemoGym, tools: list) -> object:
    return create_react_agent(llm, tools)


async def test_a_user_react_graph_runs_with_every_call_recorded_and_token_exact() -> None:
    model = TokenModel(react_script)
    harness = LangGraphAgent(graph=build_react)
    rollout = await gym.rollout(Counter(), model, Counter().tasks()[0], harness=harness)
    assert rollout.ok, rollout.failure
    assert rollout.reward == 1.0
    trajectory = rollout.trajectory
    assert [c.request.agent for c in trajectory.model_calls] == ["agent"] * 3
    assert [r.output for r in trajectory.tool_results] == ["2", "5"]
    # The raw arguments the model wrote, not a re-serialization of LangChain's dict.
    assert [r.arguments for r in trajectory.tool_results] == ['{"amount":  2}', '{"amount":3}']
    roles = [m.role for m in trajectory.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert trajectory.messages[1].reasoning == "first 2"
    assert trajectory.messages[1].content is None
    assert trajectory.final_text == "total is 5"
    # Each request carries the model's earlier replies byte for byte: one token sequence.
    trace = trajectory.token_trace()
    last = trajectory.model_calls[-1].response
    assert trace.token_ids[: len(last.prompt_token_ids)] == last.prompt_token_ids
    assert sum(trace.loss_mask) == sum(
        len(c.response.completion_token_ids) for c in trajectory.model_calls
    )
    assert trajectory.token_traces().keys() == {"agent"}


async def test_import_path_graph_and_spec() -> None:
    harness = LangGraphAgent(graph="tests.interop.test_langgraph:build_react", recursion_limit=9)
    spec = gym.registry.spec_of(harness, "harness")
    assert spec.options == {
        "graph": "tests.interop.test_langgraph:build_react",
        "recursion_limit": 9,
    }
    assert spec.rebuildable
    rebuilt = gym.registry.build(spec)
    rollout = await gym.rollout(
        Counter(), TokenModel(react_script), Counter().tasks()[0], harness=rebuilt
    )
    assert rollout.ok and rollout.reward == 1.0
    assert gym.registry.build("harness", "langgraph", graph=build_react).graph is build_react


async def test_an_ordinary_tool_exception_goes_back_to_the_model() -> None:
    rollout = await gym.rollout(
        Counter(fail_with="value"),
        TokenModel(react_script),
        Counter().tasks()[0],
        harness=LangGraphAgent(graph=build_react),
    )
    assert rollout.ok
    assert rollout.trajectory.tool_results[1].error == "ValueError: three is not allowed"
    tool_message = [m for m in rollout.trajectory.messages if m.role == "tool"][1]
    assert tool_message.content == "Error: ValueError: three is not allowed"
    assert rollout.reward == 0.0


async def test_a_tool_error_ends_the_rollout_even_when_the_graph_catches_it() -> None:
    from langgraph.prebuilt import ToolNode

    def build(llm: ChatNemoGym, tools: list) -> object:
        # A graph that swallows every tool exception: ToolError must still end it.
        return create_react_agent(llm, ToolNode(tools, handle_tool_errors=True))

    rollout = await gym.rollout(
        Counter(fail_with="tool"),
        TokenModel(react_script),
        Counter().tasks()[0],
        harness=LangGraphAgent(graph=build),
    )
    assert not rollout.ok
    assert rollout.failure.kind == "tool"
    assert "the counter broke" in rollout.failure.message


async def test_recursion_limit_is_a_harness_failure() -> None:
    def forever(request: ModelRequest) -> Message:
        n = len(request.messages)
        return Message.assistant(None, tool_calls=(_call(f"x{n}", 1),))

    rollout = await gym.rollout(
        Counter(),
        TokenModel(forever),
        Counter().tasks()[0],
        harness=LangGraphAgent(graph=build_react, recursion_limit=5),
    )
    assert not rollout.ok
    assert rollout.failure.kind == "harness"
    assert "recursion_limit=5" in rollout.failure.message


async def test_a_model_failure_inside_the_graph_is_a_model_failure() -> None:
    def broken(request: ModelRequest) -> Message:
        raise RuntimeError("backend down")

    rollout = await gym.rollout(
        Counter(),
        TokenModel(broken),
        Counter().tasks()[0],
        harness=LangGraphAgent(graph=build_react),
    )
    assert rollout.failure.kind == "model"
    assert rollout.failure.error_type == "RuntimeError"
    assert len(rollout.trajectory.model_calls) == 1


async def test_agent_names_bind_config_and_node_in_order_of_precedence() -> None:
    model = TokenModel(lambda request: "ok")
    llm = ChatNemoGym(model=model, agent="default")

    async def node(state: MessagesState) -> dict:
        a = await llm.bind(agent="bound").ainvoke(state["messages"])
        b = await llm.ainvoke(state["messages"])
        c = await ChatNemoGym(model=model).ainvoke(state["messages"])
        d = await ChatNemoGym(model=model).ainvoke(
            state["messages"], config={"metadata": {"nemo_gym_agent": "configured"}}
        )
        return {"messages": [a, b, c, d]}

    graph = StateGraph(MessagesState)
    graph.add_node("writer", node)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", END)
    await graph.compile().ainvoke({"messages": [HumanMessage("hi")]})
    assert [r.agent for r in model.requests] == ["bound", "default", "writer", "configured"]


async def test_sampling_tools_and_tool_choice_reach_the_request() -> None:
    model = TokenModel(lambda request: "ok")

    @lc_tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    llm = ChatNemoGym(model=model, sampling=gym.Sampling(temperature=0.7, max_tokens=9))
    bound = llm.bind_tools([lookup], tool_choice="lookup").bind(temperature=0.1, seed=4)
    reply = await bound.ainvoke([HumanMessage("go")], stop=["\n"])
    assert isinstance(reply, AIMessage) and reply.content == "ok"
    request = model.requests[-1]
    assert [t.name for t in request.tools] == ["lookup"]
    assert request.tools[0].parameters["properties"]["city"]["type"] == "string"
    sampling = request.sampling
    assert (sampling.temperature, sampling.max_tokens, sampling.seed) == (0.1, 9, 4)
    assert sampling.stop == ("\n",)
    assert sampling.extra == {"tool_choice": {"type": "function", "function": {"name": "lookup"}}}
    assert reply.usage_metadata["output_tokens"] > 0
    assert reply.response_metadata["finish_reason"] == "stop"


def test_sync_invoke_from_a_worker_thread_runs_on_the_models_loop() -> None:
    import asyncio

    async def main() -> str:
        llm = ChatNemoGym(model=TokenModel(lambda request: "sync ok"))
        reply = await asyncio.to_thread(llm.invoke, [HumanMessage("x")])
        return reply.content

    assert asyncio.run(main()) == "sync ok"


async def test_sync_invoke_on_the_loop_thread_is_refused_clearly() -> None:
    llm = ChatNemoGym(model=TokenModel(lambda request: "x"))
    with pytest.raises(gym.errors.HarnessError, match="ainvoke"):
        llm.invoke([HumanMessage("x")])


def test_messages_round_trip_exactly() -> None:
    messages = [
        Message.system("be brief"),
        Message(role="user", content="hi", name="ana"),
        Message.assistant(None, tool_calls=(_call("1", 2, " "),), reasoning="think"),
        Message.tool("2", tool_call_id="1", name="add"),
        Message.assistant(
            "bad args", tool_calls=(ToolCall(id="2", name="add", arguments="{oops"),)
        ),
        Message.assistant("done"),
    ]
    for message in messages:
        assert from_langchain(to_langchain(message)) == message


def test_an_edited_reply_is_converted_from_what_the_graph_holds() -> None:
    original = Message.assistant("draft", tool_calls=(_call("1", 2),))
    edited = to_langchain(original).model_copy(update={"content": "edited"})
    assert edited.response_metadata[MESSAGE_KEY]["content"] == "draft"
    converted = from_langchain(edited)
    assert converted.content == "edited"
    assert json.loads(converted.tool_calls[0].arguments) == {"amount": 2}
    assert from_langchain(SystemMessage("s")) == Message.system("s")
    assert from_langchain(ToolMessage("r", tool_call_id="9")) == Message.tool("r", tool_call_id="9")
    blocks = HumanMessage(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    assert from_langchain(blocks).content == "ab"
    with pytest.raises(gym.errors.HarnessError, match="image"):
        from_langchain(HumanMessage(content=[{"type": "image", "url": "x"}]))
