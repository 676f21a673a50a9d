#!/usr/bin/env bash
# The GPU check (issue 12): on a machine with an NVIDIA GPU and PyTorch with CUDA (no vLLM
# needed), measure the GPUs with `planner profile hardware --device cuda` (GEMM bf16/fp16/fp8
# at several shapes, HBM copy, pinned host<->device copies, NVML detection), run the tests
# marked `gpu`, and compare every figure with the GPU catalog and with `planner estimate`'s
# wake_host_s (`planner profile check`). Ends with one RESULT line; exit 1 on a failed check.
#
#   bash scripts/gpu-check.sh [OUT_DIR]      # default OUT_DIR: gpu-check-out
#   GPU_CHECK_QUICK=1 bash scripts/gpu-check.sh   # smaller sizes (about a minute)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-check-out}
PY=${PYTHON:-python}
mkdir -p "$OUT"

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "error: no CUDA device visible to torch (or torch is missing)"
    echo "fix: run on a GPU node with a CUDA build of torch: pip install -e '.[profile,dev]'"
    echo "RESULT nvml_types=0 gpu_tests_rc=None pass=0"
    exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv

quick=()
[[ "${GPU_CHECK_QUICK:-0}" == "1" ]] && quick=(--quick)
"$PY" -m planner.cli.main profile hardware --device cuda -o "$OUT/profiles" "${quick[@]}" \
    || { echo "RESULT profile_failed=1 pass=0"; exit 1; }

"$PY" -m pytest -q -m gpu tests -p no:cacheprovider
tests_rc=$?
[[ $tests_rc -eq 5 ]] && tests_rc=0  # pytest: no tests collected

"$PY" -m planner.cli.main profile check "$OUT/profiles" --tests-rc "$tests_rc"
