#!/usr/bin/env bash
# The speed suite on a GPU machine, in one prepared run (under 10 minutes on one H200).
#
#   bash benchmarks/gpu.sh [OUTPUT_DIR]
#
# Runs from the checkout as it is (PYTHONPATH=., no pip install): needs a Python with a CUDA
# build of jax >= 0.10.2, flax, optax and numpy (the project's GPU image: Python 3.12,
# jax 0.11.2); PyTorch with CUDA, if present, adds the PyTorch column. Writes
# OUTPUT_DIR/RESULTS_gpu.md (default: benchmarks/).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks}"
py="${PYTHON:-python3}"
export PYTHONPATH=.
mkdir -p "$out"
"$py" -c "import jax; assert jax.default_backend() == 'gpu', jax.devices()"
torch_device=$("$py" -c "import torch; print('cuda' if torch.cuda.is_available() else 'none')" \
  2>/dev/null || echo none)
torch_args=(--torch-device cuda)
[ "$torch_device" = cuda ] || torch_args=(--no-torch)
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  # the paper's Table 7 round: ResNet-18-GN, 10 clients x 5 epochs x 500 samples, batch 50;
  # its evaluation; memory with 100 clients' state, donated or not
  "$py" benchmarks/round_speed.py --model resnet18_gn --clients 10 --steps 50 --batch 50 \
    --repeats 3 --variants vmap:xla:1 sequential:xla:1 vmap:im2col:1 --naive-convs \
    "${torch_args[@]}" --tables speed eval memory
  # relaxed initialization must stay free: FedInit against FedAvg
  "$py" benchmarks/round_speed.py --model resnet18_gn --clients 10 --steps 50 --batch 50 \
    --repeats 5 --tables algorithms --algorithms fedavg fedinit --algo-execution vmap
  # the reference CNN round, 1 local epoch
  "$py" benchmarks/round_speed.py --model cnn --clients 10 --steps 10 --batch 50 \
    --repeats 3 --variants vmap:xla:1 sequential:xla:1 --naive-convs xla \
    "${torch_args[@]}" --tables speed eval
} 2>&1 | tee "$out/RESULTS_gpu.md"
