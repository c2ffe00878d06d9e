#!/usr/bin/env bash
# Cross-device Shakespeare at each method's tuned setting: the settings studies/shakespeare_tuning
# chose on its validation split (its report/chosen.json), each run on the whole training split
# (no validation split) in the published setting (experiments/configs/shakespeare.py:paper),
# first visits from w (first_visit=global), 300 rounds, seeds 0-2; and FedInit's `momentum` rule
# on top of the best tuned server optimizer, with delta_from=start (experiments/tuning_report.py,
# study_cells).
# Resumable: rerun the same command; a finished cell is done, an unfinished one resumes.
#   bash studies/shakespeare_tuned/run.sh [RESULTS_DIR [SEEDS]]
# One cell at a time, on both cores: ~10 min a cell on the 2-core CPU machine
# (studies/shakespeare_tuning).
set -uo pipefail
source "$(dirname "$0")/../train_common.sh" "$@"
# one line per cell: NAME FLAGS... (the chosen settings, and the best server optimizer + RI)
chosen_cells shakespeare_tuning
echo "results: $out"
for seed in $seeds; do
  for cell in "${cells[@]}"; do
    read -r name flags <<< "$cell"
    # shellcheck disable=SC2086  # the flags are words
    "$py" -m experiments.train --config experiments/configs/shakespeare.py:paper \
        --config.rounds=300 --config.first_visit=global --config.seed="$seed" \
        --workdir "$out/$name-s$seed" $flags || [ $? -eq 3 ]  # a diverged run is a result too
  done
done
