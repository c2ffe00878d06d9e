#!/usr/bin/env bash
# The CPU CIFAR-10 study: every cell of the README's "Does relaxed initialization help?".
# Resumable: rerun the same command and finished cells are skipped, unfinished ones resume.
#   TFDS_DATA_DIR=../shared/tfds bash results/cpu_cifar10/run_study.sh [RESULTS_DIR [--config.FIELD=VALUE ...]]
# Extra arguments go to every sweep (e.g. --config.rounds=80 extends every finished cell).
# Seeds run one after another over the whole grid, so a stopped study has whole seeds.
set -euo pipefail
out=${1:-results/cpu_cifar10}
shift || true
extra=("$@")
py=${PYTHON:-python}
sweep() { "$py" -m experiments.sweep --config experiments/configs/cpu_cifar10.py --results "$out" "$@" "${extra[@]}"; }
for s in 0 1 2; do
  # main grid (Table 4/6): the baselines and FedInit (beta 0.1), both splits
  sweep --algorithms=fedavg,fedinit,fedadam,fedsam --dirichlet_alphas=0.1,0.6 --seeds=$s
  # RI as a plug-in: SCAFFOLD / FedDyn / FedCM without (0) and with (0.1) RI
  sweep --algorithms=scaffold,feddyn,fedcm --betas=0,0.1 --dirichlet_alphas=0.1,0.6 --seeds=$s
  # FedInit measuring its update from the relaxed start (the authors' code)
  sweep --algorithms=fedinit --delta_from=start --dirichlet_alphas=0.1 --seeds=$s
  # beta sensitivity (Fig. 1(b), Fig. 2); beta 0 and 0.1 are FedAvg and FedInit above
  sweep --algorithms=fedavg --betas=-0.2,-0.1,0.05,0.2 --dirichlet_alphas=0.1 --seeds=$s
  # diagnostic (added after seed 0 showed FedDyn+RI and FedCM+RI diverge): the same with
  # the update measured from the relaxed start, so the RI offset is not carried into h_i / d
  sweep --algorithms=feddyn,fedcm --betas=0.1 --delta_from=start --dirichlet_alphas=0.1 --seeds=$s
done
