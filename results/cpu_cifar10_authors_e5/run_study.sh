#!/usr/bin/env bash
# The authors' CIFAR-10 configuration at full model width (experiments/configs/cpu_cifar10.py,
# preset authors_e5): FedAvg, FedInit (beta 0.1) with Algorithm 1's aggregation (global) and
# with the authors' (start), 3 seeds. Resumable: rerun the same command, finished cells are
# skipped, unfinished ones resume from their last checkpoint.
#   TFDS_DATA_DIR=../shared/tfds bash results/cpu_cifar10_authors_e5/run_study.sh [RESULTS_DIR [--config.FIELD=VALUE ...]]
# Seeds run one after another, so a stopped study has whole seeds.
set -euo pipefail
# RESULTS_DIR defaults to a fresh folder: the committed results are never overwritten or
# silently reused (pass the committed folder to extend it). The project's venv Python unless
# PYTHON is set. Expected duration on 2 cores: 9 cells of 60 rounds at ~20-35 s a round
# (width 1, 50 local steps x 10 clients), i.e. 3-5 h.
out=$(realpath -m "${1:-$(mktemp -d "${TMPDIR:-/tmp}/cpu_cifar10_authors_e5.XXXXXX")}")
cd "$(dirname "$0")/../.."
shift || true
extra=("$@")
py=${PYTHON:-.venv/bin/python}
[ -x "$py" ] || { echo "error: $py not found: run the README's install command first, or set PYTHON" >&2; exit 2; }
echo "results: $out"
sweep() { "$py" -m experiments.sweep --config experiments/configs/cpu_cifar10.py:authors_e5 --results "$out" "$@" "${extra[@]}"; }
for s in 0 1 2; do
  sweep --algorithms=fedavg,fedinit --seeds=$s
  sweep --algorithms=fedinit --delta_from=start --seeds=$s
done
"$py" -m experiments.report "$out" --out "$out/report"
echo "report: $out/report"
