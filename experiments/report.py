"""Regenerate the paper's tables and figures from result folders.

    python -m experiments.report studies/cpu_cifar10 --out /tmp/report [--window 5 --last 50]

Writes Markdown tables to stdout and <out>/tables.md, and PNG figures to <out>:
  Table 4/5  test accuracy: moving average over `window` evaluations, max over the last `last`
             rounds, mean ± std over seeds, per method (rows) and setting (columns)
  Table 6    each base algorithm without (beta = 0) and with RI, and the gain
  Table 7    seconds per round (train, eval; median over rounds and seeds, the first round,
             which compiles, left out), ratio to FedAvg where every run of the setting ran on
             one recorded machine (run_info.json's sessions), else "-" and the note says why
  Table 8    rounds and train time until the smoothed accuracy reaches a target (default:
             the highest smoothed accuracy every FedAvg run of the setting reaches), speed-up
             over FedAvg
  Table 9    communication and storage from the algorithms' declared messages and state
  fig1a_epochs.png  accuracy vs local epochs;  fig1b_beta.png  accuracy vs beta
  fig2_<setting>.png  accuracy and both divergences per round for every beta
  curves_<setting>.png  test accuracy and train loss per round, one line per method (mean
             over seeds, band from the lowest to the highest seed when n >= 3); unfinished runs
             dashed, up
             to the round they reached (they are left out of every table)
"""
import os
import sys
from collections import defaultdict

import numpy as np
from absl import app, flags

from experiments import exit_codes
from experiments.cli import parse_flags

flags.DEFINE_string("out", None, "Output folder for tables.md and the PNGs.")
flags.DEFINE_integer("window", 5, "Moving-average window (rounds with evaluation).")
flags.DEFINE_integer("last", 50, "Max over the smoothed points of the last this many rounds.")
flags.DEFINE_float("target", None, "Target accuracy (0..1) for Table 8 (default: the best "
                   "smoothed accuracy every FedAvg run of the setting reaches).")
FLAGS = flags.FLAGS


def accuracy_table(runs, window, last, field="test_accuracy"):
    """Table 4/5: the smoothed final `field` (%) per method (rows) and setting (columns)."""
    from experiments import results as R

    cells = defaultdict(list)
    for run in runs:
        cells[(R.method(run.config), R.setting(run.config))].append(
            100 * R.final_accuracy(run, window, last, field))
    methods = sorted({m for m, _ in cells}, key=R.method_order)
    settings = sorted({s for _, s in cells})
    return R.markdown(["method", *settings],
                      [[m, *[R.mean_std(cells.get((m, s), [])) for s in settings]]
                       for m in methods])


def other_accuracies(runs):
    """The second accuracies every run reports (test_accuracy_*, e.g. Shakespeare's
    test_accuracy_in_vocab), sorted."""
    fields = [{k for row in run.rows for k in row if k.startswith("test_accuracy_")}
              for run in runs]
    return sorted(set.intersection(*fields)) if fields else []


def accuracy_tables(runs, window, last):
    from experiments import results as R

    table4 = accuracy_table(runs, window, last)
    # Table 6: each method with RI against its base algorithm without (beta = 0) in the same
    # setting; one row per method, so runs of different RI rules are never pooled (at beta =
    # 0 every rule and delta_from are the same algorithm, w_i0 = w: one baseline serves all)
    without, with_ri = defaultdict(list), defaultdict(list)
    for run in runs:
        c = run.config
        accuracy = 100 * R.final_accuracy(run, window, last)
        if R.beta_of(c) == 0:
            without[(R.base_name(c), R.setting(c), c.get("_variant", ""))].append(accuracy)
        else:
            with_ri[(R.base_name(c), R.setting(c), c.get("_variant", ""), R.method(c),
                     R.beta_of(c))].append(accuracy)
    rows6 = []
    for (base, s, variant, name, beta), values in sorted(  # Algorithm 1 by beta, then rules
            with_ri.items(), key=lambda kv: (kv[0][:3], " [" in kv[0][3], kv[0][4], kv[0][3])):
        baseline = without.get((base, s, variant))
        if baseline:
            rows6.append([base, s, name, f"{beta:g}", R.mean_std(baseline), R.mean_std(values),
                          f"{np.mean(values) - np.mean(baseline):+.2f}"])
    table6 = R.markdown(["algorithm", "setting", "with RI", "beta", "- (beta = 0)", "+RI",
                         "gain"], rows6)
    return table4, table6


def time_tables(runs, window, target):
    """Table 7 (seconds per round) and Table 8 (rounds and time to target), and a note per
    setting on the machines its timings come from: seconds are compared (the ratio to
    FedAvg, the time speed-up) only between runs of one recorded machine (results.machine)."""
    from experiments import results as R

    per = defaultdict(list)
    for run in runs:
        per[(R.setting(run.config), R.method(run.config))].append(run)
    rows7, rows8, notes = [], [], []
    for s in sorted({k[0] for k in per}):
        of_setting = [r for k, rs in per.items() if k[0] == s for r in rs]
        machines = {R.machine(r) for r in of_setting}
        comparable = len(machines) == 1 and None not in machines
        if comparable:
            loads = [R.load(r) for r in of_setting]
            notes.append(f"{s}: every run on {machines.pop()}, 1-minute load at start "
                         f"{np.nanmin(loads):.2f}-{np.nanmax(loads):.2f}")
        else:
            unknown = sum(R.machine(r) is None for r in of_setting)
            notes.append(f"{s}: seconds not compared ({len(machines - {None})} machines "
                         f"recorded; {unknown} of {len(of_setting)} runs record none, or "
                         "more than one, in run_info.json's sessions)")
        fedavg = per.get((s, "FedAvg"))
        base_train = (np.median([R.seconds_per_round(r)[0] for r in fedavg])
                      if fedavg and comparable else None)
        goal = target
        if goal is None:  # the highest accuracy every FedAvg run (else every run) reaches
            goal = min(R.final_accuracy(r, window, 10 ** 9) for k, rs in per.items()
                       if k[0] == s and (not fedavg or k[1] == "FedAvg") for r in rs)
        base_hits = [R.to_target(r, goal, window) for r in fedavg] if fedavg and goal else []
        for m in sorted({k[1] for k in per if k[0] == s}, key=R.method_order):
            rs = per[(s, m)]
            train = np.median([R.seconds_per_round(r)[0] for r in rs])
            evals = np.nanmedian([R.seconds_per_round(r)[1] for r in rs])
            ratio = f"{train / base_train:.2f}x" if base_train else "-"
            rows7.append([s, m, f"{train:.3f}", f"{evals:.3f}", ratio])
            if goal is None:
                continue
            hits = [R.to_target(r, goal, window) for r in rs]
            if any(h is None for h in hits):
                rows8.append([s, m, f"{100 * goal:.2f}", "not reached", "-", "-"])
                continue
            rounds, secs = np.mean([h[0] for h in hits]), np.mean([h[1] for h in hits])
            if not base_hits or any(h is None for h in base_hits):
                speed = "-"
            else:
                by_time = (f"{np.mean([h[1] for h in base_hits]) / secs:.2f}x" if comparable
                           else "-")
                speed = f"{np.mean([h[0] for h in base_hits]) / rounds:.2f}x / {by_time}"
            rows8.append([s, m, f"{100 * goal:.2f}", f"{rounds:.0f}", f"{secs:.1f}", speed])
    table7 = R.markdown(["setting", "method", "train s/round", "eval s", "train vs FedAvg"], rows7)
    table8 = R.markdown(["setting", "method", "target %", "rounds", "train s",
                         "speed-up (rounds / time)"], rows8)
    timings = "Timings: " + "; ".join(notes) + "."
    return f"{table7}\n\n{timings}", f"{table8}\n\n{timings}"


def cost_table(runs):
    from experiments import metrics
    from experiments import results as R
    from fedinit_jax.types import Costs

    seen = {}
    for run in runs:
        if "costs" in run.info:
            name = "FedInit" if run.config["algorithm"] == "fedinit" else R.base_name(run.config)
            seen.setdefault(name, (Costs(**{k: tuple(v) for k, v in run.info["costs"].items()}),
                                   run.info["num_params"], run.info["clients_per_round"],
                                   run.config["num_clients"]))
    if not seen:
        return "(no run_info.json found)"
    names = sorted(seen, key=R.method_order)
    d, n, c = seen[names[0]][1:]
    rows = metrics.cost_table({k: seen[k][0] for k in names}, d, n, c)
    return R.markdown(
        ["method", "down / round", "up / round", "client storage", "down ratio", "up ratio",
         "storage ratio"],
        [[r["method"], f"{r['down_floats']:,} floats ({r['down_bytes'] / 2**20:.1f} MiB)",
          f"{r['up_floats']:,} floats", f"{r['client_storage_floats']:,} floats",
          f"{r['down_ratio']:g}x", f"{r['up_ratio']:g}x", f"{r['storage_ratio']:g}x"]
         for r in rows]) + f"\n\n(d = {d:,} parameters, N = {n}, C = {c}; ratios to {names[0]})"


def report(folders, out, window=5, last=50, target=None, with_figures=True) -> str:
    """The tables (returned, and written to <out>/tables.md) and, with with_figures, the PNGs."""
    from experiments import results as R
    from experiments.figures import curve_figures, figures

    if not (isinstance(window, int) and window >= 1):
        raise ValueError(f"--window={window!r} must be an int >= 1 (evaluations averaged)")
    if not (isinstance(last, int) and last >= 1):
        raise ValueError(f"--last={last!r} must be an int >= 1 (rounds the max is taken over)")
    if target is not None and not 0 < target <= 1:
        raise ValueError(f"--target={target!r} must be an accuracy in (0, 1]")
    skipped = []
    found = R.label_variants(R.find_runs(folders, skipped))
    duplicates = []
    runs = R.unique([r for r in found if R.finished(r)], duplicates)  # finished copies first
    unfinished_runs = [r for r in found if not R.finished(r)]
    unfinished = sorted(os.path.relpath(r.path, os.path.commonpath(folders))
                        for r in unfinished_runs)
    if not runs:
        raise ValueError(f"no finished runs (config.json + metrics.jsonl up to config.rounds) "
                         f"under {', '.join(folders)}")
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, f".write_test_{os.getpid()}")
        open(probe, "w").close()
        os.remove(probe)
    except OSError as err:
        raise ValueError(f"--out={out!r} cannot be written ({err.strerror}): give a folder "
                         "you can write") from None
    table4, table6 = accuracy_tables(runs, window, last)
    table7, table8 = time_tables(runs, window, target)
    smoothing = f"smoothed over {window} evaluations, max over the last {last} rounds"
    others = [part for field in other_accuracies(runs)
              for part in (f"## {field} (%), {smoothing}", accuracy_table(runs, window, last,
                                                                         field))]
    text = "\n\n".join([
        f"## Test accuracy (%), {smoothing}", table4, *others,
        "## With and without relaxed initialization (RI)", table6,
        "## Seconds per round (median over rounds and seeds)", table7,
        "## Rounds and time to target accuracy", table8,
        "## Communication and storage per round (Table 9)", cost_table(runs)])
    if with_figures:
        pngs = figures(runs, out, window, last) + curve_figures(runs, unfinished_runs, out)
        text += "\n\nFigures: " + ", ".join(pngs)
    if unfinished:
        text += f"\n\nLeft out of the tables, unfinished: {', '.join(unfinished)}"
    if duplicates:
        root = os.path.commonpath(folders)
        text += "\n\nLeft out, the same method, setting and seed as a run kept: " + "; ".join(
            f"{os.path.relpath(path, root)} (kept: {os.path.relpath(kept, root)})"
            for path, kept in duplicates)
    if skipped:
        text += "\n\nLeft out, unreadable: " + "; ".join(f"{path} ({why})" for path, why in skipped)
    with open(os.path.join(out, "tables.md"), "w") as f:
        f.write(text + "\n")
    return text


def main(argv):
    folders = argv[1:]
    if not folders or not FLAGS.out:
        print("error: usage: report.py FOLDER [FOLDER ...] --out DIR", file=sys.stderr)
        sys.exit(exit_codes.BAD_INPUT)
    try:
        print(report(folders, FLAGS.out, FLAGS.window, FLAGS.last, FLAGS.target))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(exit_codes.BAD_INPUT)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
