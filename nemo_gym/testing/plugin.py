"""The nemo_gym pytest plugin: `async def` tests, and the `scripted_model`,
`fake_openai` and `gym_task` fixtures.

Registered under the ``pytest11`` entry point, so it loads in every pytest session of
every project that installs nemo_gym. It therefore imports nothing at module level beyond
what `import nemo_gym` loads anyway: each fixture imports what it needs (the openai SDK,
the scripted model) when a test asks for it.

`async def test_...` functions run on a fresh event loop each (`asyncio.run`) with no
other plugin: testing a verifier needs nothing but pytest. Where pytest-asyncio is
active, or a test is marked for anyio, those plugins run it instead, as their
configuration says. Async *fixtures* need pytest-asyncio (or anyio).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from nemo_gym.models.scripted import ScriptedModel
    from nemo_gym.records import Task
    from nemo_gym.testing.fakes import FakeOpenAI


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an `async def` test on a fresh loop, unless another async plugin owns it."""
    function = pyfuncitem.obj
    if not inspect.iscoroutinefunction(function):
        return None
    if pyfuncitem.config.pluginmanager.has_plugin("asyncio"):
        return None
    if pyfuncitem.get_closest_marker("anyio") is not None:
        return None
    names = pyfuncitem._fixtureinfo.argnames
    arguments = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(function(**arguments))
    return True


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
