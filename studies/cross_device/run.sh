#!/usr/bin/env bash
# The cross-device configuration (experiments/configs/cross_device.py: Synthetic(1, 1) of
# FedProx, 1,000,000 clients, 100 a round, 100 rounds, clients in host memory): FedAvg, FedInit
# (beta 0.1, first_visit=global) and SCAFFOLD, seed 0, and the report.
#   bash studies/cross_device/run.sh [RESULTS_DIR [--config.FIELD=VALUE ...]]
set -euo pipefail
# Expected duration on 2 cores: ~30 s for the three cells.
source "$(dirname "$0")/../common.sh" experiments/configs/cross_device.py "$@"
sweep --algorithms=fedavg,fedinit,scaffold --seeds=0
report --window 3 --last 30
