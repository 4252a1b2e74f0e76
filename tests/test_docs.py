"""Every code block in README.md and docs/*.md runs as written.

Blocks are read from the Markdown itself (never copied into a test). A block that cannot
run standalone on a CPU machine without network says so on the line directly above its
fence: `<!-- skip-test: the reason -->`. The blocks of one page run in order in one
namespace, in a fresh process whose working directory is an empty temporary one:

- ```python blocks run as a script would (top-level `await` allowed, as in a notebook);
  a page whose blocks define `test_*` functions is instead run by pytest as a test
  module, twice: with nothing but pytest (and nemo_gym's plugin), and with
  pytest-asyncio installed in its default strict mode, as in a user's project.
- ```bash blocks run under `bash -euo pipefail`, with `gym` on the PATH.

A failure names the page and the line of the block's fence; tracebacks carry the page's
own line numbers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.models import ScriptedModel

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
RUNNABLE = ("python", "bash")
_FENCE = re.compile(r"^\s*```(\S*)\s*$")
_SKIP = re.compile(r"^<!--\s*skip-test:(.*?)-->\s*$")
# Per page: generous for a page that loads the local model, far below a hang.
PAGE_TIMEOUT_S = 240


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None  # the reason given, when marked skip-test

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of `page`, with the skip-test reason written above each."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        above = _SKIP.match(lines[index - 1].strip()) if index else None
        found.append(
            Block(
                page=page,
                line=index + 1,
                lang=opening.group(1),
                code=textwrap.dedent("\n".join(lines[index + 1 : end]) + "\n"),
                skip=above.group(1).strip() if above else None,
            )
        )
        index = end + 1
    return found


def python_blocks(name: str) -> list[str]:
    """The code of the ```python blocks of docs/`name`, in order."""
    return [b.code for b in blocks(DOCS / name) if b.lang == "python"]


def _runnable(page: Path, lang: str) -> list[Block]:
    return [b for b in blocks(page) if b.lang == lang and b.skip is None]


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


PYTHON_PAGES = [p for p in PAGES if _runnable(p, "python")]
BASH_PAGES = [p for p in PAGES if _runnable(p, "bash")]


def _environment(tmp_path: Path) -> dict[str, str]:
    """A user's environment: nemo_gym importable, `gym` on the PATH, no test settings."""
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    gym_cli = bin_dir / "gym"
    gym_cli.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nemo_gym.cli.main "$@"\n')
    gym_cli.chmod(0o755)
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "NEMO_GYM_ENV_PATH", "COV_"))
    }
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


# Runs the blocks given as JSON on stdin in one namespace; exits 3 naming the failed block.
_SCRIPT_RUNNER = textwrap.dedent(
    """
    import ast, asyncio, inspect, json, sys, traceback
    blocks = json.load(sys.stdin)
    namespace = {"__name__": "__main__"}
    loop = asyncio.new_event_loop()
    for block in blocks:
        # Padding puts the block at its own line of the page in tracebacks.
        source = "\\n" * block["line"] + block["code"]
        try:
            code = compile(source, block["page"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)
            if inspect.isawaitable(result):
                loop.run_until_complete(result)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED BLOCK {block['page']}:{block['line']}", file=sys.stderr)
            sys.exit(3)
    """
)


def _failure(kind: str, page: Path, done: subprocess.CompletedProcess[str]) -> str:
    marker = re.search(r"FAILED BLOCK (\S+)", done.stderr)
    where = marker.group(1) if marker else str(page.relative_to(ROOT))
    # Under pytest the module keeps the page's line numbers: name the block they fall in.
    lines = [int(n) for n in re.findall(r"test_\w+_page\.py:(\d+)", done.stdout)]
    if not marker and lines:
        starts = [b.line for b in _runnable(page, "python") if b.line < lines[0]]
        where = f"{page.relative_to(ROOT)}:{starts[-1] if starts else lines[0]}"
    output = (done.stdout[-3000:] + "\n" + done.stderr[-6000:]).strip()
    return f"{kind} block at {where} failed (exit {done.returncode}):\n{output}"


def _defines_tests(page: Path) -> bool:
    return any(re.search(r"^(async )?def test_", b.code, re.M) for b in _runnable(page, "python"))


@pytest.mark.parametrize("page", [p for p in PYTHON_PAGES if not _defines_tests(p)], ids=_id)
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    payload = [
        {"page": str(b.page.relative_to(ROOT)), "line": b.line, "code": b.code}
        for b in _runnable(page, "python")
    ]
    env = _environment(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT_RUNNER],
        input=json.dumps(payload),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_S,
    )
    assert done.returncode == 0, _failure("python", page, done)
    _check_stated(page, done.stdout)


_PYTEST_MODES = {
    # Nothing but pytest: nemo_gym's plugin runs the marked async tests.
    "pytest-only": ["-p", "no:asyncio"],
    # pytest-asyncio installed, in its default (strict) mode: unmarked async tests are
    # not its business, and nemo_gym's plugin must still run the marked ones.
    "pytest-asyncio-strict": ["-p", "asyncio", "-o", "asyncio_mode=strict"],
}


@pytest.mark.parametrize("mode", sorted(_PYTEST_MODES))
@pytest.mark.parametrize("page", [p for p in PYTHON_PAGES if _defines_tests(p)], ids=_id)
def test_pages_with_tests_pass_under_pytest(page: Path, mode: str, tmp_path: Path) -> None:
    if mode == "pytest-asyncio-strict":
        pytest.importorskip("pytest_asyncio")
    parts = []
    for block in _runnable(page, "python"):
        # Each block at its own line of the page, so a failure points into the page.
        used = sum(part.count("\n") for part in parts)
        parts.append("\n" * max(0, block.line - used) + block.code)
    stem = re.sub(r"\W", "_", page.stem)
    module = tmp_path / f"test_{stem}_page.py"
    module.write_text("".join(parts))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = _environment(tmp_path)
    # -s: what the page's blocks print reaches stdout, to be checked against the page.
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", module.name]
    done = _run([*command, *_PYTEST_MODES[mode]], tmp_path, env)
    assert done.returncode == 0, _failure(f"python (pytest, {mode})", page, done)
    _check_stated(page, done.stdout)
    assert re.search(r"\b\d+ passed\b", done.stdout) and " skipped" not in done.stdout, done.stdout


@pytest.mark.parametrize("page", BASH_PAGES, ids=_id)
def test_bash_blocks_run(page: Path, tmp_path: Path) -> None:
    env = _environment(tmp_path)
    for block in _runnable(page, "bash"):
        done = _run(["bash", "-euo", "pipefail", "-c", block.code], tmp_path, env)
        assert done.returncode == 0, _failure("bash", page, done).replace(
            str(page.relative_to(ROOT)), block.where, 1
        )


def test_every_skip_gives_a_reason_and_sits_on_a_fence() -> None:
    problems = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for index, line in enumerate(lines):
            marker = _SKIP.match(line.strip())
            if marker is None:
                continue
            where = f"{page.relative_to(ROOT)}:{index + 1}"
            if not marker.group(1).strip():
                problems.append(f"{where}: skip-test without a reason")
            following = lines[index + 1] if index + 1 < len(lines) else ""
            if not (_FENCE.match(following) and following.strip() != "```"):
                problems.append(f"{where}: skip-test not directly above a code fence")
    assert not problems, "\n".join(problems)


def test_the_block_reader_keeps_page_lines_and_reasons(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n```python\nx = 1\n```\n\n"
        "<!-- skip-test: needs a GPU -->\n```bash\nnvidia-smi\n```\n"
    )
    first, second = blocks(page)
    assert (first.line, first.lang, first.code, first.skip) == (3, "python", "x = 1\n", None)
    assert (second.line, second.lang, second.skip) == (8, "bash", "needs a GPU")


def _stated_outputs(page: Path) -> list[str]:
    """What the page's runnable blocks say they print: `print(...)  # prints VALUE`."""
    return [
        value
        for b in _runnable(page, "python")
        for value in re.findall(r"^\s*print\(.*\)\s+#\s*prints\s+(\S+)", b.code, re.M)
    ]


def _check_stated(page: Path, stdout: str) -> None:
    printed = [line.strip() for line in stdout.splitlines()]
    for value in _stated_outputs(page):
        assert value in printed, f"{_id(page)} says a block prints {value}; it printed {printed}"


def test_the_readme_states_what_its_examples_print() -> None:
    text = (ROOT / "README.md").read_text()
    assert re.search(r"Python 3\.11", text), "the README states the Python version"
    custom = next(b for b in blocks(ROOT / "README.md") if "gym.Env(" in b.code)
    assert _stated_outputs(ROOT / "README.md"), "the custom-env example states its output"
    assert "# prints " in custom.code


# --- the examples below check more than "it runs": what the page says it does --------


async def test_environments_page_example_runs() -> None:
    namespace: dict = {}
    exec(next(b for b in python_blocks("environments.md") if "class Cities" in b), namespace)
    env = namespace["env"]
    assert gym.check_env(env).ok
    call = gym.Message.assistant(
        tool_calls=(gym.ToolCall(id="1", name="lookup", arguments='{"city": "Paris"}'),)
    )
    (rollout,) = [r async for r in gym.rollouts(env, ScriptedModel([call, "It is in France."]))]
    assert rollout.ok and rollout.reward == 1.0
    assert rollout.trajectory.tool_results[0].output == "France"


async def test_runner_page_tool_state_example_runs() -> None:
    namespace: dict = {}
    block = next(b for b in python_blocks("runner.md") if "class Counter" in b)
    exec("import nemo_gym as gym\n" + textwrap.dedent(block), namespace)

    async def verify(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return float(trajectory.final_state["total"] == task.answer)

    env = namespace["Counter"](verify)
    call = gym.Message.assistant(
        tool_calls=(gym.ToolCall(id="1", name="add", arguments='{"amount": 2}'),)
    )
    (rollout,) = [r async for r in gym.rollouts(env, ScriptedModel([call, call, "done"]))]
    assert rollout.ok and rollout.reward == 1.0


def test_runner_page_names_every_field_a_newcomer_meets() -> None:
    text = (DOCS / "runner.md").read_text()
    from nemo_gym.collect import RunResult

    names = [
        *gym.RunMetrics.model_fields,
        *gym.ToolResult.model_fields,
        *gym.TokenTrace.model_fields,
        *gym.Failure.model_fields,
        *gym.ModelCall.model_fields,
        *(n for n in vars(RunResult) if not n.startswith("_")),
    ]
    spans = re.findall(r"`([^`]*)`", text)
    missing = [n for n in names if not any(re.search(rf"\b{n}\b", span) for span in spans)]
    assert not missing, f"docs/runner.md does not name {missing}"


def test_registry_page_spec_example_is_true() -> None:
    env = gym.make("arithmetic", seed=3)
    spec = gym.registry.spec_of(env, "env")
    text = (DOCS / "registry.md").read_text()
    assert repr(spec).replace("Spec(", "").replace(")", "") in " ".join(text.split()).replace(
        "# ", ""
    ).replace("Spec(", "").replace(")", "")
    assert gym.make(spec).to_spec() == spec


async def test_writing_a_harness_page_example_runs() -> None:
    blocks_ = python_blocks("writing-a-harness.md")
    namespace: dict = {}
    exec(next(b for b in blocks_ if "class AskTwice" in b), namespace)
    test = next(b for b in blocks_ if "async def test_ask_twice" in b)
    exec(test, namespace)
    await namespace["test_ask_twice"]()
