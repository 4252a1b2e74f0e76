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

from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox.base import Provider, WorkerSandbox, in_pids_cgroup, worker_source
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


class ProcessProvider(Provider):
    """Sandboxes as plain local processes with rlimits (no isolation; see the module doc).

    `ProcessProvider(use_cgroup=True)`: set False to skip the pids cgroup even where
    one is writable.
    """

    name = "process"

    def __init__(self, *, use_cgroup: bool = True) -> None:
        self.use_cgroup = use_cgroup

    async def create(self, spec: SandboxSpec | None = None) -> ProcessSandbox:
        """Start a sandbox the caller must `aclose()` (`start` is the context-managed form)."""
        spec = spec or SandboxSpec()
        if spec.image:
            logger.warning("the process provider runs on the host; image %r is ignored", spec.image)
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
