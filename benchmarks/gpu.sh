#!/usr/bin/env bash
# The speed suite on a GPU machine, in one prepared run (about 5-8 minutes on one H200).
#
#   bash benchmarks/gpu.sh [OUTPUT_DIR]
#
# Needs a Python with this package and a CUDA build of JAX installed
# (pip install -e . "jax[cuda12]>=0.10.2,<0.11"); on a machine without internet, bring the
# wheels along (see the device tool's notes) and install them first. Writes
# OUTPUT_DIR/RESULTS_gpu.md (default: benchmarks/).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks}"
mkdir -p "$out"
python3 -c "import jax; assert jax.default_backend() == 'gpu', jax.devices()"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  # the paper's Table 7 round: ResNet-18-GN, 10 clients x 5 epochs x 500 samples, batch 50
  python3 benchmarks/round_speed.py --model resnet18_gn --clients 10 --steps 50 --batch 50 \
    --repeats 3 --variants vmap:xla:1 chunked:xla:1 sequential:xla:1 vmap:fast:1 \
    --naive-convs xla --no-torch --algo-execution vmap
  # the same round with 1 local epoch
  python3 benchmarks/round_speed.py --model resnet18_gn --clients 10 --steps 10 --batch 50 \
    --repeats 3 --variants vmap:xla:1 sequential:xla:1 --naive-convs --no-torch --tables speed
  # the reference CNN round
  python3 benchmarks/round_speed.py --model cnn --clients 10 --steps 10 --batch 50 \
    --repeats 3 --variants vmap:xla:1 sequential:xla:1 --naive-convs xla --no-torch \
    --tables speed
} 2>&1 | tee "$out/RESULTS_gpu.md"
