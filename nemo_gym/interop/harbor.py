"""Harbor task directories as a nemo_gym environment (no extra: the layout is the API).

```python
from nemo_gym.interop.harbor import HarborEnv

env = HarborEnv("path/to/tasks")             # one task directory, or a folder of them
async for rollout in gym.rollouts(env, policy): ...
```

A Harbor task directory holds `instruction.md` (the prompt), `task.toml` (config),
`environment/` (how its container is made), `tests/test.sh` (the verifier, which writes
`/logs/verifier/reward.txt` or `reward.json`) and optionally `solution/solve.sh`.

- Each task's episode is a container sandbox (`provider`, default `docker`) of the
  task's image: `image=` (for every task), else `[environment] docker_image`, else
  (docker provider, `build=True`) `environment/` built by the engine once per content
  hash and tagged `nemo-gym-harbor/<task>:<hash>` (its base image must be on the
  engine or reachable from it). The workdir is `[environment] workdir` (default
  `/app`); memory comes from `memory_mb`; the network is off unless
  `allow_internet = true`.
- The model gets a `bash` tool (`bash -c` in the workdir, `bash_timeout` seconds);
  any harness that runs commands in `episode.sandbox` works too.
- Verification runs Harbor's way, in the same container, when the episode ends
  without error (before the sandbox is closed): `tests/` is copied to `/tests`,
  `bash /tests/test.sh` runs with `[verifier] env` and `timeout_sec`, and
  `/logs/verifier/reward.json` (a name -> number map; `reward` is the primary one) or
  `reward.txt` (one number) is read. The outcome is `final_state["verifier"]`; a
  missing, empty or non-numeric reward file is a verifier failure naming it.
- A CLI agent (`nemo_gym.harnesses.cli`: Codex, Claude Code, ...) runs in a container
  of the task's image (`episode.sandbox_spec`); once it ended, its workdir is taken as
  data and the tests run in a fresh container of that image holding exactly those
  files (`episode.workspace`, a `HarborWorkspace`), never in the agent's own. So only
  what the agent left in the workdir is graded: a task whose tests check state outside
  it (a package installed, a file in `/root`) needs the tool-calling harness, whose
  tests run in the agent's container as Harbor runs them.
- `HarborOracle` is a harness that runs `solution/solve.sh` instead of a model (Harbor's
  oracle agent): a task whose oracle does not score 1 is a broken task.

Multi-step tasks (`steps/`) are refused with a clear error.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import io
import json
import math
import shlex
import tarfile
import tomllib
from collections.abc import AsyncGenerator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Env
from nemo_gym.errors import ConfigError, EpisodeError, VerifierError
from nemo_gym.harnesses import ToolLoop, opening_messages
from nemo_gym.protocols import Episode, Model, Sandbox
from nemo_gym.records import (
    Event,
    ExecResult,
    Message,
    ResourceLimits,
    Rewards,
    SandboxSpec,
    Task,
    Trajectory,
)
from nemo_gym.registry import Described
from nemo_gym.tools import tool

__all__ = [
    "HarborEnv",
    "HarborEpisode",
    "HarborOracle",
    "HarborTask",
    "HarborWorkspace",
    "load_task",
]

TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
VERIFIER_DIR = "/logs/verifier"
DEFAULT_WORKDIR = "/app"
SYSTEM_PROMPT = (
    "You are working in a Linux container. Use the bash tool to inspect and change "
    "files and run commands until the task is done, then say briefly what you did."
)


class HarborTask:
    """One task directory, read and checked."""

    def __init__(self, path: Path, config: dict[str, Any], instruction: str) -> None:
        self.path = path
        self.config = config
        self.instruction = instruction

    @property
    def name(self) -> str:
        return self.path.name

    def _section(self, name: str) -> dict[str, Any]:
        value = self.config.get(name, {})
        if not isinstance(value, dict):
            raise ConfigError(f"{self.path / 'task.toml'}: [{name}] must be a table")
        return value

    def field(self, section: str, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        """`[section] key` of task.toml, checked to be of `kind` (None when absent)."""
        value = self._section(section).get(key, default)
        if value is None:
            return None
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise ConfigError(
                f"{self.path / 'task.toml'}: [{section}] {key} = {value!r} is not a {names}"
            )
        return value

    def files(self, folder: str) -> list[tuple[str, bytes]]:
        """(relative path, bytes) of every file under `folder/`, sorted.

        A symlink whose target lies outside the task directory raises `ConfigError`
        (see `_inside`): it would carry a host file into the build context, the sandbox
        and the rows.
        """
        root = self.path / folder
        if not root.is_dir():
            return []
        _inside(self.path, root)
        out = []
        for p in sorted(root.rglob("*")):
            _inside(self.path, p)
            if p.is_file():
                out.append((p.relative_to(root).as_posix(), p.read_bytes()))
        return out


def _inside(task_dir: Path, path: Path) -> Path:
    """`path`, checked to stay inside `task_dir` once every symlink is followed."""
    base = task_dir.resolve()
    target = path.resolve()
    if target != base and base not in target.parents:
        raise ConfigError(
            f"{path}: a symlink to {target}, outside the task directory {base}; "
            "task files must live inside it"
        )
    return path


def load_task(path: str | Path) -> HarborTask:
    """Read one Harbor task directory; `ConfigError` names the file and field at fault."""
    path = Path(path)
    instruction_path = path / "instruction.md"
    config_path = path / "task.toml"
    for name in ("instruction.md", "task.toml", "tests", "tests/test.sh", "environment"):
        if (path / name).exists() or (path / name).is_symlink():
            _inside(path, path / name)
    if not instruction_path.is_file():
        raise ConfigError(f"{path}: not a Harbor task directory (no instruction.md)")
    if (path / "steps").is_dir():
        raise ConfigError(f"{path}: multi-step Harbor tasks (steps/) are not supported")
    config: dict[str, Any] = {}
    if config_path.is_file():
        try:
            config = tomllib.loads(config_path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{config_path}: {exc}") from exc
    if not (path / "tests" / "test.sh").is_file():
        raise ConfigError(f"{path}: no tests/test.sh (Harbor's verifier script)")
    task = HarborTask(path, config, instruction_path.read_text(encoding="utf-8"))
    # Check every field we read now, so a bad task fails at load, not mid-run.
    task.field("environment", "docker_image", str, None)
    task.field("environment", "workdir", str, None)
    task.field("environment", "memory_mb", int, None)
    task.field("environment", "cpus", (int, float), None)
    task.field("environment", "allow_internet", bool, None)
    task.field("environment", "env", dict, None)
    task.field("verifier", "timeout_sec", (int, float), None)
    task.field("verifier", "env", dict, None)
    task.field("agent", "timeout_sec", (int, float), None)
    return task


def _task_dirs(path: Path) -> list[Path]:
    if (path / "instruction.md").is_file():
        return [path]
    if not path.is_dir():
        raise ConfigError(f"{path}: no such Harbor task directory or dataset folder")
    found = sorted(p for p in path.iterdir() if (p / "instruction.md").is_file())
    if not found:
        raise ConfigError(f"{path}: holds no Harbor task directory (none has instruction.md)")
    return found


def _output(result: Any) -> str:
    text = f"exit code {result.exit_code}"
    if result.timed_out:
        text += " (timed out)"
    if result.stdout:
        text += f"\n{result.stdout}"
    if result.stderr:
        text += f"\nstderr:\n{result.stderr}"
    return text


async def _upload(sandbox: Sandbox, files: list[tuple[str, bytes]], target: str) -> None:
    for relative, data in files:
        await sandbox.write_file(f"{target}/{relative}", data)


class HarborEpisode(BasicEpisode):
    """A task's container; its tests run when the episode ends without error."""

    def __init__(
        self,
        task: HarborTask,
        sandbox: Sandbox,
        stack: AsyncExitStack,
        spec: SandboxSpec | None = None,
        **kw: Any,
    ):
        self.task = task
        self._stack = stack
        # What a CLI agent's container and its grading container start from.
        self.sandbox_spec = spec
        self.workspace = HarborWorkspace(self)
        self.workdir = task.field("environment", "workdir", str, None) or DEFAULT_WORKDIR
        timeout = kw.pop("bash_timeout")
        workdir = self.workdir

        @tool(name="bash")
        async def bash(command: str) -> str:
            """Run a bash command in the task's container (in its working directory);
            returns the exit code and the output."""
            result = await sandbox.exec(["bash", "-c", command], timeout=timeout, cwd=workdir)
            return _output(result)

        super().__init__([bash], state={"task": task.name}, sandbox=None)
        self.sandbox = sandbox  # closed by the exit stack, after the tests

    async def run_tests(self, sandbox: Sandbox | None = None) -> dict[str, Any]:
        """Harbor's verifier in `sandbox` (default: the episode's own): copy tests/, run
        test.sh, read the reward file."""
        sandbox = sandbox or self.sandbox
        assert sandbox is not None
        task = self.task
        timeout = task.field("verifier", "timeout_sec", (int, float), None) or 600.0
        env = {str(k): str(v) for k, v in (task.field("verifier", "env", dict, None) or {}).items()}
        prepare = f"rm -rf {TESTS_DIR} && mkdir -p {TESTS_DIR} {VERIFIER_DIR} && rm -f " + " ".join(
            f"{VERIFIER_DIR}/{name}" for name in ("reward.txt", "reward.json")
        )
        await sandbox.exec(["bash", "-c", prepare])
        await _upload(sandbox, task.files("tests"), TESTS_DIR)
        command = f"bash {TESTS_DIR}/test.sh > {VERIFIER_DIR}/test-stdout.txt 2>&1"
        result = await sandbox.exec(
            ["bash", "-c", command], timeout=timeout, env=env, cwd=self.workdir
        )
        outcome: dict[str, Any] = {"exit_code": result.exit_code, "timed_out": result.timed_out}
        log = await _read(sandbox, f"{VERIFIER_DIR}/test-stdout.txt")
        outcome["stdout"] = (log or b"").decode("utf-8", "replace")[-4000:]
        try:
            outcome["rewards"] = await _rewards(sandbox)
        except VerifierError as exc:
            outcome["error"] = str(exc)
        return outcome

    async def __aexit__(self, *exc_info: object) -> None:
        failed = bool(exc_info) and exc_info[0] is not None
        try:
            # A CLI agent's files were graded already (`HarborWorkspace.collect`); the
            # episode's own container, which that agent never touched, is not.
            graded = isinstance(self.state, dict) and "verifier" in self.state
            if not failed and not graded and isinstance(self.state, dict):
                # The verifier reads final_state (taken just before this exit): the
                # tests' outcome is added to that same dict before the sandbox goes.
                try:
                    self.state["verifier"] = await self.run_tests()
                except Exception as error:
                    self.state["verifier"] = {"error": f"{type(error).__name__}: {error}"}
        finally:
            try:
                await super().__aexit__(*exc_info)
            finally:
                await self._stack.aclose()


class HarborWorkspace:
    """The `Workspace` of a Harbor episode, for a CLI agent: the agent works in a
    container of the task's image; `collect` makes the fresh grading container's workdir
    exactly the agent's (its files, directories and modes; what it deleted gone; links
    leaving the workdir, which `take` refuses, left out and named) and runs the task's
    tests there, into `final_state["verifier"]`."""

    def __init__(self, episode: HarborEpisode) -> None:
        self.episode = episode

    async def setup(self, sandbox: Sandbox) -> None:
        """Nothing to add: the task's image holds its files, as under Harbor."""
        await sandbox.exec(["mkdir", "-p", self.episode.workdir], timeout=30)

    async def collect(self, sandbox: Sandbox, agent: ExecResult, files: Any) -> None:
        workdir = self.episode.workdir
        clear = (
            f"mkdir -p {shlex.quote(workdir)} && find {shlex.quote(workdir)} -mindepth 1 -delete"
        )
        await sandbox.exec(["bash", "-c", clear], timeout=120)
        dirs = [f"{workdir}/{d}" for d in files.dirs]
        for start in range(0, len(dirs), 200):
            await sandbox.exec(["mkdir", "-p", "--", *dirs[start : start + 200]], timeout=60)
        # The Sandbox protocol's write_file takes no mode; the container providers' does.
        with_mode = "mode" in inspect.signature(sandbox.write_file).parameters
        for path, data in files.files.items():
            mode = files.modes.get(path)
            if with_mode and mode is not None:
                await sandbox.write_file(f"{workdir}/{path}", data, mode=mode)  # type: ignore[call-arg]
            else:
                await sandbox.write_file(f"{workdir}/{path}", data)
        outcome = await self.episode.run_tests(sandbox)
        outcome["agent"] = {"exit_code": agent.exit_code, "timed_out": agent.timed_out}
        outcome["refused"] = dict(files.refused)
        if isinstance(self.episode.state, dict):
            self.episode.state["verifier"] = outcome


async def _read(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return await sandbox.read_file(path)
    except Exception:
        return None


async def _rewards(sandbox: Sandbox) -> dict[str, float]:
    as_json = await _read(sandbox, f"{VERIFIER_DIR}/reward.json")
    if as_json is not None:
        where = f"{VERIFIER_DIR}/reward.json"
        if not as_json.strip():
            raise VerifierError(f"{where} is empty")
        try:
            value = json.loads(as_json)
        except ValueError as exc:
            raise VerifierError(f"{where} is not JSON: {exc}") from exc
        values = value if isinstance(value, dict) else {"reward": value}
        out: dict[str, float] = {}
        for name, number in values.items():
            if isinstance(number, bool) or not isinstance(number, int | float):
                raise VerifierError(f"{where}: {name} = {number!r} is not a number")
            if not math.isfinite(number):
                raise VerifierError(f"{where}: {name} = {number!r} is not finite")
            out[str(name)] = float(number)
        return out
    as_text = await _read(sandbox, f"{VERIFIER_DIR}/reward.txt")
    where = f"{VERIFIER_DIR}/reward.txt"
    if as_text is None:
        raise VerifierError(f"the tests wrote neither {where} nor reward.json")
    if not as_text.strip():
        raise VerifierError(f"{where} is empty")
    try:
        number = float(as_text.decode("utf-8", "replace").strip())
    except ValueError as exc:
        raise VerifierError(f"{where} holds {as_text[:50]!r}, not a number") from exc
    if not math.isfinite(number):
        raise VerifierError(f"{where} holds {number!r}, not a finite number")
    return {"reward": number}


async def harbor_reward(task: Task, trajectory: Trajectory) -> Rewards:
    """The reward the task's tests wrote (`final_state["verifier"]`)."""
    state = trajectory.final_state if isinstance(trajectory.final_state, dict) else {}
    outcome = state.get("verifier")
    if not isinstance(outcome, dict):
        raise VerifierError("the task's tests did not run (the episode ended early?)")
    if "error" in outcome:
        raise VerifierError(f"harbor tests: {outcome['error']}")
    rewards: dict[str, float] = outcome["rewards"]
    if "reward" in rewards:
        primary = rewards["reward"]
    elif len(rewards) == 1:
        primary = next(iter(rewards.values()))
    else:
        raise VerifierError(
            f"{VERIFIER_DIR}/reward.json has {sorted(rewards)} but no 'reward' key to use "
            "as the primary reward"
        )
    return Rewards(
        reward=primary,
        components=rewards,
        metadata={"exit_code": outcome.get("exit_code"), "timed_out": outcome.get("timed_out")},
    )


class HarborEnv(Env):
    """Harbor task directories: a container per episode, Harbor's tests as the verifier."""

    def __init__(
        self,
        path: str | Path,
        *,
        name: str = "harbor",
        provider: str = "docker",
        provider_options: dict[str, Any] | None = None,
        image: str | None = None,
        bash_timeout: float = 120.0,
        max_turns: int = 30,
        build: bool = True,
    ) -> None:
        super().__init__(
            harbor_reward,
            name=name,
            harness=ToolLoop(max_turns=max_turns, system_prompt=SYSTEM_PROMPT),
        )
        self.path = Path(path)
        self.provider_name = provider
        self.provider_options = dict(provider_options or {})
        self.image = image
        self.bash_timeout = bash_timeout
        self.build = build
        self._build_locks: dict[str, asyncio.Lock] = {}
        self._tasks_by_id: dict[str, HarborTask] | None = None
        self._provider: Any = None

    def harbor_tasks(self) -> dict[str, HarborTask]:
        if self._tasks_by_id is None:
            loaded = [load_task(p) for p in _task_dirs(self.path)]
            self._tasks_by_id = {t.name: t for t in loaded}
        return self._tasks_by_id

    def tasks(self, split: str = "test", limit: int | None = None) -> Iterator[Task]:
        for index, (task_id, harbor) in enumerate(self.harbor_tasks().items()):
            if limit is not None and index >= limit:
                return
            yield Task(
                id=task_id,
                prompt=harbor.instruction,
                metadata={"harbor": {"path": str(harbor.path), "config": harbor.config}},
            )

    def _harbor(self, task: Task) -> HarborTask:
        found = self.harbor_tasks().get(task.id)
        if found is None:
            raise EpisodeError(f"no Harbor task {task.id!r} under {self.path}")
        return found

    async def image_for(self, harbor: HarborTask) -> str:
        """`image=`, else `[environment] docker_image`, else environment/Dockerfile built."""
        image = self.image or harbor.field("environment", "docker_image", str, None)
        if image is not None:
            return image
        dockerfile = harbor.path / "environment" / "Dockerfile"
        if not (self.build and self.provider_name == "docker" and dockerfile.is_file()):
            raise ConfigError(
                f"{harbor.path / 'task.toml'}: no [environment] docker_image, and "
                "HarborEnv(image=...) was not given"
                + ("" if dockerfile.is_file() else "; nor is there an environment/Dockerfile")
            )
        return await _build(self.provider().client, harbor, self._build_locks)

    def spec_for(self, harbor: HarborTask, image: str) -> SandboxSpec:
        memory = harbor.field("environment", "memory_mb", int, None)
        env = harbor.field("environment", "env", dict, None) or {}
        return SandboxSpec(
            image=image,
            workdir=harbor.field("environment", "workdir", str, None) or DEFAULT_WORKDIR,
            network="host" if harbor.field("environment", "allow_internet", bool, None) else "none",
            env={str(k): str(v) for k, v in env.items()},
            limits=ResourceLimits(
                cpu_seconds=None,
                memory_bytes=memory * 2**20 if memory else 2 << 30,
                processes=512,
                file_size_bytes=1 << 30,
                open_files=1024,
            ),
        )

    def provider(self) -> Any:
        if self._provider is None:
            from nemo_gym.sandbox import get

            self._provider = get(self.provider_name, **self.provider_options)
        return self._provider

    async def open(self, task: Task) -> HarborEpisode:
        harbor = self._harbor(task)
        spec = self.spec_for(harbor, await self.image_for(harbor))
        stack = AsyncExitStack()
        try:
            sandbox = await stack.enter_async_context(self.provider().start(spec))
            await sandbox.exec(["mkdir", "-p", spec.workdir])
        except BaseException:
            await stack.aclose()
            raise
        return HarborEpisode(harbor, sandbox, stack, spec, bash_timeout=self.bash_timeout)

    async def aclose(self) -> None:
        provider, self._provider = self._provider, None
        close = getattr(provider, "aclose", None)
        if close is not None:
            await close()


async def _build(client: Any, harbor: HarborTask, locks: dict[str, asyncio.Lock]) -> str:
    """Build environment/ with the Docker engine (once per content hash); its tag."""
    context = io.BytesIO()
    digest = hashlib.sha256()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for relative, data in harbor.files("environment"):
            digest.update(relative.encode() + b"\0" + data + b"\0")
            info = tarfile.TarInfo(relative)
            info.size = len(data)
            info.mode = 0o755 if relative.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in harbor.name.lower())
    tag = f"nemo-gym-harbor/{safe}:{digest.hexdigest()[:12]}"
    lock = locks.setdefault(tag, asyncio.Lock())
    async with lock:
        found = await client.request("GET", f"/images/{tag}/json")
        if found.status == 200:
            return tag
        response = await client.request(
            "POST",
            "/build",
            params={"t": tag, "rm": "1", "forcerm": "1"},
            body=context.getvalue(),
            content_type="application/x-tar",
        )
        where = harbor.path / "environment" / "Dockerfile"
        if response.status != 200:
            raise EpisodeError(f"{where}: the build failed: {response.message()}")
        for line in response.body.decode("utf-8", "replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("error"):
                raise EpisodeError(f"{where}: the build failed: {event['error']}".strip())
    return tag


class HarborOracle(Described):
    """Harbor's oracle agent as a harness: runs the task's `solution/solve.sh`.

    No model is called. A task whose oracle rollout does not score 1 is broken (its
    tests or its solution). Needs a `HarborEpisode`.
    """

    spec_kind = "harness"

    def __init__(self, *, timeout: float = 600.0) -> None:
        self.timeout = timeout

    async def run(self, task: Task, episode: Episode, model: Model) -> AsyncGenerator[Event, None]:
        if not isinstance(episode, HarborEpisode) or episode.sandbox is None:
            raise EpisodeError("HarborOracle needs a HarborEnv episode")
        for message in opening_messages(task, None, episode):
            yield message
        files = episode.task.files("solution")
        if not any(name == "solve.sh" for name, _ in files):
            raise EpisodeError(f"{episode.task.path}: no solution/solve.sh")
        sandbox = episode.sandbox
        await sandbox.exec(["bash", "-c", f"rm -rf {SOLUTION_DIR} && mkdir -p {SOLUTION_DIR}"])
        await _upload(sandbox, files, SOLUTION_DIR)
        result = await sandbox.exec(
            ["bash", "-c", f"bash {shlex.quote(SOLUTION_DIR + '/solve.sh')}"],
            timeout=self.timeout,
            cwd=episode.workdir,
        )
        yield Message.assistant(f"ran solution/solve.sh: {_output(result)}")
