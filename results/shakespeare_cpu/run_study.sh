#!/usr/bin/env bash
# The CPU-sized Shakespeare comparison (README "Shakespeare"): FedAvg, FedInit under both
# delta_from, SCAFFOLD without and with RI (beta 0.1), 3 seeds, experiments/configs/shakespeare.py
# (preset cpu). Resumable: rerun the same command, finished cells are skipped.
#   bash results/shakespeare_cpu/run_study.sh [RESULTS_DIR [--config.FIELD=VALUE ...]]
set -euo pipefail
# RESULTS_DIR defaults to a fresh folder: the committed results are never overwritten or
# silently reused (pass the committed folder to extend it). The project's venv Python unless
# PYTHON is set. Expected duration: ~1.2 h on 2 cores (the
# committed 15 cells: 1.17 h of rounds and evaluations by their metrics).
out=$(realpath -m "${1:-$(mktemp -d "${TMPDIR:-/tmp}/shakespeare_cpu.XXXXXX")}")
cd "$(dirname "$0")/../.."
shift || true
extra=("$@")
py=${PYTHON:-.venv/bin/python}
[ -x "$py" ] || { echo "error: $py not found: run the README's install command first, or set PYTHON" >&2; exit 2; }
echo "results: $out"
sweep() { "$py" -m experiments.sweep --config experiments/configs/shakespeare.py --results "$out" "$@" "${extra[@]}"; }
for s in 0 1 2; do
  sweep --algorithms=fedavg,fedinit --seeds=$s
  sweep --algorithms=fedinit --delta_from=start --seeds=$s
  sweep --algorithms=scaffold --betas=0,0.1 --seeds=$s
done
# the tables and figures of the folder (Markdown and PNGs)
"$py" -m experiments.report "$out" --out "$out/report"
echo "report: $out/report"
