"""The fast HTTP client against a hostile server, and what it sends against hostile input.

Sizes are bounded after decompression, nothing can be smuggled into a request through a
header or the URL, a cancelled waiter does not leak a pooled connection, the SSE decoder
is linear, and retry jitter never touches the global `random`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("httptools")

from nemo_gym.errors import ConfigError, ModelError
from nemo_gym.models import OpenAIChat, h1
from nemo_gym.models.base import RetryPolicy
from nemo_gym.records import Message, ModelRequest
from nemo_gym.testing.httpserver import HTTPRequest, LoopbackHTTPServer, RawReply, Reply
from nemo_gym.wire import WireError
from nemo_gym.wire.common import SSEDecoder, iter_sse


def client(**overrides: Any) -> h1.Client:
    options: dict[str, Any] = {
        "headers": {"Content-Type": "application/json"},
        "connect_s": 5.0,
        "read_s": 5.0,
        "total_s": 10.0,
        "max_connections": 8,
        "keepalive_s": 4.0,
    }
    options.update(overrides)
    return h1.Client(**options)


def head(status: int, *headers: str) -> bytes:
    return ("\r\n".join([f"HTTP/1.1 {status} X", *headers]) + "\r\n\r\n").encode()


@pytest.mark.parametrize(
    "raw",
    [
        head(200, "X-Big: " + "a" * 100_000, "Content-Length: 2") + b"{}",
        head(200, *(f"X-{i}: 1" for i in range(500)), "Content-Length: 2") + b"{}",
    ],
    ids=["one-huge-header", "many-headers"],
)
async def test_response_headers_are_bounded(raw: bytes) -> None:
    async with LoopbackHTTPServer(lambda request: RawReply(raw)) as server:
        http = client()
        with pytest.raises(h1.TooLarge, match="header"):
            await http.post(server.url + "/v1", b"{}")
        await http.aclose()


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_gzip_bomb_stops_at_the_body_limit(streamed: bool) -> None:
    bomb = gzip.compress(b"0" * (16 << 20), compresslevel=9)  # 16 KiB on the wire
    raw = head(200, "Content-Encoding: gzip", f"Content-Length: {len(bomb)}") + bomb
    received: list[int] = []
    async with LoopbackHTTPServer(lambda request: RawReply(raw)) as server:
        http = client(max_body_bytes=1 << 20)
        with pytest.raises(h1.TooLarge, match="decompressed"):
            await http.post(
                server.url + "/v1",
                b"{}",
                on_chunk=(lambda chunk: received.append(len(chunk))) if streamed else None,
            )
        await http.aclose()
    assert sum(received) <= 1 << 20
    plain = head(200, f"Content-Length: {3 << 20}") + b"x" * (3 << 20)
    async with LoopbackHTTPServer(lambda request: RawReply(plain)) as server:
        http = client(max_body_bytes=1 << 20)
        with pytest.raises(h1.TooLarge, match="over 1048576 bytes"):
            await http.post(server.url + "/v1", b"{}")
        await http.aclose()


async def test_a_reply_too_large_is_a_non_retryable_model_error() -> None:
    bomb = gzip.compress(b"0" * (16 << 20), compresslevel=9)
    raw = head(200, "Content-Encoding: gzip", f"Content-Length: {len(bomb)}") + bomb
    calls = 0

    def handler(request: HTTPRequest) -> RawReply:
        nonlocal calls
        calls += 1
        return RawReply(raw)

    async with LoopbackHTTPServer(handler) as server:
        model = OpenAIChat(
            "m", base_url=server.url + "/v1", transport="fast", max_response_bytes=1 << 20
        )
        with pytest.raises(ModelError) as caught:
            await model.generate(ModelRequest(messages=(Message.user("hi"),)))
        await model.aclose()
    assert caught.value.code == "too_large" and not caught.value.retryable and calls == 1


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Evil": "a\r\nContent-Length: 0\r\n\r\nPOST /admin HTTP/1.1"},
        {"X-Evil": "a\nb"},
        {"X-Evil": "a\x00b"},
        {"X Evil": "a"},
        {"X-Evil:": "a"},
        {"X-Evil\r\nHost": "a"},
    ],
)
def test_headers_that_could_smuggle_a_request_are_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="header"):
        client(headers=headers)
    with pytest.raises(ConfigError, match="header"):
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1", headers=headers, transport="fast")
    with pytest.raises(ConfigError, match="header"):
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1", api_key="k\r\nX: y", transport="fast")


async def test_the_request_target_is_percent_encoded() -> None:
    seen: list[str] = []

    def handler(request: HTTPRequest) -> Reply:
        seen.append(request.path)
        return Reply(200, {"ok": True})

    async with LoopbackHTTPServer(handler) as server:
        http = client()
        reply = await http.post(server.url + "/v1/a b/é?q=x y&r=1", b"{}")
        await http.aclose()
    assert reply.status == 200
    assert seen == ["/v1/a%20b/%C3%A9?q=x%20y&r=1"]


async def test_a_connection_handed_to_a_cancelled_waiter_goes_back_to_the_pool() -> None:
    async with LoopbackHTTPServer(lambda request: Reply(200, {"ok": True})) as server:
        http = client(max_connections=1)
        await http.post(server.url + "/v1", b"{}")  # one idle connection now
        (pool,) = http._pools.values()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        held = await pool.acquire(deadline)
        waiting = asyncio.ensure_future(pool.acquire(deadline))
        await asyncio.sleep(0)  # it is now a waiter
        pool.release(held)  # handed to the waiter...
        waiting.cancel()  # ...which is cancelled before it resumes
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        # Before, the connection was gone with the waiter: the pool (of one) was full
        # of nothing, and this waited out the timeout.
        again = await asyncio.wait_for(pool.acquire(deadline), 1.0)
        assert again is held and len(pool.open) == 1
        pool.release(again)
        assert (await http.post(server.url + "/v1", b"{}")).status == 200
        await http.aclose()


def test_a_large_event_is_decoded_in_linear_time() -> None:
    # Before, each chunk re-copied the whole pending line: one 32 MiB event took 12 s.
    decoder = SSEDecoder()
    chunks = [b"data: "] + [b"x" * 16384] * 256
    for chunk in chunks:
        assert decoder.feed(chunk) == []
    assert len(decoder._pieces) == len(chunks)  # kept as pieces, joined once
    ((event, data),) = decoder.feed(b"\n\n")
    assert event is None and len(data) == 256 * 16384
    small = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(WireError, match="over 1000 bytes"):
        for _ in range(10):
            small.feed(b"data: " + b"y" * 200 + b"\n")


_events = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from(["message", "delta", "done"])),
        st.text(alphabet="ab {}:\n", max_size=30).filter(lambda t: "\n\n" not in t),
    ),
    max_size=6,
)


@settings(max_examples=100, deadline=None)
@given(_events, st.sampled_from(["\n", "\r\n", "\r"]), st.data())
def test_any_chunking_and_line_ending_decode_the_same(events: list, eol: str, data: Any) -> None:
    text = ""
    for name, body in events:
        if name:
            text += f"event: {name}{eol}"
        text += "".join(f"data: {line}{eol}" for line in body.split("\n")) + eol
    raw = text.encode()
    expected = [(name, body) for name, body in events]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    decoder = SSEDecoder()
    got = []
    for start, end in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        got += decoder.feed(raw[start:end])
    got += decoder.close()
    assert got == expected == list(iter_sse(raw))


def test_retry_jitter_never_touches_the_global_random() -> None:
    # Trainers seed `random` identically on every rank: jitter drawn from it would
    # make every rank retry in lockstep, and would shift the trainer's own draws.
    policy = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=1.0)
    random.seed(1234)
    first = [policy.backoff(1) for _ in range(4)]
    after = random.random()
    random.seed(1234)
    second = [policy.backoff(1) for _ in range(4)]
    assert random.random() == after  # the global stream was not consumed
    assert first != second
