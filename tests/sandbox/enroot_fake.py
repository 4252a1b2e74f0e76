"""A stand-in `enroot` binary, written from Enroot's CLI (its `doc/cmd/*.md` usage texts
and the argument checks of its `src/runtime.sh`), for tests on a machine without Enroot
(not packaged for Debian; its release .debs are on GitHub, out of reach here).

What it keeps of Enroot: the commands `import`, `create`, `start`, `list`, `remove` and
`version` with their options, errors (`[ERROR] File already exists: ...`, `Invalid
argument`, `No such file or directory`, `Invalid image format`) and exit codes; the
container store under `ENROOT_DATA_PATH`; and what `start` isolates: user and mount
namespaces only (a bubblewrap sandbox with no `--unshare-net` or `--unshare-pid`, so
it shares the caller's network and PID namespaces, as Enroot does), the `--mount`
binds (`ro` honoured) and the `--env` variables. What it does not: image formats (a
"squashfs" is a file starting with the squashfs magic `hsqs`; the container's root is
a throwaway tmpfs holding this host's system directories read-only, writable outside
them only with `--rw`), hooks, `--conf` scripts and registries (an import writes a stub image).
Every call is appended as JSON to `ENROOT_FAKE_LOG` (each argument cut at 200 chars).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from nemo_gym.sandbox.base import python_for_sandbox
from nemo_gym.sandbox.local import _SYSTEM_DIRS, _python_dirs, find_bwrap

_SCRIPT = r"""#!{python}
import json, os, re, shutil, sys

BWRAP = {bwrap!r}
PYTHON = {sandbox_python!r}
SYSTEM_DIRS = {system_dirs!r}
PYTHON_DIRS = {python_dirs!r}
MAGIC = b"hsqs"


def err(message, code=1):
    sys.stderr.write(f"[ERROR] {{message}}\n")
    sys.exit(code)


def data_path():
    path = os.environ.get("ENROOT_DATA_PATH")
    if not path:
        err("ENROOT_DATA_PATH is not set (the fake has no default)")
    os.makedirs(path, exist_ok=True)
    return path


def parse(args, valued, flags):
    opts, i = {{}}, 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        if a in valued:
            if i + 1 >= len(args):
                err(f"Option requires an argument: {{a}}")
            opts.setdefault(valued[a], []).append(args[i + 1])
            i += 2
        elif a in flags:
            opts[flags[a]] = True
            i += 1
        else:
            err(f"Invalid option: {{a}}")
    return opts, args[i:]


def do_import(args):
    valued = {{"-o": "output", "--output": "output", "-a": "arch", "--arch": "arch"}}
    opts, rest = parse(args, valued, {{}})
    if len(rest) != 1:
        err("Invalid argument")
    uri = rest[0]
    if not uri.startswith(("docker://", "dockerd://")):
        err(f"Invalid argument: {{uri}}")
    default = re.sub(r"[:/]", "+", uri.split("://", 1)[1]) + ".sqsh"
    out = (opts.get("output") or [None])[-1] or default
    if os.path.exists(out):
        err(f"File already exists: {{os.path.realpath(out)}}")
    with open(out, "wb") as f:
        f.write(MAGIC + b" imported " + uri.encode())


def do_create(args):
    opts, rest = parse(args, {{"-n": "name", "--name": "name"}}, {{}})
    if len(rest) != 1 or not rest[0]:
        err("Invalid argument")
    image = os.path.realpath(rest[0])
    if not os.path.isfile(image):
        err(f"No such file or directory: {{image}}")
    with open(image, "rb") as f:
        if f.read(4) != MAGIC:
            err(f"Invalid image format: {{image}}")
    name = (opts.get("name") or [None])[-1] or os.path.basename(image).removesuffix(".sqsh")
    if "/" in name:
        err(f"Invalid argument: {{name}}")
    rootfs = os.path.join(data_path(), name)
    if os.path.exists(rootfs):
        err(f"File already exists: {{rootfs}}")
    os.makedirs(os.path.join(rootfs, "etc"))
    with open(os.path.join(rootfs, ".image"), "w") as f:
        f.write(image)


def do_start(args):
    opts, rest = parse(
        args,
        {{"-c": "conf", "--conf": "conf", "-e": "env", "--env": "env", "--rc": "rc",
          "-m": "mount", "--mount": "mount"}},
        {{"-r": "root", "--root": "root", "-w": "rw", "--rw": "rw"}},
    )
    if not rest or not rest[0]:
        err("Invalid argument")
    name, command = rest[0], rest[1:]
    if "/" in name:
        err(f"Invalid argument: {{name}}")
    rootfs = os.path.join(data_path(), name)
    if not os.path.isdir(rootfs):
        err(f"No such file or directory: {{rootfs}}")
    for mount in opts.get("mount", []):
        if not re.fullmatch(r"[^\s]+:[^\s]+", mount):
            err(f"Invalid argument: {{mount}}")
    for env in opts.get("env", []):
        if not re.match(r"[A-Za-z_][A-Za-z0-9_]*(=|$)", env):
            err(f"Invalid argument: {{env}}")
    if not command:
        command = ["/bin/sh"]
    if command[0] == "python3":
        command = [PYTHON, *command[1:]]
    argv = [BWRAP, "--unshare-user", "--die-with-parent", "--tmpfs", "/"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in PYTHON_DIRS:
        argv += ["--ro-bind", path, path]
    argv += ["--ro-bind", "/proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for mount in opts.get("mount", []):
        fields = mount.split(":")
        source, target = fields[0], fields[1]
        options = fields[3].split(",") if len(fields) > 3 else []
        argv += ["--ro-bind" if "ro" in options else "--bind", source, target]
    for env in opts.get("env", []):
        key, _, value = env.partition("=")
        argv += ["--setenv", key, value if "=" in env else os.environ.get(key, "")]
    if not opts.get("rw"):
        argv += ["--remount-ro", "/"]  # Enroot's root is read-only without --rw
    argv += ["--chdir", "/", "--", *command]
    os.execv(BWRAP, argv)


def do_list(args):
    parse(args, {{}}, {{"-f": "fancy", "--fancy": "fancy"}})
    for name in sorted(os.listdir(data_path())):
        print(name)


def do_remove(args):
    opts, rest = parse(args, {{}}, {{"-f": "force", "--force": "force"}})
    if not rest:
        err("Invalid argument")
    if not opts.get("force"):
        err("Do you really want to delete? (the fake never prompts: pass --force)")
    for name in rest:
        if "/" in name:
            err(f"Invalid argument: {{name}}")
        rootfs = os.path.join(data_path(), name)
        if not os.path.isdir(rootfs):
            err(f"No such file or directory: {{rootfs}}")
        shutil.rmtree(rootfs)


def main():
    args = sys.argv[1:]
    with open(os.environ["ENROOT_FAKE_LOG"], "a") as log:
        log.write(json.dumps([a[:200] for a in args]) + "\n")
    if not args:
        err("Usage: enroot COMMAND [ARG...]")
    commands = {{"import": do_import, "create": do_create, "start": do_start,
                 "list": do_list, "remove": do_remove}}
    if args[0] == "version":
        print("3.5.0")
        return
    if args[0] not in commands:
        err(f"Unknown command: {{args[0]}}")
    commands[args[0]](args[1:])


main()
"""


def write_fake_enroot(directory: Path) -> Path:
    """An executable stand-in `enroot` in `directory`."""
    sandbox_python = python_for_sandbox()
    binary = directory / "enroot"
    binary.write_text(
        _SCRIPT.format(
            python=sys.executable,
            bwrap=find_bwrap(),
            sandbox_python=sandbox_python,
            system_dirs=list(_SYSTEM_DIRS),
            python_dirs=_python_dirs(sandbox_python),
        )
    )
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    return binary


def squashfs_stub(path: Path) -> Path:
    """A file the fake takes for a squashfs image."""
    path.write_bytes(b"hsqs stub image")
    return path


__all__ = ["squashfs_stub", "write_fake_enroot"]

if __name__ == "__main__":  # pragma: no cover
    print(write_fake_enroot(Path(os.getcwd())))
