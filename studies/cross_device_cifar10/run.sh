#!/usr/bin/env bash
# Cross-device CIFAR-10: 1,000 clients (50 images each), 10 a round, 1,000 rounds
# (experiments/configs/cross_device.py:cifar10-dir0.1 and :cifar10-dir0.6; docs/study_cross_device.md).
# Resumable: rerun the same command; a finished cell is done, an unfinished one resumes.
#   TFDS_DATA_DIR=../shared/tfds bash studies/cross_device_cifar10/run.sh [RESULTS_DIR [SEEDS [ALPHAS]]]
# ~8 min a cell on one core of the 2-core CPU machine (0.45 s a round, evaluation every 20).
set -uo pipefail
source "$(dirname "$0")/../train_common.sh" "$@"
echo "results: $out"
cell() {  # cell NAME ALPHA SEED ARGS...: one run; a diverged run (exit 3) is a result too
  local name=$1 alpha=$2 seed=$3; shift 3
  local dir="$out/dir$alpha/$name-s$seed"
  "$py" -m experiments.train --config "experiments/configs/cross_device.py:cifar10-dir$alpha" \
      --config.client_store=device --config.seed="$seed" --workdir "$dir" "$@" || [ $? -eq 3 ]
}
for seed in $seeds; do
  for alpha in $alphas; do
    cell fedavg "$alpha" "$seed" --config.algorithm=fedavg
    cell fedinit-model "$alpha" "$seed" --config.algorithm=fedinit                 # Algorithm 1, global
    cell fedinit-model-init "$alpha" "$seed" --config.algorithm=fedinit --config.first_visit=init
    cell fedinit-start "$alpha" "$seed" --config.algorithm=fedinit --config.delta_from=start
    cell fedinit-next "$alpha" "$seed" --config.algorithm=fedinit --config.ri_offset=next
    cell fedinit-drift "$alpha" "$seed" --config.algorithm=fedinit --config.ri_offset=drift
    cell fedinit-momentum "$alpha" "$seed" --config.algorithm=fedinit --config.ri_offset=momentum
    cell scaffold "$alpha" "$seed" --config.algorithm=scaffold
    cell scaffold-next "$alpha" "$seed" --config.algorithm=scaffold --config.beta=0.1 --config.ri_offset=next
    cell scaffold-momentum "$alpha" "$seed" --config.algorithm=scaffold --config.beta=0.1 --config.ri_offset=momentum
    cell fedinit-shared "$alpha" "$seed" --config.algorithm=fedinit --config.ri_offset=shared
    cell scaffold-shared "$alpha" "$seed" --config.algorithm=scaffold --config.beta=0.1 --config.ri_offset=shared
  done
done
