#!/usr/bin/env bash
# The CPU CIFAR-10 study: every cell of docs/study.md (the README's "Findings").
# Resumable: rerun the same command and finished cells are skipped, unfinished ones resume.
#   TFDS_DATA_DIR=../shared/tfds bash studies/cpu_cifar10/run.sh [RESULTS_DIR [--config.FIELD=VALUE ...]]
# Extra arguments go to every sweep (e.g. --config.rounds=80 extends every finished cell).
# Seeds run one after another over the whole grid, so a stopped study has whole seeds.
# Correction states (c_i, h_i, d) are built from the local progress w_iK - w_i0 under both
# delta_from (the authors' rule, fedinit_jax/correction.py); cells made before that fix were
# re-run (SCAFFOLD/FedDyn/FedCM +RI, and every FedDyn cell for the authors' clip form).
set -euo pipefail
# Expected duration: ~5 h on 2 cores (the committed 114 cells: 4.67 h of rounds and evaluations by their metrics, plus start-ups).
source "$(dirname "$0")/../common.sh" experiments/configs/cpu_cifar10.py "$@"
for s in 0 1 2; do
  # main grid (Table 4/6): the baselines and FedInit (beta 0.1), both splits
  sweep --algorithms=fedavg,fedinit,fedadam,fedsam --dirichlet_alphas=0.1,0.6 --seeds=$s
  # RI as a plug-in: SCAFFOLD / FedDyn / FedCM without (0) and with (0.1) RI, Algorithm 1's
  # aggregation (global) and the authors' (start); beta 0 is the same algorithm under both
  sweep --algorithms=scaffold,feddyn,fedcm --betas=0,0.1 --dirichlet_alphas=0.1,0.6 --seeds=$s
  sweep --algorithms=scaffold,feddyn,fedcm --betas=0.1 --delta_from=start \
      --dirichlet_alphas=0.1,0.6 --seeds=$s
  sweep --algorithms=fedinit --delta_from=start --dirichlet_alphas=0.1,0.6 --seeds=$s
  # global vs start across local epochs (the paper's Fig. 1(a)): E1 is the grid above
  sweep --algorithms=fedavg,fedinit --local_epochs=2,5 --dirichlet_alphas=0.1 --seeds=$s
  sweep --algorithms=fedinit --delta_from=start --local_epochs=2,5 --dirichlet_alphas=0.1 --seeds=$s
  # beta sensitivity (Fig. 1(b), Fig. 2); beta 0 and 0.1 are FedAvg and FedInit above
  sweep --algorithms=fedavg --betas=-0.2,-0.1,0.05,0.2 --dirichlet_alphas=0.1 --seeds=$s
done
report --window 3 --last 6  # 60 rounds evaluated every 5: as docs/study.md
