"""Shell pieces for services whose exec API lacks stdin or a kill: an exec's files live
in `IO_DIR` (under /tmp, which a reset empties) while it runs, and `KILL_SCRIPT` kills
the process group an exec wrapper recorded there."""

from __future__ import annotations

__all__ = ["IO_DIR", "KILL_SCRIPT"]

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
