#!/usr/bin/env bash
# The CPU-sized Shakespeare comparison (README, "Findings"; docs/shakespeare.md): FedAvg, FedInit under both
# delta_from, SCAFFOLD without and with RI (beta 0.1), 3 seeds, experiments/configs/shakespeare.py
# (preset cpu). Resumable: rerun the same command, finished cells are skipped.
#   bash studies/shakespeare_cpu/run.sh [RESULTS_DIR [--config.FIELD=VALUE ...]]
set -euo pipefail
# Expected duration: ~1.2 h on 2 cores (the committed 15 cells: 1.17 h of rounds and evaluations by their metrics).
source "$(dirname "$0")/../common.sh" experiments/configs/shakespeare.py "$@"
for s in 0 1 2; do
  sweep --algorithms=fedavg,fedinit --seeds=$s
  sweep --algorithms=fedinit --delta_from=start --seeds=$s
  sweep --algorithms=scaffold --betas=0,0.1 --seeds=$s
done
report
