#!/usr/bin/env bash
# The authors' CIFAR-10 configuration at full model width (experiments/configs/cpu_cifar10.py,
# preset authors_e5): FedAvg, FedInit (beta 0.1) with Algorithm 1's aggregation (global) and
# with the authors' (start), 3 seeds. Resumable: rerun the same command, finished cells are
# skipped, unfinished ones resume from their last checkpoint.
#   TFDS_DATA_DIR=../shared/tfds bash studies/cpu_cifar10_authors_e5/run.sh [RESULTS_DIR [--config.FIELD=VALUE ...]]
# Seeds run one after another, so a stopped study has whole seeds.
set -euo pipefail
# Measured on 2 cores: 9 cells of 60 rounds at a median 32-42 s a round (width 1, 50 local steps x ~10 clients;
# 14-95 s as the Bernoulli rounds vary), 33-42 min a cell, ~6 h in all (docs/study.md).
source "$(dirname "$0")/../common.sh" experiments/configs/cpu_cifar10.py:authors_e5 "$@"
for s in 0 1 2; do
  sweep --algorithms=fedavg,fedinit --seeds=$s
  sweep --algorithms=fedinit --delta_from=start --seeds=$s
done
report --window 3 --last 6  # 60 rounds evaluated every 5: as docs/study.md
