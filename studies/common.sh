# The set-up shared by the study scripts (studies/*/run.sh): sourced, never run.
#   source "$(dirname "$0")/../common.sh" CONFIG "$@"    (the script's own arguments:
#                                                         [RESULTS_DIR [--config.FIELD=VALUE ...]])
# Sets $out: RESULTS_DIR, by default a fresh folder, so the committed results are never
# overwritten or silently reused (pass the committed studies/<name>/runs to extend it); changes to the
# repository root; sets $py: the project's venv Python unless PYTHON is set; defines
#   sweep ARGS...   experiments.sweep of CONFIG into $out (the extra arguments to every sweep;
#                   a diverged cell does not stop the study)
#   report [ARGS]   the folder's tables and figures (Markdown and PNGs) into $out/report
#                   (into studies/<name>/report for the committed studies/<name>/runs)
#                   (ARGS: experiments.report flags, e.g. --window 3 --last 6 for 60 rounds)
#   cross_device_grids   the tuning grids of the cross-device methods, the same budget for
#                   each: 9 settings of FedAvgM, FedAdam, FedYogi and FedACG, 3 betas x 2 rules
#                   of FedInit, FedAvg and SCAFFOLD at their defaults
study_config=$1
study_name=$(basename "$(dirname "$(realpath "$0")")")
out=$(realpath -m "${2:-$(mktemp -d "${TMPDIR:-/tmp}/$study_name.XXXXXX")}")
extra=("${@:3}")
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=${PYTHON:-.venv/bin/python}
[ -x "$py" ] || { echo "error: $py not found: run the README's install command first, or set PYTHON" >&2; exit 2; }
echo "results: $out"
# a diverged cell (exit 3) is a result of the study: the next sweep goes on; a stopped sweep
# (SIGTERM / SIGINT: 75, or 128 + N at a second signal) stops the study
sweep() {
  "$py" -m experiments.sweep --config "$study_config" --results "$out" "$@" "${extra[@]}"
  local code=$?
  if [ $code -eq 75 ] || [ $code -gt 128 ]; then
    echo "study stopped (exit $code): rerun the same command to continue" >&2
    exit $code
  fi
  [ $code -eq 0 ] || [ $code -eq 3 ]
}
report_dir="$out/report"
[ "$(basename "$out")" = runs ] && report_dir="$(dirname "$out")/report"
report() { "$py" -m experiments.report "$out" --out "$report_dir" "$@"; echo "report: $report_dir"; }
# each method's default setting first (FedAvgM: Hsu et al.'s; FedAdam, FedYogi: this library's;
# FedACG: its authors'; FedInit `momentum` and `shared`: beta 0.1), named as its grid names it,
# then the grids (a cell already done is skipped)
cross_device_grids() {
  sweep --algorithms=fedavg,scaffold
  sweep --algorithms=fedinit --betas=0.1 --grid ri_offset=momentum,shared
  sweep --algorithms=fedavgm --grid server_lr=1.0 --grid momentum=0.9
  sweep --algorithms=fedadam,fedyogi --grid server_lr=0.1 --grid eps=0.01
  sweep --algorithms=fedacg --betas=0.85 --grid mu=0.002
  sweep --algorithms=fedavgm --grid server_lr=0.1,0.3,1.0 --grid momentum=0.5,0.8,0.9
  sweep --algorithms=fedadam,fedyogi --grid server_lr=0.01,0.03,0.1 --grid eps=0.001,0.01,0.1
  sweep --algorithms=fedacg --betas=0.7,0.85,0.95 --grid mu=0,0.002,0.02
  sweep --algorithms=fedinit --betas=0.05,0.1,0.2 --grid ri_offset=momentum,shared
}
