"""Regenerate the paper's tables and figures from result folders.

    python -m experiments.report results/cpu_cifar10 --out /tmp/report [--window 5 --last 50]

Writes Markdown tables to stdout and <out>/tables.md, and PNG figures to <out>:
  Table 4/5  test accuracy: moving average over `window` evaluations, max over the last `last`
             rounds, mean ± std over seeds, per method (rows) and setting (columns)
  Table 6    each base algorithm without (beta = 0) and with RI, and the gain
  Table 7    seconds per round (train, eval; median over rounds and seeds, the first round,
             which compiles, left out), ratio to FedAvg
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
    # Table 6: base algorithm, beta = 0 vs beta != 0 (same delta_from; at beta = 0 both
    # delta_from are the same algorithm, w_i0 = w, so a beta = 0 run serves both)
    pairs = defaultdict(dict)
    for run in runs:
        c = run.config
        beta = R.beta_of(c)
        for delta in (("global", "start") if beta == 0 else (c.get("delta_from", "global"),)):
            pairs[(R.base_name(c), R.setting(c), delta)].setdefault(beta, []).append(
                100 * R.final_accuracy(run, window, last))
    rows6 = []
    for (base, s, delta), by_beta in sorted(pairs.items()):
        if 0.0 in by_beta and len(by_beta) > 1:
            for beta in sorted(b for b in by_beta if b != 0):
                gain = np.mean(by_beta[beta]) - np.mean(by_beta[0.0])
                rows6.append([base, s, delta, f"{beta:g}", R.mean_std(by_beta[0.0]),
                              R.mean_std(by_beta[beta]), f"{gain:+.2f}"])
    table6 = R.markdown(["algorithm", "setting", "delta_from", "beta", "- (beta = 0)", "+RI",
                         "gain"], rows6)
    return table4, table6


def time_tables(runs, window, target):
    from experiments import results as R

    per = defaultdict(list)
    for run in runs:
        per[(R.setting(run.config), R.method(run.config))].append(run)
    rows7, rows8 = [], []
    for s in sorted({k[0] for k in per}):
        fedavg = per.get((s, "FedAvg"))
        base_train = np.median([R.seconds_per_round(r)[0] for r in fedavg]) if fedavg else None
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
            speed = ("-" if not base_hits or any(h is None for h in base_hits)
                     else f"{np.mean([h[0] for h in base_hits]) / rounds:.2f}x / "
                          f"{np.mean([h[1] for h in base_hits]) / secs:.2f}x")
            rows8.append([s, m, f"{100 * goal:.2f}", f"{rounds:.0f}", f"{secs:.1f}", speed])
    table7 = R.markdown(["setting", "method", "train s/round", "eval s", "train vs FedAvg"], rows7)
    table8 = R.markdown(["setting", "method", "target %", "rounds", "train s",
                         "speed-up (rounds / time)"], rows8)
    return table7, table8


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
