"""A tuning grid's choice: for every method, the setting with the best validation accuracy.

    .venv/bin/python -m experiments.tuning_report FOLDER --out OUT [--window 3]
    .venv/bin/python -m experiments.tuning_report --cells OUT/chosen.json   # a study's cells

FOLDER holds one run per setting (studies/cross_device_tuning/runs: every run evaluated on a
validation split carved from the training data, task.images.validation or
task.shakespeare.validation, and on the test split). A method is the algorithm with its RI
rule (`ri_offset` when it takes RI and its beta is not 0); its settings are every run of it.
A run's validation accuracy is the mean of its last `window` evaluations (val_accuracy); a
run that did not finish (diverged, stopped) is listed and never chosen. Writes OUT/report.md
(per method: every setting with its validation and test accuracy, the chosen one marked;
then the choices side by side) and OUT/chosen.json ({method: {"fields": {field: value},
"flags": [--config.FIELD=VALUE, ...], "validation": its validation accuracy}} of each chosen
setting: the flags run it, as studies/cross_device_tuned/run.sh does). The test accuracy is
printed beside, never used to choose.
"""
import argparse
import json
import os
import re

import numpy as np

from experiments import results as R
from fedinit_jax import algorithms

__all__ = ["family", "tuned_fields", "final_validation", "choose", "flags", "report",
           "SERVER_OPTIMIZERS", "study_cells", "main"]


def family(config) -> str:
    """The method a setting belongs to: the algorithm's name, with its RI rule when it
    takes RI at a beta != 0 (FedInit [ri_offset=momentum])."""
    name = algorithms.REGISTRY[config["algorithm"]].display
    if config["algorithm"] == "fedinit" or (R.takes_ri(config) and R.beta_of(config)):
        name = "FedInit" if config["algorithm"] == "fedinit" else name + "+RI"
        return f"{name} [ri_offset={config.get('ri_offset') or 'model'}]"
    return name


def tuned_fields(config) -> dict:
    """The fields a setting chooses: its algorithm's hyperparameters (beta among them) and,
    with RI, the offset rule."""
    fields = {name: config.get(name) for name in algorithms.REGISTRY[config["algorithm"]]
              .defaults}
    if R.takes_ri(config):
        if R.beta_of(config):
            fields["ri_offset"] = config.get("ri_offset") or "model"
        else:
            del fields["beta"]  # no RI: beta is not part of the method
    return fields


def final_validation(run: R.Run, window: int) -> float | None:
    """The mean of the run's last `window` validation accuracies; None when it did not
    finish (it is never chosen)."""
    values = [r["val_accuracy"] for r in run.rows if "val_accuracy" in r]
    if not R.finished(run) or len(values) < window:
        return None
    return float(np.mean(values[-window:]))


def choose(runs, window: int) -> dict:
    """{method: [(validation, test, fields, run) of each setting, best validation first]}."""
    by_method = {}
    for run in runs:
        val = final_validation(run, window)
        tests = [r["test_accuracy"] for r in run.rows if "test_accuracy" in r]
        test = float(np.mean(tests[-window:])) if val is not None else None
        by_method.setdefault(family(run.config), []).append(
            (val, test, tuned_fields(run.config), run))
    return {m: sorted(s, key=lambda x: (x[0] is None, -(x[0] or 0.0)))
            for m, s in by_method.items()}


def _percent(value) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _fields(fields) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in fields.items())


def report(folder: str, window: int) -> tuple[str, dict]:
    """(report.md's text, chosen.json's object) of the runs under folder."""
    runs = R.find_runs([folder])
    if not runs:
        raise ValueError(f"no runs under {folder}")
    chosen = choose(runs, window)
    order = sorted(chosen, key=lambda m: R.method_order(m))
    lines = [f"# Tuning on the validation split: {R.setting(runs[0].config)}, "
             f"{runs[0].config['rounds']} rounds", "",
             f"Validation accuracy: the mean of each run's last {window} evaluations of "
             "val_accuracy (the held-out training examples); test accuracy the same of "
             "test_accuracy, printed beside and never used to choose. A run that did not "
             "finish is never chosen. n = 1 seed a setting. Minutes: the run's rounds and "
             "evaluations (train_seconds + eval_seconds): a cost, not a benchmark (runs may "
             "have shared their machine; run_info.json records it and its load).", "",
             "| method | settings | chosen | validation % | test % |", "|---|---|---|---|---|"]
    for method in order:
        val, test, fields, _ = chosen[method][0]
        lines.append(f"| {method} | {len(chosen[method])} | {_fields(fields)} | "
                     f"{_percent(val)} | {_percent(test)} |")
    for method in order:
        lines += ["", f"## {method}", "",
                  "| setting | validation % | test % | rounds | minutes |", "|---|---|---|---|---|"]
        for i, (val, test, fields, run) in enumerate(chosen[method]):
            mark = " (chosen)" if i == 0 and val is not None else ""
            minutes = sum(r.get("train_seconds", 0.0) + r.get("eval_seconds", 0.0)
                          for r in run.rows) / 60
            lines.append(f"| {_fields(fields)}{mark} | {_percent(val)} | {_percent(test)} | "
                         f"{len(run.rows)}/{run.config['rounds']} | {minutes:.1f} |")
    picked = {m: {"fields": chosen[m][0][2], "flags": flags(chosen[m][0][3].config),
                  "validation": chosen[m][0][0]}
              for m in order if chosen[m][0][0] is not None}
    return "\n".join(lines) + "\n", picked


def flags(config) -> list:
    """The binaries' flags of a setting: its algorithm, its tuned fields and, with RI, the
    rule's first visit (what differs from the preset it ran on)."""
    out = [f"--config.algorithm={config['algorithm']}"]
    for name, value in tuned_fields(config).items():
        out.append(f"--config.{name}={value:g}" if isinstance(value, float)
                   else f"--config.{name}={value}")
    if "ri_offset" in tuned_fields(config):
        out.append(f"--config.first_visit={config['first_visit']}")
    return out


SERVER_OPTIMIZERS = ("FedAvgM", "FedAdam", "FedYogi")  # the methods RI goes on top of


def study_cells(chosen: dict) -> list:
    """The cells of a study at the chosen settings: (name, flags) of every chosen method, then
    FedInit's `momentum` rule (beta 0.1, first visits from w) on the best server optimizer by
    validation accuracy, with delta_from=start (docs/algorithms.md: under `global` its state
    would accumulate the rule's m^t).

    Args:
      chosen: chosen.json's object ({method: {"flags": [...], "validation": ...}}).
    Returns:
      [(folder name, [--config.FIELD=VALUE, ...])], in chosen's order."""
    cells = [(re.sub(r"[^a-z0-9]+", "-", method.lower()).strip("-"), list(c["flags"]))
             for method, c in chosen.items()]
    servers = {m: c for m, c in chosen.items() if m in SERVER_OPTIMIZERS}
    if servers:
        best = max(servers, key=lambda m: servers[m]["validation"])
        cells.append((f"{best.lower()}-ri-momentum-start", [
            *servers[best]["flags"], "--config.beta=0.1", "--config.ri_offset=momentum",
            "--config.first_visit=global", "--config.delta_from=start"]))
    return cells


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", nargs="?")
    parser.add_argument("--out")
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--cells", metavar="CHOSEN_JSON",
                        help="print the cells of a study at CHOSEN_JSON's settings, one line "
                             "each: NAME FLAGS... (study_cells), instead of a report")
    args = parser.parse_args(argv)
    if args.cells:
        with open(args.cells) as f:
            for name, cell_flags in study_cells(json.load(f)):
                print(name, *cell_flags)
        return
    if not (args.folder and args.out):
        parser.error("a report needs FOLDER and --out (or --cells CHOSEN_JSON)")
    text, picked = report(args.folder, args.window)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "chosen.json"), "w") as f:
        json.dump(picked, f, indent=2, sort_keys=True)
    print(text)


if __name__ == "__main__":
    main()
