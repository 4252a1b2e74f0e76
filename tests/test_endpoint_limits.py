"""The model endpoint attacked over loopback: every limit of `EndpointLimits` holds.

Whatever runs the agent may be the policy's own code, so each test plays a hostile
client with raw sockets and checks the server's memory and connections stay bounded
while a legitimate route keeps working.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
import time

import openai
import pytest

from nemo_gym.endpoint import EndpointLimits, ModelEndpoint, Route
from nemo_gym.errors import ConfigError, HarnessError
from nemo_gym.models import ScriptedModel

CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


async def _exchange(
    endpoint: ModelEndpoint, data: bytes, *, read_s: float = 5.0
) -> tuple[bytes, float]:
    """Send `data` on a new connection; (everything the server sent until it closed, s)."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.bound_port)
    try:
        writer.write(data)
        await writer.drain()
    except ConnectionError:
        pass
    received = b""
    try:
        async with asyncio.timeout(read_s):
            while chunk := await reader.read(65536):
                received += chunk
    except (ConnectionError, TimeoutError):
        pass
    writer.close()
    return received, time.monotonic() - started


def _post(path: str, body: bytes, *headers: str) -> bytes:
    head = [
        f"POST {path} HTTP/1.1",
        "Host: x",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *headers,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _route(endpoint: ModelEndpoint, replies: list[str]) -> Route:
    return await endpoint.route(ScriptedModel(replies))


def _server_connections(endpoint: ModelEndpoint) -> set:
    assert endpoint._server is not None
    return endpoint._server.connections


async def _chat(route: Route) -> str | None:
    async with openai.AsyncOpenAI(base_url=route.base_url, api_key="k", max_retries=0) as sdk:
        reply = await sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    return reply.choices[0].message.content


async def test_a_gzip_bomb_stops_at_the_body_limit() -> None:
    # 16 MiB of zeros is 16 KiB of gzip: before, the whole of it was inflated in memory.
    endpoint = ModelEndpoint(limits=EndpointLimits(max_body_bytes=1 << 20))
    try:
        route = await _route(endpoint, ["never"])
        bomb = gzip.compress(b"0" * (16 << 20), compresslevel=9)
        assert len(bomb) < 100_000
        path = f"/r/{route.token}/v1/chat/completions"
        received, _ = await _exchange(endpoint, _post(path, bomb, "Content-Encoding: gzip"))
        assert received.startswith(b"HTTP/1.1 413") and b"max_body_bytes" in received
        assert isinstance(route.failure, HarnessError) and route.failure.code == "too_large"
        # Compressed within the limit still works.
        route = await _route(endpoint, ["fine"])
        small = gzip.compress(CHAT)
        received, _ = await _exchange(
            endpoint,
            _post(f"/r/{route.token}/v1/chat/completions", small, "Content-Encoding: gzip"),
        )
        assert received.startswith(b"HTTP/1.1 200") and b"fine" in received
    finally:
        await endpoint.aclose()


async def test_request_line_and_headers_are_bounded() -> None:
    endpoint = ModelEndpoint(limits=EndpointLimits(max_header_bytes=4096, max_headers=20))
    try:
        await endpoint.start()
        long_line = b"GET /v1/models?" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        received, _ = await _exchange(endpoint, long_line)
        assert received.startswith(b"HTTP/1.1 431")
        big_header = b"GET /v1/models HTTP/1.1\r\nX-A: " + b"b" * 10_000 + b"\r\n\r\n"
        received, _ = await _exchange(endpoint, big_header)
        assert received.startswith(b"HTTP/1.1 431")
        many = b"GET /v1/models HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(50))
        received, _ = await _exchange(endpoint, many + b"\r\n")
        assert received.startswith(b"HTTP/1.1 431") and b"header fields" in received
    finally:
        await endpoint.aclose()


async def test_nothing_is_buffered_for_a_request_without_a_valid_route() -> None:
    endpoint = ModelEndpoint(limits=EndpointLimits(max_header_bytes=8192))
    try:
        await _route(endpoint, [])
        seen: list[int] = []
        # A body of 64 MiB announced with a wrong token: answered 401 and closed after
        # 8 KiB of it, and none of it kept.
        head = _post("/r/not-a-token/v1/chat/completions", b"").replace(
            b"Content-Length: 0", b"Content-Length: %d" % (64 << 20)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.bound_port)
        writer.write(head)
        sent = 0
        with pytest.raises(ConnectionError):
            for _ in range(1024):
                writer.write(b"x" * 65536)
                sent += 65536
                await writer.drain()
                seen.extend(len(c._body) for c in _server_connections(endpoint))
        writer.close()
        # The 401 may be lost to the reset that closing an unread connection sends.
        assert sent < (64 << 20) and set(seen) <= {0}
        assert reader.exception() is not None or reader.at_eof()
        # One that waits for 100 Continue is told 401 at once instead.
        waits = _post("/r/not-a-token/v1/chat/completions", b"", "Expect: 100-continue")
        waits = waits.replace(b"Content-Length: 0", b"Content-Length: 1000")
        received, took = await _exchange(endpoint, waits)
        assert received.startswith(b"HTTP/1.1 401") and took < 2
        # A client that sends a small body with a wrong token reads a clean 401.
        small = _post("/r/not-a-token/v1/chat/completions", CHAT)
        received, _ = await _exchange(endpoint, small)
        assert received.startswith(b"HTTP/1.1 401")
    finally:
        await endpoint.aclose()


async def test_header_and_idle_timeouts_close_slow_clients() -> None:
    limits = EndpointLimits(header_timeout_s=0.3, idle_timeout_s=0.5)
    endpoint = ModelEndpoint(limits=limits)
    try:
        await endpoint.start()
        # Idle: connect and say nothing.
        received, took = await _exchange(endpoint, b"")
        assert received == b"" and 0.4 < took < 3
        # Slowloris: a header byte every 0.1 s (never idle) still ends at the header timeout.
        reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.bound_port)
        started = time.monotonic()
        writer.write(b"GET /v1/models HTTP/1.1\r\n")
        answer = b""
        try:
            for _ in range(50):
                writer.write(b"X")
                await writer.drain()
                try:
                    answer += await asyncio.wait_for(reader.read(1024), 0.1)
                except TimeoutError:
                    continue
                if answer:
                    break
        except ConnectionError:
            pass
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 3
    finally:
        await endpoint.aclose()


async def test_an_unauthenticated_flood_does_not_lock_a_route_out() -> None:
    endpoint = ModelEndpoint(limits=EndpointLimits(max_connections=16))
    try:
        route = await _route(endpoint, ["one", "two"])
        assert await _chat(route) == "one"
        flood = []
        for _ in range(64):  # 4x the cap, each holding half a request forever
            _, writer = await asyncio.open_connection("127.0.0.1", endpoint.bound_port)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            flood.append(writer)
        await asyncio.sleep(0.2)
        assert len(_server_connections(endpoint)) <= 16
        assert await _chat(route) == "two"
        for writer in flood:
            writer.close()
    finally:
        await endpoint.aclose()


async def test_pipelined_requests_whose_answers_are_never_read_stay_bounded() -> None:
    endpoint = ModelEndpoint()
    try:
        await endpoint.start()
        sock = socket.create_connection(("127.0.0.1", endpoint.bound_port))
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
        chunk = request * (65536 // len(request))
        sent = stalls = 0
        while sent < (8 << 20) and stalls < 40:
            try:
                sent += sock.send(chunk)
                stalls = 0
            except BlockingIOError:
                stalls += 1
            await asyncio.sleep(0.005)
        (connection,) = _server_connections(endpoint)
        buffered = connection.transport.get_write_buffer_size()
        queued = len(connection.queue)
        sock.close()
        # Before, the server read all 8 MiB, queued 220,000 requests and buffered
        # 60 MB of answers; now reading stops while the answers are not read.
        assert sent < (8 << 20)
        assert buffered < (1 << 20) and queued < 2_000
    finally:
        await endpoint.aclose()


def test_limits_are_validated() -> None:
    with pytest.raises(ConfigError, match="max_connections"):
        EndpointLimits(max_connections=0)


async def test_a_rollout_through_the_endpoint_is_unaffected_by_the_limits() -> None:
    endpoint = ModelEndpoint(limits=EndpointLimits(max_connections=32, max_pipelined=1))
    try:
        route = await _route(endpoint, [f"r{i}" for i in range(20)])
        replies = await asyncio.gather(*(_chat(route) for _ in range(20)))
        assert sorted(replies) == sorted(f"r{i}" for i in range(20))
    finally:
        await endpoint.aclose()
