#!/usr/bin/env bash
# Cross-device Shakespeare, every method tuned on held-out data: each method's grid of settings
# (9 for the server optimizers and FedACG, the grids of studies/cross_device_tuning) on the
# published setting (experiments/configs/shakespeare.py:paper: 1,108 roles, 10 a round, 1 local
# epoch of batches of 4, client lr 1, clients weighted by their targets) with the last 10 % of
# each role's training windows held out as the validation split
# (task.shakespeare.validation=0.1), first visits from w (first_visit=global), 300 rounds,
# seed 0; the choice is each method's best validation accuracy over its last 3 evaluations,
# rounds 200-300 (experiments/tuning_report.py). The test split is evaluated and recorded,
# never chosen by. Each method's default runs first, so a stopped study has every method.
# Resumable: rerun the same command; finished cells are skipped, unfinished ones resume from
# their last checkpoint (every 100 rounds).
#   bash studies/shakespeare_tuning/run.sh [RESULTS_DIR]
# One cell at a time, on both cores (a cell holds 2.4 GiB at round 20, up to 8-16 GiB as the
# clients' rows fill: studies/cross_device_shakespeare); ~10 min a cell on the 2-core CPU
# machine (1-2 s a round, an evaluation of the 1,108 roles' test and validation windows every
# 50 rounds, ~20 s). 44 cells.
set -uo pipefail
source "$(dirname "$0")/../common.sh" "experiments/configs/shakespeare.py:paper" \
    "${1:-}" --config.task.shakespeare.validation=0.1 --config.rounds=300 \
    --config.first_visit=global
cross_device_grids
