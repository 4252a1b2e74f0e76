"""The fast transport's HTTP/1.1 client (`nemo_gym.models.h1`) against a loopback server.

What the adapter-level tests do not reach: body framings (chunked, close-delimited,
gzip), interim responses, TLS, the pool's waiters and their timeouts, cancellation,
`Connection: close`, proxies in the transport choice.
"""

from __future__ import annotations

import asyncio
import gzip
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("httptools")

from nemo_gym.models import OpenAIChat, h1
from nemo_gym.testing.httpserver import (
    HTTPRequest,
    LoopbackHTTPServer,
    RawReply,
    Reply,
    StreamReply,
)


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


async def test_request_line_headers_and_body_reach_the_server() -> None:
    seen: list[HTTPRequest] = []

    def handler(request: HTTPRequest) -> Reply:
        seen.append(request)
        return Reply(200, {"ok": True})

    async with LoopbackHTTPServer(handler) as server:
        http = client(headers={"Content-Type": "application/json", "Authorization": "Bearer k"})
        reply = await http.post(server.url + "/v1/chat/completions?x=1", b'{"a": 1}')
        assert (reply.status, reply.body) == (200, b'{"ok":true}')
        assert reply.headers["content-type"] == "application/json"
        request = seen[0]
        assert (request.method, request.path, request.body) == (
            "POST",
            "/v1/chat/completions?x=1",
            b'{"a": 1}',
        )
        assert request.headers["host"] == f"127.0.0.1:{server.port}"
        assert request.headers["authorization"] == "Bearer k"
        await http.aclose()


@pytest.mark.parametrize(
    ("raw", "body"),
    [
        (head(200, "Transfer-Encoding: chunked") + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", b"abcde"),
        (head(200, "Connection: close") + b"until the end", b"until the end"),  # close-delimited
        (head(100) + head(200, "Content-Length: 2") + b"ok", b"ok"),  # an interim 100 first
        (
            head(200, "Content-Encoding: gzip", "Content-Length: 30")
            + gzip.compress(b"zipped")[:30],
            None,
        ),
    ],
    ids=["chunked", "close-delimited", "interim-100", "gzip"],
)
async def test_body_framings(raw: bytes, body: bytes | None) -> None:
    if body is None:
        data = gzip.compress(b"zipped")
        raw = head(200, "Content-Encoding: gzip", f"Content-Length: {len(data)}") + data
        body = b"zipped"
    async with LoopbackHTTPServer(lambda request: RawReply(raw)) as server:
        http = client()
        assert (await http.post(server.url + "/x", b"{}")).body == body
        await http.aclose()


async def test_an_unknown_content_encoding_is_a_protocol_error() -> None:
    raw = head(200, "Content-Encoding: br", "Content-Length: 2") + b"xx"
    async with LoopbackHTTPServer(lambda request: RawReply(raw)) as server:
        http = client()
        with pytest.raises(h1.ProtocolError, match="br"):
            await http.post(server.url + "/x", b"{}")
        await http.aclose()


async def test_streamed_chunks_go_to_the_callback() -> None:
    events = [b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"]
    async with LoopbackHTTPServer(lambda request: StreamReply(events, delay_s=0.01)) as server:
        http = client()
        chunks: list[bytes] = []
        reply = await http.post(server.url + "/x", b"{}", on_chunk=chunks.append)
        assert b"".join(chunks) == b"".join(events)
        assert reply.body == b""  # a streamed body is not kept
        await http.aclose()


async def test_an_error_reply_to_a_stream_is_read_whole() -> None:
    async with LoopbackHTTPServer(lambda request: Reply(503, {"error": "busy"})) as server:
        http = client()
        chunks: list[bytes] = []
        reply = await http.post(server.url + "/x", b"{}", on_chunk=chunks.append)
        assert (reply.status, reply.body, chunks) == (503, b'{"error":"busy"}', [])
        await http.aclose()


async def test_connection_close_is_honoured_and_keep_alive_reuses() -> None:
    replies = [
        Reply(200, b"a", headers={"Connection": "close"}),
        Reply(200, b"b"),
        Reply(200, b"c"),
    ]

    def handler(request: HTTPRequest) -> Reply:
        return replies.pop(0)

    async with LoopbackHTTPServer(handler) as server:
        http = client()
        assert [(await http.post(server.url + "/x", b"")).body for _ in range(3)] == [
            b"a",
            b"b",
            b"c",
        ]
        assert server.connections == 2  # closed after the first, reused after the second
        await http.aclose()


async def test_the_pool_waits_for_a_free_connection_within_the_total_timeout() -> None:
    async with LoopbackHTTPServer(lambda request: Reply(200, b"ok", delay_s=0.2)) as server:
        # One connection, 0.2 s a reply: the second fits in its 0.5 s, the third does not.
        http = client(max_connections=1, total_s=0.5)
        first = asyncio.ensure_future(http.post(server.url + "/x", b""))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(http.post(server.url + "/x", b""))
        third = asyncio.ensure_future(http.post(server.url + "/x", b""))
        results = await asyncio.gather(first, second, third, return_exceptions=True)
        assert [r.body for r in results[:2]] == [b"ok", b"ok"]  # type: ignore[union-attr]
        assert isinstance(results[2], h1.Timeout) and results[2].phase == "total"
        assert server.connections == 1
        await http.aclose()


async def test_a_cancelled_request_frees_its_connection_slot() -> None:
    async with LoopbackHTTPServer(lambda request: Reply(200, b"ok", delay_s=0.2)) as server:
        http = client(max_connections=1)
        task = asyncio.ensure_future(http.post(server.url + "/x", b""))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Its connection is closed (a reply may still come on it), the slot is free.
        assert (await http.post(server.url + "/x", b"")).body == b"ok"
        assert server.connections == 2
        await http.aclose()


async def test_timeouts_name_their_phase() -> None:
    async with LoopbackHTTPServer(lambda request: Reply(200, b"ok", delay_s=1)) as server:
        http = client(read_s=0.1)
        with pytest.raises(h1.Timeout) as info:
            await http.post(server.url + "/x", b"")
        assert info.value.phase == "read"
        http = client(read_s=5, total_s=0.2)
        with pytest.raises(h1.Timeout) as info:
            await http.post(server.url + "/x", b"")
        assert info.value.phase == "total"
        await http.aclose()


async def test_refused_and_closed_client() -> None:
    http = client()
    with pytest.raises(h1.ConnectError):
        await http.post("http://127.0.0.1:9/x", b"")
    await http.aclose()
    with pytest.raises(h1.ConnectError, match="closed"):
        await http.post("http://127.0.0.1:9/x", b"")
    with pytest.raises(ValueError, match="not an http"):
        client().endpoint("ftp://example.test/x")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_with_a_trusted_certificate(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    client_context = ssl.create_default_context(cafile=str(cert))
    async with LoopbackHTTPServer(
        lambda request: Reply(200, b"secure"), ssl=server_context
    ) as server:
        assert server.url.startswith("https://")
        http = client(ssl_context=client_context)
        assert (await http.post(server.url + "/x", b"")).body == b"secure"
        untrusting = client()  # the system's CAs do not know this certificate
        with pytest.raises(h1.ConnectError):
            await untrusting.post(server.url + "/x", b"")
        await http.aclose()
        await untrusting.aclose()


def test_a_proxy_sends_the_automatic_choice_to_the_sdk(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("openai")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "localhost")
    assert OpenAIChat("m", base_url="http://10.0.0.5:8000/v1").transport == "sdk"
    assert OpenAIChat("m", base_url="http://localhost:8000/v1").transport == "fast"
    assert OpenAIChat("m", base_url="http://10.0.0.5:8000/v1", transport="fast").transport == "fast"
    assert "connects directly" in caplog.text


_garbage = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda status, extra, body: head(status, *extra) + body,
        st.integers(100, 599),
        st.lists(
            st.sampled_from(
                [
                    "Content-Length: 5",
                    "Content-Length: x",
                    "Transfer-Encoding: chunked",
                    "Content-Encoding: gzip",
                    "Connection: close",
                ]
            ),
            max_size=3,
        ),
        st.binary(max_size=60),
    ),
)


@settings(max_examples=60, deadline=None)
@given(_garbage)
def test_any_bytes_from_the_server_end_in_a_response_or_an_h1_error(raw: bytes) -> None:
    async def main() -> None:
        async with LoopbackHTTPServer(lambda request: RawReply(raw)) as server:
            http = client(total_s=2.0)
            try:
                reply = await http.post(server.url + "/x", b"{}")
            except h1.H1Error:
                pass
            else:
                assert 200 <= reply.status <= 599
            finally:
                await http.aclose()

    asyncio.run(main())
