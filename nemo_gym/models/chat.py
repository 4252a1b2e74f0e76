"""Chat templates and tool-call formats, shared by the token-level adapters.

`ChatTemplate` turns our `Message`s into the text a Hugging Face tokenizer's chat
template writes, and that text into token ids. `Local`, `LivePolicy` and `VLLM` all
render prompts through it (and continue conversations through `nemo_gym.models.tokens`),
so the same checkpoint sees the same tokens behind every adapter.

A `ToolFormat` says how a model writes tool calls and reads tool results. A template
that renders tools itself (its text mentions `tools`, as Qwen2.5's does) gets
OpenAI-shaped messages and `tools=`; a template without tool support (SmolLM2's) gets
the format's own text: a system-prompt block offering the tools, calls written back
into earlier assistant turns, results wrapped for the `tool` role. Either way the reply
is parsed by the format. `HermesTools` (`<tool_call>{json}</tool_call>`) is built in;
any object with the `ToolFormat` methods can be passed instead.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from nemo_gym.errors import ConfigError
from nemo_gym.records import Message, ToolCall, ToolSpec

__all__ = [
    "CHATML_TEMPLATE",
    "ChatTemplate",
    "HermesTools",
    "ToolFormat",
    "parse_tool_calls",
    "render_tool_call",
    "render_tools_prompt",
    "tool_format",
]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""SmolLM2's ChatML chat template (as its GGUF carries it), set on tokenizers that carry none."""

# Stands in for an assistant message's content, to find what the template writes after it.
_SENTINEL = "\x00nemo-gym-assistant-content\x00"


@runtime_checkable
class ToolFormat(Protocol):
    """How a model is offered tools, writes its calls and reads their results (as text)."""

    name: str

    def tools_prompt(self, tools: Sequence[ToolSpec]) -> str:
        """The system-prompt block that offers `tools`."""
        ...

    def render_calls(self, content: str | None, calls: Sequence[ToolCall]) -> str:
        """An earlier assistant turn's content and tool calls, as the model wrote them."""
        ...

    def render_result(self, content: str) -> str:
        """A tool result, as the content of the `tool` turn."""
        ...

    def parse(self, text: str) -> tuple[str | None, tuple[ToolCall, ...]]:
        """Split generated text into content (None when empty) and tool calls."""
        ...


_HERMES_PROMPT = (
    "You are a function calling AI model. You are provided with function signatures within "
    "<tools></tools> XML tags. You may call one or more functions to assist with the user "
    "query. Don't make assumptions about what values to plug into functions. Here are the "
    "available tools: <tools>\n{tools}\n</tools>\nFor each function call return a json object "
    "with function name and arguments within <tool_call></tool_call> XML tags as follows:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-dict>}}\n</tool_call>'
)
_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class HermesTools:
    """The Hermes convention (NousResearch; Qwen2.5 and many fine-tunes use it).

    Tools are offered as OpenAI function JSON, one per line, inside `<tools></tools>`;
    the model answers with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
    results go back wrapped in `<tool_response></tool_response>`.
    """

    name = "hermes"

    def tools_prompt(self, tools: Sequence[ToolSpec]) -> str:
        return render_tools_prompt(tools)

    def render_calls(self, content: str | None, calls: Sequence[ToolCall]) -> str:
        written = "\n".join(render_tool_call(call) for call in calls)
        return f"{content}\n{written}" if content else written

    def render_result(self, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"

    def parse(self, text: str) -> tuple[str | None, tuple[ToolCall, ...]]:
        return parse_tool_calls(text)

    def __repr__(self) -> str:
        return "HermesTools()"


_FORMATS: dict[str, ToolFormat] = {"hermes": HermesTools()}


def tool_format(value: str | ToolFormat) -> ToolFormat:
    """A `ToolFormat` by name ("hermes") or the object itself."""
    if isinstance(value, str):
        found = _FORMATS.get(value)
        if found is None:
            raise ConfigError(
                f"tool_format={value!r}: unknown; built in: {', '.join(sorted(_FORMATS))} "
                "(or pass an object with the ToolFormat methods)"
            )
        return found
    methods = ("tools_prompt", "render_calls", "render_result", "parse")
    missing = [m for m in methods if not hasattr(value, m)]
    if missing:
        raise ConfigError(f"tool_format={value!r} lacks {', '.join(missing)}")
    return value


def render_tools_prompt(tools: Sequence[ToolSpec]) -> str:
    """The Hermes-style system prompt block that offers `tools` to a model."""
    lines = "\n".join(json.dumps(spec.to_openai(), ensure_ascii=False) for spec in tools)
    return _HERMES_PROMPT.format(tools=lines)


def render_tool_call(call: ToolCall) -> str:
    """One tool call as the model writes it: `<tool_call>{"name":..,"arguments":..}</tool_call>`."""
    body = json.dumps({"name": call.name, "arguments": _arguments(call)}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def parse_tool_calls(text: str) -> tuple[str | None, tuple[ToolCall, ...]]:
    """Split generated text into content and Hermes-style tool calls.

    Each `<tool_call>...</tool_call>` block holding a JSON object with a string `name`
    becomes a `ToolCall` (its `arguments` re-serialized as JSON text; a string value is
    kept as written). Blocks that are not such an object stay in the content, so a
    malformed call is visible to the harness rather than silently dropped. Content is
    `None` when nothing but tool calls was written.
    """
    calls: list[ToolCall] = []
    kept: list[str] = []
    position = 0
    for match in _HERMES_CALL.finditer(text):
        call = _tool_call_from_json(match.group(1))
        if call is None:
            continue
        kept.append(text[position : match.start()])
        position = match.end()
        calls.append(call)
    if not calls:
        return text, ()
    kept.append(text[position:])
    content = "".join(kept).strip()
    return content or None, tuple(calls)


def _tool_call_from_json(raw: str) -> ToolCall | None:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=value["name"], arguments=text)


def _arguments(call: ToolCall) -> Any:
    try:
        return json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return call.arguments


class ChatTemplate:
    """A Hugging Face tokenizer's chat template, as the token-level adapters use it.

    `tokenizer` is any `transformers` tokenizer (vLLM's `get_tokenizer()` returns one).
    `chat_template` overrides the tokenizer's own; a tokenizer with neither gets
    SmolLM2's ChatML (`CHATML_TEMPLATE`). `native_tools=None` detects whether the
    template renders `tools` itself. Rendering and encoding are pure functions of the
    tokenizer, safe to call from any thread.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        tool_format: str | ToolFormat = "hermes",
        native_tools: bool | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        template = chat_template or getattr(tokenizer, "chat_template", None) or CHATML_TEMPLATE
        self.template: str = template if isinstance(template, str) else str(template)
        self.tools = _resolve_format(tool_format)
        self.native_tools = "tools" in self.template if native_tools is None else bool(native_tools)

    def messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Messages as the chat template takes them, and the extra template arguments."""
        rendered: list[dict[str, Any]] = []
        if self.native_tools:
            for message in messages:
                entry: dict[str, Any] = {"role": message.role, "content": message.content or ""}
                if message.tool_calls:
                    entry["tool_calls"] = [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": _arguments(call)},
                        }
                        for call in message.tool_calls
                    ]
                if message.tool_call_id is not None:
                    entry["tool_call_id"] = message.tool_call_id
                if message.name is not None:
                    entry["name"] = message.name
                rendered.append(entry)
            extra = {"tools": [spec.to_openai() for spec in tools]} if tools else {}
            return rendered, extra
        for message in messages:
            content = message.content or ""
            if message.role == "assistant" and message.tool_calls:
                content = self.tools.render_calls(message.content, message.tool_calls)
            elif message.role == "tool":
                content = self.tools.render_result(content)
            rendered.append({"role": message.role, "content": content})
        if tools:
            block = self.tools.tools_prompt(tools)
            if rendered and rendered[0]["role"] == "system":
                rendered[0] = {"role": "system", "content": f"{rendered[0]['content']}\n\n{block}"}
            else:
                rendered.insert(0, {"role": "system", "content": block})
        return rendered, {}

    def render(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, generation_prompt: bool
    ) -> str:
        """The template's text for `messages` (with the generation prompt when asked)."""
        rendered, extra = self.messages(messages, tools)
        return self.tokenizer.apply_chat_template(
            rendered,
            tokenize=False,
            add_generation_prompt=generation_prompt,
            chat_template=self.template,
            **extra,
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text (no special tokens added: the template wrote any BOS)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens kept (the caller strips a final EOS)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def after_assistant(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
        """What the template writes after the content of the last (assistant) message."""
        stand_in = Message.assistant(_SENTINEL)
        text = self.render([*messages[:-1], stand_in], tools, generation_prompt=False)
        position = text.rfind(_SENTINEL)
        if position < 0:
            return ""
        return text[position + len(_SENTINEL) :]

    def parse(self, text: str) -> tuple[str | None, tuple[ToolCall, ...]]:
        """Content and tool calls of a reply (by the tool format)."""
        return self.tools.parse(text)

    def __repr__(self) -> str:
        return f"ChatTemplate(tools={self.tools!r}, native_tools={self.native_tools})"


def _resolve_format(value: str | ToolFormat) -> ToolFormat:
    return tool_format(value)
