"""Shell pieces for services whose exec API lacks stdin, a kill or file transfer.

`IO_DIR` and `KILL_SCRIPT`: an exec's files live under /tmp (which a reset empties)
while it runs, and the process group its wrapper recorded there is killed.
`marked_command`, `MARKED_KILL`, `READ_SCRIPT`, `WRITE_SCRIPT`: an exec tagged with an
environment marker (so a deadline or a cancelled exec kills every process carrying it),
and files through `cat` over exec. The image needs `/bin/sh`, `timeout`, `cat`, `mkdir`,
`tr`, `grep` and `kill` (coreutils or busybox).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.records import ExecResult
from nemo_gym.sandbox.remote.common import OutputCap

__all__ = [
    "IO_DIR",
    "KILL_SCRIPT",
    "MARKED_EXEC",
    "MARKED_KILL",
    "MARKER",
    "READ_SCRIPT",
    "WRITE_SCRIPT",
    "marked_command",
    "marked_result",
    "ulimit_flags",
]

IO_DIR = "/tmp/.nemo-gym-io"
"""Where an exec's stdin file and pid file live for the moment they are needed."""

KILL_SCRIPT = r"""
for _ in 1 2 3 4 5 6 7 8 9 10; do
  [ -s "$1.pid" ] && break
  sleep 0.2
done
[ -s "$1.pid" ] && kill -9 "-$(cat "$1.pid")" 2>/dev/null
rm -f "$1.pid" "$1.in"
exit 0
"""
"""Kill the process group of the exec whose io prefix is `$1` (waiting up to 2s for
the wrapper to have started it)."""

MARKER = "NEMO_GYM_EXEC"

# $1 cwd, $2 deadline (s), $3 marker, $4.. "ulimit" flags as one word each, then "--",
# then NAME=VALUE... and the argv after a second "--".
MARKED_EXEC = r"""
cd "$1" || exit 126
export NEMO_GYM_EXEC="$3"
shift 3
while [ "$1" != -- ]; do ulimit $1 2>/dev/null; shift; done
shift
exec env "$@"
"""

MARKED_KILL = r"""
for d in /proc/[0-9]*; do
  [ "${d#/proc/}" = "$$" ] && continue
  tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "NEMO_GYM_EXEC=$1" &&
    kill -9 "${d#/proc/}" 2>/dev/null
done
exit 0
"""
"""Kill every process whose environment carries the marker `$1`."""

READ_SCRIPT = r"""
[ -e "$1" ] || exit 44
[ -d "$1" ] && exit 21
exec cat -- "$1"
"""
"""`cat` of `$1`: exit 44 when it is missing, 21 when it is a directory."""

WRITE_SCRIPT = r"""
mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"
"""
"""stdin into `$1`, its parent directories made."""


def marked_command(
    argv: Sequence[str],
    *,
    cwd: str,
    timeout: float,
    marker: str,
    env: Mapping[str, str],
    flags: Sequence[str] = (),
) -> list[str]:
    """`argv` as `/bin/sh -c MARKED_EXEC`: in `cwd`, with `env`, the `ulimit` `flags`,
    every process tagged `NEMO_GYM_EXEC=marker`, killed by `timeout -s KILL` at `timeout`
    seconds (the runtime then reports 137)."""
    return [
        "/bin/sh",
        "-c",
        MARKED_EXEC,
        "nemo-gym",
        cwd,
        f"{timeout:.3f}",
        marker,
        *flags,
        "--",
        *(f"{k}={v}" for k, v in env.items()),
        "timeout",
        "-s",
        "KILL",
        f"{timeout:.3f}",
        *argv,
    ]


def ulimit_flags(spec_limits: Any) -> list[str]:
    """`ulimit` flags for the per-exec limits (`-t` s, `-v` KiB, `-f` 512-byte blocks,
    `-n` files), each one word for the wrapper."""
    flags = []
    if spec_limits.cpu_seconds:
        flags.append(f"-t{math.ceil(spec_limits.cpu_seconds)}")
    if spec_limits.memory_bytes:
        flags.append(f"-v{spec_limits.memory_bytes // 1024}")
    if spec_limits.file_size_bytes:
        flags.append(f"-f{max(1, spec_limits.file_size_bytes // 512)}")
    if spec_limits.open_files:
        flags.append(f"-n{spec_limits.open_files}")
    return flags


def marked_result(
    code: int | None, *, timeout: float, elapsed: float, out: OutputCap, err: OutputCap
) -> ExecResult:
    """The result of a `marked_command` that returned `code` (None: no status by the
    deadline) after `elapsed` seconds. 137 at or past `timeout` is the deadline's kill
    (`timed_out`, -9; the caller kills what carries the mark); otherwise a runtime's
    128 + n for a command killed by signal n is -n, as the other providers report it
    (so a command that itself exits 137 early reads as -9)."""
    if code is None or (code == 137 and elapsed >= timeout):
        timed_out, exit_code = True, -9
    else:
        timed_out, exit_code = False, -(code - 128) if 128 < code <= 128 + 64 else code
    return ExecResult(
        exit_code=exit_code,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        duration_s=elapsed,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )
