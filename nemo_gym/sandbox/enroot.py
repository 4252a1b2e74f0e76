"""`enroot`: sandboxes in Enroot containers (NVIDIA's container runtime on Slurm), through
its CLI.

Each sandbox is its own container: `enroot create --name nemo-gym_<id>_<owner> IMAGE.sqsh`
(a fresh root filesystem), then one `enroot start --rw` of it that runs the shared
sandbox worker (`worker.py`, standard library only), as `apptainer` does; close ends the
worker and runs `enroot remove --force`. `spec.image` is a `.sqsh` file, or a
`docker://` / `dockerd://` URI imported once (`enroot import`) into the provider's
`cache_dir`.

Enroot is "an enhanced unprivileged chroot": user and mount namespaces only. It shares
the host's network and PID namespaces, so on its own `network="none"` cannot hold and
a daemonised process outlives the container. With `isolate=True` (the default) the
provider starts `enroot start` inside a bubblewrap sandbox of new user, PID and (unless
`network="host"`) network namespaces: no interface but loopback, every process killed
when the worker or its owner dies. `isolate=False` runs `enroot start` bare and then
accepts only `network="host"`.

Containers are named with their owner process (`remote.common.owner_token`): the first
`create` of a provider removes the `nemo-gym_*` containers of this user whose owner on
this host is gone (a trainer killed by SIGKILL); `reap()` does it on demand.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

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
from nemo_gym.sandbox.local import find_bwrap
from nemo_gym.sandbox.network import MOUNT, PortRelay, forward_argv
from nemo_gym.sandbox.remote.common import owner_alive, owner_token

__all__ = ["EnrootProvider", "container_name", "enroot_start_argv", "find_binary", "owner_of"]

logger = logging.getLogger(__name__)

PREFIX = "nemo-gym_"
# Beside the exec'd processes: bwrap and its init, the cgroup shell, enroot's switchroot
# and the worker.
_OWN_PROCESSES = 8
_PASSED_ENV_PREFIXES = ("ENROOT_", "XDG_")
_PASSED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG")
# What `enroot start` accepts for `--mount` and `--env` (its runtime.sh checks these).
_MOUNT_FIELD = re.compile(r"[^\s:]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IMPORTED_URI = ("docker://", "dockerd://")


def find_binary(binary: str | None = None) -> str:
    """The `enroot` executable; `SandboxError` naming what to install when it is missing."""
    name = binary or "enroot"
    found = shutil.which(name)
    if found:
        return found
    raise SandboxError(
        f"the enroot provider needs {name!r} on PATH (install Enroot: "
        "https://github.com/NVIDIA/enroot/blob/master/doc/installation.md, "
        "or pass EnrootProvider(binary=...))",
        code="sandbox_unavailable",
    )


def container_name(owner: str | None = None) -> str:
    """A new container name carrying its owner process (`nemo-gym_<id>_<owner>`)."""
    return f"{PREFIX}{uuid.uuid4().hex[:12]}_{owner or owner_token()}"


def owner_of(name: str) -> str | None:
    """The owner token in a container name of ours, else None."""
    if not name.startswith(PREFIX):
        return None
    _, sep, owner = name[len(PREFIX) :].partition("_")
    return owner if sep and owner else None


def _check_workdir(workdir: str) -> None:
    if not workdir.startswith("/") or workdir.rstrip("/") in ("", "/tmp", "/proc", "/dev"):
        raise ConfigError(
            f"SandboxSpec.workdir must be an absolute path of its own, got {workdir!r}"
        )
    if not _MOUNT_FIELD.fullmatch(workdir):
        raise ConfigError(
            f"SandboxSpec.workdir {workdir!r}: enroot mounts take no spaces or colons"
        )


def _mount(source: str, target: str, options: str) -> str:
    if not _MOUNT_FIELD.fullmatch(source):
        raise ConfigError(f"enroot cannot mount {source!r}: a path with a space or colon")
    return f"{source}:{target}:none:{options}"


def enroot_start_argv(
    binary: str,
    spec: SandboxSpec,
    container: str,
    host_workdir: str,
    *,
    python: str = "python3",
    isolate: bool = True,
    bwrap: str | None = None,
    extra_args: Sequence[str] = (),
    net_dir: str | None = None,
) -> list[str]:
    """The command line that runs the sandbox worker in `container` for `spec`.

    With `isolate`, `bwrap` is the bubblewrap binary that gives it its own PID and
    network namespaces; with `network="loopback"`, `net_dir` is the host relay's socket
    directory.
    """
    _check_workdir(spec.workdir)
    if not isolate and spec.network != "host":
        raise ConfigError(
            f"enroot: network={spec.network!r} needs isolate=True: Enroot shares the host's "
            "network namespace, so a bare `enroot start` reaches everything the host "
            "reaches; use isolate=True (a bubblewrap network namespace) or network='host'"
        )
    argv: list[str] = []
    if isolate:
        if not bwrap:
            raise ConfigError("enroot: isolate=True needs the bwrap binary")
        argv += [bwrap, "--unshare-user", "--unshare-pid", "--die-with-parent"]
        if spec.network != "host":
            argv.append("--unshare-net")  # bwrap brings loopback up, nothing else
        argv += ["--dev-bind", "/", "/", "--proc", "/proc", "--"]
    argv += [binary, "start", "--rw"]
    argv += ["--mount", _mount(host_workdir, spec.workdir, "x-create=dir,rbind")]
    worker = [python, "-I", "-c", worker_source()]
    if spec.network == "loopback":
        if not net_dir:
            raise ConfigError("network='loopback' needs the host relay's socket directory")
        argv += ["--mount", _mount(net_dir, MOUNT, "x-create=dir,rbind,ro")]
        worker = forward_argv(python, spec.ports, worker)
    argv += [str(arg) for arg in extra_args]
    argv += ["--", container, *worker]
    return argv


class EnrootProvider(Provider):
    """Sandboxes as Enroot containers running the sandbox worker (see the module doc).

    `binary`: the executable (default `enroot` on PATH). `image`: used when the spec
    names none. `python`: the interpreter inside the image. `isolate`: own PID and
    network namespaces through bubblewrap. `extra_args`: more `enroot start` flags
    (e.g. `["--env", "NVIDIA_VISIBLE_DEVICES"]`). `cache_dir`: where imported images
    are kept. `use_cgroup`: cap the process count with a pids cgroup where one is
    writable. `reap_on_start`: remove dead owners' containers at the first create.
    `SandboxSpec.options["start_timeout"]`: seconds for import and create (default 600).
    """

    name = "enroot"

    def __init__(
        self,
        *,
        binary: str | None = None,
        image: str | None = None,
        python: str = "python3",
        isolate: bool = True,
        extra_args: Sequence[str] = (),
        cache_dir: str | os.PathLike[str] | None = None,
        use_cgroup: bool = True,
        reap_on_start: bool = True,
    ) -> None:
        self.binary = binary
        self.image = image
        self.python = python
        self.isolate = isolate
        self.extra_args = tuple(extra_args)
        self.cache_dir = Path(
            cache_dir
            if cache_dir is not None
            else os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
        )
        if cache_dir is None:
            self.cache_dir = self.cache_dir / "nemo_gym" / "enroot"
        self.use_cgroup = use_cgroup
        self.reap_on_start = reap_on_start
        self._reaped = False
        self._imports: dict[str, asyncio.Lock] = {}

    async def _enroot(self, *args: str, timeout: float = 600.0) -> str:
        """Run one enroot command; its stdout, or `SandboxError` with what it said."""
        binary = find_binary(self.binary)
        process = await asyncio.create_subprocess_exec(
            binary,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=runtime_env(_PASSED_ENV, _PASSED_ENV_PREFIXES),
        )
        try:
            async with asyncio.timeout(timeout):
                out, err = await process.communicate()
        except BaseException:
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise
        if process.returncode != 0:
            said = (err or out).decode(errors="replace").strip()[-1000:]
            raise SandboxError(f"`enroot {args[0]}` failed (exit {process.returncode}): {said}")
        return out.decode(errors="replace")

    async def image_file(self, image: str, timeout: float = 600.0) -> str:
        """The `.sqsh` file for `image`: a file as given, or a URI imported once."""
        if image.startswith(_IMPORTED_URI):
            digest = hashlib.sha256(image.encode()).hexdigest()[:16]
            slug = re.sub(r"[^A-Za-z0-9_.-]", "+", image.split("://", 1)[1])[:80]
            target = self.cache_dir / f"{slug}-{digest}.sqsh"
            async with self._imports.setdefault(image, asyncio.Lock()):
                if not target.exists():
                    self.cache_dir.mkdir(parents=True, exist_ok=True)
                    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
                    try:
                        await self._enroot(
                            "import", "--output", str(partial), image, timeout=timeout
                        )
                        os.replace(partial, target)
                    finally:
                        partial.unlink(missing_ok=True)
            return str(target)
        if not os.path.isfile(image):
            raise ConfigError(
                f"enroot: image {image!r} is neither a .sqsh file here nor a "
                "docker:// or dockerd:// URI"
            )
        return os.path.realpath(image)

    @clocked_create
    async def create(self, spec: SandboxSpec | None = None) -> WorkerSandbox:
        """Start a sandbox the caller must `aclose()` (`start` is the context-managed form)."""
        spec = spec or SandboxSpec()
        if not spec.image and self.image:
            spec = spec.model_copy(update={"image": self.image})
        if not spec.image:
            raise ConfigError(
                "the enroot provider needs SandboxSpec(image=...): a .sqsh file or a "
                "docker:// URI such as docker://python:3.12-slim"
            )
        _check_workdir(spec.workdir)
        binary = find_binary(self.binary)
        bwrap = find_bwrap() if self.isolate else None
        if not self.isolate and spec.network != "host":
            enroot_start_argv(binary, spec, "", "/", isolate=False)  # raises its ConfigError
        if self.reap_on_start and not self._reaped:
            self._reaped = True
            try:
                await self.reap()
            except SandboxError as exc:
                logger.warning("enroot: removing orphaned containers failed: %s", exc)
        timeout = float(spec.options.get("start_timeout", 600.0))
        image = await self.image_file(spec.image, timeout)
        container = container_name()
        await self._enroot("create", "--name", container, image, timeout=timeout)
        host_workdir = ""
        relay: PortRelay | None = None
        try:
            host_workdir = tempfile.mkdtemp(prefix="nemo_gym_enroot_")
            relay = await PortRelay.for_spec(spec)
            argv = enroot_start_argv(
                binary,
                spec,
                container,
                host_workdir,
                python=self.python,
                isolate=self.isolate,
                bwrap=bwrap,
                extra_args=self.extra_args,
                net_dir=relay.directory if relay else None,
            )
            processes = int(resolve(spec.limits).processes or 0)
            own = _OWN_PROCESSES + (1 if relay else 0)
            argv, drop_cgroup = await in_pids_cgroup(argv, processes + own, enabled=self.use_cgroup)
        except BaseException:
            if host_workdir:
                shutil.rmtree(host_workdir, ignore_errors=True)
            if relay is not None:
                await relay.aclose()
            await self._remove(container)
            raise

        async def cleanup() -> None:
            try:
                await drop_cgroup()
                await asyncio.to_thread(shutil.rmtree, host_workdir, True)
            finally:
                try:
                    if relay is not None:
                        await relay.aclose()
                finally:
                    await self._remove(container)

        sandbox = WorkerSandbox(
            provider=self.name,
            argv=argv,
            spec=spec,
            workdir=spec.workdir,
            env=image_exec_env(spec.workdir),
            process_env=runtime_env(_PASSED_ENV, _PASSED_ENV_PREFIXES),
            # enroot's switchroot passes stdio, not other descriptors, into the container
            channel_on_stdio=True,
            process_cwd=host_workdir,
            cleanup=cleanup,
        )
        await sandbox.start()
        return sandbox

    async def _remove(self, container: str) -> None:
        try:
            await self._enroot("remove", "--force", container, timeout=120.0)
        except (SandboxError, OSError) as exc:
            logger.warning("enroot: could not remove container %s: %s", container, exc)

    async def reap(self, *, dead_owners_only: bool = True, run: str | None = None) -> list[str]:
        """Remove this user's `nemo-gym_*` containers whose owner on this host is gone
        (and, with `dead_owners_only=False`, those of other hosts, as `gym sandbox reap`
        asks: a store shared between nodes); the names removed. Never a live owner's
        on this host."""
        if run is not None:
            raise ConfigError("enroot: containers carry their owner, not a run: drop --run")
        listed = await self._enroot("list", timeout=120.0)
        wanted = (False,) if dead_owners_only else (False, None)
        doomed = [
            name
            for name in listed.split()
            if (owner := owner_of(name)) is not None and owner_alive(owner) in wanted
        ]
        if doomed:
            await self._enroot("remove", "--force", *doomed, timeout=300.0)
            logger.info("enroot: removed %d orphaned containers: %s", len(doomed), doomed)
        return doomed

    def __repr__(self) -> str:
        return f"EnrootProvider(binary={self.binary!r}, image={self.image!r})"
