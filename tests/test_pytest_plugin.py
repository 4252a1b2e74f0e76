"""nemo_gym's pytest plugin runs only the async tests marked for it.

It loads in every pytest session of every project that installs nemo_gym, so it must
not take over another project's `async def` tests; a test marked `nemo_gym` runs with
nothing but pytest, and beside pytest-asyncio in strict or auto mode.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import asyncio
import pytest

@pytest.mark.nemo_gym
async def test_marked():
    await asyncio.sleep(0)

async def test_unmarked():
    await asyncio.sleep(0)
"""

MARKED_MODULE = """
import asyncio
import pytest

pytestmark = pytest.mark.nemo_gym

async def test_one(gym_task):
    await asyncio.sleep(0)
    assert gym_task("2+2?", answer="4").answer == "4"

async def test_two():
    await asyncio.sleep(0)
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\n")
    return pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *args)


def test_without_an_async_plugin_only_the_marked_test_is_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=TESTS)
    result = _run(pytester, "-p", "no:asyncio", "-rA")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1
    # The unmarked one is pytest's business ("async def functions are not natively
    # supported"): it is not run, and not reported as passed.
    assert outcomes.get("failed", 0) + outcomes.get("skipped", 0) == 1
    result.stdout.fnmatch_lines(["PASSED test_user.py::test_marked"])


def test_a_module_marker_covers_every_test_in_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=MARKED_MODULE)
    _run(pytester, "-p", "no:asyncio").assert_outcomes(passed=2)


def test_beside_pytest_asyncio_strict_mode_the_marked_test_runs(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("pytest_asyncio")
    pytester.makepyfile(test_user=TESTS)
    result = _run(pytester, "-p", "asyncio", "-o", "asyncio_mode=strict", "-rA")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1
    result.stdout.fnmatch_lines(["PASSED test_user.py::test_marked"])


def test_in_auto_mode_pytest_asyncio_runs_them_all(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_asyncio")
    pytester.makepyfile(test_user=TESTS)
    result = _run(pytester, "-p", "asyncio", "-o", "asyncio_mode=auto")
    result.assert_outcomes(passed=2)
