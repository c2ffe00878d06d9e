#!/usr/bin/env bash
# The speed suite on a GPU machine, in one prepared run (9-10 min on one H200), the most wanted
# numbers first.
#
#   bash benchmarks/gpu.sh [OUTPUT_DIR]              # on the GPU machine
#   bash benchmarks/gpu.sh --dry-run [OUTPUT_DIR]    # the whole script on CPU, tiny shapes (CI)
#
# Runs from the checkout as it is (no pip install; the checkout is put before PYTHONPATH):
# needs a Python with a CUDA build of jax >= 0.10.2, flax, optax and numpy (the project's GPU
# image: Python 3.12, jax 0.11.2); PyTorch with CUDA, if present, adds the PyTorch column;
# the plan step loads the experiment configs, so it needs ml_collections (pip install it, or
# put its wheel's install on PYTHONPATH); the masked step uses the Shakespeare texts when
# fetch.shakespeare_texts finds them (FEDINIT_CACHE_DIR/shakespeare), else matched draws.
# Writes OUTPUT_DIR/RESULTS_gpu.md (default: benchmarks/) as it goes, unbuffered, so a run
# stopped at a time limit keeps every finished step. A step that fails is reported and the
# next one runs. --dry-run runs every step with the MLP and one local step on the CPU, so
# that a broken step shows here, not on the lent GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0
if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
out="${1:-benchmarks}"
py="${PYTHON:-python3}"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$out"
failed=0
step() {  # step NAME COMMAND...: run one step, time it, carry on if it fails
  local name=$1 t0=$SECONDS; shift
  echo; echo "## $name ($(date -u +%FT%TZ))"
  "$@"; local rc=$?
  [ "$rc" = 0 ] || { echo "step '$name' FAILED (exit $rc)"; failed=1; }
  echo "($name: $(( SECONDS - t0 )) s)"
}
if [ "$dry" = 1 ]; then
  export JAX_PLATFORMS=cpu
  resnet=mlp cnn=mlp clients=2 steps=1 batch=2 repeats=1 plan=(--dry-run)
  variants=(vmap:xla:1 sequential:xla:1)  # the MLP has no convolution to vary
  torch_args=(--no-torch) small=(--eval-images 200 --lstm-steps 1 --lstm-batch 1)
  lstm=(--lstm-executions vmap) replicas=(--replica-betas 0 0.1)
else
  "$py" -c "import jax; assert jax.default_backend() == 'gpu', jax.devices()"
  resnet=resnet18_gn cnn=cnn clients=10 steps=50 batch=50 repeats=3
  # one preset per model and cohort shape (the data set and split do not change the round)
  plan=(--on-device --devices 1 --presets cifar10-resnet18_gn-dir0.1-10-100
        cifar10-resnet18_gn-dir0.1-5-200 cifar10-vgg11-dir0.1-10-100
        experiments/configs/shakespeare.py:paper) small=() lstm=(--lstm-executions sequential vmap) replicas=()
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
  step "Table 7 round, evaluation, memory" "$py" benchmarks/round_speed.py --model "$resnet" \
    --clients "$clients" --steps "$steps" --batch "$batch" --repeats "$repeats" \
    --variants "${variants[@]}" --naive-convs "${torch_args[@]}" "${small[@]}" \
    --tables speed eval memory
  # relaxed initialization must stay free: FedInit against FedAvg
  step "FedInit against FedAvg" "$py" benchmarks/round_speed.py --model "$resnet" \
    --clients "$clients" --steps "$steps" --batch "$batch" --repeats $(( repeats + 2 )) \
    --tables algorithms --algorithms fedavg fedinit --algo-execution vmap
  # the Shakespeare LSTM round: fixed K and masked epochs, sequential and vmapped clients
  step "Shakespeare LSTM round" "$py" benchmarks/round_speed.py --clients "$clients" \
    --repeats "$repeats" "${torch_args[@]}" "${small[@]}" "${lstm[@]}" --tables lstm
  # presets' rounds compiled by the GPU's own compiler: their memory on one device
  step "plan" "$py" benchmarks/plan.py "${plan[@]}"
  # the reference CNN round, 1 local epoch (the dry run's model is step 1's: nothing new to run)
  [ "$dry" = 1 ] || step "reference CNN round" "$py" benchmarks/round_speed.py --model "$cnn" \
    --clients "$clients" --steps "$cnn_steps" --batch "$batch" --repeats "$repeats" \
    --variants vmap:xla:1 vmap:im2col:1 sequential:xla:1 --naive-convs xla "${torch_args[@]}" \
    "${small[@]}" --tables speed eval
  # the reference CNN's step in float32 vs bfloat16 (slower on XLA:CPU; native on the GPU)
  step "float32 vs bfloat16" "$py" benchmarks/conv_dtype.py --convs xla --batch "$batch" \
    --steps "$cnn_steps" --repeats "$repeats"
  # R federations (a beta sweep) in one vmapped program against R separate runs
  step "replicas" "$py" benchmarks/round_speed.py --model "$cnn" --clients "$clients" \
    --steps "$cnn_steps" --batch "$batch" --repeats "$repeats" "${replicas[@]}" \
    --tables replicas
  # masked epochs (Shakespeare sizes): static K vs buckets vs fixed K, per real step (the
  # dry run leaves it out: its real-size federation is the cost itself)
  [ "$dry" = 1 ] || step "masked epochs" "$py" benchmarks/round_speed.py --tables masked \
    --clients 10 --lstm-batch 4 --repeats "$repeats" --lstm-executions sequential vmap
  # VGG-11's round with vmapped clients: the stock convolution against im2col (conv=auto)
  [ "$dry" = 1 ] || step "VGG-11 round" "$py" benchmarks/round_speed.py --model vgg11 \
    --clients "$clients" --steps "$steps" --batch "$batch" --repeats "$repeats" --no-torch \
    --naive-convs --variants vmap:xla:1 vmap:im2col:1 --tables speed
  [ "$failed" = 0 ] || echo "some steps FAILED (above)"
  exit "$failed"
} 2>&1 | tee "$out/RESULTS_gpu.md"
