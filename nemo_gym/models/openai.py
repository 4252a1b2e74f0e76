"""OpenAI-compatible HTTP adapters: chat completions, Responses, and plain completions.

They work against api.openai.com and against OpenAI-compatible servers (vLLM, SGLang,
TRT-LLM, ...); where vLLM returns exact token ids and logprobs, the response carries
them. The wire formats live in `nemo_gym.wire`; the transports ("fast", or the
`openai` SDK) in `nemo_gym.models.http`. `ModelAdapter.generate` does the retrying (on
retryable errors only) and caps concurrency; the SDK's own retries are off.

Transport (`transport=`): None picks "fast" when a base URL is known (`base_url=` or
OPENAI_BASE_URL) and no HTTP(S)_PROXY applies to it, and "sdk" otherwise (api.openai.com,
a proxy, or an `openai.AsyncOpenAI` passed as `client=`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nemo_gym.errors import ConfigError, ModelError
from nemo_gym.models.http import (
    HTTPAdapter,
    HTTPKwargs,
    HTTPOptions,
    StreamParser,
    TransportName,
)
from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling
from nemo_gym.wire import openai_chat, openai_completions, openai_responses
from nemo_gym.wire.openai_chat import MaxTokensField, ReasoningField

if TYPE_CHECKING:
    from typing_extensions import Unpack

PromptTemplate = Callable[[Sequence[Message]], str]


class _OpenAIAdapter(HTTPAdapter):
    """What the three OpenAI adapters share: key handling and the SDK client."""

    sdk_name = "openai"
    env_base_url = "OPENAI_BASE_URL"
    env_api_key = "OPENAI_API_KEY"
    default_base_url = "https://api.openai.com/v1"

    def check_key(
        self, key: str | None, base_url: str | None, transport: TransportName
    ) -> str | None:
        if key is None:
            if base_url is None:
                raise ConfigError(
                    f"{type(self).__name__}: no api_key given and OPENAI_API_KEY is not set "
                    "(needed for api.openai.com; pass base_url= for a local server)"
                )
            key = "EMPTY"  # local OpenAI-compatible servers (vLLM) accept any key
        return key

    def auth_headers(self, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def make_sdk_client(
        self, sdk: ModuleType, base_url: str | None, key: str | None, headers: dict[str, str]
    ) -> Any:
        return sdk.AsyncOpenAI(
            api_key=key, base_url=base_url, max_retries=0, default_headers=headers or None
        )


class OpenAIChat(_OpenAIAdapter):
    """Chat completions (`/v1/chat/completions`).

    With vLLM, `return_token_ids=True` asks for the exact prompt and completion token
    ids and `logprobs=True` for the sampled tokens' logprobs, so a trainer gets the
    tokens the policy really produced.

    Args:
        model: the model name sent on each request (overridden by `request.model`).
        base_url: the server, e.g. "http://127.0.0.1:8000/v1"; None: OPENAI_BASE_URL, else
            api.openai.com.
        api_key: None reads OPENAI_API_KEY; with a base URL and no key, "EMPTY".
        client: a ready `openai.AsyncOpenAI` (or `AsyncAzureOpenAI`, ...) to send through
            (the sdk transport); never closed by the adapter.
        headers: extra HTTP headers sent on every request (never recorded).
        http: the HTTP options (`HTTPOptions`: transport, timeout, stream,
            max_concurrency, retry, default_sampling, extra_body, ...); its fields may
            also be given as keywords (`stream=True`), which override `http`'s.
        logprobs: request the sampled tokens' logprobs.
        return_token_ids: ask vLLM for `prompt_token_ids` / `token_ids`.
        reasoning_field: the assistant-message field earlier reasoning is sent back in
            (None: dropped).
        max_tokens_field: "max_completion_tokens" for OpenAI reasoning models, which
            reject `max_tokens`.
    """

    path = openai_chat.PATH

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        headers: dict[str, str] | None = None,
        http: HTTPOptions | None = None,
        logprobs: bool = False,
        return_token_ids: bool = False,
        reasoning_field: ReasoningField | None = "reasoning",
        max_tokens_field: MaxTokensField = "max_tokens",
        **options: Unpack[HTTPKwargs],
    ) -> None:
        if reasoning_field not in ("reasoning", "reasoning_content", None):
            raise ConfigError(
                f"reasoning_field must be 'reasoning', 'reasoning_content' or None, "
                f"got {reasoning_field!r}"
            )
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError(
                f"max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                f"got {max_tokens_field!r}"
            )
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            headers=headers,
            http=HTTPOptions.of(http, options),
        )
        self.logprobs = logprobs
        self.return_token_ids = return_token_ids
        self.reasoning_field: ReasoningField | None = reasoning_field
        self.max_tokens_field: MaxTokensField = max_tokens_field

    def build(self, request: ModelRequest) -> tuple[dict[str, Any], Sampling]:
        """(JSON body, sampling sent) for `request` (its sampling already merged)."""
        return openai_chat.build_request(
            request,
            model=self.model,
            reasoning_field=self.reasoning_field,
            max_tokens_field=self.max_tokens_field,
            logprobs=self.logprobs,
            return_token_ids=self.return_token_ids,
            extra_body=self.extra_body,
            stream=self.stream,
        )

    def parse(self, body: Any) -> ModelResponse:
        return openai_chat.parse_response(body)

    def stream_parser(self) -> StreamParser:
        return openai_chat.ChatStream()


class OpenAIResponses(_OpenAIAdapter):
    """The Responses API (`/v1/responses`).

    Tool turns go out as `function_call` / `function_call_output` input items; the
    reply's reasoning summary (or, from servers such as vLLM, its reasoning text)
    becomes `Message.reasoning`. Requests are sent with `store=False` by default, so
    the server keeps nothing between calls (this adapter always sends the whole
    conversation). The API has no `stop` (a request with one is refused with a clear
    error) and no `seed` (dropped; set `Sampling.extra={"seed": ...}` for a server that
    takes one). Exact token ids are not available through this API.

    Arguments as for `OpenAIChat`, plus:
        logprobs: ask for the output text's logprobs.
        store: let the server keep the response (`store=True`).
    """

    path = openai_responses.PATH

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        headers: dict[str, str] | None = None,
        http: HTTPOptions | None = None,
        logprobs: bool = False,
        store: bool = False,
        **options: Unpack[HTTPKwargs],
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            headers=headers,
            http=HTTPOptions.of(http, options),
        )
        self.logprobs = logprobs
        self.store = store

    def build(self, request: ModelRequest) -> tuple[dict[str, Any], Sampling]:
        """(JSON body, sampling sent); `ModelError(code="unsupported")` for a stop."""
        return openai_responses.build_request(
            request,
            model=self.model,
            logprobs=self.logprobs,
            store=self.store,
            extra_body=self.extra_body,
            stream=self.stream,
        )

    def parse(self, body: Any) -> ModelResponse:
        return openai_responses.parse_response(body, want_logprobs=self.logprobs)

    def stream_parser(self) -> StreamParser:
        return openai_responses.ResponsesStream(want_logprobs=self.logprobs)


def plain_prompt(messages: Sequence[Message]) -> str:
    """The default prompt for base checkpoints: labelled turns, ending in "Assistant:".

    A system message comes first as a bare paragraph, then one "User: ..." or
    "Assistant: ..." paragraph per turn (separated by a blank line); the prompt ends
    with "Assistant:" for the model to continue. Pair it with
    `Sampling(stop=("\\nUser:",))` so the model stops before writing the next user turn.
    Tool messages and tool calls have no plain-text form: they raise `ModelError`.
    """
    parts: list[str] = []
    for index, message in enumerate(messages):
        if message.role == "tool" or message.tool_calls:
            raise ModelError(
                f"message {index}: the plain completions prompt has no form for tool "
                "calls or tool results; use OpenAIChat, or pass a prompt_template that "
                "renders them",
                retryable=False,
                code="unsupported",
            )
        text = message.content or ""
        if message.role == "system":
            parts.append(text)
        elif message.role == "user":
            parts.append(f"User: {text}")
        else:
            parts.append(f"Assistant: {text}")
    parts.append("Assistant:")
    return "\n\n".join(parts)


class OpenAICompletions(_OpenAIAdapter):
    """Plain completions (`/v1/completions`), for base checkpoints without a chat template.

    The messages are rendered to one prompt string by `prompt_template` (default:
    `plain_prompt`); the reply is the generated text. Tool specs are refused with a
    clear error (a base model has no tool-call format). With vLLM,
    `return_token_ids=True` and `logprobs=True` give exact token ids and logprobs.

    Arguments as for `OpenAIChat`, plus:
        logprobs: request the sampled tokens' logprobs.
        return_token_ids: ask vLLM for `prompt_token_ids` / `token_ids`.
        prompt_template: messages -> prompt string.
    """

    path = openai_completions.PATH

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        headers: dict[str, str] | None = None,
        http: HTTPOptions | None = None,
        logprobs: bool = False,
        return_token_ids: bool = False,
        prompt_template: PromptTemplate = plain_prompt,
        **options: Unpack[HTTPKwargs],
    ) -> None:
        if not callable(prompt_template):
            raise ConfigError(f"prompt_template must be callable, got {prompt_template!r}")
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            headers=headers,
            http=HTTPOptions.of(http, options),
        )
        self.logprobs = logprobs
        self.return_token_ids = return_token_ids
        self.prompt_template = prompt_template

    def build(self, request: ModelRequest) -> tuple[dict[str, Any], Sampling]:
        """(JSON body, sampling sent); tools are refused (`code="unsupported"`)."""
        if request.tools:
            raise ModelError(
                "OpenAICompletions does not support tools (a base checkpoint has no "
                f"tool-call format); got {len(request.tools)} tool spec(s)",
                retryable=False,
                code="unsupported",
            )
        prompt = self.prompt_template(request.messages)
        if not isinstance(prompt, str):
            raise ConfigError(f"prompt_template must return a str, got {type(prompt).__name__}")
        return openai_completions.build_request(
            request,
            prompt=prompt,
            model=self.model,
            logprobs=self.logprobs,
            return_token_ids=self.return_token_ids,
            extra_body=self.extra_body,
            stream=self.stream,
        )

    def parse(self, body: Any) -> ModelResponse:
        return openai_completions.parse_response(body)

    def stream_parser(self) -> StreamParser:
        return openai_completions.CompletionStream()
