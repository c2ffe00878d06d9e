#!/usr/bin/env bash
# The speed suite on this project's 2-core CPU machine, in one run (~12 minutes). Run it on a
# quiet machine: nothing else on the cores. Writes OUTPUT_DIR/RESULTS_cpu_latest.md.
#
#   bash benchmarks/cpu.sh [OUTPUT_DIR]
#
# Needs the project's .venv (README); PyTorch (CPU wheel torch==2.13.0) is optional and only
# adds the PyTorch column.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks}"
py="${PYTHON:-.venv/bin/python}"
mkdir -p "$out"
{
  # the reference CNN round (10 clients x 1 epoch of 500 samples, batch 50): strategies,
  # devices, the naive per-step loop, PyTorch; and the test-split evaluation
  "$py" benchmarks/round_speed.py --repeats 2 --tables speed eval \
    --variants sequential:fast:1 sequential:fast:2 vmap:fast:2 --naive-convs fast
  # the same with 5 local epochs (the paper's setting)
  "$py" benchmarks/round_speed.py --steps 50 --repeats 1 --tables speed \
    --variants sequential:fast:2 --naive-convs fast
  # the CPU study's width-0.25 CNN: algorithms vs FedAvg, replicas vs separate runs
  "$py" benchmarks/round_speed.py --width 0.25 --repeats 3 --tables algorithms replicas \
    --algorithms fedavg fedinit fedadam fedsam scaffold feddyn fedcm
  # ResNet-18-GN, 2 clients x 2 steps x 50 (a full paper round is ~100x this on 2 cores)
  "$py" benchmarks/round_speed.py --model resnet18_gn --clients 2 --steps 2 --repeats 1 \
    --variants sequential:fast:2 sequential:xla:2 --naive-convs fast --no-torch \
    --tables speed eval
} 2>&1 | tee "$out/RESULTS_cpu_latest.md"
