"""`math_with_code`: math problems solved with a Python tool whose globals last the rollout.

NeMo Gym's `math_with_code`: the model may call `execute_python(code)` as often as it
likes; each call sees the names earlier calls of the same rollout defined. The tool is
NeMo Gym's: the same preloaded names (`np`/`numpy`, `scipy`, `pd`/`pandas`), the same
short list of builtins plus `__import__`, the code run as `exec(code, globals, locals)`
with a 10 s alarm, and the same reply, a JSON object `{"success", "stdout", "stderr",
"error_message", "result"}` (`result`: the value of a last line that is a bare
expression). Its restrictions are not a security boundary (`__import__` reaches
everything); the sandbox is. NeMo Gym keeps one worker process per session; here every
call runs in the episode's sandbox, which replays the rollout's earlier calls first
(their output dropped, `random` and numpy's global generator seeded the same each time,
so seeded or not a deterministic cell recomputes the same values) and then the new one.

The reward (`verify_boxed_with_code`) is NeMo Gym's `verify`: the last `\\boxed{}` of the
last assistant message that has one, else of the last tool output whose `stdout` has
one; matched after stripping `\\( \\)`, `$ $` and `\\text{}` wrappers and whitespace,
or as numbers within 1e-6 (relative to the expected value, at least 1e-6 absolute).
The tool's output is the policy's own text either way (it writes the code), so nothing
the sandboxed code forges changes what the verifier trusts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import ToolLoop
from nemo_gym.protocols import Sandbox, SandboxProvider
from nemo_gym.records import (
    Message,
    ResourceLimits,
    Rewards,
    SandboxSpec,
    Task,
    ToolCall,
    ToolSpec,
    Trajectory,
)
from nemo_gym.tools import Tool, ToolArgumentsError

__all__ = ["MathWithCode", "answers_match", "last_boxed", "verify_boxed_with_code"]

# NeMo Gym's `max_execution_time` (configs/math_with_code.yaml): the alarm on each call.
CALL_TIMEOUT_S = 10
_SLACK_S = 5.0
# numpy, scipy and pandas together map more address space than the sandbox default. The
# CPU limit is a backstop above the wall-clock budget of a call with its replays (the
# sandbox default, 10 s, ended a 10 s busy loop by SIGXCPU before its own deadline on an
# idle machine); a process it kills reads as timed out all the same.
_LIMITS = ResourceLimits(cpu_seconds=120.0, memory_bytes=4 << 30, processes=64)
_CPU_KILLED = (-24, 128 + 24)  # SIGXCPU, as a signal or as a shell's exit status
_THREADS = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}

TOOL = ToolSpec(
    name="execute_python",
    description=(
        "Execute Python code to perform calculations. You have access to numpy, scipy, "
        "pandas and basic math operations."
    ),
    parameters={
        "properties": {
            "code": {
                "type": "string",
                "title": "Python Code",
                "description": "The Python code to execute for the calculation.",
            }
        },
        "type": "object",
        "required": ["code"],
        "additionalProperties": False,
    },
)

# Runs inside the sandbox: reads {"cells", "code", "seed", "timeout"} on stdin, replays
# the cells silently, runs `code` and writes its report as the last line of stdout.
# The builtins, the globals/locals split and the last-expression rule are NeMo Gym's.
_DRIVER = r"""
import io, json, random, signal, sys
from contextlib import redirect_stderr, redirect_stdout

request = json.loads(sys.stdin.read())
out = sys.stdout
g = {"__builtins__": {
    "print": print, "len": len, "str": str, "int": int, "float": float, "list": list,
    "dict": dict, "tuple": tuple, "set": set, "min": min, "max": max, "sum": sum,
    "abs": abs, "range": range, "enumerate": enumerate, "zip": zip,
    "__import__": __import__,
}}
random.seed(request["seed"])
try:
    import numpy
    numpy.random.seed(request["seed"])
    g["np"] = g["numpy"] = numpy
except ImportError:
    pass
for name, alias in (("scipy", "scipy"), ("pandas", "pd")):
    try:
        g[name] = g[alias] = __import__(name)
    except ImportError:
        pass
loc = {}

def _timed_out(signum, frame):
    raise TimeoutError("code timed-out")

signal.signal(signal.SIGALRM, _timed_out)

def _last_value(code):
    line = code.strip().split("\n")[-1].strip()
    if line.startswith(("print", "import", "from", "def", "class", "if", "for", "while",
                        "try", "with")):
        return None
    try:
        return str(eval(line, g, loc))
    except Exception:
        return None

def run(code):
    stdout, stderr = io.StringIO(), io.StringIO()
    signal.alarm(request["timeout"])
    try:
        with redirect_stdout(stdout), redirect_stderr(stderr):
            exec(code, g, loc)
            result = _last_value(code)
    finally:
        signal.alarm(0)
    return stdout.getvalue(), stderr.getvalue(), result

for cell in request["cells"]:
    try:
        run(cell)
    except BaseException:
        pass
try:
    stdout, stderr, result = run(request["code"])
    report = {"ok": True, "stdout": stdout, "stderr": stderr, "result": result}
except TimeoutError as exc:
    report = {"ok": False, "error": str(exc), "dropped": True}
except Exception as exc:
    report = {"ok": False, "error": str(exc)}
except BaseException as exc:
    report = {"ok": False, "error": str(exc), "dropped": True}
out.write("\n" + request["mark"] + json.dumps(report) + "\n")
out.flush()
"""


def _reply(
    success: bool,
    stdout: str = "",
    stderr: str = "",
    error: str | None = None,
    result: str | None = None,
) -> str:
    """The tool's output as NeMo Gym's endpoint serialises `ExecutePythonResponse`."""
    body = {
        "success": success,
        "stdout": stdout,
        "stderr": stderr,
        "error_message": error,
        "result": result,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


_LIBRARIES = ("numpy", "scipy", "pandas")


def sandbox_spec(provider: SandboxProvider, image: str | None) -> SandboxSpec:
    """The tool's sandbox. NeMo Gym's tool has numpy, scipy and pandas: on the host
    providers (`local`, `process`) the directories they are installed in here are shown
    read-only and put on the path; a container provider needs an `image` with them."""
    import importlib.util
    import os

    env = dict(_THREADS)
    options: dict[str, Any] = {}
    if getattr(provider, "name", None) in ("local", "process"):
        found = (importlib.util.find_spec(name) for name in _LIBRARIES)
        dirs = sorted(
            {
                os.path.dirname(os.path.dirname(os.path.realpath(spec.origin)))
                for spec in found
                if spec is not None and spec.origin is not None
            }
        )
        if dirs:
            env["PYTHONPATH"] = os.pathsep.join(dirs)
            options["ro_binds"] = dirs
    # Not the default /work, whose tmpfs would hide a library directory under it.
    return SandboxSpec(
        image=image, limits=_LIMITS, env=env, options=options, workdir="/python_session"
    )


class PythonSession:
    """One rollout's Python: a sandbox started on the first call, and the calls so far."""

    def __init__(
        self, provider: SandboxProvider, image: str | None, seed: int, stack: AsyncExitStack
    ) -> None:
        self.provider, self.image, self.seed, self.stack = provider, image, seed, stack
        self.cells: list[str] = []
        self._sandbox: Sandbox | None = None

    async def _started(self) -> Sandbox:
        if self._sandbox is None:
            spec = sandbox_spec(self.provider, self.image)
            self._sandbox = await self.stack.enter_async_context(self.provider.start(spec))
        return self._sandbox

    async def execute(self, code: str) -> str:
        """Run `code` after the session's earlier calls; NeMo Gym's JSON reply."""
        import secrets

        sandbox = await self._started()
        mark = "@@nemo_gym_python:" + secrets.token_hex(8) + ":"
        request = {
            "cells": self.cells,
            "code": code,
            "seed": self.seed,
            "timeout": CALL_TIMEOUT_S,
            "mark": mark,
        }
        budget = CALL_TIMEOUT_S * (len(self.cells) + 1) + _SLACK_S
        done = await sandbox.exec(
            ["python3", "-c", _DRIVER], stdin=json.dumps(request), timeout=budget
        )
        found = done.stdout.rfind("\n" + mark)
        if done.timed_out or found < 0:
            # The process died or hung past every alarm: its state is gone, so the call
            # is not replayed (NeMo Gym's session worker is likewise lost).
            out_of_time = done.timed_out or done.exit_code in _CPU_KILLED
            why = "code timed-out" if out_of_time else f"exit code {done.exit_code}"
            return _reply(False, error=f"the Python process ended without a result ({why})")
        line = done.stdout[found + len(mark) + 1 :].split("\n", 1)[0]
        try:
            report = json.loads(line)
        except json.JSONDecodeError:
            return _reply(False, error="the Python process wrote an unreadable result")
        # A failed call keeps what it defined before failing, as in NeMo Gym; one that
        # timed out or exited is not replayed, or every later call would pay for it again.
        if not report.get("dropped"):
            self.cells.append(code)
        if report.get("ok"):
            return _reply(True, report["stdout"], report["stderr"], result=report["result"])
        return _reply(False, error=str(report.get("error")))


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces balanced), or None (NeMo Gym's)."""
    marker = "\\boxed{"
    start = text.rfind(marker)
    if start == -1:
        return None
    i = start = start + len(marker)
    depth = 1
    while i < len(text) and depth > 0:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
        i += 1
    if depth != 0:
        return None
    return text[start : i - 1].strip() or None


def _normalized(s: str) -> str:
    s = s.strip()
    if s.startswith("\\(") and s.endswith("\\)"):
        s = s[2:-2].strip()
    if s.startswith("$") and s.endswith("$") and len(s) > 1:
        s = s[1:-1].strip()
    if s.startswith("\\text{") and s.endswith("}"):
        s = s[6:-1].strip()
    return " ".join(s.split())


def answers_match(actual: str | None, expected: str) -> bool:
    """NeMo Gym's rule: equal once wrappers and whitespace go, or equal as numbers."""
    if actual is None:
        return False
    a, e = _normalized(actual), _normalized(expected)
    if a == e:
        return True
    try:
        fa, fe = float(a), float(e)
    except (ValueError, OverflowError):
        return False
    return abs(fa - fe) < 1e-6 * max(1.0, abs(fe))


def _tool_stdout(output: str) -> str:
    try:
        return str(json.loads(output).get("stdout", ""))
    except (json.JSONDecodeError, AttributeError):
        return output


async def verify_boxed_with_code(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the reply's answer (else the tool output's) matches the task's answer (the
    row's `expected_result`)."""
    produced = trajectory.messages[len(task.messages) :]
    actual = None
    for message in reversed(produced):
        if message.role == "assistant":
            actual = last_boxed(message.content or "")
            if actual is not None:
                break
    if actual is None:
        for message in reversed(produced):
            if message.role == "tool":
                actual = last_boxed(_tool_stdout(message.content or ""))
                if actual is not None:
                    break
    matched = answers_match(actual, str(task.answer))
    return Rewards(
        reward=float(matched),
        components={"accuracy": float(matched)},
        metadata={"extracted_answer": actual},
    )


class MathWithCode(DatasetEnv):
    """Math with a Python tool that keeps its globals across a rollout's calls; the
    answer is the last `\\boxed{}` of the reply, else of the tool's output.

    Rows are NeMo Gym's `math_with_code` layout: `responses_create_params` (`input`,
    `tools`) and `expected_result`. `provider` names the sandbox the tool runs in
    (`image`: a container provider's image, with numpy, scipy and pandas); `max_turns`
    is NeMo Gym's agent `max_steps` (3). Ships NeMo Gym's 5 example rows.
    """

    name = "math_with_code"
    version = "1"
    domain = "math"
    requires = ("sandbox",)
    verification = "the last \\boxed{} of the reply, else of the Python tool's output"
    source = "NeMo Gym's math_with_code example rows (OpenMathReasoning problems)"
    license = "Apache-2.0"
    sample = "math/data/math_with_code.jsonl"

    def __init__(
        self,
        *,
        provider: str | SandboxProvider = "local",
        image: str | None = None,
        max_turns: int = 3,
        path: str | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        super().__init__(
            verify_boxed_with_code,
            path=path,
            tasks=tasks,
            # The calls share one session: run them in order, as NeMo Gym's rows ask.
            harness=ToolLoop(max_turns=max_turns, parallel_tool_calls=False),
        )
        self.provider_name = provider
        self.image = image
        self.max_turns = max_turns
        self._provider: SandboxProvider | None = None

    def provider(self) -> SandboxProvider:
        if self._provider is None:
            if isinstance(self.provider_name, str):
                from nemo_gym.sandbox import get

                self._provider = get(self.provider_name)
            else:
                self._provider = self.provider_name
        return self._provider

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, _ = prompt_of(row)  # its one tool is `TOOL`
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            answer=row.require("expected_result", str),
        )

    async def open(self, task: Task) -> BasicEpisode:
        # One seed per task, so a rerun of a rollout replays to the same values.
        seed = int.from_bytes(hashlib.sha256(task.id.encode()).digest()[:4], "big")
        stack = AsyncExitStack()
        session = PythonSession(self.provider(), self.image, seed, stack)

        async def execute_python(**arguments: Any) -> str:
            code = arguments.get("code")
            if not isinstance(code, str):
                raise ToolArgumentsError("code: a string of Python source is required")
            return await session.execute(code)

        episode = BasicEpisode([Tool(spec=TOOL, fn=execute_python)], state=session.cells)
        episode.on_close(stack.aclose)
        return episode

    def oracle(self, task: Task) -> Turns:
        """The answer set in one call, printed boxed by the next (it needs the first's
        globals), then stated without a box: the reward comes from the tool's output."""
        answer = _normalized(str(task.answer))
        calls = [
            ToolCall(
                id="c0", name="execute_python", arguments=json.dumps({"code": f"a = {answer!r}"})
            ),
            ToolCall(
                id="c1",
                name="execute_python",
                arguments=json.dumps({"code": 'print("\\\\boxed{" + a + "}")'}),
            ),
        ]
        return [
            Message.assistant(tool_calls=(calls[0],)),
            Message.assistant(tool_calls=(calls[1],)),
            Message.assistant("That is the answer printed above."),
        ]

    def wrong(self, task: Task) -> Turns:
        answer = _normalized(str(task.answer))
        return [Message.assistant(f"\\boxed{{{answer} + 1}}")]

    async def aclose(self) -> None:
        provider, self._provider = self._provider, None
        close = getattr(provider, "aclose", None)
        if close is not None and isinstance(self.provider_name, str):
            await close()
