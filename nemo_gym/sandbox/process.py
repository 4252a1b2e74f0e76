"""The `process` provider: plain subprocesses with resource limits. NOT isolated.

Use it where Linux namespaces are unavailable (some containers, macOS CI is not
supported either way). Commands run as the calling user, see the whole host filesystem
and network, and can signal any process that user may signal. What it does give:

- a private temporary workdir (removed on close), used as cwd and HOME;
- per-exec rlimits (CPU, address space, file size, open files, processes), and where a
  pids cgroup is writable, a process count that holds also for root;
- wall-clock deadlines that kill the command's whole process group;
- cleanup: processes an exec leaves behind (also ones that left its process group or
  session) are re-parented to the worker, which kills them on `reset` and `close`. A
  process that escapes while the worker itself is killed from outside can survive;
  with a pids cgroup, `close` kills it too.

Paths: `spec.workdir` (default "/work") is an alias of the private directory, so
`write_file("/work/a.txt", ...)` and `cwd="/work/src"` work; commands themselves see
the real temporary path (in `$HOME` and as their cwd), not "/work".
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import tempfile

from nemo_gym.errors import ConfigError
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox.base import Provider, WorkerSandbox, in_pids_cgroup, worker_source
from nemo_gym.sandbox.clock import clocked_create
from nemo_gym.sandbox.limits import resolve

logger = logging.getLogger(__name__)


class ProcessSandbox(WorkerSandbox):
    """A `WorkerSandbox` whose workdir is a private host directory."""

    def host_path(self, path: str) -> str:
        path = super().host_path(path)
        alias = self.spec.workdir.rstrip("/") or "/"
        if path == alias:
            return self.workdir
        if alias != "/" and path.startswith(alias + "/"):
            return os.path.join(self.workdir, path[len(alias) + 1 :])
        return path


def unenforced(spec: SandboxSpec) -> list[str]:
    """What of `spec` the `process` provider cannot enforce, one phrase each."""
    found = []
    if spec.network == "none":
        found.append('network="none" (commands share the host network)')
    elif spec.network == "loopback":
        found.append(f'network="loopback" with ports={spec.ports} (every host port is reachable)')
    if spec.image:
        found.append(f"image={spec.image!r} (commands run on the host)")
    return found


class ProcessProvider(Provider):
    """Sandboxes as plain local processes with rlimits (no isolation; see the module doc).

    `ProcessProvider(use_cgroup=True, strict=False)`: `use_cgroup=False` skips the pids
    cgroup even where one is writable. A spec asking for what this provider cannot
    enforce (`network="none"` or `"loopback"`, an `image`) logs a warning once per
    provider and kind, or, with `strict=True`, raises `ConfigError`.
    """

    name = "process"

    def __init__(self, *, use_cgroup: bool = True, strict: bool = False) -> None:
        self.use_cgroup = use_cgroup
        self.strict = strict
        self._warned: set[str] = set()

    @clocked_create
    async def create(self, spec: SandboxSpec | None = None) -> ProcessSandbox:
        """Start a sandbox the caller must `aclose()` (`start` is the context-managed form)."""
        spec = spec or SandboxSpec()
        missing = unenforced(spec)
        if missing and self.strict:
            raise ConfigError(
                "the process provider cannot enforce "
                + "; ".join(missing)
                + ": use the local, docker or apptainer provider, or network='host'"
            )
        for what in missing:
            if what not in self._warned:
                self._warned.add(what)
                logger.warning(
                    "the process provider does NOT enforce %s: it is not isolated "
                    "(ProcessProvider(strict=True) refuses such specs)",
                    what,
                )
        processes = int(resolve(spec.limits).processes or 0)  # bad limits fail before mkdtemp
        tmp = tempfile.mkdtemp(prefix="nemo_gym_sandbox_")
        # +1: the worker itself lives in the cgroup
        argv, drop_cgroup = await in_pids_cgroup(
            [sys.executable, "-I", "-c", worker_source()], processes + 1, enabled=self.use_cgroup
        )

        async def cleanup() -> None:
            await drop_cgroup()
            await asyncio.to_thread(shutil.rmtree, tmp, True)

        bin_dir = os.path.dirname(sys.executable)
        env = {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": tmp,
            "TMPDIR": tmp,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        sandbox = ProcessSandbox(
            provider=self.name,
            argv=argv,
            spec=spec,
            workdir=tmp,
            env=env,
            process_env={"PATH": env["PATH"], "LANG": "C.UTF-8"},
            process_cwd=tmp,
            cleanup=cleanup,
            remove_workdir=True,
        )
        await sandbox.start()
        return sandbox
