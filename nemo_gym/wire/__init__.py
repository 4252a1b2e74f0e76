"""The wire formats of model APIs, both directions, in one place.

| module | endpoint |
|---|---|
| `openai_chat` | OpenAI chat completions, `POST /v1/chat/completions` (and vLLM's token fields) |
| `openai_responses` | OpenAI Responses, `POST /v1/responses` |
| `openai_completions` | OpenAI plain completions, `POST /v1/completions` |
| `anthropic` | Anthropic Messages, `POST /v1/messages` |
| `gemini` | Google's Gemini API, `POST /v1beta/models/{model}:generateContent` |

Each module has the client side (`build_request(request, ...) -> (body, sampling sent)`,
`parse_response(body) -> ModelResponse`, a stream accumulator for `stream=True`) and the
server side (`parse_request(body) -> ServerRequest`, `build_response(response, ...)`,
`stream_events(response, ...) -> [SSE bytes]`, `error_body(...)`). The HTTP adapters
(`nemo_gym.models`), the testing fakes and loopback endpoints all use these, so a
format is written down once. Bodies are plain JSON values (dicts); nothing here does I/O.
A body of the wrong shape raises `WireError` (a `ValueError`) naming the field.
"""

from nemo_gym.wire.common import (
    ServerRequest,
    SSEDecoder,
    WireError,
    dumps,
    error_message,
    iter_sse,
    loads,
    retry_after_s,
    sse,
)

__all__ = [
    "SSEDecoder",
    "ServerRequest",
    "WireError",
    "dumps",
    "error_message",
    "iter_sse",
    "loads",
    "retry_after_s",
    "sse",
]
