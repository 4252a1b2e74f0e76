"""`apptainer`: sandboxes in Apptainer (or Singularity) containers, through its CLI.

For HPC clusters, where Apptainer is the container runtime and Docker is not allowed.
Each sandbox is one `apptainer exec` of the image that runs the shared sandbox worker
(`worker.py`, standard library only) inside the container; the worker forks one child
per exec and applies the per-exec limits, deadlines and output caps, exactly as in the
`local` and `process` providers (same `WorkerSandbox`, same fast paths `run_python`
and `run_batch`).

```python
provider = ApptainerProvider()                      # finds `apptainer`, else `singularity`
async with provider.start(SandboxSpec(image="/images/python_3.12.sif")) as box:
    result = await box.exec("python3 -c 'print(6 * 7)'")
```

The container is started with `--containall` (own PID and IPC namespaces, a minimal
/dev, empty /tmp and home, a clean environment), `--net --network none` (loopback only;
`spec.network=True` leaves the host network), `--writable-tmpfs` (a throwaway writable
overlay) and a private host directory bound at `spec.workdir` (removed on close).

Limits: the image needs a `python3` (option `python`). The sandbox's process count is
capped by a pids cgroup where one is writable (as for `process`); memory, CPU time,
file size and open files are per-exec rlimits. The workdir lives on the host disk (not
size-capped). The PID namespace ends every process in it when the worker exits, which
it does when its owner dies (its stdin closes). Not installable on Debian 12, so the
test suite checks the command line it builds and runs it through a stand-in binary.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox.base import (
    Provider,
    WorkerSandbox,
    image_exec_env,
    in_pids_cgroup,
    runtime_env,
    worker_source,
)
from nemo_gym.sandbox.clock import clocked_create
from nemo_gym.sandbox.limits import resolve
from nemo_gym.sandbox.network import MOUNT, PortRelay, forward_argv

logger = logging.getLogger(__name__)

BINARIES = ("apptainer", "singularity")
# Beside the exec'd processes: apptainer's starter, its shim init and the worker.
_OWN_PROCESSES = 8
# What the apptainer process itself needs from our environment (its caches, config).
_PASSED_ENV_PREFIXES = ("APPTAINER_", "SINGULARITY_")
_PASSED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "XDG_RUNTIME_DIR", "TMPDIR", "LANG")


def find_binary(binary: str | None = None) -> str:
    """The apptainer (or singularity) executable; `SandboxError` naming what is missing."""
    candidates = (binary,) if binary else BINARIES
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    raise SandboxError(
        f"the apptainer provider needs {' or '.join(repr(c) for c in candidates)} on PATH "
        "(install Apptainer: https://apptainer.org/docs/admin/main/installation.html, "
        "or pass ApptainerProvider(binary=...))",
        code="sandbox_unavailable",
    )


def apptainer_argv(
    binary: str,
    spec: SandboxSpec,
    host_workdir: str,
    *,
    python: str = "python3",
    writable_tmpfs: bool = True,
    extra_args: Sequence[str] = (),
    net_dir: str | None = None,
) -> list[str]:
    """The `apptainer exec` command line that runs the sandbox worker for `spec`.

    With `network="loopback"`, `net_dir` is the host relay's socket directory.
    """
    if not spec.image:
        raise ConfigError(
            "the apptainer provider needs SandboxSpec(image=...): a .sif file, a sandbox "
            "directory, or a URI such as docker://python:3.12-slim"
        )
    workdir = spec.workdir
    if not workdir.startswith("/") or workdir.rstrip("/") in ("", "/tmp", "/proc", "/dev"):
        raise ConfigError(
            f"SandboxSpec.workdir must be an absolute path of its own, got {workdir!r}"
        )
    argv = [binary, "exec", "--containall"]
    if spec.network != "host":
        argv += ["--net", "--network", "none"]
    if writable_tmpfs:
        argv.append("--writable-tmpfs")
    argv += ["--bind", f"{host_workdir}:{workdir}", "--pwd", workdir]
    for path in spec.options.get("ro_binds", ()):
        if not isinstance(path, str) or not path.startswith("/") or ":" in path or "," in path:
            raise ConfigError(
                f"apptainer: ro_binds entry {path!r} must be an absolute host path "
                "without ':' or ','"
            )
        argv += ["--bind", f"{path}:{path}:ro"]
    if os.geteuid() == 0:
        # root keeps capabilities in the container otherwise (the worker drops them too)
        argv.append("--no-privs")
    worker = [python, "-I", "-c", worker_source()]
    if spec.network == "loopback":
        if not net_dir:
            raise ConfigError("network='loopback' needs the host relay's socket directory")
        argv += ["--bind", f"{net_dir}:{MOUNT}:ro"]
        worker = forward_argv(python, spec.ports, worker)
    argv += [str(arg) for arg in extra_args]
    argv += [spec.image, *worker]
    return argv


class ApptainerProvider(Provider):
    """Sandboxes as Apptainer containers running the sandbox worker (see the module doc).

    `binary`: the executable (default: `apptainer`, else `singularity`, on PATH).
    `image`: used when the spec names none. `python`: the interpreter inside the image.
    `writable_tmpfs`: a throwaway writable overlay on the image. `extra_args`: more
    `apptainer exec` flags (e.g. `["--nv"]` for GPUs). `use_cgroup`: cap the process
    count with a pids cgroup where one is writable. Options read from
    `SandboxSpec.options`: `start_timeout` (seconds; image conversion can be slow),
    `ro_binds` (host paths shown read-only at the same path, as for `local`).
    """

    name = "apptainer"

    def __init__(
        self,
        *,
        binary: str | None = None,
        image: str | None = None,
        python: str = "python3",
        writable_tmpfs: bool = True,
        extra_args: Sequence[str] = (),
        use_cgroup: bool = True,
    ) -> None:
        self.binary = binary
        self.image = image
        self.python = python
        self.writable_tmpfs = writable_tmpfs
        self.extra_args = tuple(extra_args)
        self.use_cgroup = use_cgroup

    def command(
        self, spec: SandboxSpec, host_workdir: str, net_dir: str | None = None
    ) -> list[str]:
        """The command line `create` runs (without the pids cgroup wrapper)."""
        if not spec.image and self.image:
            spec = spec.model_copy(update={"image": self.image})
        return apptainer_argv(
            find_binary(self.binary),
            spec,
            host_workdir,
            python=self.python,
            writable_tmpfs=self.writable_tmpfs,
            extra_args=self.extra_args,
            net_dir=net_dir,
        )

    @clocked_create
    async def create(self, spec: SandboxSpec | None = None) -> WorkerSandbox:
        """Start a sandbox the caller must `aclose()` (`start` is the context-managed form)."""
        spec = spec or SandboxSpec()
        if not spec.image and self.image:
            spec = spec.model_copy(update={"image": self.image})
        host_workdir = tempfile.mkdtemp(prefix="nemo_gym_apptainer_")
        relay: PortRelay | None = None
        try:
            relay = await PortRelay.for_spec(spec)
            argv = self.command(spec, host_workdir, relay.directory if relay else None)
            processes = int(resolve(spec.limits).processes or 0)
            own = _OWN_PROCESSES + (1 if relay else 0)
            argv, drop_cgroup = await in_pids_cgroup(argv, processes + own, enabled=self.use_cgroup)
        except BaseException:
            shutil.rmtree(host_workdir, ignore_errors=True)
            if relay is not None:
                await relay.aclose()
            raise

        async def cleanup() -> None:
            try:
                await drop_cgroup()
                await asyncio.to_thread(shutil.rmtree, host_workdir, True)
            finally:
                if relay is not None:
                    await relay.aclose()

        sandbox = WorkerSandbox(
            provider=self.name,
            argv=argv,
            spec=spec,
            workdir=spec.workdir,
            env=image_exec_env(spec.workdir),
            process_env=runtime_env(_PASSED_ENV, _PASSED_ENV_PREFIXES),
            # apptainer's starter may not pass other descriptors through; no bwrap init
            # holds stdio inside its container
            channel_on_stdio=True,
            process_cwd=host_workdir,
            cleanup=cleanup,
        )
        await sandbox.start()
        return sandbox

    def __repr__(self) -> str:
        return f"ApptainerProvider(binary={self.binary!r}, image={self.image!r})"
