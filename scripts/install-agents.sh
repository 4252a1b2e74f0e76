#!/usr/bin/env bash
# Install the real agent programs the CLI-agent tests drive, at their pinned versions
# (nemo_gym/harnesses/cli/programs.py): Codex CLI, Claude Code, OpenCode, Pi, Qwen Code,
# KiloCode and Gemini CLI from npm (one `npm install`; the host's node is copied beside
# them for containers), mini-SWE-agent, aider and Hermes from PyPI, each in a venv of its
# own. They go to $NEMO_GYM_AGENTS_HOME (default ~/.cache/nemo_gym/agents); a second run
# is a quick check. Needs node + npm on PATH (Node >= 20.6 for Pi; Debian 12's nodejs is
# 18: use NodeSource's). About 3.5 GB on disk. First run on the loaded 2-core machine: the
# six npm programs 200 to 260 s from a warm npm cache, the mini-SWE-agent venv about
# 100 s, aider's about 240 s; Gemini CLI alone about 25 s (warm npm cache, 195 MB), the
# Hermes venv about 60 s (230 MB).
# Usage: bash scripts/install-agents.sh [codex claude-code opencode pi qwen-code kilocode gemini-cli mini-swe-agent aider hermes]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null; then
    echo "install-agents: npm not found; install Node.js (apt-get install nodejs npm)" >&2
    exit 1
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q -e .
exec .venv/bin/python -m nemo_gym.harnesses.cli.programs install "$@"
