"""`check_env`: what an environment author runs before anyone trains on their tasks.

Gymnasium's `env_checker` in spirit: every check that fails is reported with what is
wrong and what to change, and all of them run (one broken check does not hide the next).

```python
report = gym.check_env(env)          # raises EnvCheckError listing every problem
report = gym.check_env(env, raise_on_error=False)
print(report)                        # what passed, what failed and how to fix it
```

Checked: tasks load as `Task`s; ids are unique within a split and stable across calls
(and across a rebuild from the env's spec); `limit` is respected; every declared split
loads, an unknown split is refused, and splits share neither ids nor prompts; episodes
open and close (twice, harmlessly); tools have valid schemas; the oracle's turns (when
the environment has an oracle) score `oracle_reward(task)` through the real harness and
verifier, a wrong reply scores less, and verifying the same trajectory again gives the
same rewards; `aclose()` can be called twice.

With `hacks=True`, the reward-hacking suite too (`nemo_gym.testing.hacks`): every hack
reply class that applies to the environment (and every hack agent, where its episodes
give a CLI agent a `workspace`) runs on the first `hack_tasks` tasks, and a class that
scores above what a wrong reply scores is a problem. `report.hacks` holds each class's
result.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nemo_gym.errors import ConfigError
from nemo_gym.protocols import Environment
from nemo_gym.records import Rewards, Rollout, Task

if TYPE_CHECKING:
    from nemo_gym.testing.hacks import HackResult

__all__ = ["CheckReport", "EnvCheckError", "Problem", "acheck_env", "check_env"]

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNKNOWN_SPLIT = "__check_env_no_such_split__"


@dataclass(frozen=True)
class Problem:
    """One failed check: which, what is wrong, and what to change."""

    check: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.message}\n    fix: {self.fix}"


@dataclass
class CheckReport:
    """The outcome of `check_env`: the problems found and the checks that passed."""

    env: str
    problems: list[Problem] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hacks: list[HackResult] = field(default_factory=list)
    """With `hacks=True`: each hack class's best score against the wrong reply's."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        lines = [
            f"check_env({self.env!r}): {'ok' if self.ok else f'{len(self.problems)} problem(s)'}"
        ]
        lines += [f"  passed: {', '.join(self.passed)}"] if self.passed else []
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines)


class EnvCheckError(ConfigError):
    """`check_env` found problems; `.report` holds them all."""

    def __init__(self, report: CheckReport) -> None:
        super().__init__(str(report), code="env_check_failed")
        self.report = report


class _Checker:
    def __init__(self, env: Environment, report: CheckReport) -> None:
        self.env, self.report = env, report

    def fail(self, check: str, message: str, fix: str) -> None:
        self.report.problems.append(Problem(check, message, fix))

    def passed(self, check: str) -> None:
        if not any(p.check == check for p in self.report.problems):
            self.report.passed.append(check)

    def load(self, split: str, limit: int | None) -> list[Task] | None:
        try:
            tasks = list(self.env.tasks(split=split, limit=limit))
        except Exception as exc:
            self.fail(
                "tasks",
                f"tasks(split={split!r}) raised {type(exc).__name__}: {exc}",
                "make tasks() return an iterable of gym.Task for each declared split",
            )
            return None
        bad = [t for t in tasks if not isinstance(t, Task)]
        if bad:
            self.fail(
                "tasks",
                f"tasks(split={split!r}) yielded {type(bad[0]).__name__}",
                "yield gym.Task objects",
            )
            return None
        return tasks

    def check_split(self, split: str, limit: int) -> list[Task]:
        tasks = self.load(split, limit)
        if tasks is None:
            return []
        if not tasks:
            self.fail(
                "tasks",
                f"split {split!r} has no tasks",
                "declare only splits that have tasks (the env's `splits`)",
            )
            return []
        if len(tasks) > limit:
            self.fail(
                "limit",
                f"tasks(split={split!r}, limit={limit}) gave {len(tasks)} tasks",
                "stop after `limit` tasks",
            )
        one = self.load(split, 1) or []
        if len(one) != 1 or one[0].id != tasks[0].id:
            self.fail(
                "limit",
                f"tasks(split={split!r}, limit=1) is not the first task",
                "make limit=k return the first k tasks of the split",
            )
        ids = [t.id for t in tasks]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            self.fail(
                "ids",
                f"split {split!r} repeats task ids {duplicates[:5]}",
                "give every task of a split its own id",
            )
        again = self.load(split, limit) or []
        if [t.id for t in again] != ids:
            self.fail(
                "stable",
                f"two calls of tasks(split={split!r}) gave different ids",
                "derive ids from the data or the seed, never from a counter or the clock",
            )
        elif again != tasks:
            changed = next(a.id for a, b in zip(again, tasks, strict=True) if a != b)
            self.fail(
                "stable",
                f"task {changed!r} changed between two calls of tasks()",
                "make task generation deterministic (seed every random choice)",
            )
        return tasks

    def check_splits(self, by_split: dict[str, list[Task]]) -> None:
        try:
            list(self.env.tasks(split=_UNKNOWN_SPLIT, limit=1))
        except (ConfigError, ValueError, KeyError, LookupError):
            pass
        except Exception as exc:
            self.fail(
                "splits",
                f"an unknown split raised {type(exc).__name__}: {exc}",
                "raise ConfigError (or ValueError) naming the known splits",
            )
        else:
            self.fail(
                "splits",
                "tasks() accepted an unknown split",
                "raise ConfigError (or ValueError) for a split the env does not have",
            )
        seen_ids: dict[str, str] = {}
        seen_prompts: dict[str, str] = {}
        for split, tasks in by_split.items():
            for task in tasks:
                other = seen_ids.setdefault(task.id, split)
                if other != split:
                    self.fail(
                        "splits",
                        f"task id {task.id!r} is in {other!r} and {split!r}",
                        "keep splits disjoint (put the split in the id)",
                    )
                    return
                prompt = self.content(task)
                other = seen_prompts.setdefault(prompt, split)
                if other != split:
                    self.fail(
                        "splits",
                        f"task {task.id!r} of {split!r} has the same prompt as a task of {other!r}",
                        "keep splits disjoint by content (see nemo_gym.envs.procedural)",
                    )
                    return

    def content(self, task: Task) -> str:
        """What makes two tasks the same problem: the env's `content()`, else prompt and gold."""
        content = getattr(self.env, "content", None)
        if callable(content):
            return str(content(task))
        prompt = (
            task.prompt if task.prompt is not None else repr([m.content for m in task.messages])
        )
        return f"{prompt}\n{task.answer!r}"

    async def check_episode(self, task: Task) -> None:
        try:
            episode = await self.env.open(task)
            async with episode:
                tools = list(getattr(episode, "tools", ()) or ())
            await episode.__aexit__(None, None, None)
        except Exception as exc:
            self.fail(
                "episode",
                f"opening/closing the episode of {task.id!r} raised {type(exc).__name__}: {exc}",
                "open() returns an async context manager whose exit is idempotent",
            )
            return
        self.check_tools(tools)

    def check_tools(self, tools: Sequence[Any]) -> None:
        names = [getattr(getattr(t, "spec", None), "name", None) for t in tools]
        for tool, name in zip(tools, names, strict=True):
            spec = getattr(tool, "spec", None)
            if spec is None or not isinstance(name, str) or not _TOOL_NAME.match(name):
                self.fail(
                    "tools",
                    f"tool name {name!r} is not 1-64 letters, digits, _ or -",
                    "rename the tool (models' APIs reject other names)",
                )
                continue
            problem = _schema_problem(spec.parameters)
            if problem:
                self.fail(
                    "tools",
                    f"tool {name!r}: {problem}",
                    "give parameters as a JSON Schema object with properties",
                )
            if not spec.description.strip():
                self.fail(
                    "tools",
                    f"tool {name!r} has no description",
                    "document the tool: the model reads the description",
                )
        if len(set(names)) != len(names):
            self.fail("tools", f"tool names repeat: {names}", "give each tool its own name")

    async def check_oracle(self, tasks: Sequence[Task]) -> None:
        from nemo_gym.models.scripted import ScriptedModel
        from nemo_gym.runner import rollout

        oracle = getattr(self.env, "oracle", None)
        with_oracle = [(t, oracle(t)) for t in tasks] if callable(oracle) else []
        with_oracle = [(t, turns) for t, turns in with_oracle if turns is not None]
        if not with_oracle:
            self.report.notes.append("no oracle: the scoring checks were skipped")
            return
        for task, turns in with_oracle:
            expected = float(self.env.oracle_reward(task))  # type: ignore[attr-defined]
            done = await rollout(self.env, ScriptedModel(turns), task)
            reward = _reward(done)
            if reward is None:
                self.fail(
                    "oracle",
                    f"the oracle's rollout of {task.id!r} failed: {_why(done)}",
                    "make oracle(task) return the turns the harness asks for",
                )
                continue
            if not math.isclose(reward, expected, rel_tol=1e-9, abs_tol=1e-9):
                self.fail(
                    "oracle",
                    f"the oracle scored {reward} on {task.id!r}, not {expected}",
                    "fix the verifier or the oracle: the gold answer must earn the maximum",
                )
            await self.check_deterministic(task, done)
            wrong = getattr(self.env, "wrong", None)
            if callable(wrong):
                missed = await rollout(self.env, ScriptedModel(list(wrong(task))), task)
                score = _reward(missed)
                if score is None:
                    self.fail(
                        "wrong",
                        f"the wrong reply's rollout of {task.id!r} failed: {_why(missed)}",
                        "score a wrong answer, do not fail on it",
                    )
                elif score >= expected:
                    self.fail(
                        "wrong",
                        f"a wrong reply scored {score} on {task.id!r}",
                        "the verifier must score a wrong answer below the gold one",
                    )

    async def check_hacks(self, tasks: Sequence[Task], provider: str) -> None:
        from nemo_gym.testing.hacks import (
            AGENT_HACKS,
            REPLY_HACKS,
            run_agent_hacks,
            run_reply_hacks,
        )

        try:
            results = await run_reply_hacks(self.env, tasks)
            if await _has_workspace(self.env, tasks[0]):
                results += await run_agent_hacks(self.env, tasks, provider=provider)
        except Exception as exc:
            self.fail("hacks", f"the hack suite raised {exc!r}", "fix what the message names")
            return
        self.report.hacks = results
        for result in results:
            if result.beats_baseline:
                hack = REPLY_HACKS.get(result.hack) or AGENT_HACKS[result.hack]
                self.fail(
                    "hacks",
                    f"hack {result.hack!r} ({hack.description}) scored {result.score:g}, "
                    f"a wrong reply {result.baseline:g}; e.g. {result.example}",
                    hack.fix,
                )

    async def check_deterministic(self, task: Task, done: Rollout) -> None:
        first = done.rewards
        try:
            again = [
                Rewards.of(await self.env.verifier.verify(task, done.trajectory)) for _ in range(2)
            ]
        except Exception as exc:
            self.fail(
                "deterministic",
                f"verifying {task.id!r} again raised {exc!r}",
                "make the verifier a function of (task, trajectory) alone",
            )
            return
        for other in again:
            if (
                first is None
                or other.reward != first.reward
                or other.components != first.components
            ):
                self.fail(
                    "deterministic",
                    f"verifying {task.id!r} twice gave different rewards",
                    "remove randomness and outside state from the verifier",
                )
                return


async def _has_workspace(env: Environment, task: Task) -> bool:
    """Whether `env`'s episodes give a CLI agent something to work on."""
    episode = await env.open(task)
    async with episode:
        return getattr(episode, "workspace", None) is not None


def _reward(done: Rollout) -> float | None:
    return done.rewards.reward if done.ok and done.rewards is not None else None


def _why(done: Rollout) -> str:
    failure = done.failure
    return f"{failure.kind}/{failure.code}: {failure.message}" if failure else "no rewards"


def _schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "parameters must be a JSON Schema with type 'object'"
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        return "'properties' must be an object"
    missing = [r for r in schema.get("required", []) if r not in properties]
    if missing:
        return f"required names {missing} are not in 'properties'"
    try:
        import jsonschema
    except ImportError:
        return None
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"invalid JSON Schema: {exc.message}"
    return None


async def acheck_env(
    env: Environment,
    *,
    limit: int = 5,
    oracle_tasks: int = 3,
    splits: Iterable[str] | None = None,
    hacks: bool = False,
    hack_tasks: int = 2,
    provider: str = "local",
) -> CheckReport:
    """Run every check on `env` (see the module doc) and return the report.

    `limit` tasks are loaded per split; the oracle and wrong replies run on the first
    `oracle_tasks` of the "test" split (or the first split), the hacks (`hacks=True`) on
    the first `hack_tasks`; hack agents run in sandboxes of `provider`.
    """
    report = CheckReport(getattr(env, "name", type(env).__name__))
    checker = _Checker(env, report)
    names = list(splits or getattr(env, "splits", None) or ("test",))
    by_split = {split: checker.check_split(split, limit) for split in names}
    for check in ("tasks", "limit", "ids", "stable"):
        checker.passed(check)
    if len(names) > 0:
        checker.check_splits(by_split)
        checker.passed("splits")
    main = by_split.get("test") or next((t for t in by_split.values() if t), [])
    if main:
        await checker.check_episode(main[0])
        for check in ("episode", "tools"):
            checker.passed(check)
        await checker.check_oracle(main[:oracle_tasks])
        for check in ("oracle", "wrong", "deterministic"):
            checker.passed(check)
        if hacks:
            await checker.check_hacks(main[:hack_tasks], provider)
            checker.passed("hacks")
        _check_rebuild(checker, main)
    try:
        aclose = getattr(env, "aclose", None)
        if aclose is not None:
            await aclose()
            await aclose()
        checker.passed("aclose")
    except Exception as exc:
        checker.fail("aclose", f"aclose() twice raised {exc!r}", "make aclose() idempotent")
    return report


def _check_rebuild(checker: _Checker, tasks: list[Task]) -> None:
    to_spec = getattr(checker.env, "to_spec", None)
    if not callable(to_spec):
        return
    spec = to_spec()
    if not spec.rebuildable or getattr(checker.env, "_tasks", None) is not None:
        return
    from nemo_gym.registry import rebuild

    try:
        rebuilt = rebuild(spec, trust_code=True)  # the env's own spec, made in this process
        splits = tuple(getattr(checker.env, "splits", ("test",)))
        split = "test" if "test" in splits else splits[0]
        again = list(rebuilt.tasks(split=split, limit=len(tasks)))
    except Exception as exc:
        checker.fail(
            "spec",
            f"rebuilding from {spec.id!r}'s spec raised {exc!r}",
            "keep constructor options JSON values (they are the spec)",
        )
        return
    if [t.id for t in again] != [t.id for t in tasks]:
        checker.fail(
            "spec",
            "the env rebuilt from its spec has other tasks",
            "every option that changes the tasks must be a constructor argument",
        )
    else:
        checker.passed("spec")


def check_env(
    env: Environment,
    *,
    limit: int = 5,
    oracle_tasks: int = 3,
    splits: Iterable[str] | None = None,
    raise_on_error: bool = True,
    hacks: bool = False,
    hack_tasks: int = 2,
    provider: str = "local",
) -> CheckReport:
    """Check `env` (see the module doc); raise `EnvCheckError` listing every problem.

    `hacks=True` runs the reward-hacking suite too (`nemo_gym.testing.hacks`).
    Synchronous (it runs its own event loop, in a thread inside a running one); in
    async code `await acheck_env(env)`.
    """
    from nemo_gym.collect import run_sync

    report = run_sync(
        acheck_env(
            env,
            limit=limit,
            oracle_tasks=oracle_tasks,
            splits=splits,
            hacks=hacks,
            hack_tasks=hack_tasks,
            provider=provider,
        )
    )
    if raise_on_error and not report.ok:
        raise EnvCheckError(report)
    return report
