"""Each adapter imports its library lazily and, without it, names the extra to install."""

from __future__ import annotations

import importlib
import sys

import pytest

from nemo_gym.errors import MissingDependency


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("nemo_gym.interop.langgraph", "langchain_core", "langgraph"),
        ("nemo_gym.harnesses.langgraph", "langgraph", "langgraph"),
        ("nemo_gym.interop.mcp", "mcp", "mcp"),
        ("nemo_gym.interop.openenv", "openenv", "openenv"),
        ("nemo_gym.interop.verifiers", "verifiers", "verifiers"),
    ],
)
def test_a_missing_library_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, blocked: str, extra: str
) -> None:
    for name in [m for m in sys.modules if m == blocked or m.startswith(blocked + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)  # `import blocked` now fails
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(MissingDependency, match=rf"pip install 'nemo-gym\[{extra}\]'"):
        importlib.import_module(module)


def test_import_nemo_gym_loads_no_interop_library() -> None:
    import subprocess

    code = (
        "import sys, nemo_gym, nemo_gym.harnesses, nemo_gym.interop, nemo_gym.interop.harbor;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'langchain_core', 'mcp', 'openenv', 'verifiers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_agent_tag_is_never_sent_to_a_backend() -> None:
    from nemo_gym.records import Message, ModelRequest
    from nemo_gym.wire import anthropic, openai_chat, openai_responses

    request = ModelRequest(messages=(Message.user("hi"),), agent="critic")
    for wire in (openai_chat, openai_responses, anthropic):
        body, _ = wire.build_request(request, model="m")
        assert "critic" not in repr(body), wire.__name__
