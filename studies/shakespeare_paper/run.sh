#!/usr/bin/env bash
# The published Shakespeare setting (experiments/configs/shakespeare.py, preset paper: Reddi et
# al. 2021's FedAvg, 1,108 roles, 10 a round, 1 local epoch of batches of 4, 1,200 rounds,
# clients weighted by their tokens): FedAvg, FedInit (beta 0.1) with Algorithm 1's aggregation
# (global), with the authors' (start), and with `global` and first_visit=global, seed 0.
# Resumable: rerun the same command, finished cells are skipped, unfinished ones resume from
# their last checkpoint (every 100 rounds).
#   bash studies/shakespeare_paper/run.sh [RESULTS_DIR [--config.FIELD=VALUE ...]]
set -euo pipefail
# Expected duration on 2 cores: FedAvg's cell took a median 5.4 s a round and 15-24 s an evaluation of all 1,108 roles (24 of them), ~2 h a cell; ~8 h for the 4.
source "$(dirname "$0")/../common.sh" experiments/configs/shakespeare.py:paper "$@"
sweep --algorithms=fedavg,fedinit --seeds=0
sweep --algorithms=fedinit --delta_from=start --seeds=0
# FedInit `global` with first_visit=global (a role never sampled starts from w), in a folder of
# its own: its cell name is that of the diverged `global` cell above
"$py" -m experiments.sweep --config "$study_config" --results "$out/first_visit_global" \
    --algorithms=fedinit --seeds=0 --config.first_visit=global "${extra[@]}"
report
