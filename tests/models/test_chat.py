"""Chat templates, tool formats (`models/chat.py`) and token continuation (`models/tokens.py`).

The parsers are pure; the template and continuation tests use the real SmolLM2
tokenizer (from `Local`'s converted cache: no model weights are loaded) and a
template that rewrites history, so what is checked is what the adapters do.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_gym.errors import ConfigError
from nemo_gym.models.chat import (
    CHATML_TEMPLATE,
    ChatTemplate,
    HermesTools,
    ToolFormat,
    parse_tool_calls,
    render_tool_call,
    render_tools_prompt,
    tool_format,
)
from nemo_gym.records import Message, ModelRequest, ToolCall, ToolSpec

ADD = ToolSpec(
    name="add",
    description="Add two numbers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
)

# ---------------------------------------------------------------------------------------
# Hermes tool calls (no tokenizer)

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
arguments = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
# Free text around the calls; it may not open a tag of its own.
prose = st.text(max_size=30).filter(lambda s: "<tool_call>" not in s and "</tool_call>" not in s)


@settings(max_examples=50, deadline=None)
@given(before=prose, calls=st.lists(st.tuples(names, arguments), min_size=1, max_size=3))
def test_rendered_tool_calls_parse_back(before: str, calls: list[tuple[str, dict]]) -> None:
    text = before + "".join(
        render_tool_call(ToolCall(id="x", name=n, arguments=json.dumps(a))) for n, a in calls
    )
    content, parsed = parse_tool_calls(text)
    assert [(c.name, json.loads(c.arguments)) for c in parsed] == calls
    assert content == (before.strip() or None)
    assert len({c.id for c in parsed}) == len(parsed)


@settings(max_examples=50, deadline=None)
@given(prose)
def test_text_without_tool_calls_is_unchanged(text: str) -> None:
    assert parse_tool_calls(text) == (text, ())


@settings(max_examples=50, deadline=None)
@given(content=st.none() | prose, calls=st.lists(st.tuples(names, arguments), max_size=3))
def test_hermes_render_calls_round_trips(content: str | None, calls: list) -> None:
    hermes = HermesTools()
    written = [ToolCall(id="x", name=n, arguments=json.dumps(a)) for n, a in calls]
    text = hermes.render_calls(content, written)
    parsed_content, parsed = hermes.parse(text)
    assert [(c.name, json.loads(c.arguments)) for c in parsed] == calls
    if calls:
        assert parsed_content == ((content or "").strip() or None)


def test_malformed_tool_calls_stay_in_the_content() -> None:
    text = 'ok <tool_call>{"name": 3}</tool_call> <tool_call>not json</tool_call>'
    assert parse_tool_calls(text) == (text, ())
    content, calls = parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}')
    assert calls == () and content.startswith("<tool_call>")  # unclosed: left as text


def test_string_arguments_are_kept_as_written() -> None:
    _, calls = parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert calls[0].arguments == '{"a": 1}'


def test_tools_prompt_lists_every_tool_as_openai_json() -> None:
    prompt = render_tools_prompt([ADD])
    assert json.dumps(ADD.to_openai()) in prompt
    assert "<tool_call>" in prompt and "</tools>" in prompt


def test_tool_formats_by_name_or_object() -> None:
    assert isinstance(tool_format("hermes"), HermesTools)
    assert isinstance(HermesTools(), ToolFormat)
    with pytest.raises(ConfigError, match=r"'nope'.*hermes"):
        tool_format("nope")
    with pytest.raises(ConfigError, match="lacks"):
        tool_format(object())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# ChatTemplate and Continuations over the real SmolLM2 tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    from nemo_gym.models.local import cache_root

    converted = [
        p
        for p in (cache_root() / "models").glob("SmolLM2-135M-Instruct*")
        if (p / "tokenizer_config.json").is_file()
    ]
    if not converted:
        # The first Local() load converts the GGUF (tens of seconds); do it once here.
        from nemo_gym.models.local import Local

        model = Local(threads=1).load()
        model.close()
        converted = list((cache_root() / "models").glob("SmolLM2-135M-Instruct*"))
    return transformers.AutoTokenizer.from_pretrained(str(converted[0]))


def test_hermes_rendering_for_a_template_without_tools(tokenizer) -> None:
    template = ChatTemplate(tokenizer)
    assert not template.native_tools
    call = ToolCall(id="call_1", name="add", arguments='{"a": 2, "b": 3}')
    history = [
        Message.user("add 2 and 3"),
        Message.assistant(None, tool_calls=(call,)),
        Message.tool("5", tool_call_id="call_1"),
    ]
    rendered, extra = template.messages(history, [ADD])
    assert extra == {}
    assert rendered[0] == {"role": "system", "content": render_tools_prompt([ADD])}
    assert rendered[2] == {"role": "assistant", "content": render_tool_call(call)}
    assert rendered[3] == {"role": "tool", "content": "<tool_response>\n5\n</tool_response>"}
    with_system, _ = template.messages([Message.system("Be brief."), *history], [ADD])
    assert with_system[0]["content"] == "Be brief.\n\n" + render_tools_prompt([ADD])


def test_openai_shaped_messages_for_a_template_with_tools(tokenizer) -> None:
    template = ChatTemplate(tokenizer, native_tools=True)
    call = ToolCall(id="call_1", name="add", arguments='{"a": 2, "b": 3}')
    history = [Message.assistant("sure", tool_calls=(call,)), Message.tool("5", tool_call_id="c")]
    rendered, extra = template.messages(history, [ADD])
    assert extra == {"tools": [ADD.to_openai()]}
    function = {"name": "add", "arguments": {"a": 2, "b": 3}}
    assert rendered[0]["tool_calls"] == [{"id": "call_1", "type": "function", "function": function}]
    assert rendered[1] == {"role": "tool", "content": "5", "tool_call_id": "c"}


def test_the_template_text_and_what_follows_an_assistant_turn(tokenizer) -> None:
    template = ChatTemplate(tokenizer)
    assert template.template == CHATML_TEMPLATE  # the GGUF carries SmolLM2's own template
    text = template.render([Message.user("hi")], [], generation_prompt=True)
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    history = [Message.user("hi"), Message.assistant("hello")]
    assert template.after_assistant(history, []) == "<|im_end|>\n"
    assert template.decode(template.encode(text)) == text


def _reply(template: ChatTemplate, text: str) -> tuple[Message, list[int]]:
    content, calls = template.parse(text)
    return Message.assistant(content, tool_calls=calls), template.encode(text)


def test_a_continued_prompt_keeps_the_generated_ids_and_adds_only_the_new_turns(
    tokenizer,
) -> None:
    from nemo_gym.models.tokens import Continuations

    template = ChatTemplate(tokenizer)
    cache = Continuations(template)
    opening = (Message.user("add 2 and 3"),)
    first = cache.prompt(ModelRequest(messages=opening, tools=(ADD,)))
    assert first.history == "fresh"
    # A reply spelled unlike our rendering of it (no newlines inside the tag): only the
    # exact ids keep it as generated.
    written = '<tool_call>{"name":"add","arguments":{"a":2,"b":3}}</tool_call>'
    reply, completion = _reply(template, written)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    cache.remember(
        ModelRequest(messages=opening, tools=(ADD,)),
        reply,
        first.ids,
        [*completion, eos],
        ended_on_stop_token=True,
    )
    history = (*opening, reply, Message.tool("5", tool_call_id=reply.tool_calls[0].id))
    second = cache.prompt(ModelRequest(messages=history, tools=(ADD,)))
    assert second.history == "continued"
    exact = [*first.ids, *completion, eos]
    assert second.ids[: len(exact)] == exact
    added = tokenizer.decode(second.ids[len(exact) :])
    assert added == (
        "\n<|im_start|>tool\n<tool_response>\n5\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # Re-rendering would have written the call our way, not the model's.
    rendered = template.encode(template.render(history, (ADD,), generation_prompt=True))
    assert rendered[: len(exact)] != exact


def test_a_reply_cut_by_length_is_closed_by_the_template(tokenizer) -> None:
    from nemo_gym.models.tokens import Continuations

    template = ChatTemplate(tokenizer)
    cache = Continuations(template)
    opening = ModelRequest(messages=(Message.user("Count."),))
    first = cache.prompt(opening)
    reply, completion = _reply(template, "1, 2, 3")
    cache.remember(opening, reply, first.ids, completion, ended_on_stop_token=False)
    second = cache.prompt(ModelRequest(messages=(*opening.messages, reply, Message.user("Go on"))))
    assert second.history == "continued"
    added = tokenizer.decode(second.ids[len(first.ids) + len(completion) :])
    assert added == "<|im_end|>\n<|im_start|>user\nGo on<|im_end|>\n<|im_start|>assistant\n"


def test_unknown_edited_or_evicted_history_is_retokenized(tokenizer) -> None:
    from nemo_gym.models.tokens import Continuations

    template = ChatTemplate(tokenizer)
    cache = Continuations(template, max_conversations=1)
    opening = ModelRequest(messages=(Message.user("Hi"),))
    first = cache.prompt(opening)
    reply, completion = _reply(template, "Hello!")
    cache.remember(opening, reply, first.ids, completion, ended_on_stop_token=False)
    edited = Message.assistant("Hello there!")
    assert cache.prompt(ModelRequest(messages=(Message.user("Hi"), edited))).history == (
        "retokenized"
    )
    other = ModelRequest(messages=(Message.user("Other"),))
    cache.remember(other, reply, cache.prompt(other).ids, completion, ended_on_stop_token=False)
    assert len(cache) == 1  # the first conversation was evicted
    evicted = cache.prompt(ModelRequest(messages=(*opening.messages, reply, Message.user("?"))))
    assert evicted.history == "retokenized"
    off = Continuations(template, max_conversations=0)
    off.remember(opening, reply, first.ids, completion, ended_on_stop_token=False)
    assert off.prompt(ModelRequest(messages=(*opening.messages, reply))).history == "retokenized"


def test_a_template_that_rewrites_history_is_retokenized_not_spliced(tokenizer) -> None:
    from nemo_gym.models.tokens import Continuations

    # Drops every assistant turn but the last, as reasoning templates drop old thoughts.
    rewriting = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
        "{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    template = ChatTemplate(tokenizer, chat_template=rewriting)
    cache = Continuations(template)
    opening = ModelRequest(messages=(Message.user("Hi"),))
    first = cache.prompt(opening)
    reply, completion = _reply(template, "Hello!")
    cache.remember(opening, reply, first.ids, completion, ended_on_stop_token=False)
    later = cache.prompt(ModelRequest(messages=(*opening.messages, reply, Message.user("Bye"))))
    assert later.history == "retokenized"


# Text a byte-level BPE tokenizer round-trips exactly (no special-token look-alikes).
chat_text = st.text(
    alphabet=st.characters(whitelist_categories=("L", "N", "P", "Zs"), whitelist_characters="\n"),
    max_size=40,
).filter(lambda s: "<|" not in s)


@settings(max_examples=60, deadline=None)
@given(user=chat_text, reply=chat_text, follow=chat_text, ended=st.booleans())
def test_a_continued_prompt_decodes_to_the_full_rendering(
    tokenizer, user: str, reply: str, follow: str, ended: bool
) -> None:
    """Whatever the texts, and whether the reply ended on EOS or ran out of tokens, the
    continued ids are the generated ids plus the rest of the template's rendering."""
    from nemo_gym.models.tokens import Continuations

    template = ChatTemplate(tokenizer)
    cache = Continuations(template)
    opening = ModelRequest(messages=(Message.user(user),))
    first = cache.prompt(opening)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    completion = template.encode(reply) + ([eos] if ended else [])
    message = Message.assistant(reply)
    cache.remember(opening, message, first.ids, completion, ended_on_stop_token=ended)
    history = (*opening.messages, message, Message.user(follow))
    second = cache.prompt(ModelRequest(messages=history))
    assert second.history == "continued"
    exact = [*first.ids, *completion]
    assert second.ids[: len(exact)] == exact
    assert template.decode(second.ids) == template.render(history, (), generation_prompt=True)
