"""The workspace of a CLI agent's rollout: what the environment puts in, and checks after.

The CLI harness starts the agent's sandbox (it decides the network and the programs
mounted there); the environment decides what the agent works on and how its work is
judged, through the episode's `workspace`:

- `setup(sandbox)` puts the task's files in the sandbox's workdir before the agent runs;
- `collect(sandbox, agent)` runs after the agent exited, in the same sandbox, while it
  is still alive: typically it writes the tests again (the agent may have edited them)
  and runs them, keeping the results for the episode's `final_state()`, which the
  verifier scores after the sandbox is gone.

`FilesWorkspace` is that contract for files given as text and check commands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from nemo_gym.protocols import Sandbox
from nemo_gym.records import ExecResult

__all__ = ["FilesWorkspace", "Workspace"]


@runtime_checkable
class Workspace(Protocol):
    """What a CLI harness asks of an episode that gives its agent something to work on."""

    async def setup(self, sandbox: Sandbox) -> None: ...

    async def collect(self, sandbox: Sandbox, agent: ExecResult) -> None: ...


class FilesWorkspace:
    """Files written before the agent runs; commands run (and files read) after it.

    Args:
        files: path (relative to the workdir) -> text or bytes, written before the agent.
        checks: shell commands run in the workdir after the agent, in order.
        check_files: written again just before the checks (the tests, so an agent that
            edited them is judged on the originals).
        keep: paths whose content after the agent is kept in `state["files"]` (a
            missing file is None).
        timeout: seconds per check.

    After `collect`, `state` holds `agent` (exit code, timed out, duration),
    `checks` (one dict per command: cmd, exit_code, stdout, stderr, timed_out) and
    `files`; `passed` is True when every check exited 0.
    """

    def __init__(
        self,
        files: Mapping[str, str | bytes],
        *,
        checks: Sequence[str] = (),
        check_files: Mapping[str, str | bytes] | None = None,
        keep: Sequence[str] = (),
        timeout: float = 60.0,
    ) -> None:
        self.files = dict(files)
        self.checks = tuple(checks)
        self.check_files = dict(check_files or {})
        self.keep = tuple(keep)
        self.timeout = timeout
        self.state: dict[str, Any] = {}

    async def setup(self, sandbox: Sandbox) -> None:
        for path, data in self.files.items():
            await sandbox.write_file(path, data)

    async def collect(self, sandbox: Sandbox, agent: ExecResult) -> None:
        for path, data in self.check_files.items():
            await sandbox.write_file(path, data)
        results = [await sandbox.exec(cmd, timeout=self.timeout) for cmd in self.checks]
        files: dict[str, str | None] = {}
        for path in self.keep:
            try:
                files[path] = (await sandbox.read_file(path)).decode("utf-8", "replace")
            except OSError:
                files[path] = None
        self.state = {
            "agent": {
                "exit_code": agent.exit_code,
                "timed_out": agent.timed_out,
                "duration_s": agent.duration_s,
            },
            "checks": [
                _check(cmd, result) for cmd, result in zip(self.checks, results, strict=True)
            ],
            "files": files,
        }

    @property
    def passed(self) -> bool:
        """Every check ran and exited 0 (False before `collect`)."""
        checks = self.state.get("checks")
        return bool(checks) and all(c["exit_code"] == 0 and not c["timed_out"] for c in checks)


def _check(cmd: str, result: ExecResult) -> dict[str, Any]:
    return {
        "cmd": cmd,
        "exit_code": result.exit_code,
        "stdout": result.stdout[-4000:],
        "stderr": result.stderr[-4000:],
        "timed_out": result.timed_out,
    }
