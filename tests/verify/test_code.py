"""CodeVerifier: extraction, output matching, test layouts, outcomes, C/C++, the pool."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Message, Task, Trajectory
from nemo_gym.sandbox.local import LocalProvider, unavailable_reason
from nemo_gym.verify.code import CodeVerifier, extract_code, load_tests, outputs_match

pytestmark = pytest.mark.timeout(120)

ADD_TESTS = [{"input": f"{i} {i + 1}\n", "output": f"{2 * i + 1}\n"} for i in range(5)]
ADD = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n"


def reply(code: str, lang: str = "python") -> Trajectory:
    code = code if code.endswith("\n") else code + "\n"
    text = f"Here it is:\n```{lang}\n{code}```\nDone."
    return Trajectory(messages=[Message.user("solve"), Message.assistant(text)])


def task(**metadata: object) -> Task:
    return Task(prompt="solve", metadata=metadata)


# ---------------------------------------------------------------- pure functions


@given(st.text(alphabet=st.characters(blacklist_characters="`~\r"), max_size=200))
def test_extract_code_takes_the_fenced_body(code: str) -> None:
    body = code if code.endswith("\n") or not code else code + "\n"
    text = f"```cpp\nint x;\n```\nthinking...\n```python\n{body}```\ntrailing words"
    assert extract_code(text, "python") == body
    assert extract_code(text, "cpp") == "int x;\n"


def test_extract_code_fallbacks() -> None:
    assert extract_code("```\nprint(1)\n```", "python") == "print(1)\n"
    assert extract_code("  print(2)  ", "python") == "print(2)"
    assert extract_code("```py\na\n```\n```python\nb\n```", "python") == "b\n"


@given(
    st.lists(st.integers(-(10**20), 10**20) | st.from_regex(r"[a-z]{1,5}", fullmatch=True)),
    st.sampled_from([" ", "\n", " \n", "\t"]),
    st.sampled_from(["", "\n", "  \n\n", " "]),
)
def test_outputs_match_ignores_whitespace_layout(tokens: list, sep: str, tail: str) -> None:
    expected = "\n".join(str(t) for t in tokens) + "\n"
    assert outputs_match(sep.join(str(t) for t in tokens) + tail, expected)


@given(st.floats(-1e6, 1e6, allow_nan=False))
def test_outputs_match_tolerates_float_formatting(x: float) -> None:
    assert outputs_match(f"{x:.9f}", repr(x))
    assert outputs_match(f"{x:.7e}", f"{x:.10f}")
    off = x + max(1e-3, abs(x) * 1e-5)  # well past both the relative and absolute 1e-6
    assert not outputs_match(f"{off:.9f}", repr(x))


def test_outputs_match_is_exact_for_integers_and_words() -> None:
    assert not outputs_match("10000000000000000001", "10000000000000000000")
    assert not outputs_match("1", "1.0000001e0") or outputs_match("1.0", "1.0000001e0")
    assert not outputs_match("yes", "Yes")
    assert not outputs_match("1 2", "1 2 3")


def test_load_tests_layouts() -> None:
    apps = load_tests(
        task(input_output=json.dumps({"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"}))
    )
    assert apps.fn_name == "add" and apps.tests[0].kind == "functional"
    assert apps.tests[0].input == [1, 2]
    lcb = load_tests(
        task(
            public_test_cases=json.dumps(
                [{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"}]
            ),
            metadata=json.dumps({"func_name": "append"}),
        )
    )
    assert lcb.tests[0].input == [[1, 2], 3] and lcb.tests[0].output == [1, 2, 3]
    mbpp = load_tests(task(test_list=["assert f(1) == 1"], test_setup_code="import math"))
    assert mbpp.tests[0].kind == "assert" and mbpp.setup == "import math"
    with pytest.raises(ConfigError, match="no tests"):
        load_tests(task())
    with pytest.raises(ConfigError, match="'input' and 'output'"):
        load_tests(task(tests=[{"input": "1"}]))
    with pytest.raises(ConfigError, match="identifier"):
        load_tests(task(tests=[{"input": "[]", "output": "1"}], fn_name="a b"))


# ---------------------------------------------------------------- end to end


@pytest.fixture
async def verifier():
    async with CodeVerifier(provider="process", timeout_per_test=2, pool_size=2) as v:
        yield v


async def test_right_and_wrong(verifier: CodeVerifier) -> None:
    right = await verifier.verify(task(tests=ADD_TESTS), reply(ADD))
    assert right.reward == 1.0 and right.metadata["n_passed"] == 5
    assert all(t["status"] == "passed" for t in right.metadata["tests"])
    wrong = await verifier.verify(task(tests=ADD_TESTS), reply(ADD.replace("a + b", "a * b")))
    assert wrong.reward == 0.0
    first = wrong.metadata["tests"][0]
    assert first["status"] == "wrong_answer" and first["got"] == "0\n"


async def test_partial_credit() -> None:
    code = ADD + "if a > 2: raise SystemExit(1)\n"
    async with CodeVerifier(provider="process", partial_credit=True) as v:
        result = await v.verify(task(tests=ADD_TESTS), reply(code))
    assert result.reward == pytest.approx(3 / 5)
    assert result.components == {"accuracy": 0.0, "pass_rate": pytest.approx(0.6)}
    statuses = [t["status"] for t in result.metadata["tests"]]
    assert statuses == ["passed"] * 3 + ["runtime_error"] * 2


async def test_syntax_error_is_reward_zero_with_the_message(verifier: CodeVerifier) -> None:
    result = await verifier.verify(task(tests=ADD_TESTS), reply("def f(:\n    pass\n"))
    assert result.reward == 0.0
    assert "SyntaxError" in result.metadata["compile_error"]
    assert {t["status"] for t in result.metadata["tests"]} == {"not_run"}


async def test_infinite_loop_times_out_and_stops_early(verifier: CodeVerifier) -> None:
    start = time.monotonic()
    result = await verifier.verify(task(tests=ADD_TESTS), reply("while True:\n    pass\n"))
    assert time.monotonic() - start < 10, "all-or-nothing scoring stops at the first failure"
    assert result.reward == 0.0
    assert result.metadata["tests"][0]["status"] == "timeout"
    assert result.metadata["tests"][1]["status"] == "not_run"


async def test_total_deadline_bounds_a_partial_credit_run() -> None:
    async with CodeVerifier(
        provider="process", partial_credit=True, timeout_per_test=1, timeout_total=2.5
    ) as v:
        start = time.monotonic()
        result = await v.verify(task(tests=ADD_TESTS * 4), reply("import time\ntime.sleep(5)"))
    assert time.monotonic() - start < 8
    statuses = [t["status"] for t in result.metadata["tests"]]
    assert "timeout" in statuses and "not_run" in statuses and result.reward == 0.0


async def test_crash_is_a_runtime_error_with_stderr(verifier: CodeVerifier) -> None:
    result = await verifier.verify(task(tests=ADD_TESTS), reply("print(1 / 0)\n"))
    first = result.metadata["tests"][0]
    assert first["status"] == "runtime_error" and "ZeroDivisionError" in first["stderr"]


async def test_function_tests(verifier: CodeVerifier) -> None:
    tests = [
        {"input": "[1, 2]\n[3]", "output": "[1, 2, 3]"},
        {"input": "[]\n[0.1]", "output": "[0.1000000001]"},
    ]
    plain = "def join(a, b):\n    print('debug noise')\n    return a + b\n"
    result = await verifier.verify(task(tests=tests, fn_name="join"), reply(plain))
    assert result.reward == 1.0, result.metadata
    leetcode = "class Solution:\n    def join(self, a, b):\n        return b + a\n"
    wrong = await verifier.verify(task(tests=tests, fn_name="join"), reply(leetcode))
    assert wrong.metadata["tests"][0]["got"] == "[3, 1, 2]"
    apps = task(input_output={"inputs": [[2, 3]], "outputs": [[5]], "fn_name": "add"})
    wrapped = await verifier.verify(apps, reply("def add(a, b):\n    return a + b\n"))
    assert wrapped.reward == 1.0
    missing = await verifier.verify(apps, reply("def other():\n    pass\n"))
    assert "NameError" in missing.metadata["tests"][0]["stderr"]


async def test_assert_tests(verifier: CodeVerifier) -> None:
    mbpp = task(
        test_list=["assert sq(3) == 9", "assert sq(-2) == 4", "assert root(16) == 4"],
        test_setup_code="import math",
    )
    code = "def sq(x):\n    return x * x\ndef root(x):\n    return math.isqrt(x)\n"
    assert (await verifier.verify(mbpp, reply(code))).reward == 1.0
    bad = await verifier.verify(mbpp, reply(code.replace("x * x", "x + x")))
    assert bad.reward == 0.0 and "AssertionError" in bad.metadata["tests"][0]["stderr"]


async def test_solution_cannot_forge_or_break_its_way_to_reward(verifier: CodeVerifier) -> None:
    kill = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    result = await verifier.verify(task(tests=ADD_TESTS), reply(kill))
    assert result.reward == 0.0 and "sandbox broke" in result.metadata["error"]
    # the verifier still works afterwards, on a fresh sandbox
    assert (await verifier.verify(task(tests=ADD_TESTS), reply(ADD))).reward == 1.0


async def test_sandboxes_are_reused_with_a_clean_workdir(verifier: CodeVerifier) -> None:
    probe = "import os\nprint(sorted(os.listdir('.')))\nopen('left_behind.txt', 'w').write('x')\n"
    one_test = task(tests=[{"input": "", "output": "[]"}])
    first = await verifier.verify(one_test, reply(probe))
    second = await verifier.verify(one_test, reply(probe))
    assert first.reward == 1.0 and second.reward == 1.0, second.metadata
    pool = verifier._pool
    assert pool is not None and len(pool.idle) == 1


async def test_no_code_and_no_tests(verifier: CodeVerifier) -> None:
    empty = await verifier.verify(task(tests=ADD_TESTS), Trajectory(messages=[]))
    assert empty.reward == 0.0 and empty.metadata["error"] == "no code in the response"
    with pytest.raises(VerifierError, match="no tests"):
        await verifier.verify(task(), reply(ADD))


async def test_a_sandbox_that_cannot_start_is_a_verifier_error() -> None:
    broken = LocalProvider(bwrap="/nonexistent/bwrap")
    async with CodeVerifier(provider=broken) as v:
        with pytest.raises(VerifierError, match="could not start") as info:
            await v.verify(task(tests=ADD_TESTS), reply(ADD))
    assert info.value.code == "sandbox_unavailable"


def test_bad_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="language"):
        CodeVerifier(language="cobol")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timeout_per_test"):
        CodeVerifier(timeout_per_test=0, provider="process")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
async def test_c_and_cpp() -> None:
    c = (
        '#include <stdio.h>\nint main(void){long a,b; scanf("%ld %ld",&a,&b);'
        ' printf("%ld\\n", a+b); return 0;}\n'
    )
    cpp = "#include <iostream>\nint main(){long a,b; std::cin>>a>>b; std::cout<<a+b<<'\\n';}\n"
    async with CodeVerifier("c", provider="process") as v:
        assert (await v.verify(task(tests=ADD_TESTS), reply(c, "c"))).reward == 1.0
        broken = await v.verify(task(tests=ADD_TESTS), reply("int main( {", "c"))
        assert broken.reward == 0.0 and "error" in broken.metadata["compile_error"]
    async with CodeVerifier("cpp", provider="process") as v:
        assert (await v.verify(task(tests=ADD_TESTS), reply(cpp, "cpp"))).reward == 1.0


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
async def test_local_provider_end_to_end() -> None:
    async with CodeVerifier(provider="local") as v:
        assert (await v.verify(task(tests=ADD_TESTS), reply(ADD))).reward == 1.0
        net = "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\nprint(3)"
        result = await v.verify(task(tests=[{"input": "", "output": "3"}]), reply(net))
        assert result.reward == 0.0


# ---------------------------------------------------------------- leaving early


# Each of these ends (or tries to end) the run with exit code 0, or fakes what a pass
# looks like, without the test ever passing. None may score.
EARLY_EXITS = {
    "sys.exit(0)": "import sys\nsys.exit(0)\n",
    "raise SystemExit": "raise SystemExit\n",
    "os._exit(0)": "import os\nos._exit(0)\n",
    "exit()": "exit()\n",
    "quit()": "quit()\n",
    "close stdout then exit": "import os, sys\nos.close(1)\nos.close(2)\nsys.exit(0)\n",
    "kill the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "atexit": "import atexit, os, sys\natexit.register(os._exit, 0)\nsys.exit(0)\n",
    "SIGTERM self with handler": (
        "import os, signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: os._exit(0))\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
    ),
    "guessed markers": (
        "import sys\nfor m in ('@@nemo_gym_done_@@', 'OK', 'PASSED', '@@nemo_gym_result_@@3'):\n"
        "    print(m)\nsys.exit(0)\n"
    ),
    "override AssertionError": (
        "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n"
        "def sq(x):\n    return 0\n"
    ),
    "replace exec and compile": (
        "import builtins\nbuiltins.exec = lambda *a, **k: None\n"
        "builtins.compile = lambda *a, **k: None\ndef sq(x):\n    return 0\n"
    ),
    "empty stdin": "import io, sys\nsys.stdin = io.StringIO('')\ndef sq(x):\n    return 0\n",
    "trace skips the test": (
        "import sys\ndef _t(frame, event, arg):\n"
        "    if frame.f_code.co_filename == '<test>':\n        raise SystemExit(0)\n    return _t\n"
        "sys.settrace(_t)\ndef sq(x):\n    return 0\n"
    ),
    "exit inside the function": "import sys\ndef sq(x):\n    sys.exit(0)\n",
    "os._exit inside the function": "import os\ndef sq(x):\n    os._exit(0)\n",
}
ASSERT_TASK = {"test_list": ["assert sq(3) == 9", "assert sq(-2) == 4"]}
FUNCTION_TASK = {
    "tests": [{"input": [3], "output": 9}, {"input": [4], "output": 16}],
    "fn_name": "sq",
}


class _NoFastPath:
    """A sandbox with only the `Sandbox` protocol (as docker or a plugin): one exec a test."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name in ("run_batch", "run_python"):
            raise AttributeError(name)
        return getattr(self._inner, name)


class _PlainProvider:
    name = "plain"

    def __init__(self) -> None:
        from nemo_gym.sandbox.process import ProcessProvider

        self._inner = ProcessProvider()

    async def create(self, spec: object = None) -> _NoFastPath:
        return _NoFastPath(await self._inner.create(spec))


@pytest.fixture(params=["worker", "exec"])
async def any_path_verifier(request: pytest.FixtureRequest):
    provider = "process" if request.param == "worker" else _PlainProvider()
    async with CodeVerifier(provider=provider, timeout_per_test=5, pool_size=1) as v:
        yield v


@pytest.mark.parametrize("layout", ["assert", "function"])
async def test_leaving_early_never_passes(any_path_verifier: CodeVerifier, layout: str) -> None:
    meta = ASSERT_TASK if layout == "assert" else FUNCTION_TASK
    honest = await any_path_verifier.verify(task(**meta), reply("def sq(x):\n    return x * x\n"))
    assert honest.reward == 1.0, honest.metadata
    for name, hack in EARLY_EXITS.items():
        result = await any_path_verifier.verify(task(**meta), reply(hack))
        assert result.reward == 0.0, (name, result.metadata)
        statuses = {t["status"] for t in result.metadata["tests"]}
        assert "passed" not in statuses, (name, statuses)


async def test_the_exec_path_leaves_stdin_whole_for_the_program() -> None:
    async with CodeVerifier(provider=_PlainProvider(), timeout_per_test=5, pool_size=1) as v:
        raw = "import os\na, b = map(int, os.read(0, 100).split())\nprint(a + b)\n"
        opened = "print(sum(map(int, open(0).read().split())))\n"
        for code in (raw, opened, ADD):
            result = await v.verify(task(tests=ADD_TESTS), reply(code))
            assert result.reward == 1.0, (code, result.metadata)
