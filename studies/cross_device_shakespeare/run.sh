#!/usr/bin/env bash
# Cross-device Shakespeare: the published setting (experiments/configs/shakespeare.py:paper,
# 1,108 roles, 10 a round, a role returns every ~111 rounds, 1 local epoch of batches of 4), 300
# rounds, every method of docs/study_cross_device.md, seeds 0-2. The committed seed-0 cells of
# FedAvg, FedInit `start`, Algorithm 1 (`model`, first visits from w) and `momentum` are links
# to studies/shakespeare_paper and studies/shakespeare_momentum, which ran them (to 1,200
# rounds, or until they diverged); the report reads every run to round 300
# (experiments/cross_device_report.py --rounds 300 --drift 50).
# Resumable: rerun the same command; a finished cell is done, an unfinished one resumes.
#   bash studies/cross_device_shakespeare/run.sh [RESULTS_DIR [SEEDS]]
# One cell at a time: a run holds 8-16 GiB of host memory (FedAvg ~8 GiB; the [C, d] tables of
# w_i, c_i or the offsets, 3.4 GiB each, on top, and 2 more copies of them while orbax saves a
# checkpoint; client_store=auto takes the host store, whose checkpoints stream, when those do
# not fit: SCAFFOLD's here); two at once ran out of the 23 GiB of the 2-core CPU machine. A
# 300-round cell takes 10-20 min on both of its cores (2-4 s a round, an evaluation of all
# 1,108 roles every 50 rounds), 22-45 min pinned to one; the committed cells ran on 2 XLA CPU
# devices. Disk: a SCAFFOLD cell's workdir grows to ~13 GB (a host-store delta of ~4.4 GB at
# each checkpoint, every 100 rounds), a device-store cell's to ~3.2 GB.
set -uo pipefail
source "$(dirname "$0")/../train_common.sh" "$@"
echo "results: $out"
cell() {  # cell NAME SEED ARGS...: one run; a diverged run (exit 3) is a result too
  local name=$1 seed=$2; shift 2
  "$py" -m experiments.train --config experiments/configs/shakespeare.py:paper \
      --config.rounds=300 --config.seed="$seed" --workdir "$out/$name-s$seed" "$@" || [ $? -eq 3 ]
}
MOMENTUM="--config.beta=0.1 --config.ri_offset=momentum --config.first_visit=global"
NEXT="--config.beta=0.1 --config.ri_offset=next --config.first_visit=global"
SHARED="--config.beta=0.1 --config.ri_offset=shared --config.first_visit=global"
for seed in $seeds; do
  cell fedavg "$seed" --config.algorithm=fedavg
  cell fedinit-model "$seed" --config.algorithm=fedinit --config.first_visit=global  # Algorithm 1, global
  cell fedinit-model-init "$seed" --config.algorithm=fedinit                         # and its first visit
  cell fedinit-start "$seed" --config.algorithm=fedinit --config.delta_from=start
  cell fedinit-momentum "$seed" --config.algorithm=fedinit $MOMENTUM
  cell scaffold "$seed" --config.algorithm=scaffold
  cell scaffold-momentum "$seed" --config.algorithm=scaffold $MOMENTUM
  # the two parts of the `momentum` offset apart: the client's last drift alone (`next`) and
  # the expected server steps alone (`shared`) (docs/study_cross_device.md)
  cell scaffold-next "$seed" --config.algorithm=scaffold $NEXT
  cell scaffold-shared "$seed" --config.algorithm=scaffold $SHARED
  cell fedinit-shared "$seed" --config.algorithm=fedinit $SHARED
  cell fedinit-next "$seed" --config.algorithm=fedinit $NEXT
done
