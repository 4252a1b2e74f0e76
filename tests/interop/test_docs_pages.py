"""The examples on the interop pages run as written (await at top level included)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"


def _blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), re.S)


async def _run(source: str) -> dict:
    namespace: dict = {}
    exec(
        "async def __example():\n" + textwrap.indent(source, "    ") + "\n    return locals()\n",
        namespace,
    )
    return await namespace["__example"]()


async def test_the_langgraph_page_example_runs() -> None:
    pytest.importorskip("langgraph")
    found = await _run(_blocks("harness-langgraph.md")[0])
    rollout = found["rollout"]
    assert rollout.ok, rollout.failure
    assert [c.request.agent for c in rollout.trajectory.model_calls] == ["agent"]
    assert rollout.trajectory.final_text == "Done."


async def test_the_mcp_page_examples_run() -> None:
    pytest.importorskip("mcp")
    served = await _run(_blocks("mcp.md")[0])
    assert not served["result"].is_error
    assert served["server"].final_state() is None
    built = await _run(_blocks("mcp.md")[1])
    assert built["env"].name == "mcp"
