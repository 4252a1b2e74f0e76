"""Credentials in a base_url are sent as basic auth and written nowhere.

`http://user:SECRET@host/v1` names a server behind basic auth. The secret must reach
the server and appear in none of run.json, rollouts.jsonl, failures.jsonl, the
metrics, the report, the logs or the adapter's repr, however the adapter was built.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.models import Anthropic, OpenAIChat
from nemo_gym.models.http import is_private_url
from nemo_gym.records import ModelResponse
from nemo_gym.registry import build
from nemo_gym.testing.httpserver import HTTPRequest, LoopbackHTTPServer, Reply
from nemo_gym.urls import split_credentials, without_credentials
from nemo_gym.wire import openai_chat

SECRET = "s3cr3t-Pa55"


def test_split_credentials() -> None:
    assert split_credentials(f"http://bob:{SECRET}@10.0.0.2:8000/v1") == (
        "http://10.0.0.2:8000/v1",
        "bob",
        SECRET,
    )
    assert split_credentials("http://127.0.0.1:8000/v1") == ("http://127.0.0.1:8000/v1", None, None)
    assert split_credentials("http://:p%40ss@h/v1") == ("http://h/v1", "", "p@ss")
    assert without_credentials("not a url, an @ sign") == "not a url, an @ sign"


@pytest.mark.parametrize("transport", ["fast", "sdk"])
@pytest.mark.parametrize("built", ["class", "registry"])
async def test_a_secret_in_base_url_is_used_as_auth_and_recorded_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, transport: str, built: str
) -> None:
    seen: list[HTTPRequest] = []
    calls = 0

    async def server(request: HTTPRequest) -> Reply:
        nonlocal calls
        seen.append(request)
        calls += 1
        if calls % 2 == 0:  # every other call fails: the failure rows are checked too
            return Reply(400, {"error": {"message": "no"}})
        reply = ModelResponse(message=gym.Message.assistant("4"))
        return Reply(200, openai_chat.build_response(reply, model="m"))

    caplog.set_level(logging.DEBUG)
    async with LoopbackHTTPServer(server) as http:
        url = http.url.replace("http://", f"http://bob:{SECRET}@") + "/v1"
        options = {"base_url": url, "transport": transport}
        if built == "class":
            model = OpenAIChat("m", **options)  # type: ignore[arg-type]
        else:
            model = build("model", "openai", model="m", **options)
        assert SECRET not in repr(model)
        env = gym.make("arithmetic")
        result = await gym.collect(env, model, output=tmp_path / "run", limit=4)
        await model.aclose()
    assert result.new == 4 and seen
    auth = base64.b64encode(f"bob:{SECRET}".encode()).decode()
    assert all(r.headers.get("authorization") == f"Basic {auth}" for r in seen)
    from nemo_gym.analysis import profile, write_report

    write_report(profile(tmp_path / "run"), tmp_path / "run" / "report.html")
    files = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert {"run.json", "rollouts.jsonl", "failures.jsonl", "report.html"} <= set(files)
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path.name
    assert "bob:" not in (tmp_path / "run" / "run.json").read_text()
    assert SECRET not in caplog.text


def test_anthropic_keeps_the_key_and_adds_basic_auth() -> None:
    model = Anthropic("c", base_url=f"http://u:{SECRET}@127.0.0.1:9/", api_key="k")
    assert SECRET not in repr(model) and SECRET not in str(model.to_spec())


@pytest.mark.parametrize(
    ("url", "private"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://10.1.2.3:8000/v1", True),
        ("http://192.168.0.7/v1", True),
        ("http://vllm:8000/v1", True),
        ("http://vllm.default.svc.cluster.local:8000/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://my-model.example.com/v1", False),
        ("http://8.8.8.8/v1", False),
    ],
)
def test_the_fast_transport_is_the_default_only_for_private_endpoints(
    url: str, private: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert is_private_url(url) is private
    model = OpenAIChat("m", base_url=url, api_key="k")
    assert model.transport == ("fast" if private else "sdk")
    assert OpenAIChat("m", base_url=url, api_key="k", transport="fast").transport == "fast"


def test_one_http_options_value_and_the_keyword_forms() -> None:
    from nemo_gym.errors import ConfigError
    from nemo_gym.models import HTTPOptions, OpenAICompletions, OpenAIResponses, Timeouts
    from nemo_gym.models.base import RetryPolicy

    shared = HTTPOptions(stream=True, timeout=30, max_concurrency=4, retry=RetryPolicy(2))
    url = "http://127.0.0.1:9/v1"
    for cls in (OpenAIChat, OpenAIResponses, OpenAICompletions):
        model = cls("m", base_url=url, http=shared, max_concurrency=8)
        assert model.stream and model.timeouts == Timeouts(total=30)
        assert model.max_concurrency == 8 and model.retry.max_attempts == 2  # keyword wins
    claude = Anthropic("c", base_url=url, http=shared)
    assert claude.stream and claude.http is shared
    # The keyword form, recorded in the spec as keywords and rebuilt from it.
    model = build("model", "openai", model="m", base_url=url, stream=True, timeout=12.0)
    spec = model.to_spec()
    assert spec.options["stream"] is True and build(spec).timeouts.total == 12.0
    rebuilt = build(OpenAIChat("m", base_url=url, http=shared).to_spec())
    assert rebuilt.stream and rebuilt.retry.max_attempts == 2 and rebuilt.max_concurrency == 4
    with pytest.raises(ConfigError, match="did you mean 'max_concurrency'"):
        OpenAIChat("m", base_url=url, max_concurency=4)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="max_concurrency must be >= 1"):
        HTTPOptions(max_concurrency=0)


def test_the_keyword_form_names_exactly_the_options_fields() -> None:
    import dataclasses

    from nemo_gym.models.http import HTTPKwargs, HTTPOptions

    assert set(HTTPKwargs.__annotations__) == {f.name for f in dataclasses.fields(HTTPOptions)}


async def test_a_per_request_base_url_with_credentials_is_refused_without_echoing_them() -> None:
    from nemo_gym.errors import ModelError
    from nemo_gym.records import ModelRequest

    model = OpenAIChat("m", base_url="http://127.0.0.1:9/v1")
    request = ModelRequest(
        messages=(gym.Message.user("hi"),), base_url=f"http://u:{SECRET}@127.0.0.1:9/v1"
    )
    with pytest.raises(ModelError, match="carries credentials") as caught:
        await model.generate(request)
    assert SECRET not in str(caught.value) and not caught.value.retryable
