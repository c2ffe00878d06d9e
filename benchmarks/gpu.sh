#!/usr/bin/env bash
# The speed suite on a GPU machine, in one prepared run (under 10 minutes on one H200).
#
#   bash benchmarks/gpu.sh [OUTPUT_DIR]              # on the GPU machine
#   bash benchmarks/gpu.sh --dry-run [OUTPUT_DIR]    # the whole script on CPU, tiny shapes (CI)
#
# Runs from the checkout as it is (PYTHONPATH=., no pip install): needs a Python with a CUDA
# build of jax >= 0.10.2, flax, optax and numpy (the project's GPU image: Python 3.12,
# jax 0.11.2); PyTorch with CUDA, if present, adds the PyTorch column. Writes
# OUTPUT_DIR/RESULTS_gpu.md (default: benchmarks/). --dry-run runs every step with the MLP
# and one local step on the CPU, so that a broken step shows here, not on the lent GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
dry=0
if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
out="${1:-benchmarks}"
py="${PYTHON:-python3}"
export PYTHONPATH=.
mkdir -p "$out"
if [ "$dry" = 1 ]; then
  export JAX_PLATFORMS=cpu
  resnet=mlp cnn=mlp clients=2 steps=1 batch=2 repeats=1 plan=(--dry-run)
  variants=(vmap:xla:1 sequential:xla:1)  # the MLP has no convolution to vary
  torch_args=(--no-torch) small=(--eval-images 200 --lstm-steps 1 --lstm-batch 1)
  lstm=(--lstm-executions vmap) replicas=(--replica-betas 0 0.1)
else
  "$py" -c "import jax; assert jax.default_backend() == 'gpu', jax.devices()"
  resnet=resnet18_gn cnn=cnn clients=10 steps=50 batch=50 repeats=3
  plan=(--on-device --devices 1) small=() lstm=(--lstm-executions sequential vmap) replicas=()
  variants=(vmap:xla:1 sequential:xla:1 vmap:im2col:1)
  torch_device=$("$py" -c "import torch; print('cuda' if torch.cuda.is_available() else 'none')" \
    2>/dev/null || echo none)
  torch_args=(--torch-device cuda)
  [ "$torch_device" = cuda ] || torch_args=(--no-torch)
fi
cnn_steps=$(( steps < 10 ? steps : 10 ))
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    || echo "no GPU (dry run: $dry)"
  # the paper's Table 7 round: ResNet-18-GN, 10 clients x 5 epochs x 500 samples, batch 50;
  # its evaluation; memory with 100 clients' state, donated or not
  "$py" benchmarks/round_speed.py --model "$resnet" --clients "$clients" --steps "$steps" \
    --batch "$batch" --repeats "$repeats" --variants "${variants[@]}" \
    --naive-convs "${torch_args[@]}" "${small[@]}" --tables speed eval memory
  # relaxed initialization must stay free: FedInit against FedAvg
  "$py" benchmarks/round_speed.py --model "$resnet" --clients "$clients" --steps "$steps" \
    --batch "$batch" --repeats $(( repeats + 2 )) --tables algorithms \
    --algorithms fedavg fedinit --algo-execution vmap
  # the reference CNN round, 1 local epoch (the dry run's model is step 1's: nothing new to run)
  [ "$dry" = 1 ] || "$py" benchmarks/round_speed.py --model "$cnn" --clients "$clients" --steps "$cnn_steps" \
    --batch "$batch" --repeats "$repeats" --variants vmap:xla:1 sequential:xla:1 \
    --naive-convs xla "${torch_args[@]}" "${small[@]}" --tables speed eval
  # the reference CNN's step in float32 vs bfloat16 (slower on XLA:CPU; native on the GPU)
  "$py" benchmarks/conv_dtype.py --convs xla --batch "$batch" --steps "$cnn_steps" \
    --repeats "$repeats"
  # R federations (a beta sweep) in one vmapped program against R separate runs
  "$py" benchmarks/round_speed.py --model "$cnn" --clients "$clients" --steps "$cnn_steps" \
    --batch "$batch" --repeats "$repeats" "${replicas[@]}" --tables replicas
  # the Shakespeare LSTM round: fixed K and masked epochs, sequential and vmapped clients
  "$py" benchmarks/round_speed.py --clients "$clients" --repeats "$repeats" \
    "${torch_args[@]}" "${small[@]}" "${lstm[@]}" --tables lstm
  # masked epochs (Shakespeare sizes): static K vs buckets vs fixed K, per real step (the
  # dry run leaves it out: its real-size federation is the cost itself)
  [ "$dry" = 1 ] || "$py" benchmarks/round_speed.py --tables masked --clients 10 \
    --lstm-batch 4 --repeats "$repeats" --lstm-executions sequential vmap \
    || echo "masked table failed"
  # every preset's round compiled by the GPU's own compiler: its memory on one device
  "$py" benchmarks/plan.py "${plan[@]}"
} 2>&1 | tee "$out/RESULTS_gpu.md"
