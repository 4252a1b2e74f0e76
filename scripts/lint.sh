#!/usr/bin/env bash
# The lint and type checks CI runs (.ci/run), one command each: ruff's lint, ruff's
# format check, and mypy over nemo_gym/ (configured in pyproject.toml's [tool.mypy]).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m ruff check nemo_gym tests bench scripts
"$PY" -m ruff format --check nemo_gym tests bench scripts
"$PY" -m mypy
