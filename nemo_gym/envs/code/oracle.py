"""Oracle programs for code tasks: the reference solution, else a table of the tests.

A task without a reference solution (LiveCodeBench, NeMo Gym's code rows) still gets an
oracle: a program that answers each test input with its expected output. It proves the
tests and the verifier agree, which is what an oracle is for; it solves nothing else.
"""

from __future__ import annotations

import json

from nemo_gym.errors import ConfigError
from nemo_gym.records import Message, Task
from nemo_gym.verify.code import load_tests

__all__ = ["fenced", "oracle_program", "oracle_turns"]

_STDIN_TABLE = """import sys
_TABLE = json.loads({table!r})
_data = sys.stdin.read()
_out = _TABLE.get(_data)
if _out is None:
    _out = {{k.strip(): v for k, v in _TABLE.items()}}.get(_data.strip(), "")
sys.stdout.write(_out)
"""

_FUNCTION_TABLE = """_TABLE = json.loads({table!r})


def {fn}(*args):
    return _TABLE[json.dumps(list(args), sort_keys=True)]
"""


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def oracle_program(task: Task) -> str:
    """The reference solution of `task`, or a program that replays its tests' outputs."""
    reference = task.metadata.get("reference_solution")
    if reference:
        return str(reference)
    suite = load_tests(task)
    kinds = {t.kind for t in suite.tests}
    if kinds == {"stdin"}:
        table = {str(t.input): str(t.output) for t in suite.tests}
        return "import json\n" + _STDIN_TABLE.format(table=json.dumps(table))
    if kinds == {"functional"} and suite.fn_name:
        table = {json.dumps(t.input, sort_keys=True): t.output for t in suite.tests}
        return "import json\n" + _FUNCTION_TABLE.format(table=json.dumps(table), fn=suite.fn_name)
    raise ConfigError(f"task {task.id}: assertion tests need a reference_solution for an oracle")


def oracle_turns(task: Task) -> list[Message] | None:
    """The oracle's reply, or None for assertion tests without a reference solution (NeMo
    Gym's scicodepile rows): there is no program to replay then."""
    if not task.metadata.get("reference_solution") and "asserts" in task.metadata:
        return None
    return [Message.assistant(f"Here is my solution.\n\n{fenced(oracle_program(task))}")]
