# The set-up of the study scripts that run experiments.train once per cell: sourced, never
# run.   source "$(dirname "$0")/../train_common.sh" "$@"   ([RESULTS_DIR [SEEDS [ALPHAS]]])
# Changes to the repository root; sets $out (RESULTS_DIR, by default a fresh folder, so the
# committed runs are never overwritten or silently reused), $seeds (default "0 1 2"),
# $alphas (default "0.1 0.6"; the CIFAR-10 studies' Dirichlet splits) and $py (the project's
# venv Python unless PYTHON is set).
study_name=$(basename "$(dirname "$(realpath "$0")")")
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=$(realpath -m "${1:-$(mktemp -d "${TMPDIR:-/tmp}/$study_name.XXXXXX")}")
seeds=${2:-"0 1 2"}
alphas=${3:-"0.1 0.6"}
py=${PYTHON:-.venv/bin/python}
