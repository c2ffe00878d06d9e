#!/usr/bin/env bash
# A learnable synthetic cross-device federation: 100,000 clients, each a perturbation of one
# shared linear model, 100 a round, 300 rounds (experiments/configs/cross_device.py:
# synthetic-shared; docs/study_cross_device.md). Resumable: rerun the same command.
#   bash studies/cross_device_synthetic/run.sh [RESULTS_DIR [SEEDS]]
# ~1 min a cell on one core of the 2-core CPU machine.
set -uo pipefail
source "$(dirname "$0")/../train_common.sh" "$@"
echo "results: $out"
cell() {  # cell NAME SEED ARGS...: one run; a diverged run (exit 3) is a result too
  local name=$1 seed=$2; shift 2
  "$py" -m experiments.train --config experiments/configs/cross_device.py:synthetic-shared \
      --config.seed="$seed" --workdir "$out/$name-s$seed" "$@" || [ $? -eq 3 ]
}
for seed in $seeds; do
  cell fedavg "$seed" --config.algorithm=fedavg
  cell fedinit-model "$seed" --config.algorithm=fedinit                 # Algorithm 1, global
  cell fedinit-model-init "$seed" --config.algorithm=fedinit --config.first_visit=init
  cell fedinit-start "$seed" --config.algorithm=fedinit --config.delta_from=start
  cell fedinit-next "$seed" --config.algorithm=fedinit --config.ri_offset=next
  cell fedinit-momentum "$seed" --config.algorithm=fedinit --config.ri_offset=momentum
  cell scaffold "$seed" --config.algorithm=scaffold
  cell scaffold-momentum "$seed" --config.algorithm=scaffold --config.beta=0.1 --config.ri_offset=momentum
  cell fedinit-shared "$seed" --config.algorithm=fedinit --config.ri_offset=shared
  cell scaffold-next "$seed" --config.algorithm=scaffold --config.beta=0.1 --config.ri_offset=next
  cell scaffold-shared "$seed" --config.algorithm=scaffold --config.beta=0.1 --config.ri_offset=shared
done
