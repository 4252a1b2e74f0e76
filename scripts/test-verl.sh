#!/usr/bin/env bash
# The verl tests: verl 0.9.1 pins transformers < 5.11 and pulls ray and a GPU stack, so it
# goes, without its dependencies, into a venv of its own layered over the project's
# (.venv, made by scripts/test.sh): only what verl's agent-loop classes import is added.
# Usage: bash scripts/test-verl.sh [pytest args...]
#   NEMO_GYM_VERL_VENV   where the venv lives (default: .venv-verl in the repository)
#   NEMO_GYM_BASE_VENV   the venv it layers over (default: .venv)
# A venv that finished installing is reused; delete it to time a clean install.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${NEMO_GYM_VERL_VENV:-.venv-verl}"
BASE="${NEMO_GYM_BASE_VENV:-.venv}"
SPEC="verl==0.9.1"
if [ ! -x "$BASE/bin/python" ]; then
    echo "no $BASE: run bash scripts/test.sh first (it builds the project's venv)" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$BASE/bin/python" -m venv "$VENV"
fi
SITE="$("$VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
"$BASE/bin/python" -c 'import site; print(site.getsitepackages()[0])' > "$SITE/_nemo_gym_base.pth"
. "$VENV/bin/activate"
if [ "$(cat "$VENV/.nemo-gym-verl" 2>/dev/null)" != "$SPEC" ]; then
    python -m pip install -q --no-deps "$SPEC"
    # What `verl.experimental.agent_loop` imports (ray, hydra, tensordict, ...), nothing of
    # its GPU stack; torch and transformers are the base venv's.
    python -m pip install -q "ray>=2.41" "hydra-core>=1.3" "omegaconf>=2.3" \
        "tensordict>=0.8,<=0.10,!=0.9.0" codetiming dill pylatexenc torchdata pillow \
        cachetools uvicorn fastapi
    echo "$SPEC" > "$VENV/.nemo-gym-verl"
fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
python -m pytest -q -p no:cacheprovider tests/integrations/test_verl.py "$@"
