# The set-up of the study scripts that run experiments.train once per cell: sourced, never
# run.   source "$(dirname "$0")/../train_common.sh" "$@"   ([RESULTS_DIR [SEEDS [ALPHAS]]])
# Changes to the repository root; sets $out (RESULTS_DIR, by default a fresh folder, so the
# committed runs are never overwritten or silently reused), $seeds (default "0 1 2"),
# $alphas (default "0.1 0.6"; the CIFAR-10 studies' Dirichlet splits) and $py (the project's
# venv Python unless PYTHON is set); defines
#   chosen_cells TUNING   $cells: one line per cell, NAME FLAGS..., of a study at the settings
#                         studies/TUNING chose (its report/chosen.json, or $CHOSEN;
#                         experiments/tuning_report.py --cells)
study_name=$(basename "$(dirname "$(realpath "$0")")")
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=$(realpath -m "${1:-$(mktemp -d "${TMPDIR:-/tmp}/$study_name.XXXXXX")}")
seeds=${2:-"0 1 2"}
alphas=${3:-"0.1 0.6"}
py=${PYTHON:-.venv/bin/python}
chosen_cells() {
  local chosen=${CHOSEN:-studies/$1/report/chosen.json}
  [ -f "$chosen" ] || { echo "error: $chosen missing: run studies/$1 and its report first" >&2; exit 2; }
  mapfile -t cells < <("$py" -m experiments.tuning_report --cells "$chosen")
}
