"""Where the real agent programs live, and how they are installed from their registries.

Programs go under `agents_home()` (`$NEMO_GYM_AGENTS_HOME`, else
`~/.cache/nemo_gym/agents`): the npm ones with `npm install --prefix <home>/npm`, the
PyPI ones in a virtual environment of their own (`<home>/<name>/venv`, built on this
interpreter, so the `local` sandbox can run it). The sandbox shows that directory
read-only. `python -m nemo_gym.harnesses.cli.programs install [names]` (what
`scripts/install-agents.sh` runs) installs the pinned versions below.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nemo_gym.errors import ConfigError

__all__ = [
    "PROGRAMS",
    "Program",
    "agents_home",
    "find",
    "install",
    "install_many",
    "node_dir",
]


@dataclass(frozen=True, slots=True)
class Program:
    """One agent program: its registry package, the pinned version and its executable."""

    name: str
    registry: Literal["npm", "pypi"]
    package: str
    version: str
    executable: str
    node: bool = False
    """Its executable is a Node script: it runs on the Node copied beside it (`node_dir`)."""

    def root(self, home: Path | None = None) -> Path:
        home = home or agents_home()
        return home / "npm" if self.registry == "npm" else home / self.name / "venv"

    def path(self, home: Path | None = None) -> Path:
        """Where the executable is once installed."""
        root = self.root(home)
        return root / ("node_modules/.bin" if self.registry == "npm" else "bin") / self.executable

    def runtime(self, home: Path | None = None) -> list[Path]:
        """Host directories the installed program needs outside `agents_home()`.

        A PyPI program's venv runs the interpreter it was built on: its prefix is shown
        at the same path in a container, unless it is a system directory (`/usr`), which
        a container's own would hide; then the image must have that interpreter.
        """
        if self.registry != "pypi":
            return []
        return [prefix] if (prefix := _venv_base_prefix(self.root(home))) else []


SYSTEM_PREFIXES = frozenset({"/", "/usr", "/usr/local", "/bin", "/lib", "/opt", "/root"})
"""Interpreter prefixes never mounted into a container (its own would be hidden)."""


def _venv_base_prefix(venv: Path) -> Path | None:
    try:
        config = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return None
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            prefix = Path(value.strip()).resolve().parent  # `home` is the interpreter's bin
            return None if str(prefix) in SYSTEM_PREFIXES else prefix
    return None


PROGRAMS: dict[str, Program] = {
    p.name: p
    for p in (
        Program("codex", "npm", "@openai/codex", "0.171.0", "codex"),
        Program("claude-code", "npm", "@anthropic-ai/claude-code", "2.1.197", "claude"),
        Program("opencode", "npm", "opencode-ai", "1.18.33", "opencode"),
        Program("mini-swe-agent", "pypi", "mini-swe-agent", "2.4.6", "mini"),
        Program("aider", "pypi", "aider-chat", "0.86.2", "aider"),
        Program("hermes", "pypi", "hermes-agent", "0.19.0", "hermes"),
        Program("pi", "npm", "@mariozechner/pi-coding-agent", "0.73.1", "pi", node=True),
        Program("qwen-code", "npm", "@qwen-code/qwen-code", "0.24.4", "qwen", node=True),
        Program("kilocode", "npm", "@kilocode/cli", "7.7.7", "kilo"),
        Program("gemini-cli", "npm", "@google/gemini-cli", "0.61.0", "gemini", node=True),
    )
}


def node_dir(home: Path | None = None) -> Path:
    """Where `install` copies the host's `node` for the Node programs (on their PATH).

    Inside `agents_home()`, so a container sees it with the programs; the host's own
    lives in `/usr/bin`, which a container's would hide.
    """
    return (home or agents_home()) / "npm" / "runtime" / "bin"


def _copy_node(home: Path) -> None:
    found = shutil.which("node")
    if found is None:
        raise ConfigError("the Node agent programs need `node` on PATH to install")
    source = Path(found).resolve()
    target = node_dir(home) / "node"
    if target.exists() and target.stat().st_size == source.stat().st_size:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def agents_home() -> Path:
    """`$NEMO_GYM_AGENTS_HOME`, else `~/.cache/nemo_gym/agents`."""
    value = os.environ.get("NEMO_GYM_AGENTS_HOME")
    return Path(value) if value else Path.home() / ".cache" / "nemo_gym" / "agents"


def _program(name: str) -> Program:
    try:
        return PROGRAMS[name]
    except KeyError:
        raise ConfigError(f"unknown agent program {name!r}; known: {', '.join(PROGRAMS)}") from None


def find(name: str) -> Path | None:
    """The installed executable of program `name`, or None."""
    path = _program(name).path()
    return path if path.exists() else None


def install(name: str, *, quiet: bool = True) -> Path:
    """Install program `name` (its pinned version) under `agents_home()`; its executable."""
    return install_many([name], quiet=quiet)[name]


def install_many(names: Sequence[str], *, quiet: bool = True) -> dict[str, Path]:
    """Install programs `names` (pinned); their executables by name.

    The npm programs go in one `npm install` (one dependency resolution, shared
    packages fetched once); each PyPI program into its own venv.
    """
    programs = [_program(name) for name in dict.fromkeys(names)]
    home = agents_home()
    npm = [p for p in programs if p.registry == "npm"]
    if npm:
        root = npm[0].root(home)
        root.mkdir(parents=True, exist_ok=True)
        command = ["npm", "install", "--no-fund", "--no-audit", "--prefix", str(root)]
        command += [f"{p.package}@{p.version}" for p in npm]
        if quiet:
            command.append("--silent")
        subprocess.run(command, check=True)
        if any(p.node for p in npm):
            _copy_node(home)
    for program in programs:
        if program.registry != "pypi":
            continue
        venv = program.root(home)
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        command = [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            f"{program.package}=={program.version}",
        ]
        if quiet:
            command.append("-q")
        subprocess.run(command, check=True)
    paths = {}
    for program in programs:
        path = program.path(home)
        if not path.exists():
            raise ConfigError(f"installing {program.package} left no {path}")
        paths[program.name] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "install":
        print("usage: python -m nemo_gym.harnesses.cli.programs install [name ...]")
        print(f"programs: {', '.join(PROGRAMS)}; home: {agents_home()}")
        return 2
    for name, path in install_many(args[1:] or list(PROGRAMS)).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
