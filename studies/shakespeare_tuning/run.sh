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
# each method's default setting first (FedAvgM: Hsu et al.'s; FedAdam, FedYogi: this library's;
# FedACG: its authors'; FedInit `momentum` and `shared`: beta 0.1), named as its grid names it,
# then the grids (a cell already done is skipped)
sweep --algorithms=fedavg,scaffold
sweep --algorithms=fedinit --betas=0.1 --grid ri_offset=momentum,shared
sweep --algorithms=fedavgm --grid server_lr=1.0 --grid momentum=0.9
sweep --algorithms=fedadam,fedyogi --grid server_lr=0.1 --grid eps=0.01
sweep --algorithms=fedacg --betas=0.85 --grid mu=0.002
sweep --algorithms=fedavgm --grid server_lr=0.1,0.3,1.0 --grid momentum=0.5,0.8,0.9
sweep --algorithms=fedadam,fedyogi --grid server_lr=0.01,0.03,0.1 --grid eps=0.001,0.01,0.1
sweep --algorithms=fedacg --betas=0.7,0.85,0.95 --grid mu=0,0.002,0.02
sweep --algorithms=fedinit --betas=0.05,0.1,0.2 --grid ri_offset=momentum,shared
