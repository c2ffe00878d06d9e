#!/usr/bin/env bash
# The published Shakespeare setting (experiments/configs/shakespeare.py, preset paper: 1,108
# roles, 10 a round, 1 local epoch of batches of 4) with FedInit's `momentum` offset (beta 0.1,
# first_visit=global), seed 0, 300 rounds; beside studies/shakespeare_paper's FedAvg, `start`
# and Algorithm 1 `global` cells (which ran 1,200). The committed cell was extended to 1,200
# rounds (2 XLA CPU devices, as it started). Resumable; extend it with
#   bash studies/shakespeare_momentum/run.sh [RESULTS_DIR [--config.rounds=1200]]
# ~5 s a round on one core of the 2-core CPU machine (~30 min for 300 rounds).
set -euo pipefail
source "$(dirname "$0")/../common.sh" experiments/configs/shakespeare.py:paper "$@"
sweep --algorithms=fedinit --seeds=0 --config.ri_offset=momentum --config.first_visit=global \
    --config.rounds=300
