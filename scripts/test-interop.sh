#!/usr/bin/env bash
# The OpenEnv and verifiers adapters' tests: a venv of their own, since neither extra can
# join the main one (openenv-core pulls gradio, which pins pillow<13; verifiers pins
# openai<3). The LangGraph, MCP and Harbor tests run in the main suite.
# Usage: bash scripts/test-interop.sh [pytest args...]
#   NEMO_GYM_INTEROP_VENV   where the venv lives (default: .venv-interop in the repository)
# A venv that finished installing is reused; delete it to time a clean install.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${NEMO_GYM_INTEROP_VENV:-.venv-interop}"
SPEC="openenv-core==0.3.0 verifiers==0.4.0"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
if [ "$(cat "$VENV/.nemo-gym-interop" 2>/dev/null)" != "$SPEC" ]; then
    python -m pip install -q --upgrade pip
    # shellcheck disable=SC2086
    python -m pip install -q $SPEC
    python -m pip install -q -e "." "pytest>=8" "pytest-asyncio>=0.24" "pytest-timeout>=2.3" \
        "hypothesis>=6.100"
    echo "$SPEC" > "$VENV/.nemo-gym-interop"
fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
python -m pytest -q -p no:cacheprovider tests/interop/test_openenv.py tests/interop/test_verifiers.py "$@"
