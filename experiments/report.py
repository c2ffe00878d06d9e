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
             over seeds, band from the lowest to the highest seed when n >= 3); unfinished runs dashed, up
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
    methods = sorted({m for m, _ in cells}, key=_method_order)
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
        for m in sorted({k[1] for k in per if k[0] == s}, key=_method_order):
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
    names = sorted(seen, key=_method_order)
    d, n, c = seen[names[0]][1:]
    rows = metrics.cost_table({k: seen[k][0] for k in names}, d, n, c)
    return R.markdown(
        ["method", "down / round", "up / round", "client storage", "down ratio", "up ratio",
         "storage ratio"],
        [[r["method"], f"{r['down_floats']:,} floats ({r['down_bytes'] / 2**20:.1f} MiB)",
          f"{r['up_floats']:,} floats", f"{r['client_storage_floats']:,} floats",
          f"{r['down_ratio']:g}x", f"{r['up_ratio']:g}x", f"{r['storage_ratio']:g}x"]
         for r in rows]) + f"\n\n(d = {d:,} parameters, N = {n}, C = {c}; ratios to {names[0]})"


def figure1_series(runs, window, last):
    """[(x field, PNG name, {curve label: {x: [final accuracy %, one per seed]}})] for Fig. 1:
    over local epochs a curve is one method (FedAvg and FedInit apart) in one setting but its
    epochs; over beta, one base algorithm in one setting, epochs included. Curves of one
    point are left out."""
    from experiments import results as R

    out = []
    for field, fname, getter, label_of in (
            ("local_epochs", "fig1a_epochs.png", lambda c: c["local_epochs"],
             lambda c: f"{R.method(c)} {R.setting(c).rsplit(' E', 1)[0]}"),
            ("beta", "fig1b_beta.png", R.beta_of,
             lambda c: f"{_ri_family(c)} {R.setting(c)}{_delta_tag(c)}")):
        series = defaultdict(lambda: defaultdict(list))
        for run in runs:
            series[label_of(run.config)][getter(run.config)].append(
                100 * R.final_accuracy(run, window, last))
        out.append((field, fname, {k: v for k, v in series.items() if len(v) > 1}))
    return out


def figures(runs, out, window, last):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments import results as R

    written = []
    for field, fname, series in figure1_series(runs, window, last):
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(9, 6))
        for label, by_x in sorted(series.items()):
            xs = sorted(by_x)
            # a sweep of three or more values is a curve; two (without / with RI) are two
            # categories, not a trend: markers only
            ax.errorbar(xs, [np.mean(by_x[x]) for x in xs],
                        yerr=[R.sample_std(by_x[x]) for x in xs], marker="o", capsize=3,
                        ls="-" if len(xs) >= 3 else "none", label=label)
        ax.set_xlabel(FIGURE1_AXES[field])
        ax.set_ylabel("final test accuracy (%)")
        ax.set_title(f"smoothed over {window} evaluations, max over the last {last} rounds; "
                     "mean and sample std over seeds", fontsize=9)
        ax.legend(fontsize=6, loc="best")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out, fname), dpi=110)
        plt.close(fig)
        written.append(fname)
    # Fig. 2: curves of accuracy and both divergences for every beta (mean over the seeds)
    groups = defaultdict(list)
    for run in runs:
        c = run.config
        groups[(R.base_name(c), R.setting(c) + _delta_tag(c))].append(run)
    for (base, s), rs in sorted(groups.items()):
        betas = sorted({R.beta_of(r.config) for r in rs})
        if len(betas) < 2:
            continue
        fig, axes = plt.subplots(1, 3, figsize=(15, 4))
        for beta in betas:
            chosen = [r for r in rs if R.beta_of(r.config) == beta]
            for ax, (field, title, ylabel, scale) in zip(axes, FIGURE2_PANELS):
                x, y = _mean_curve(chosen, field)
                ax.plot(x, scale * y, label=f"beta={beta:g} (n={len(chosen)})")
                ax.set_title(title + " (not smoothed, mean over seeds)", fontsize=9)
                ax.set_xlabel("round")
                ax.set_ylabel(ylabel)
        axes[1].set_yscale("log")
        axes[2].set_yscale("log")
        axes[0].legend(loc="best")
        fig.suptitle(f"{_ri_family(rs[0].config)}, {s}")
        fig.tight_layout()
        fname = "fig2_" + f"{base}_{s}".replace(" ", "_").replace("%", "pct") + ".png"
        fig.savefig(os.path.join(out, fname), dpi=110)
        plt.close(fig)
        written.append(fname)
    return written


def curve_lines(runs, unfinished):
    """{setting: [(field, label, finished, rounds, [seeds, rounds] values)]}: test accuracy (%)
    and train loss per round, one line per method; finished runs merged over their seeds
    (rounds every seed has), unfinished ones labelled with the round they reached."""
    from experiments import results as R

    groups = defaultdict(lambda: defaultdict(list))
    for run in runs + unfinished:
        groups[R.setting(run.config)][(R.method(run.config), R.finished(run))].append(run)
    lines = {}
    for s, by_method in sorted(groups.items()):
        lines[s] = []
        for (name, done), chosen in sorted(by_method.items(), key=lambda kv: (
                not kv[0][1], _method_order(kv[0][0]))):
            label = (f"{name} (n={len(chosen)})" if done else
                     f"{name}, unfinished (to round {max(len(r.rows) for r in chosen)})")
            for field, scale in (("test_accuracy", 100), ("train_loss", 1)):
                rounds, values = _aligned_curves(chosen, field)
                if len(rounds):
                    lines[s].append((field, label, done, rounds, scale * values))
    return lines


def curve_figures(runs, unfinished, out):
    """curves_<setting>.png per setting (curve_lines): finished methods solid (mean over the
    seeds, band from the lowest to the highest when there are 3 or more), unfinished runs
    dashed. Returns the names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for s, lines in curve_lines(runs, unfinished).items():
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        panels = dict(zip(("test_accuracy", "train_loss"), axes))
        labels = list(dict.fromkeys(label for _, label, *_ in lines))
        palette = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
        for field, label, done, rounds, values in lines:
            color = palette(labels.index(label) % palette.N)
            panels[field].plot(rounds, values.mean(0), label=label, color=color,
                               ls="-" if done else "--", marker="o" if len(rounds) == 1 else None)
            if len(values) >= 3:  # a min-max band of fewer seeds says little
                panels[field].fill_between(rounds, values.min(0), values.max(0), alpha=0.15,
                                           color=color)
        for ax, title in zip(axes, ("test accuracy (%)", "train loss (mean local loss)")):
            ax.set_title(f"{title}, not smoothed: mean over seeds, band min-max (n >= 3)",
                         fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
        axes[1].legend(fontsize=6, loc="best")
        fig.suptitle(s)
        fig.tight_layout()
        fname = "curves_" + s.replace(" ", "_").replace("%", "pct") + ".png"
        fig.savefig(os.path.join(out, fname), dpi=110)
        plt.close(fig)
        written.append(fname)
    return written


FIGURE1_AXES = {"local_epochs": "local epochs E", "beta": "RI coefficient beta"}
# Fig. 2's panels: (metrics field, title, y label, scale)
FIGURE2_PANELS = (("test_accuracy", "test accuracy", "test accuracy (%)", 100),
                  ("divergence", "sampled clients' divergence",
                   "mean_S ||w_iK - w^{t+1}||^2 (log)", 1),
                  ("divergence_all", "Delta^t over all clients",
                   "(1/C) sum ||w_i - w||^2 (log)", 1))


def _ri_family(config):
    """Fig. 1(b)'s curve label: the base method at beta = 0 and with RI at beta > 0."""
    from experiments import results as R

    base = R.base_name(config)
    with_ri = "FedInit" if R.base_algorithm(config) == "fedavg" else f"{base}+RI"
    return f"{base} (beta 0) / {with_ri} (beta > 0)"


def _delta_tag(config):
    return " [start]" if config.get("delta_from") == "start" else ""


def _aligned_curves(runs, field):
    """(rounds every run has, [runs, rounds] values of the metric over them)."""
    from experiments import results as R

    curves = [dict(zip(*R.curve(run, field))) for run in runs]
    rounds = sorted(set.intersection(*(set(c) for c in curves)))
    return np.array(rounds, dtype=int), np.array([[c[t] for t in rounds] for c in curves])


def _mean_curve(runs, field):
    """Mean over runs of a metric, over the rounds every one of them has."""
    rounds, values = _aligned_curves(runs, field)
    return rounds, values.mean(0)


def _method_order(name):
    from fedinit_jax import algorithms

    order = [entry.display for entry in algorithms.REGISTRY.values()]  # the registry's order
    head = name.split("+")[0].split("(")[0].split(" ")[0]
    return (order.index(head) if head in order else len(order), name)


def report(folders, out, window=5, last=50, target=None, with_figures=True) -> str:
    """The tables (returned, and written to <out>/tables.md) and, with with_figures, the PNGs."""
    from experiments import results as R

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
