"""CLI coding agents: real agent programs run in a sandbox, their model calls served by us.

`CLIAgent(adapter)` runs one agent program per rollout:

1. opens a route for the rollout's recording model on a `ModelEndpoint` (started on
   first use, closed with the harness), so every call the program makes is recorded on
   this rollout with the in-process model's token ids;
2. starts a sandbox (`local`, `docker`, `apptainer`) from the episode's `sandbox_spec`
   when it has one (an SWE task: its image, the repository in the workdir), else from
   the harness's `sandbox`, with `network="loopback"` whose only reachable host port is
   the endpoint's, the program's install directory shown read-only;
3. puts the task's files in the workdir (`episode.workspace.setup`, else
   `task.metadata["files"]`), writes the program's config, runs it on the prompt;
4. once the program ended, stops every process left in its sandbox and takes the
   workdir as data (`workspace.take`: a container is frozen and read through its
   engine's archive API; files only, links leaving it refused), then closes the sandbox;
5. lets the environment grade those files in a fresh sandbox of the same base spec
   (`episode.workspace.collect`), then yields the conversation of the program's last
   model call and the program's tool runs as it reported them (`ToolResult`s: each
   tool call joined with the result a later request carried).

Each model call names the conversation it continues (`segments.py`): a side request or
a compacted history is a segment of its own, never joined with the others into one
token sequence.

A model failure (or a request the endpoint cannot read) stops the program and fails the
rollout with that failure; so does a program that exits non-zero (`harness`,
`agent_exit`) or runs past `timeout` (`timeout`, `agent_timeout`).

The adapter says how to start the program, where its config goes and how the model is
pointed at us (`CLIAdapter`); `CommandAdapter` is that as data, for any program. The
built-in adapters are in `adapters.py`: `Codex`, `ClaudeCode`, `OpenCode`,
`MiniSWEAgent`, `Pi`, `QwenCode`, `KiloCode`, `Aider`.

The sandbox may be a container (`docker`, `apptainer`): the program and its runtime
are shown read-only at their host paths (`options["ro_binds"]`), so the task's image
needs nothing of the agent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import string
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from nemo_gym.endpoint import Dialect, ModelEndpoint, Route
from nemo_gym.errors import ConfigError, HarnessError, RolloutTimeout
from nemo_gym.harnesses import opening_messages
from nemo_gym.harnesses.cli.segments import Segments
from nemo_gym.harnesses.cli.workspace import (
    MAX_BYTES,
    AgentFiles,
    FilesWorkspace,
    Workspace,
    take,
)
from nemo_gym.protocols import Episode, Model, Sandbox, SandboxProvider
from nemo_gym.records import Event, ExecResult, Message, ResourceLimits, SandboxSpec, Task
from nemo_gym.registry import Described

__all__ = [
    "AGENT_LIMITS",
    "AgentFiles",
    "AgentLaunch",
    "CLIAdapter",
    "CLIAgent",
    "CommandAdapter",
    "FilesWorkspace",
    "Workspace",
]

AGENT_LIMITS = ResourceLimits(
    cpu_seconds=3600,
    # Address space, not memory: V8 and Bun reserve tens of GB they never touch.
    memory_bytes=1 << 40,
    file_size_bytes=1 << 30,
    open_files=8192,
    processes=512,
    output_bytes=8 << 20,
)
"""Per-process limits for agent programs (a Node or Bun runtime needs room)."""

HOME = "/tmp/agent-home"
"""The program's HOME inside the sandbox (its config files go there)."""


@dataclass(frozen=True, slots=True)
class AgentLaunch:
    """What an adapter needs to start its program for one rollout."""

    prompt: str
    model: str
    """The model name the program is told to use (a label; any name reaches the policy)."""
    base_url: str
    """OpenAI-style base URL, ending in /v1 (it holds the route token)."""
    anthropic_base_url: str
    """Anthropic-style base URL (the client adds /v1/messages; it holds the route token)."""
    api_key: str
    """The route token. It, and both URLs, go in `env` or `files`, never in `command`:
    any local user reads every process's command line in /proc."""
    workdir: str
    home: str = HOME

    def fields(self) -> dict[str, str]:
        """The placeholders `CommandAdapter` fills in (`{prompt}`, `{base_url}`, ...)."""
        return {
            "prompt": self.prompt,
            "model": self.model,
            "base_url": self.base_url,
            "anthropic_base_url": self.anthropic_base_url,
            "api_key": self.api_key,
            "workdir": self.workdir,
            "home": self.home,
        }


@runtime_checkable
class CLIAdapter(Protocol):
    """How to run one agent program: its command, config files, environment, install."""

    name: str
    dialect: Dialect

    def command(self, launch: AgentLaunch) -> list[str]: ...

    def files(self, launch: AgentLaunch) -> dict[str, str]: ...

    def env(self, launch: AgentLaunch) -> dict[str, str]: ...

    def mounts(self) -> list[str]:
        """Host directories the program needs, shown read-only in the sandbox."""
        ...


@dataclass(frozen=True)
class CommandAdapter:
    """An adapter as data: templates filled with `AgentLaunch.fields()` (`{base_url}`...).

    ```python
    CommandAdapter(
        name="my-agent",
        dialect="chat",
        command=["my-agent", "--model", "{model}", "--task", "{prompt}"],
        env={"OPENAI_BASE_URL": "{base_url}", "OPENAI_API_KEY": "{api_key}"},
        files={"{home}/.my-agent.toml": 'endpoint = "{base_url}"'},
        mounts=["/opt/my-agent"],
    )
    ```
    """

    name: str
    command: Sequence[str]
    dialect: Dialect = "chat"
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    mounts: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError(f"CommandAdapter {self.name!r}: command is empty")
        secret = sorted(_fields(self.command) & SECRET_FIELDS)
        if secret:
            raise ConfigError(
                f"CommandAdapter {self.name!r}: command uses "
                f"{', '.join('{' + f + '}' for f in secret)}, which hold the route token; "
                "any local user reads command lines in /proc: pass them in env or files"
            )
        if self.dialect not in ("chat", "responses", "messages", "gemini"):
            raise ConfigError(
                f"CommandAdapter {self.name!r}: dialect must be chat, responses, messages or "
                "gemini, "
                f"not {self.dialect!r}"
            )

    def _fill(self, template: str, launch: AgentLaunch) -> str:
        try:
            return template.format_map(launch.fields())
        except (KeyError, IndexError, ValueError) as exc:
            known = ", ".join("{" + k + "}" for k in launch.fields())
            raise ConfigError(
                f"CommandAdapter {self.name!r}: bad template {template!r} ({exc}); "
                f"placeholders: {known} (double braces for a literal brace)"
            ) from None

    def command_for(self, launch: AgentLaunch) -> list[str]:
        return [self._fill(part, launch) for part in self.command]

    def files_for(self, launch: AgentLaunch) -> dict[str, str]:
        return {self._fill(k, launch): self._fill(v, launch) for k, v in self.files.items()}

    def env_for(self, launch: AgentLaunch) -> dict[str, str]:
        return {k: self._fill(v, launch) for k, v in self.env.items()}


SECRET_FIELDS = frozenset({"api_key", "base_url", "anthropic_base_url"})
"""The `AgentLaunch` fields that hold the route token."""


def _fields(templates: Sequence[str]) -> set[str]:
    names: set[str] = set()
    for template in templates:
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError:
            continue  # a malformed template fails with its own message when filled
        names |= {name for _, name, _, _ in parsed if name}
    return names


class _Templated:
    """`CommandAdapter` seen through the `CLIAdapter` protocol."""

    def __init__(self, spec: CommandAdapter) -> None:
        self.spec = spec
        self.name = spec.name
        self.dialect: Dialect = spec.dialect

    def command(self, launch: AgentLaunch) -> list[str]:
        return self.spec.command_for(launch)

    def files(self, launch: AgentLaunch) -> dict[str, str]:
        return self.spec.files_for(launch)

    def env(self, launch: AgentLaunch) -> dict[str, str]:
        return self.spec.env_for(launch)

    def mounts(self) -> list[str]:
        return list(self.spec.mounts)


def as_adapter(adapter: CLIAdapter | CommandAdapter | Mapping[str, Any]) -> CLIAdapter:
    """An adapter from an adapter, a `CommandAdapter` or its dict (a rebuilt spec)."""
    if isinstance(adapter, Mapping):
        adapter = CommandAdapter(**adapter)
    if isinstance(adapter, CommandAdapter):
        return _Templated(adapter)
    if not isinstance(adapter, CLIAdapter):
        raise ConfigError(f"{adapter!r} is not a CLIAdapter (command, files, env, mounts)")
    return adapter


class CLIAgent(Described):
    """Run an agent program per rollout, in a sandbox that reaches only our endpoint.

    Args:
        adapter: how to run the program (`CLIAdapter`, a `CommandAdapter`, or its dict).
        provider: the sandbox provider (a name or a provider); "local" (bubblewrap)
            enforces the network; "process" runs unisolated, for hosts without namespaces.
        sandbox: the base `SandboxSpec` (image, env, workdir, options); the harness sets
            its network to "loopback" with the endpoint's port and adds the mounts. An
            episode's `sandbox_spec` replaces its image, workdir and container budget
            (`base_spec`).
        limits: per-process limits (default `AGENT_LIMITS`).
        timeout: seconds the program may run.
        served_model: the model name the program is told to use.
        endpoint_thread: serve HTTP from a thread of its own (`ModelEndpoint(thread=)`).
        fail_on_exit: a non-zero exit fails the rollout (`agent_exit`).
        system_prompt: prepended to the prompt (the programs bring their own system prompt).

    See the module docstring for the flow and the failures.
    """

    spec_kind = "harness"

    def __init__(
        self,
        adapter: CLIAdapter | CommandAdapter | Mapping[str, Any],
        *,
        provider: str | SandboxProvider = "local",
        sandbox: SandboxSpec | None = None,
        limits: ResourceLimits | None = None,
        timeout: float = 600.0,
        served_model: str = "nemo-gym-policy",
        endpoint_thread: bool = False,
        fail_on_exit: bool = True,
        system_prompt: str | None = None,
    ) -> None:
        self.adapter = as_adapter(adapter)
        self.provider = provider
        self.sandbox = sandbox or SandboxSpec()
        self.limits = limits or AGENT_LIMITS
        self.timeout = timeout
        self.served_model = served_model
        self.endpoint_thread = endpoint_thread
        self.fail_on_exit = fail_on_exit
        self.system_prompt = system_prompt
        self._endpoint: ModelEndpoint | None = None
        self._provider: SandboxProvider | None = None

    @property
    def endpoint(self) -> ModelEndpoint:
        """The endpoint this harness serves its programs from (created on first use)."""
        if self._endpoint is None:
            self._endpoint = ModelEndpoint(
                served_model=self.served_model, thread=self.endpoint_thread
            )
        return self._endpoint

    def _sandbox_provider(self) -> SandboxProvider:
        if self._provider is None:
            if isinstance(self.provider, str):
                from nemo_gym.sandbox import get

                self._provider = get(self.provider)
            else:
                self._provider = self.provider
        return self._provider

    def base_spec(self, episode: Episode | None = None) -> SandboxSpec:
        """The spec the agent's sandbox and the grading sandbox start from.

        An episode with a `sandbox_spec` (an SWE task: its image, the repository at the
        base commit in its workdir) gives the image, workdir and the container's budget
        (`memory_bytes`, `processes`); the harness's `sandbox` adds its env and options,
        and its `limits` give the per-process ones. Otherwise the harness's `sandbox`.
        """
        given = getattr(episode, "sandbox_spec", None)
        if given is None:
            return self.sandbox
        if not isinstance(given, SandboxSpec):
            raise ConfigError(f"episode.sandbox_spec is {type(given).__name__}, not a SandboxSpec")
        return given.model_copy(
            update={
                "env": {**given.env, **self.sandbox.env},
                "options": {**given.options, **self.sandbox.options},
            }
        )

    def spec_for(self, port: int, base: SandboxSpec | None = None) -> SandboxSpec:
        """The agent's sandbox spec of one rollout from `base` (default: the harness's
        `sandbox`): loopback to `port`, the program mounted."""
        base = base or self.sandbox
        options = dict(base.options)
        mounts = [*options.get("ro_binds", ()), *self.adapter.mounts()]
        if mounts:
            options["ro_binds"] = list(dict.fromkeys(mounts))
        if self._sandbox_provider().name == "local":
            # The workdir and /tmp of `local` are tmpfs of 256 MiB by default: an agent's
            # caches need more. Other providers use the disk of their container.
            options.setdefault("disk_bytes", 1 << 30)
        limits = self.limits
        if base is not self.sandbox:
            # The episode's container budget stands; a Node runtime's per-process needs
            # (open files, output) are the harness's.
            limits = limits.model_copy(
                update={
                    "memory_bytes": base.limits.memory_bytes,
                    "processes": base.limits.processes,
                }
            )
        return base.model_copy(
            update={
                "network": "loopback",
                "ports": (port,),
                "limits": limits,
                "options": options,
            }
        )

    def prompt(self, task: Task) -> str:
        """The text handed to the program: the task's user messages (and system prompt)."""
        parts = [self.system_prompt] if self.system_prompt else []
        parts += [m.content for m in task.messages if m.role in ("system", "user") and m.content]
        if not parts:
            raise ConfigError(f"task {task.id!r} has no text to give a CLI agent")
        return "\n\n".join(parts)

    async def run(self, task: Task, episode: Episode, model: Model) -> AsyncGenerator[Event, None]:
        endpoint = self.endpoint
        segments = Segments(model, self.adapter.name)
        route = await endpoint.route(segments)
        provider = self._sandbox_provider()
        base = self.base_spec(episode)
        try:
            async with contextlib.AsyncExitStack() as stack:
                # The grading sandbox starts while the agent works, off the critical path.
                grading = asyncio.ensure_future(stack.enter_async_context(provider.start(base)))
                try:
                    async with provider.start(self.spec_for(endpoint.bound_port, base)) as box:
                        launch = AgentLaunch(
                            prompt=self.prompt(task),
                            model=self.served_model,
                            base_url=route.base_url,
                            anthropic_base_url=route.anthropic_base_url,
                            api_key=route.api_key,
                            workdir=base.workdir,
                        )
                        workspace = _workspace(task, episode)
                        await workspace.setup(box)
                        result = await self._run_program(box, launch, route)
                        route.raise_failure()
                        files = await take(
                            box,
                            base.workdir,
                            max_bytes=getattr(workspace, "max_bytes", MAX_BYTES),
                            skip=getattr(workspace, "skip", ()),
                        )
                    # The agent's sandbox is gone with all it started; grading happens
                    # where nothing of the agent's is but its files, handed over as data.
                    await workspace.collect(await grading, result, files)
                finally:
                    if not grading.done():
                        grading.cancel()
                    await asyncio.wait({grading})  # its sandbox, if started, closes with the stack
                    if not grading.cancelled():
                        grading.exception()  # raised above where it mattered
        finally:
            await route.aclose()
        route.raise_failure()
        self._check_exit(result)
        for message in _conversation(task, route):
            yield message
        for tool_result in segments.tool_results():
            yield tool_result

    async def _run_program(self, box: Sandbox, launch: AgentLaunch, route: Route) -> ExecResult:
        command = self.adapter.command(launch)
        leaked = [i for i, arg in enumerate(command) if route.token in arg]
        if leaked:
            raise ConfigError(
                f"{self.adapter.name}: argv[{leaked[0]}] of its command holds the route token "
                "(the API key or a base URL); any local user reads command lines in /proc: "
                "pass it through the adapter's env or files"
            )
        await box.exec(["mkdir", "-p", launch.home], timeout=30)
        for path, content in self.adapter.files(launch).items():
            await _write_private(box, path, content)
        env = {"HOME": launch.home, "TERM": "dumb", "NO_COLOR": "1", "CI": "1"}
        env.update(self.sandbox.env)
        env.update(self.adapter.env(launch))
        program = asyncio.ensure_future(
            box.exec(command, timeout=self.timeout, env=env, cwd=launch.workdir)
        )
        failed = asyncio.ensure_future(route.failed.wait())
        try:
            await asyncio.wait({program, failed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            failed.cancel()
            if not program.done():
                # The model failed: the program has nothing to go on; stop it now.
                program.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await program
        if program.cancelled():
            route.raise_failure()
            raise HarnessError(f"{self.adapter.name} was stopped")  # pragma: no cover
        return program.result()

    def _check_exit(self, result: ExecResult) -> None:
        name = self.adapter.name
        tail = (result.stderr.strip() or result.stdout.strip())[-2000:]
        if result.timed_out:
            raise RolloutTimeout(
                f"{name} ran past its {self.timeout:g}s timeout\n{tail}", code="agent_timeout"
            )
        if result.exit_code != 0 and self.fail_on_exit:
            raise HarnessError(
                f"{name} exited with status {result.exit_code}\n{tail}", code="agent_exit"
            )

    async def aclose(self) -> None:
        """Stop the endpoint (the next rollout starts it again)."""
        if self._endpoint is not None:
            await self._endpoint.aclose()


async def _write_private(box: Sandbox, path: str, content: str) -> None:
    """Write an adapter's file readable by its owner alone (it may hold the route token)."""
    if "mode" in inspect.signature(box.write_file).parameters:
        await box.write_file(path, content, mode=0o600)  # type: ignore[call-arg]
        return
    await box.exec(["sh", "-c", 'umask 077 && : > "$1"', "sh", path], timeout=30)
    await box.write_file(path, content)


def _workspace(task: Task, episode: Episode) -> Workspace:
    workspace = getattr(episode, "workspace", None)
    if workspace is not None:
        if not isinstance(workspace, Workspace):
            raise ConfigError(
                f"episode.workspace is {type(workspace).__name__}, not a Workspace "
                "(async setup(sandbox), async collect(sandbox, agent, files))"
            )
        return workspace
    files = task.metadata.get("files") or {}
    if not isinstance(files, Mapping):
        raise ConfigError(f"task {task.id!r}: metadata['files'] must map paths to text")
    return FilesWorkspace(files)


def _conversation(task: Task, route: Route) -> list[Message]:
    """The program's last conversation: its last request's messages and the reply."""
    if route.last is None:
        return opening_messages(task, None)
    request, response = route.last
    return [*request.messages, response.message]
