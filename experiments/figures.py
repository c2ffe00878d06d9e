"""The report's figures (experiments/report.py): Fig. 1 (final accuracy against local epochs and
against beta), Fig. 2 (accuracy and both divergences per round for every beta) and each
setting's curves (test accuracy and train loss per round, one line per method). Every axis
carries its unit, legends sit inside the axes, a two-value series (without / with RI) is
drawn as markers, and a min-max band only over 3 or more seeds."""
import os
from collections import defaultdict

import numpy as np

from experiments.results import method_order


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
                not kv[0][1], method_order(kv[0][0]))):
            label = (f"{name} (n={len(chosen)})" if done else
                     f"{name}, unfinished (to round {max(len(r.rows) for r in chosen)})")
            for field, scale in (("test_accuracy", 100), ("train_loss", 1)):
                rounds, values = aligned_curves(chosen, field)
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


def aligned_curves(runs, field):
    """(rounds every run has, [runs, rounds] values of the metric over them)."""
    from experiments import results as R

    curves = [dict(zip(*R.curve(run, field))) for run in runs]
    rounds = sorted(set.intersection(*(set(c) for c in curves)))
    return np.array(rounds, dtype=int), np.array([[c[t] for t in rounds] for c in curves])


def _mean_curve(runs, field):
    """Mean over runs of a metric, over the rounds every one of them has."""
    rounds, values = aligned_curves(runs, field)
    return rounds, values.mean(0)
