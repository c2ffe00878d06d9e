#!/usr/bin/env bash
# ri_offset=next where clients return often: the CPU CIFAR-10 study's 10 of 100 clients, 1 local
# epoch, 60 rounds (experiments/configs/cpu_cifar10.py), FedInit (beta 0.1, global) with the
# `next` offset, both splits, 3 seeds: to set beside studies/cpu_cifar10's FedAvg and FedInit.
#   TFDS_DATA_DIR=../shared/tfds bash studies/cpu_cifar10_next/run.sh [RESULTS_DIR]
# ~3 min a cell on one core (two workers on the 2-core machine: ~10 min).
set -euo pipefail
source "$(dirname "$0")/../common.sh" experiments/configs/cpu_cifar10.py "$@"
sweep --algorithms=fedinit --dirichlet_alphas=0.1,0.6 --seeds=0,1,2 \
    --config.ri_offset=next --config.first_visit=global --workers=2
report --window 3 --last 6
