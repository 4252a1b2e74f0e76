"""The workspace of a CLI agent's rollout: what the environment puts in, and how it grades.

The CLI harness starts the agent's sandbox (it decides the network and the programs
mounted there); the environment decides what the agent works on and how its work is
judged, through the episode's `workspace`:

- `setup(sandbox)` puts the task's files in the agent's workdir before the agent runs;
- once the program ended, the harness stops every process left in the agent's sandbox
  and takes its workdir as data (`take`): a container is frozen and read through its
  engine's archive API (nothing in it runs to read its files); a `local` or `process`
  sandbox has its processes killed (`stop_processes`) and its workdir listed
  (`take_files`). Regular files and directories only: a symlink that stays inside the
  workdir becomes a copy of its target, one that leaves it (and a fifo, socket or
  device) is refused. Then the agent's sandbox closes;
- `collect(sandbox, agent, files)` runs in a fresh sandbox that holds nothing of the
  agent's but what it is handed: typically it restores the agent's files, writes the
  task's own tests again and runs them, keeping the results for the episode's
  `final_state()`, which the verifier scores.

So grading sees the agent's work as files only: no process the agent left running, no
link into another place, no test the agent replaced, and (with `FilesWorkspace`) no
module the agent planted where the checks would import it (see `PROTECTED`).
"""

from __future__ import annotations

import fnmatch
import io
import json
import sys
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Protocol, runtime_checkable

from nemo_gym.errors import SandboxError
from nemo_gym.protocols import Sandbox
from nemo_gym.records import ExecResult

__all__ = [
    "CHECK_ENV",
    "PROTECTED",
    "AgentFiles",
    "FilesWorkspace",
    "Workspace",
    "archive",
    "engine_of",
    "stop_processes",
    "take",
    "take_files",
]

MAX_FILES = 20_000
"""At most this many entries are taken from a workspace (the rest are refused)."""
MAX_BYTES = 32 << 20
"""At most this many bytes of file content are taken from a workspace: they are held in
the trainer's memory until graded, once per rollout in flight, and a hostile agent fills
whatever it may (the rest is refused, named in `AgentFiles.refused`)."""

PROTECTED = (
    "conftest.py",
    "*/conftest.py",
    "pytest.ini",
    "*/pytest.ini",
    "sitecustomize.py",
    "*/sitecustomize.py",
    "usercustomize.py",
    "*/usercustomize.py",
    "*.pth",
    "*.pyc",
    "__pycache__/*",
    "*/__pycache__/*",
    # pytest reads `addopts` (`-p module`: a plugin of the agent's) from these
    "pyproject.toml",
    "*/pyproject.toml",
    "setup.cfg",
    "*/setup.cfg",
    "tox.ini",
    "*/tox.ini",
    # HOME is the workdir in the grading sandbox: a login shell, git and pdb read these
    ".profile",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".gitconfig",
    ".config/git/*",
    ".git/hooks/*",
    ".pdbrc",
)
"""Paths that run code when a check starts Python, pytest, a shell or git, whoever wrote
them.

`FilesWorkspace` grades with the task's own copy of each (from `files`) and drops the
agent's. The agent's new Python modules named like a standard-library module (`unittest.py`,
`json/__init__.py`), which shadow it for a test run from the workdir, are dropped too.
"""

CHECK_ENV = {"PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
"""Environment of every check: no user site-packages (a planted `usercustomize` under
`$HOME/.local`), no bytecode written."""

# `test` is the standard library's own test suite, which no test imports; a project's
# `test/` package is common.
_SHADOWED = (frozenset(sys.stdlib_module_names) - {"test"}) | {"pytest", "_pytest", "pluggy"}

# Runs inside the agent's sandbox after its processes are gone: lists the workdir
# without following a link (python -I -S: nothing of the workdir is imported).
_LISTER = r"""
import json, os, stat, sys
root = os.path.realpath(".")
limit = int(sys.argv[1])
out = []
def walk(rel):
    try:
        entries = sorted(os.scandir(os.path.join(root, rel)), key=lambda e: e.name)
    except OSError as exc:
        out.append([rel, "refused", 0, f"unreadable directory: {exc.strerror}"])
        return
    for entry in entries:
        if len(out) >= limit:
            out.append([os.path.join(rel, entry.name), "refused", 0, "over the file limit"])
            return
        path = os.path.join(rel, entry.name) if rel else entry.name
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            out.append([path.encode("utf-8", "replace").decode(), "refused", 0, "not UTF-8"])
            continue
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            out.append([path, "dir", 0, None])
            walk(path)
        elif stat.S_ISREG(mode):
            out.append([path, "file", entry.stat(follow_symlinks=False).st_size, None])
        elif stat.S_ISLNK(mode):
            target = os.path.realpath(os.path.join(root, path))
            inside = target.startswith(root + os.sep)
            if inside and os.path.isfile(target):
                out.append([path, "link", os.path.getsize(target), os.path.relpath(target, root)])
            elif inside:
                out.append([path, "refused", 0, "a link to a directory or to nothing"])
            else:
                out.append([path, "refused", 0, "a link that leaves the workspace"])
        else:
            out.append([path, "refused", 0, "not a regular file (fifo, socket or device)"])
walk("")
sys.stdout.write(json.dumps(out))
"""


@dataclass(frozen=True)
class AgentFiles:
    """An agent's workdir taken as data, once nothing of the agent's runs any more.

    `files`: path (relative to the workdir) -> content, for every regular file and every
    link to a file inside the workdir (its target's content); `dirs`: every directory;
    `refused`: path -> why it was not taken (a link that leaves the workdir, a special
    file, past the limits); `modes`: each file's permission bits, where the sandbox's
    engine archive gave them (else empty: a file is written back 0644).
    """

    files: dict[str, bytes] = field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    refused: dict[str, str] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)

    def text(self, path: str) -> str | None:
        """A file's content as text (None when it was not taken)."""
        data = self.files.get(path)
        return None if data is None else data.decode("utf-8", "replace")


async def stop_processes(sandbox: Sandbox) -> bool:
    """Kill every process left in `sandbox`, keeping its files; False where it cannot.

    The `local` and `process` sandboxes can (`reset(wipe=False)`); for others the agent's
    files are still taken after it ends, and graded in a fresh sandbox its leftovers
    cannot reach.
    """
    reset = getattr(sandbox, "reset", None)
    if reset is None:
        return False
    try:
        await reset(wipe=False)
    except TypeError:  # a reset that would also empty the workdir
        return False
    return True


async def take_files(
    sandbox: Sandbox, *, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES
) -> AgentFiles:
    """The sandbox's workdir as data (see `AgentFiles`); call it after `stop_processes`."""
    listed = await sandbox.exec(["python3", "-I", "-S", "-c", _LISTER, str(max_files)], timeout=120)
    if listed.exit_code != 0 or listed.stdout_truncated:
        raise SandboxError(
            f"could not list the agent's workspace (exit {listed.exit_code}): "
            f"{listed.stderr.strip()[-500:]}"
        )
    files: dict[str, bytes] = {}
    dirs: list[str] = []
    refused: dict[str, str] = {}
    total = 0
    for path, kind, size, extra in json.loads(listed.stdout):
        if kind == "dir":
            dirs.append(path)
        elif kind == "refused":
            refused[path] = extra
        elif total + size > max_bytes:
            refused[path] = f"over the {max_bytes}-byte limit of a workspace"
        else:
            try:
                data = await sandbox.read_file(extra if kind == "link" else path)
            except OSError as exc:
                refused[path] = f"unreadable: {exc.strerror or exc}"
                continue
            total += len(data)
            files[path] = data
    return AgentFiles(files=files, dirs=tuple(dirs), refused=refused)


def engine_of(sandbox: Sandbox) -> tuple[Any, str] | None:
    """The Docker-API client and container id of a container sandbox, when it has one."""
    client, container = getattr(sandbox, "client", None), getattr(sandbox, "id", None)
    if client is None or not isinstance(container, str) or not hasattr(client, "request"):
        return None
    return client, container


def _skipped(path: str, skip: Sequence[str]) -> bool:
    return any(path == d or path.startswith(d + "/") for d in skip)


def _from_tar(
    data: bytes, *, max_files: int, max_bytes: int, skip: Sequence[str] = ()
) -> AgentFiles:
    """The files of an engine's archive of one folder (its one top folder stripped), with
    the policy of `take_files`; paths under `skip` are left out."""
    files: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    refused: dict[str, str] = {}
    links: dict[str, str] = {}
    hard: dict[str, str] = {}
    dirs: list[str] = []
    total = 0
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            _, _, path = member.name.partition("/")
            if not path or _skipped(path, skip):
                continue
            count += 1
            if count > max_files:
                refused[path] = "over the file limit"
                continue
            if member.isdir():
                dirs.append(path)
            elif member.isreg():
                if total + member.size > max_bytes:
                    refused[path] = f"over the {max_bytes}-byte limit of a workspace"
                    continue
                handle = tar.extractfile(member)
                assert handle is not None
                files[path] = handle.read()
                modes[path] = member.mode & 0o777
                total += member.size
            elif member.issym():
                links[path] = member.linkname
            elif member.islnk():
                # A hard link names another member of the archive: a file taken above.
                hard[path] = member.linkname.partition("/")[2]
            else:
                refused[path] = "not a regular file (fifo, socket or device)"
    for path, source in hard.items():
        if source in files:
            files[path], modes[path] = files[source], modes[source]
        else:
            refused[path] = "a hard link to a file not taken"
    for path in links:
        resolved = _resolve(path, links)
        if resolved is None:
            refused[path] = "a link that leaves the workspace"
        elif resolved in files:
            files[path], modes[path] = files[resolved], modes[resolved]
        else:
            refused[path] = "a link to a directory or to nothing"
    return AgentFiles(files=files, dirs=tuple(dirs), refused=refused, modes=modes)


def _resolve(path: str, links: Mapping[str, str]) -> str | None:
    """Where the link at `path` leads once every link on the way is followed, as a
    workspace path; None when it leaves the workspace (or loops)."""
    resolved: list[str] = []
    queue = path.split("/")
    for _ in range(1000):
        if not queue:
            return "/".join(resolved)
        part = queue.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        here = "/".join([*resolved, part])
        if here in links:
            target = links[here]
            if target.startswith("/"):
                return None  # the container's file system, not the workspace
            queue = target.split("/") + queue
            continue
        resolved.append(part)
    return None


async def archive(
    sandbox: Sandbox,
    root: str,
    *,
    max_files: int = MAX_FILES,
    max_bytes: int = MAX_BYTES,
    skip: Sequence[str] = (),
) -> AgentFiles:
    """`root` in a container sandbox, read through the engine's archive API (no program
    in the container runs)."""
    engine = engine_of(sandbox)
    if engine is None:
        raise SandboxError(f"{sandbox!r} has no engine archive API to take {root} through")
    client, container = engine
    response = await client.request(
        "GET", f"/containers/{container}/archive", params={"path": root.rstrip("/") + "/."}
    )
    if response.status != 200:
        raise SandboxError(
            f"cannot take {root} from container {container[:12]}: {response.message()}"
        )
    return _from_tar(response.body, max_files=max_files, max_bytes=max_bytes, skip=skip)


async def take(
    sandbox: Sandbox,
    root: str,
    *,
    max_files: int = MAX_FILES,
    max_bytes: int = MAX_BYTES,
    skip: Sequence[str] = (),
    must_stop: bool = False,
) -> AgentFiles:
    """Stop everything the agent started in `sandbox`, then take `root` as files.

    A container with an engine API is frozen (`pause`: every process in it stopped at
    once by the cgroup freezer) and stays frozen until it is removed, then read through
    the engine's archive API: nothing in the container runs to list or read the files,
    so a replaced `python3` or a daemon cannot answer for them. Other sandboxes:
    `stop_processes`, then `take_files` (`root` must be the workdir); `must_stop`
    refuses a sandbox whose processes cannot be stopped (`SandboxError`).
    """
    engine = engine_of(sandbox)
    if engine is None:
        if not await stop_processes(sandbox) and must_stop:
            raise SandboxError(
                f"{sandbox!r} can neither be frozen nor have its processes stopped: its "
                "files could change while they are taken"
            )
        files = await take_files(sandbox, max_files=max_files, max_bytes=max_bytes)
        kept = {p: d for p, d in files.files.items() if not _skipped(p, skip)}
        return AgentFiles(
            files=kept,
            dirs=tuple(d for d in files.dirs if not _skipped(d, skip)),
            refused=dict(files.refused),
        )
    client, container = engine
    paused = await client.request("POST", f"/containers/{container}/pause")
    if paused.status not in (204, 304):
        raise SandboxError(
            f"cannot freeze the agent's container {container[:12]}: {paused.message()}"
        )
    return await archive(sandbox, root, max_files=max_files, max_bytes=max_bytes, skip=skip)


@runtime_checkable
class Workspace(Protocol):
    """What a CLI harness asks of an episode that gives its agent something to work on.

    A workspace may also set `max_bytes` (the most of the workdir taken, default
    `MAX_BYTES`) and `skip` (folders of the workdir never taken, e.g. `(".git",)`); the
    harness reads them when it takes the agent's files (`take`).
    """

    async def setup(self, sandbox: Sandbox) -> None:
        """Put the task's files in the agent's sandbox."""
        ...

    async def collect(self, sandbox: Sandbox, agent: ExecResult, files: AgentFiles) -> None:
        """Grade `files` (the agent's workdir, as data) in `sandbox`, a fresh one."""
        ...


def protected(path: str, patterns: Sequence[str] = PROTECTED) -> bool:
    """Whether `path` is test machinery an agent must not supply (see `PROTECTED`)."""
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def shadows_a_module(path: str) -> bool:
    """Whether `path` is a module or package named like a standard-library one, which a
    test run from its directory imports instead (`unittest.py`, `json/__init__.py`)."""
    parts = PurePosixPath(path).parts
    if len(parts) >= 2 and parts[-1].partition(".")[0] == "__init__":
        return parts[-2] in _SHADOWED
    name, _, suffix = parts[-1].partition(".")
    # `json.py`, and extension modules: `json.so`, `json.cpython-311-x86_64-linux-gnu.so`
    return name in _SHADOWED and (suffix == "py" or suffix.endswith(("so", "pyd")))


class FilesWorkspace:
    """Files written before the agent runs; the agent's files graded after it.

    Args:
        files: path (relative to the workdir) -> text or bytes, written before the agent.
        checks: shell commands run after the agent, in order, in a fresh sandbox that
            holds the agent's files, the task's protected files and `check_files`.
        check_files: written fresh before the checks (the tests: an agent that edited,
            deleted or replaced them is judged on the originals).
        keep: paths whose content after the agent is kept in `state["files"]` (a
            missing file is None).
        timeout: seconds per check.
        protect: glob patterns of paths the agent may not supply (default `PROTECTED`):
            the task's own copy (from `files`) is used, or none.

    After `collect`, `state` holds `agent` (exit code, timed out, duration),
    `checks` (one dict per command: cmd, exit_code, stdout, stderr, timed_out),
    `files` and `refused` (path -> why the agent's file was not graded); `passed` is
    True when every check exited 0.
    """

    def __init__(
        self,
        files: Mapping[str, str | bytes],
        *,
        checks: Sequence[str] = (),
        check_files: Mapping[str, str | bytes] | None = None,
        keep: Sequence[str] = (),
        timeout: float = 60.0,
        protect: Sequence[str] = PROTECTED,
    ) -> None:
        self.files = dict(files)
        self.checks = tuple(checks)
        self.check_files = dict(check_files or {})
        self.keep = tuple(keep)
        self.timeout = timeout
        self.protect = tuple(protect)
        self.state: dict[str, Any] = {}

    async def setup(self, sandbox: Sandbox) -> None:
        for path, data in self.files.items():
            await sandbox.write_file(path, data)

    def graded_files(self, agent_files: AgentFiles) -> tuple[dict[str, bytes], dict[str, str]]:
        """What the checks see: the agent's files, the task's protected ones, fresh tests;
        and the agent's files left out, with why."""
        refused = dict(agent_files.refused)
        graded: dict[str, bytes] = {}
        for path, data in agent_files.files.items():
            if path in self.check_files:
                continue
            if protected(path, self.protect):
                refused[path] = "test machinery: graded with the task's own copy, or none"
                continue
            if path not in self.files and shadows_a_module(path):
                refused[path] = "named like a standard-library module it would shadow"
                continue
            graded[path] = data
        for path, original in self.files.items():
            if protected(path, self.protect):
                graded[path] = original.encode() if isinstance(original, str) else original
        for path, test in self.check_files.items():
            graded[path] = test.encode() if isinstance(test, str) else test
        return graded, refused

    async def collect(self, sandbox: Sandbox, agent: ExecResult, files: AgentFiles) -> None:
        graded, refused = self.graded_files(files)
        dirs = [d for d in files.dirs if not protected(d + "/x", self.protect)]
        for start in range(0, len(dirs), 200):
            await sandbox.exec(["mkdir", "-p", "--", *dirs[start : start + 200]], timeout=60)
        for path, data in graded.items():
            await sandbox.write_file(path, data)
        results = [
            await sandbox.exec(cmd, timeout=self.timeout, env=CHECK_ENV) for cmd in self.checks
        ]
        self.state = {
            "agent": {
                "exit_code": agent.exit_code,
                "timed_out": agent.timed_out,
                "duration_s": agent.duration_s,
            },
            "checks": [
                _check(cmd, result) for cmd, result in zip(self.checks, results, strict=True)
            ],
            "files": {path: files.text(path) for path in self.keep},
            "refused": refused,
        }

    @property
    def passed(self) -> bool:
        """Every check ran and exited 0 (False before `collect`)."""
        checks = self.state.get("checks") or []
        return bool(checks) and all(c["exit_code"] == 0 and not c["timed_out"] for c in checks)


def _check(cmd: str, result: ExecResult) -> dict[str, Any]:
    return {
        "cmd": cmd,
        "exit_code": result.exit_code,
        "stdout": result.stdout[-4000:],
        "stderr": result.stderr[-4000:],
        "timed_out": result.timed_out,
    }
