#!/usr/bin/env bash
# Install the real agent programs the CLI-agent tests drive, at their pinned versions
# (nemo_gym/harnesses/cli/programs.py): Codex CLI, Claude Code and OpenCode from npm,
# mini-SWE-agent from PyPI in a venv of its own. They go to $NEMO_GYM_AGENTS_HOME
# (default ~/.cache/nemo_gym/agents); a second run is a quick no-op check.
# Needs node + npm on PATH (Debian: apt-get install nodejs npm). About 1.2 GB on disk;
# about 2 minutes the first time (npm ~20 s, the mini-SWE-agent venv ~100 s).
# Usage: bash scripts/install-agents.sh [codex claude-code opencode mini-swe-agent]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null; then
    echo "install-agents: npm not found; install Node.js (apt-get install nodejs npm)" >&2
    exit 1
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q -e .
exec .venv/bin/python -m nemo_gym.harnesses.cli.programs install "$@"
