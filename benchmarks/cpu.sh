#!/usr/bin/env bash
# The speed suite on this project's 2-core CPU machine, in one run (~17 minutes). Run it on a
# quiet machine: nothing else on the cores. Writes OUTPUT_DIR/RESULTS_cpu_latest.md.
#
#   bash benchmarks/cpu.sh [OUTPUT_DIR]
#
# Needs the project's .venv (README); PyTorch (CPU wheel torch==2.13.0) is optional and adds
# the PyTorch column: `.venv/bin/pip install torch==2.13.0` takes the CPU wheel from this
# machine kind's disk (elsewhere: --index-url https://download.pytorch.org/whl/cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks}"
py="${PYTHON:-.venv/bin/python}"
mkdir -p "$out"
{
  # the reference CNN round (10 clients x 10 steps x batch 50): strategies, conv forms,
  # devices, the naive per-step loop, PyTorch; the test-split evaluation against PyTorch's
  "$py" benchmarks/round_speed.py --repeats 3 --tables speed eval \
    --variants sequential:auto:1 sequential:auto:2 vmap:auto:2 sequential:im2col:2 \
    --naive-convs auto
  # ResNet-18-GN (ImageNet stem, the paper's model), the same round shape and evaluation
  "$py" benchmarks/round_speed.py --model resnet18_gn --repeats 2 --tables speed eval \
    --variants sequential:auto:2 vmap:auto:2 sequential:auto:1 sequential:fast:2 --naive-convs
  # relaxed initialization must stay free: FedInit against FedAvg on both models
  "$py" benchmarks/round_speed.py --repeats 5 --tables algorithms --algorithms fedavg fedinit
  "$py" benchmarks/round_speed.py --model resnet18_gn --repeats 3 --tables algorithms \
    --algorithms fedavg fedinit
  # the CPU study's width-0.25 CNN: algorithms vs FedAvg, replicas vs separate runs
  "$py" benchmarks/round_speed.py --width 0.25 --repeats 3 --tables algorithms replicas \
    --algorithms fedavg fedinit fedadam fedsam scaffold feddyn fedcm
  # masked epochs on a Shakespeare-shaped federation: seconds per real step, static K vs the
  # power-of-two bucket of the sampled clients' largest vs fixed K
  "$py" benchmarks/round_speed.py --tables masked --clients 10 --lstm-batch 4 --repeats 3 \
    --lstm-executions sequential vmap
  # memory: ResNet-18-GN with 100 clients' state, donated or not (compiles only)
  "$py" benchmarks/round_speed.py --model resnet18_gn --tables memory --state-clients 100
  # where one client's local step spends its time, per op and conv form
  "$py" benchmarks/profile_ops.py --model resnet18_gn --convs xla fast im2col auto
  "$py" benchmarks/profile_ops.py --model cnn --convs auto
} 2>&1 | tee "$out/RESULTS_cpu_latest.md"
