#!/usr/bin/env bash
# Cross-device CIFAR-10, every method tuned on held-out data: each method's grid of settings
# (9 for the server optimizers and FedACG) on the `cifar10-dir0.1` preset (1,000 clients, 10 a
# round) with 10 % of the training split held out as the validation split
# (task.images.validation=0.1: the clients train on the other 45,000 images, 10 local steps
# of 10 as in the study), 300 rounds, seed 0; the choice is each method's best validation
# accuracy (experiments/tuning_report.py). The test split is evaluated and recorded, never
# chosen by. Each method's default runs first, so a stopped study has every method.
# Resumable: rerun the same command; finished cells are skipped, unfinished ones resume.
#   TFDS_DATA_DIR=../shared/tfds bash studies/cross_device_tuning/run.sh [RESULTS_DIR]
# ~3 min a cell on one core of the 2-core CPU machine (0.45 s a round, evaluation every 20).
set -uo pipefail
source "$(dirname "$0")/../common.sh" "experiments/configs/cross_device.py:cifar10-dir0.1" \
    "${1:-}" --config.task.images.validation=0.1 --config.local_steps=10 --config.rounds=300 \
    --config.client_store=device
cross_device_grids
