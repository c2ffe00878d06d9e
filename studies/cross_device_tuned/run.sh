#!/usr/bin/env bash
# Cross-device CIFAR-10 at each method's tuned setting: the settings studies/cross_device_tuning
# chose on its validation split (its report/chosen.json), each run on the whole training split
# (no validation split) over 1,000 clients, 10 a round, 1,000 rounds, Dir-0.1 and Dir-0.6,
# seeds 0-2; and FedInit's `momentum` rule on top of the best tuned server optimizer (FedAvgM,
# FedAdam or FedYogi by validation accuracy), with delta_from=start (docs/algorithms.md: under
# `global` a stateful server optimizer would accumulate the rule's m^t).
# Resumable: rerun the same command; a finished cell is done, an unfinished one resumes.
#   TFDS_DATA_DIR=../shared/tfds bash studies/cross_device_tuned/run.sh [RESULTS_DIR [SEEDS [ALPHAS]]]
# ~10 min a cell on one core of the 2-core CPU machine.
set -uo pipefail
source "$(dirname "$0")/../train_common.sh" "$@"
# one line per cell: NAME FLAGS... (the chosen settings, and the best server optimizer + RI)
chosen_cells cross_device_tuning
echo "results: $out"
for seed in $seeds; do
  for alpha in $alphas; do
    for cell in "${cells[@]}"; do
      read -r name flags <<< "$cell"
      # shellcheck disable=SC2086  # the flags are words
      "$py" -m experiments.train --config "experiments/configs/cross_device.py:cifar10-dir$alpha" \
          --config.client_store=device --config.seed="$seed" --workdir "$out/dir$alpha/$name-s$seed" \
          $flags || [ $? -eq 3 ]  # a diverged run (exit 3) is a result too
    done
  done
done
