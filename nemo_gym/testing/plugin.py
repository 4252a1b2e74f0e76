"""The nemo_gym pytest plugin: the `nemo_gym` marker for `async def` tests, and the
`scripted_model`, `fake_openai` and `gym_task` fixtures.

Registered under the ``pytest11`` entry point, so it loads in every pytest session of
every project that installs nemo_gym. It therefore imports nothing at module level beyond
what `import nemo_gym` loads anyway: each fixture imports what it needs (the openai SDK,
the scripted model) when a test asks for it. For the same reason it takes over no test
it was not asked to: only `async def` tests marked ``@pytest.mark.nemo_gym`` (or in a
module with ``pytestmark = pytest.mark.nemo_gym``) run on a fresh event loop each
(`asyncio.run`), so testing a verifier needs nothing but pytest. A marked test that
pytest-asyncio or anyio also claims (auto mode, an ``asyncio``/``anyio`` marker) is left
to them. Async *fixtures* need pytest-asyncio (or anyio).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from nemo_gym.models.scripted import ScriptedModel
    from nemo_gym.records import Task
    from nemo_gym.testing.fakes import FakeOpenAI

MARKER = "nemo_gym"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: run this async def test on a fresh event loop (nemo_gym's pytest plugin; "
        "no async plugin needed)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an `async def` test marked `nemo_gym` on a fresh loop, unless another async
    plugin claims it too."""
    function = pyfuncitem.obj
    if pyfuncitem.get_closest_marker(MARKER) is None:
        return None
    # pytest-asyncio marks what it runs `asyncio` (auto mode marks every async test).
    if any(pyfuncitem.get_closest_marker(name) is not None for name in ("asyncio", "anyio")):
        return None
    hypothesis = getattr(function, "hypothesis", None)
    inner = getattr(hypothesis, "inner_test", None)
    if inspect.iscoroutinefunction(inner):
        # A hypothesis test: its wrapper is sync and calls the async body once per
        # example; run each example on a fresh loop and let pytest call the wrapper.
        hypothesis.inner_test = _on_fresh_loop(inner)  # type: ignore[union-attr]
        return None
    if not inspect.iscoroutinefunction(function):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    arguments = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(function(**arguments))
    return True


def _on_fresh_loop(function: Callable[..., Any]) -> Callable[..., None]:
    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(function(*args, **kwargs))

    return run


@pytest.fixture
def scripted_model() -> Callable[..., ScriptedModel]:
    """A factory: ``scripted_model(["reply", ...])`` or ``scripted_model(fn)`` -> ScriptedModel.

    Arguments are those of `ScriptedModel` (`cycle=True` to loop over the replies).
    """
    from nemo_gym.models.scripted import ScriptedModel

    def make(replies: Any, **options: Any) -> ScriptedModel:
        return ScriptedModel(replies, **options)

    return make


@pytest.fixture
def fake_openai() -> Iterator[Callable[..., FakeOpenAI]]:
    """A factory: ``fake_openai(["reply", ...])`` or ``fake_openai(fn)`` -> FakeOpenAI.

    Each `FakeOpenAI` holds a real `openai.AsyncOpenAI` (`.client`) over a mock
    transport and records the request bodies (`.requests`); all are closed after the test.
    Skips the test when the ``openai`` extra is not installed. A plain (sync) fixture, so
    it works whatever async plugin and mode the project uses.
    """
    from nemo_gym.errors import MissingDependency
    from nemo_gym.testing.fakes import FakeOpenAI

    made: list[FakeOpenAI] = []

    def make(replies: Any, **options: Any) -> FakeOpenAI:
        try:
            fake = FakeOpenAI(replies, **options)
        except MissingDependency as exc:
            pytest.skip(str(exc))
        made.append(fake)
        return fake

    yield make
    if not made:
        return
    # The mock transport holds no sockets and no loop-bound state, so closing on a
    # private loop is safe; asyncio.run() would reset the thread's current event loop,
    # which an async plugin may still be using.
    loop = asyncio.new_event_loop()
    try:
        for fake in made:
            loop.run_until_complete(fake.aclose())
    finally:
        loop.close()


@pytest.fixture
def gym_task() -> Callable[..., Task]:
    """A factory: ``gym_task("2+2?", answer="4")`` -> Task (see `testing.make_task`)."""
    from nemo_gym.testing import make_task

    return make_task
