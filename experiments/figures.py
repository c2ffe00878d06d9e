"""The report's figures (experiments/report.py): Fig. 1 (final accuracy against local epochs and
against beta), Fig. 2 (accuracy and both divergences per round for every beta) and each
setting's curves (test accuracy and train loss per round, one line per method). Every axis
carries its unit; every method has its own colour and line style (styles(), any number of
methods); legends sit outside the data; a curve of one point, or a two-value series (without
/ with RI), is drawn as markers; a min-max band only over 3 or more seeds, and the title says
so only where one is drawn; titles name the dataset, clients, participation and rounds; the
Delta^t panel names, per curve, what the run measured (delta_label)."""
import os
from collections import defaultdict

import numpy as np

from experiments.results import method_order

LINESTYLES = ("-", "--", "-.", ":")
MARKERS = (None, "s", "^", "D", "v", "P")
POINTS = ("o", "s", "^", "D", "v", "P", "X", "*")  # a series drawn as markers only


def styles(labels) -> dict:
    """{label: matplotlib line keywords}, distinct for any number of labels: colour from
    tab10, then line style, then marker (10 x 4 x 6 combinations before one repeats); a
    series of markers only takes its marker from POINTS by the tens (see plot_line)."""
    import matplotlib.pyplot as plt

    palette = plt.get_cmap("tab10")
    return {label: {"color": palette(i % 10), "ls": LINESTYLES[(i // 10) % len(LINESTYLES)],
                    "marker": MARKERS[(i // 40) % len(MARKERS)], "markevery": 0.1,
                    "point": POINTS[(i // 10) % len(POINTS)]}
            for i, label in enumerate(dict.fromkeys(labels))}


def plot_line(ax, rounds, values, style, label):
    """One curve in its style; a curve of one point as a marker (a line would not show)."""
    style = dict(style)
    point = style.pop("point")
    if len(rounds) == 1:
        style.update(marker=point, ls="none")
    ax.plot(rounds, values, label=label, **style)


def legend_outside(ax, fontsize=7):
    """The legend to the right of `ax`, off the data (save with bbox_inches="tight")."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=fontsize, frameon=False)


def log_axis(ax):
    """A log y axis with labels at 1, 2 and 5 of each decade (a curve within one decade
    still gets labelled ticks)."""
    from matplotlib import ticker

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def delta_label(config) -> str:
    """What a run's divergence_all is: the paper's Delta^t = (1/C) sum ||w_i - w||^2 where
    the client rows are last local models (no RI, or ri_offset=model), else the mean squared
    stored offset of its rule, (1/C) sum ||e_i||^2, which is not Delta^t (e.g. `momentum`
    stores w^{tau_i+1} - w_i, the client's own drift, apart from the server's m^t)."""
    from experiments import results as R

    offset = config.get("ri_offset") or "model"
    if R.beta_of(config) == 0 or offset == "model":
        return "Delta^t"
    return f"(1/C) sum ||e_i||^2 of ri_offset={offset}"


def setting_title(runs) -> str:
    """A figure's title: dataset, model, split, clients, participation, local epochs and
    rounds (the most any run has); a part the runs differ in is left to the legend."""
    from experiments import results as R

    def common(values, text):
        values = set(values)
        return text(values.pop()) if len(values) == 1 else None

    configs = [r.config for r in runs]
    named = [R.setting(c).split(" ")[:3] for c in configs]  # dataset, model, split
    parts = [*(common((n[i] for n in named), str) for i in range(3)),
             common((c["num_clients"] for c in configs), lambda n: f"{n:,} clients"),
             common((c["participation"] for c in configs), lambda p: f"{p * 100:g}% per round"),
             common((c["local_epochs"] for c in configs), lambda e: f"E={e}"),
             f"{max(c['rounds'] for c in configs)} rounds"]
    shown = ", ".join(p for p in parts if p is not None)
    return shown + ("; the rest of each setting in the legend" if None in parts else "")


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
             lambda c: f"{_ri_family(c)} {R.setting(c)}{_rule_tag(c)}")):
        series = defaultdict(lambda: defaultdict(list))
        for run in runs:
            series[label_of(run.config)][getter(run.config)].append(
                100 * R.final_accuracy(run, window, last))
        if field == "beta":  # the beta = 0 runs (no rule) are the start of every rule's curve
            for label in [k for k in series if " [" in k]:
                series[label][0.0] = series.get(label.split(" [")[0], {}).get(0.0, [])
                if not series[label][0.0]:
                    del series[label][0.0]
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
        look = styles(sorted(series))
        for label, by_x in sorted(series.items()):
            xs = sorted(by_x)
            n = sorted({len(by_x[x]) for x in xs})
            # a sweep of three or more values is a curve; two (without / with RI) are two
            # categories, not a trend: markers only
            ax.errorbar(xs, [np.mean(by_x[x]) for x in xs],
                        yerr=[R.sample_std(by_x[x]) for x in xs], capsize=3,
                        color=look[label]["color"], marker=look[label]["point"],
                        ls=look[label]["ls"] if len(xs) >= 3 else "none",
                        label=f"{label} (n={'/'.join(map(str, n))})")
        ax.set_xlabel(FIGURE1_AXES[field])
        ax.set_ylabel("final test accuracy (%)")
        ax.set_title(f"{setting_title(runs)}\nsmoothed over {window} evaluations, max over the "
                     f"last {last} rounds; mean and sample std over seeds (n)", fontsize=9)
        legend_outside(ax, 6)
        ax.grid(alpha=0.3)
        fig.savefig(os.path.join(out, fname), dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(fname)
    # Fig. 2: curves of accuracy and both divergences for every beta (mean over the seeds),
    # one figure per base algorithm, setting and RI rule (rule_options), its beta = 0 runs in
    # every one of them
    groups, without = defaultdict(list), defaultdict(list)
    for run in runs:
        c = run.config
        if R.beta_of(c) == 0:
            without[(R.base_name(c), R.setting(c))].append(run)
        else:
            groups[(R.base_name(c), R.setting(c), tuple(R.rule_options(c)))].append(run)
    for (base, s, options), rs in sorted(groups.items()):
        rs = without.get((base, s), []) + rs
        betas = sorted({R.beta_of(r.config) for r in rs})
        if len(betas) < 2:
            continue
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
        look = styles(betas)
        for beta in betas:
            chosen = [r for r in rs if R.beta_of(r.config) == beta]
            label = f"beta={beta:g} (n={len(chosen)})"
            for ax, (field, title, ylabel, scale) in zip(axes, FIGURE2_PANELS):
                x, y = _mean_curve(chosen, field)
                tail = f": {delta_label(chosen[0].config)}" if field == "divergence_all" else ""
                plot_line(ax, x, scale * y, look[beta], label + tail)
                ax.set_title(title, fontsize=9)
                ax.set_xlabel("round")
                ax.set_ylabel(ylabel)
        log_axis(axes[1])
        log_axis(axes[2])
        legend_outside(axes[2])
        fig.suptitle(f"{_ri_family(rs[-1].config)}{R.bracketed(options)}; "
                     f"{setting_title(rs)}\nnot smoothed, mean over seeds", fontsize=10)
        name = f"{base}_{s}{'_' + '_'.join(options) if options else ''}"
        fname = "fig2_" + name.replace(" ", "_").replace("%", "pct").replace("=", "-") + ".png"
        fig.savefig(os.path.join(out, fname), dpi=110, bbox_inches="tight")
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
    """curves_<setting>.png per setting (curve_lines): one line per method (mean over the
    seeds, band from the lowest to the highest when there are 3 or more), an unfinished run
    labelled with the round it reached. Returns the names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments import results as R

    by_setting = defaultdict(list)
    for run in runs + unfinished:
        by_setting[R.setting(run.config)].append(run)
    written = []
    for s, lines in curve_lines(runs, unfinished).items():
        fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
        panels = dict(zip(("test_accuracy", "train_loss"), axes))
        look = styles(label for _, label, *_ in lines)
        banded = False
        for field, label, _, rounds, values in lines:
            plot_line(panels[field], rounds, values.mean(0), look[label], label)
            if len(values) >= 3:  # a min-max band of fewer seeds says little
                banded = True
                panels[field].fill_between(rounds, values.min(0), values.max(0), alpha=0.15,
                                           color=look[label]["color"])
        band = ", band min-max over seeds (n >= 3)" if banded else ""
        for ax, title in zip(axes, ("test accuracy (%)", "train loss (mean local loss)")):
            ax.set_xlabel("round")
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
        legend_outside(axes[1], 6)
        fig.suptitle(f"{setting_title(by_setting[s])}\nnot smoothed: mean over seeds{band}",
                     fontsize=10)
        fname = "curves_" + s.replace(" ", "_").replace("%", "pct") + ".png"
        fig.savefig(os.path.join(out, fname), dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(fname)
    return written


FIGURE1_AXES = {"local_epochs": "local epochs E", "beta": "RI coefficient beta"}
# Fig. 2's panels: (metrics field, title, y label, scale)
FIGURE2_PANELS = (("test_accuracy", "test accuracy", "test accuracy (%)", 100),
                  ("divergence", "sampled clients' divergence",
                   "mean_S ||w_iK - w^{t+1}||^2 (log)", 1),
                  ("divergence_all", "over all clients (legend: what each run measured)",
                   "(1/C) sum ||w_i - w||^2, or ||e_i||^2 (log)", 1))


def _ri_family(config):
    """Fig. 1(b)'s curve label: the base method at beta = 0 and with RI at beta > 0."""
    from experiments import results as R

    base = R.base_name(config)
    with_ri = "FedInit" if R.base_algorithm(config) == "fedavg" else f"{base}+RI"
    return f"{base} (beta 0) / {with_ri} (beta > 0)"


def _rule_tag(config):
    """' [options]' of a run with RI that departs from Algorithm 1 (results.rule_options)."""
    from experiments import results as R

    return R.bracketed(R.rule_options(config) if R.beta_of(config) != 0 else [])


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
