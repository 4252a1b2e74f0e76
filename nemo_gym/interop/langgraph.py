"""LangChain / LangGraph: our model as a LangChain chat model, a user's graph as a harness.

```python
from nemo_gym.interop.langgraph import LangGraphAgent

def build(llm, tools):                       # any graph over a "messages" state
    from langgraph.prebuilt import create_react_agent
    return create_react_agent(llm, tools)

harness = LangGraphAgent(graph="mypkg.agents:build")   # or graph=build
async for rollout in gym.rollouts(env, policy, harness=harness): ...
```

- `ChatNemoGym(model=...)` implements LangChain's `BaseChatModel` over any nemo_gym
  `Model`: messages, tools (`bind_tools`), tool calls (raw argument text kept),
  reasoning, usage. Inside a harness the model is the runner's recording wrapper, so
  every call the graph makes lands on the trajectory.
- Each call names its agent (`ModelRequest.agent`, what `Trajectory.token_trace(agent=)`
  groups by): `llm.bind(agent="critic")`, else `ChatNemoGym(agent=...)`, else the
  LangGraph node making the call (its `langgraph_node`), else none. A node that fans
  out several conversations (a `Send` per worker) binds one name per conversation.
- A reply comes back to LangChain carrying the exact message the model returned
  (`response_metadata["nemo_gym_message"]`); when the graph hands that message back
  unchanged, the next request holds it byte for byte, so token-level adapters continue
  the conversation from the exact ids instead of re-tokenizing it.
- Episode tools become LangChain tools (`as_langchain_tools`) that run through
  `nemo_gym.harnesses.call_tool`: an ordinary exception goes back to the model, a
  `ToolError` ends the rollout (even if the graph catches it), and every call is a
  `ToolResult` on the trajectory.

Needs the `langgraph` extra (`pip install 'nemo-gym[langgraph]'`).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, Literal

from nemo_gym.errors import HarnessError, MissingDependency, ToolError
from nemo_gym.harnesses import call_tool, opening_messages
from nemo_gym.protocols import Episode, Model
from nemo_gym.records import (
    Event,
    Message,
    ModelRequest,
    ModelResponse,
    Sampling,
    Task,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from nemo_gym.registry import Described
from nemo_gym.tools import Tool, tool_table

try:
    from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import Runnable, RunnableConfig
    from langchain_core.tools import BaseTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import ConfigDict, Field, PrivateAttr
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependency("langchain-core", "langgraph") from exc

__all__ = [
    "AGENT_KEY",
    "MESSAGE_KEY",
    "ChatNemoGym",
    "GraphFactory",
    "LangGraphAgent",
    "ToolRun",
    "as_langchain_tools",
    "from_langchain",
    "to_langchain",
]

MESSAGE_KEY = "nemo_gym_message"
"""`AIMessage.response_metadata` key holding the exact `Message` the model returned."""

AGENT_KEY = "nemo_gym_agent"
"""Run-config metadata key naming the agent (`config={"metadata": {AGENT_KEY: "x"}}`)."""

_SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "seed")
_LANGCHAIN_ONLY = frozenset({"stream", "stream_usage"})  # and any "ls_*" tracing hint


# -- messages -------------------------------------------------------------------------


def _text(content: Any, what: str) -> str:
    """LangChain content (a str or a list of blocks) as text; non-text blocks refused."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, Mapping) and block.get("type") in ("reasoning", "thinking"):
                continue  # carried separately (Message.reasoning)
            else:
                kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
                raise HarnessError(f"{what}: content block of type {kind!r} is not text")
        return "".join(parts)
    raise HarnessError(f"{what}: content must be a str or a list of blocks, got {content!r}")


def _arguments(args: Any) -> str:
    return json.dumps(args if args is not None else {}, ensure_ascii=False)


def _same_call(ours: ToolCall, theirs: Mapping[str, Any]) -> bool:
    if ours.id != theirs.get("id") or ours.name != theirs.get("name"):
        return False
    try:
        return ours.parsed_arguments() == (theirs.get("args") or {})
    except ValueError:
        return False


def _exact(message: AIMessage) -> Message | None:
    """The model's own message behind `message`, when the graph did not edit it."""
    stored = message.response_metadata.get(MESSAGE_KEY)
    if not isinstance(stored, Mapping):
        return None
    try:
        ours = Message.model_validate(stored)
    except ValueError:
        return None
    try:
        content = _text(message.content, "assistant message")
    except HarnessError:
        return None
    if content != (ours.content or ""):
        return None
    valid = [c for c in ours.tool_calls if _parses(c)]
    invalid = [c for c in ours.tool_calls if not _parses(c)]
    if len(valid) != len(message.tool_calls) or len(invalid) != len(message.invalid_tool_calls):
        return None
    if not all(_same_call(a, b) for a, b in zip(valid, message.tool_calls, strict=True)):
        return None
    return ours


def _parses(call: ToolCall) -> bool:
    try:
        call.parsed_arguments()
    except ValueError:
        return False
    return True


def from_langchain(message: BaseMessage) -> Message:
    """A LangChain message as a nemo_gym `Message` (the model's exact one when unedited)."""
    if isinstance(message, AIMessage):
        exact = _exact(message)
        if exact is not None:
            return exact
        calls = [
            ToolCall(id=c.get("id") or "", name=c["name"], arguments=_arguments(c.get("args")))
            for c in message.tool_calls
        ]
        calls += [
            ToolCall(
                id=c.get("id") or "",
                name=c.get("name") or "",
                arguments=c.get("args") or "",
            )
            for c in message.invalid_tool_calls
        ]
        reasoning = message.additional_kwargs.get("reasoning_content")
        content = _text(message.content, "assistant message")
        return Message(
            role="assistant",
            content=content if content or not calls else None,
            reasoning=reasoning if isinstance(reasoning, str) else None,
            tool_calls=tuple(calls),
            name=message.name,
        )
    if isinstance(message, HumanMessage):
        return Message(
            role="user", content=_text(message.content, "user message"), name=message.name
        )
    if isinstance(message, SystemMessage):
        return Message(role="system", content=_text(message.content, "system message"))
    if isinstance(message, ToolMessage):
        return Message(
            role="tool",
            content=_text(message.content, "tool message"),
            tool_call_id=message.tool_call_id,
            name=message.name,
        )
    if isinstance(message, ChatMessage) and message.role in ("system", "user", "assistant", "tool"):
        return Message(
            role=message.role,
            content=_text(message.content, f"{message.role} message"),
        )
    raise HarnessError(f"cannot convert a LangChain {type(message).__name__} to a Message")


def to_langchain(message: Message) -> BaseMessage:
    """A nemo_gym `Message` as a LangChain message (assistant ones keep the exact message)."""
    content = message.content or ""
    if message.role == "system":
        return SystemMessage(content=content)
    if message.role == "user":
        return HumanMessage(content=content, name=message.name)
    if message.role == "tool":
        return ToolMessage(
            content=content, tool_call_id=message.tool_call_id or "", name=message.name
        )
    valid: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    for call in message.tool_calls:
        try:
            args = call.parsed_arguments()
        except ValueError as exc:
            invalid.append(
                {
                    "name": call.name,
                    "args": call.arguments,
                    "id": call.id,
                    "error": str(exc),
                    "type": "invalid_tool_call",
                }
            )
        else:
            valid.append({"name": call.name, "args": args, "id": call.id, "type": "tool_call"})
    extra = {"reasoning_content": message.reasoning} if message.reasoning else {}
    return AIMessage(
        content=content,
        tool_calls=valid,
        invalid_tool_calls=invalid,
        additional_kwargs=extra,
        response_metadata={MESSAGE_KEY: message.model_dump(mode="json")},
        name=message.name,
    )


# -- tools ----------------------------------------------------------------------------


class ToolRun:
    """The tools of one rollout and what happened to them.

    Shared by the chat model (which remembers the exact tool calls the model wrote) and
    the LangChain tools (which run them through `call_tool`): `results` are the
    `ToolResult`s to put on the trajectory, `fatal` the `ToolError` that ends it.
    """

    def __init__(
        self,
        tools: Sequence[Tool] = (),
        *,
        timeout: float | None = None,
        errors: Literal["model", "fail"] = "model",
    ) -> None:
        self.table = tool_table(tools)
        self.timeout = timeout
        self.errors = errors
        self.results: list[ToolResult] = []
        self.fatal: ToolError | None = None
        self._calls: dict[str, ToolCall] = {}

    def remember(self, message: Message) -> None:
        for call in message.tool_calls:
            if call.id:
                self._calls[call.id] = call

    def drain(self) -> list[ToolResult]:
        results, self.results = self.results, []
        return results

    async def run(self, call: ToolCall, table: Mapping[str, Tool] | None = None) -> ToolResult:
        """Run one call (recorded in `results`); a `ToolError` is kept in `fatal` too.

        `table` replaces the episode's tools for this call (an agent with tools of its
        own, such as an orchestrator's `delegate`)."""
        tools = self.table if table is None else table
        try:
            result = await call_tool(tools, call, timeout=self.timeout, errors=self.errors)
        except ToolError as exc:
            if self.fatal is None:
                self.fatal = exc
            raise
        self.results.append(result)
        return result

    async def run_langchain(self, name: str, call_id: str | None, args: Mapping[str, Any]) -> str:
        exact = self._calls.get(call_id or "")
        if exact is None or exact.name != name:
            exact = ToolCall(id=call_id or "", name=name, arguments=_arguments(dict(args)))
        return (await self.run(exact)).output


_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "nemo_gym_tool_call_id", default=None
)


class _EpisodeTool(BaseTool):
    """An episode tool seen by LangChain; runs through its rollout's `ToolRun`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    run_state: Any = Field(exclude=True)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        call_id = input.get("id") if isinstance(input, Mapping) else None
        token = _CALL_ID.set(call_id if isinstance(call_id, str) else None)
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _CALL_ID.reset(token)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        raise HarnessError(f"tool {self.name!r} is async: call it with ainvoke (async nodes)")

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise HarnessError(f"tool {self.name!r} is async: call it with ainvoke (async nodes)")

    async def _arun(self, *args: Any, **kwargs: Any) -> str:
        kwargs.pop("run_manager", None)
        if args:
            raise HarnessError(f"tool {self.name!r} takes keyword arguments only")
        return await self.run_state.run_langchain(self.name, _CALL_ID.get(), kwargs)


def as_langchain_tools(run: ToolRun) -> list[BaseTool]:
    """The rollout's episode tools as LangChain tools (for `bind_tools`, `ToolNode`)."""
    return [
        _EpisodeTool(
            name=tool.spec.name,
            description=tool.spec.description or tool.spec.name,
            args_schema=dict(tool.spec.parameters),
            run_state=run,
        )
        for tool in run.table.values()
    ]


def _tool_spec(tool: Any) -> ToolSpec:
    if isinstance(tool, ToolSpec):
        return tool
    if isinstance(tool, Tool):
        return tool.spec
    described = convert_to_openai_tool(tool)
    function = described.get("function", described)
    return ToolSpec(
        name=function["name"],
        description=function.get("description", "") or "",
        parameters=function.get("parameters") or {"type": "object", "properties": {}},
    )


# -- the chat model -------------------------------------------------------------------


class ChatNemoGym(BaseChatModel):
    """LangChain's chat-model interface over a nemo_gym `Model`.

    `model` is any `Model` (inside a harness: the runner's recording wrapper). `sampling`
    is merged under what a call binds (`llm.bind(temperature=0.2)`); `agent` names the
    agent when a call binds none (see the module docstring). `tool_run` links calls to
    the rollout's tools. Async first; a sync `invoke` from a worker thread runs on the
    loop the model was created in.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: Any = Field(exclude=True)
    sampling: Sampling | None = None
    agent: str | None = None
    tool_run: Any = Field(default=None, exclude=True)
    _loop: asyncio.AbstractEventLoop | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    @property
    def _llm_type(self) -> str:
        return "nemo-gym"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": type(self.model).__name__, "agent": self.agent}

    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Runnable[Any, AIMessage]:
        """Bind tools (LangChain tools, functions, pydantic models, OpenAI dicts, ToolSpecs).

        `tool_choice` other than "auto" is sent as OpenAI's `tool_choice` in
        `Sampling.extra` (adapters that speak OpenAI's API pass it on)."""
        specs = tuple(_tool_spec(t) for t in tools)
        if tool_choice not in (None, "auto"):
            if tool_choice in ("any", "required", True):
                tool_choice = "required"
            elif isinstance(tool_choice, str) and tool_choice != "none":
                tool_choice = {"type": "function", "function": {"name": tool_choice}}
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=specs, **kwargs)

    def _request(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None,
        metadata: Mapping[str, Any],
        kwargs: dict[str, Any],
    ) -> ModelRequest:
        kwargs = {
            k: v for k, v in kwargs.items() if k not in _LANGCHAIN_ONLY and not k.startswith("ls_")
        }
        tools = tuple(_tool_spec(t) for t in kwargs.pop("tools", ()) or ())
        agent = kwargs.pop("agent", None) or self.agent
        if agent is None:
            named = metadata.get(AGENT_KEY) or metadata.get("langgraph_node")
            agent = named if isinstance(named, str) else None
        fields: dict[str, Any] = {k: kwargs.pop(k) for k in _SAMPLING_FIELDS if k in kwargs}
        if stop:
            fields["stop"] = tuple(stop)
        sampling = Sampling(**fields, extra=kwargs) if fields or kwargs else Sampling()
        if self.sampling is not None:
            sampling = sampling.merged_over(self.sampling)
        converted = tuple(from_langchain(m) for m in messages)
        return ModelRequest(messages=converted, tools=tools, sampling=sampling, agent=agent)

    def _result(self, response: ModelResponse) -> ChatResult:
        message = response.message
        if self.tool_run is not None:
            self.tool_run.remember(message)
        ai = to_langchain(message)
        assert isinstance(ai, AIMessage)
        ai.response_metadata.update(
            {"finish_reason": response.finish_reason, "model_name": response.model}
        )
        ai.usage_metadata = {
            "input_tokens": response.usage.prompt_tokens,
            "output_tokens": response.usage.completion_tokens,
            "total_tokens": response.usage.total_tokens,
        }
        return ChatResult(
            generations=[ChatGeneration(message=ai)],
            llm_output={"finish_reason": response.finish_reason},
        )

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        metadata = run_manager.metadata if run_manager is not None else {}
        request = self._request(messages, stop, metadata, kwargs)
        return self._result(await self.model.generate(request))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        metadata = run_manager.metadata if run_manager is not None else {}
        request = self._request(messages, stop, metadata, kwargs)
        loop = self._loop
        if loop is None or loop.is_closed():
            return self._result(asyncio.run(self.model.generate(request)))
        if getattr(loop, "_thread_id", None) == threading.get_ident():
            raise HarnessError(
                "ChatNemoGym.invoke was called on the event loop's own thread (a sync node "
                "in an async graph would block the loop): use `await llm.ainvoke(...)`"
            )
        future = asyncio.run_coroutine_threadsafe(self.model.generate(request), loop)
        return self._result(future.result())


# -- the harness ----------------------------------------------------------------------

GraphFactory = Callable[[ChatNemoGym, list[BaseTool]], Any]
"""`build(llm, tools) -> compiled graph`: how a harness gets a graph for one rollout."""


def _load_factory(graph: str | GraphFactory) -> GraphFactory:
    if callable(graph):
        return graph
    from pkgutil import resolve_name

    try:
        found = resolve_name(graph)
    except Exception as exc:
        raise HarnessError(f"LangGraphAgent(graph={graph!r}): cannot import it: {exc}") from exc
    if not callable(found):
        raise HarnessError(f"LangGraphAgent(graph={graph!r}) is not callable")
    return found


class LangGraphAgent(Described):
    """A LangGraph graph as the agent loop: one graph per rollout, over our model and tools.

    `graph` is a factory `build(llm, tools)` returning a compiled graph whose state has a
    `messages` list (`messages_key`), or its import path `"pkg.module:build"` (which keeps
    the harness's spec rebuildable in another process). Per rollout the factory is given
    a `ChatNemoGym` over the recording model and the episode's tools as LangChain tools;
    the graph starts from the task's messages and every message it appends to that list
    is yielded as it appears (with the `ToolResult`s of the tools it ran). The
    conversation ends with the graph; the last assistant message is the answer.

    `recursion_limit` bounds the graph's steps (past it: a `harness` failure);
    `tool_timeout` and `tool_errors` are `ToolLoop`'s.
    """

    spec_kind = "harness"

    def __init__(
        self,
        graph: str | GraphFactory,
        *,
        system_prompt: str | None = None,
        sampling: Sampling | None = None,
        messages_key: str = "messages",
        recursion_limit: int = 50,
        tool_timeout: float | None = None,
        tool_errors: Literal["model", "fail"] = "model",
    ) -> None:
        self.graph = graph
        self.system_prompt = system_prompt
        self.sampling = sampling
        self.messages_key = messages_key
        self.recursion_limit = recursion_limit
        self.tool_timeout = tool_timeout
        self.tool_errors = tool_errors
        self._factory: GraphFactory | None = graph if callable(graph) else None

    def build_graph(self, llm: ChatNemoGym, tools: list[BaseTool]) -> Any:
        """The compiled graph for one rollout (subclasses override it)."""
        if self._factory is None:
            self._factory = _load_factory(self.graph)
        return self._factory(llm, tools)

    def graph_input(self, messages: list[Message]) -> dict[str, Any]:
        """The graph's input state for the opening messages."""
        return {self.messages_key: [to_langchain(m) for m in messages]}

    async def run(self, task: Task, episode: Episode, model: Model) -> AsyncGenerator[Event, None]:
        messages = opening_messages(task, self.system_prompt, episode)
        for message in messages:
            yield message
        tools = ToolRun(episode.tools, timeout=self.tool_timeout, errors=self.tool_errors)
        llm = ChatNemoGym(model=model, sampling=self.sampling, tool_run=tools)
        graph = self.build_graph(llm, as_langchain_tools(tools))
        config: RunnableConfig = {"recursion_limit": self.recursion_limit}
        seen: set[str] = set()
        first = True
        stream = graph.astream(self.graph_input(messages), config, stream_mode="values")
        try:
            async for state in stream:
                if tools.fatal is not None:
                    raise tools.fatal
                for result in tools.drain():
                    yield result
                for message in _messages(state, self.messages_key):
                    key = message.id or f"#{id(message)}"
                    if key in seen:
                        continue
                    seen.add(key)
                    if not first:
                        yield from_langchain(message)
                first = False
        except ToolError:
            raise
        except Exception as exc:
            if tools.fatal is not None:
                raise tools.fatal from exc
            if type(exc).__name__ == "GraphRecursionError":
                raise HarnessError(
                    f"the graph did not finish within recursion_limit={self.recursion_limit}"
                ) from exc
            raise
        finally:
            await _aclose(stream)
        if tools.fatal is not None:
            raise tools.fatal
        for result in tools.drain():
            yield result


def _messages(state: Any, key: str) -> list[BaseMessage]:
    if not isinstance(state, Mapping):
        raise HarnessError(f"the graph's state is a {type(state).__name__}, not a mapping")
    found = state.get(key)
    if found is None:
        return []
    if not isinstance(found, list):
        raise HarnessError(f"the graph's state[{key!r}] is not a list of messages")
    return found


async def _aclose(stream: Any) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
