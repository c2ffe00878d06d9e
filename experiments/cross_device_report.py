"""The cross-device studies' table and figures (docs/study_cross_device.md).

    .venv/bin/python -m experiments.cross_device_report FOLDER [FOLDER ...] --out OUT \
        [--target 0.45] [--window 3] [--last 100] [--rounds R] [--drift W] [--paired NAME]

Each FOLDER holds cells named <method>-s<seed> (a run's workdir, as the study scripts write
them). Writes OUT/report.md: per method, the seeds, final test accuracy (moving average over
`window` evaluations, max over the last `last` rounds; finished runs only), best single
evaluation, the rounds to `target` test accuracy (first evaluation at or above it, one per
seed), the final train loss (mean of the last 20 rounds) and its ratio to FedAvg's, and how
each run ended (done, or diverged at a round); mean ± sample std over seeds, every other test
metric (test_accuracy_new) likewise. And OUT/<folder>_curves.png: test accuracy, train loss
and divergence_all at evaluation rounds (Delta^t = (1/C) sum ||w_i - w||^2, or for an offset
rule the mean squared stored offset, each labelled), one line per method (mean over seeds,
min-max band only with 3 or more seeds). With --drift W, a table of the round divergence
(the cohort's spread around the new global model) averaged over windows of W rounds. With
--paired NAME, each method's final test accuracy minus NAME's seed by seed (one seed: one
split, the same clients and batches), mean ± sample std of those differences.
"""
import argparse
import glob
import math
import os
import statistics as st

from experiments import figures as F
from experiments import results as R
from experiments.figures import aligned_curves
from fedinit_jax.experiment import stopping

ORDER = ("fedavg", "fedinit-model", "fedinit-model-init", "fedinit-start", "fedinit-next",
         "fedinit-drift", "fedinit-momentum", "scaffold", "scaffold-next", "scaffold-momentum")


def cells(folder, rounds=None):
    """{method: [(seed, run, ended)]} of the folder's <method>-s<seed> workdirs (a workdir may
    be a symbolic link to a cell of another study).

    With `rounds`, every run is read as if it ended there (its rows after it left out), so runs
    of different lengths compare at one round. A run ends `done` (it reached its last round),
    `diverged at R` (its recorded train losses meet the runaway rule,
    fedinit_jax.experiment.stopping.runaway, at its last round R, where the rule stopped it;
    or its last train loss is not finite; or its train.log's summary says it diverged),
    `diverged at R*` (it ran on past round R, where its recorded losses meet the rule: it was
    stopped later by the rule before it, or predates both; its rows after R are left out, as
    the rule would have stopped it there) or
    `unfinished at R` (stopped before its end). Only the committed files (config.json,
    metrics.jsonl) are needed; train.log, not committed, is read where it exists."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*-s[0-9]*"))):
        if not os.path.exists(os.path.join(path, "metrics.jsonl")):
            continue
        name, seed = os.path.basename(path).rsplit("-s", 1)
        run = R.find_runs([path])[0]
        end = min(run.config["rounds"], rounds or run.config["rounds"])
        rows = [r for r in run.rows if r["round"] <= end]
        log = os.path.join(path, "train.log")
        last = open(log).read().strip().splitlines()[-1] if os.path.exists(log) else ""
        losses = [r["train_loss"] for r in rows]
        runaway = None if max(losses) <= losses[0] else next(  # the rule needs L_t > L_1
            (i for i in range(1, len(rows) + 1) if stopping.runaway(rows[:i])), None)
        if runaway is not None:
            star = "" if runaway == len(run.rows) else "*"
            rows = rows[:runaway]
            ended = f"diverged at {rows[-1]['round']}{star}"
        elif rows[-1]["round"] == end:
            ended = "done"
        elif not math.isfinite(losses[-1]) or "summary: diverged" in last:
            ended = f"diverged at {rows[-1]['round']}"
        else:
            ended = f"unfinished at {rows[-1]['round']}"
        out.setdefault(name, []).append((int(seed), run._replace(rows=rows), ended))
    return dict(sorted(out.items(), key=lambda kv: (
        ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER), kv[0])))


def mean_std(values, scale=100.0):
    values = [v for v in values if v == v]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{scale * values[0]:.2f}"
    return f"{scale * st.mean(values):.2f} ± {scale * st.stdev(values):.2f}"


def final_loss(run):
    return st.mean(r["train_loss"] for r in run.rows[-20:])


def table(folder, target, window, last, rounds=None):
    groups = cells(folder, rounds)
    fields = sorted({k for runs in groups.values() for _, run, _ in runs for r in run.rows
                     for k in r if k.startswith("test_accuracy")})
    base = [final_loss(run) for _, run, ended in groups.get("fedavg", []) if ended == "done"]
    head = ["method", "seeds"] + [f"final {f} %" for f in fields] + [
        "best test_accuracy %", f"rounds to {100 * target:g} %", "final train loss",
        "x FedAvg's", "ended"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, runs in groups.items():
        finals = [mean_std([R.final_accuracy(run, window, last, f) if ended == "done"
                            else float("nan") for _, run, ended in runs]) for f in fields]
        best = mean_std([max(R.curve(run, "test_accuracy")[1]) for _, run, _ in runs])
        hits = []
        for _, run, _ in runs:
            rounds, acc = R.curve(run, "test_accuracy")
            hit = rounds[acc >= target]
            hits.append(str(hit[0]) if len(hit) else "never")
        losses = [final_loss(run) for _, run, _ in runs]
        ratio = (f"{st.mean(losses) / st.mean(base):.2f}" if base and all(
            ended == "done" for *_, ended in runs) else "-")
        lines.append("| " + " | ".join(
            [name, str(len(runs))] + finals + [best, ", ".join(hits),
                                               ", ".join(f"{x:.3g}" for x in losses), ratio,
                                               ", ".join(f"s{s}: {e}" for s, _, e in runs)])
            + " |")
    ceilings = {}  # a task's Bayes-optimal global classifier, when it has one (synthetic_shared)
    for _, run, _ in next(iter(groups.values()), []):
        shared = (run.info.get("data") or {}).get("shared_model_accuracy") or {}
        for field, value in shared.items():
            ceilings.setdefault(field, []).append(value)
    if ceilings:
        lines.append("| " + " | ".join(
            ["shared model (Bayes-optimal)", str(len(ceilings[fields[0]]))]
            + [mean_std(ceilings.get(f, [])) for f in fields] + ["-"] * 5) + " |")
    return "\n".join(lines), groups


def paired_table(groups, against, window, last):
    """Per method, its final test accuracy minus `against`'s, seed by seed, over the seeds
    both finished (`done`): a seed fixes the split, the clients of every round and their
    batches, so each difference compares two methods on one federation. Mean ± sample std
    of the differences (points), and each seed's difference.

    Args:
      groups: cells() of one folder.
      against: the method every other is compared with (a key of groups).
      window, last: final accuracy as in table() (results.final_accuracy).
    Returns:
      The markdown table, one row per other method."""
    if against not in groups:
        raise ValueError(f"--paired={against!r}: no such method in the folder; "
                         f"methods: {', '.join(groups)}")

    def finals(runs):
        return {s: R.final_accuracy(run, window, last) for s, run, e in runs if e == "done"}

    base = finals(groups[against])
    lines = [f"| method | seeds | final test_accuracy − {against}'s (points) | per seed |",
             "|---|---|---|---|"]
    for name, runs in groups.items():
        if name == against:
            continue
        diffs = {s: a - base[s] for s, a in finals(runs).items() if s in base}
        lines.append(f"| {name} | {len(diffs)} | {mean_std(list(diffs.values()))} | "
                     + ", ".join(f"s{s}: {100 * d:+.2f}" for s, d in sorted(diffs.items()))
                     + " |")
    return "\n".join(lines)


def drift_table(groups, every):
    """Per method, the round divergence (mean_S ||w_iK - w^{t+1}||^2, the cohort's spread
    around the new global model) averaged over the rounds of each window of `every` rounds,
    then over seeds (runs that diverged left out of the windows they did not reach)."""
    end = max(r["round"] for runs in groups.values() for _, run, _ in runs for r in run.rows)
    starts = list(range(1, end + 1, every))
    head = ["method"] + [f"rounds {a}-{min(a + every - 1, end)}" for a in starts]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, runs in groups.items():
        cells_ = []
        for a in starts:
            windows = [[r["divergence"] for r in run.rows if a <= r["round"] < a + every]
                       for _, run, _ in runs]
            means = [st.mean(w) for w in windows if w]
            cells_.append(f"{st.mean(means):.3g}" if means else "-")
        lines.append("| " + " | ".join([name] + cells_) + " |")
    return "\n".join(lines)


def figure(groups, path):
    """The curves figure: one colour and line style per method (figures.styles), the
    Delta^t panel labelled per method with what its runs measured (figures.delta_label),
    the legend outside the data, the title naming the setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("test_accuracy", "test accuracy (%)", 100.0, False),
              ("train_loss", "train loss (mean local loss, log)", 1.0, True),
              ("divergence_all", "(1/C) sum ||w_i - w||^2, or ||e_i||^2 (legend; log)", 1.0,
               True))
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    look = F.styles(groups)
    banded = False
    for name, runs in groups.items():
        label = f"{name} (n={len(runs)})"
        for ax, (field, _, scale, _) in zip(axes, panels):
            rounds, values = aligned_curves([run for _, run, _ in runs], field)
            if not len(rounds):
                continue
            values = scale * values
            tail = (f": {F.delta_label(runs[0][1].config)}" if field == "divergence_all"
                    else "")
            F.plot_line(ax, rounds, values.mean(0), look[name], label + tail)
            if len(runs) >= 3:
                banded = True
                ax.fill_between(rounds, values.min(0), values.max(0), alpha=0.15,
                                color=look[name]["color"])
    for ax, (_, label, _, log) in zip(axes, panels):
        if log:
            F.log_axis(ax)
        ax.set_xlabel("round")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    F.legend_outside(axes[2])
    band = ", band min-max (n >= 3)" if banded else ""
    every = [run for runs in groups.values() for _, run, _ in runs]
    fig.suptitle(f"{F.setting_title(every)}\nmean over seeds{band}; diverged runs end early",
                 fontsize=10)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--target", type=float, default=0.45)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--last", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=None,
                        help="read every run as if it ended at this round")
    parser.add_argument("--drift", type=int, default=None,
                        help="add the round divergence averaged over windows of this many rounds")
    parser.add_argument("--paired", default=None,
                        help="add each method's final accuracy minus this method's, seed by seed")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    parts = []
    for folder in args.folders:
        name = os.path.basename(os.path.normpath(folder))
        text, groups = table(folder, args.target, args.window, args.last, args.rounds)
        try:  # a bad --paired is refused before this folder's figure is drawn
            paired = (f"\n\nPaired by seed (the same split, clients and batches), final test "
                      f"accuracy minus {args.paired}'s:\n\n"
                      f"{paired_table(groups, args.paired, args.window, args.last)}"
                      if args.paired else "")
        except ValueError as err:
            parser.error(f"{folder}: {err}")
        figure(groups, os.path.join(args.out, f"{name}_curves.png"))
        upto = f" Every run read to round {args.rounds}." if args.rounds else ""
        starred = ("\n\n\\* diverged by today's runaway rule applied to the recorded metrics "
                   "(the run was stopped later by the rule before it, or predates both and ran "
                   "on: its rows after R are left out)." if "*" in text else "")
        drift = (f"\n\nRound divergence, mean_S ||w_iK - w^(t+1)||^2, averaged over rounds "
                 f"and seeds:\n\n{drift_table(groups, args.drift)}" if args.drift else "")
        parts.append(f"## {name}\n\nFinal: moving average over {args.window} evaluations, max "
                     f"over the last {args.last} rounds.{upto}\n\n{text}{starred}{drift}"
                     f"{paired}\n\n"
                     f"![{name}]({name}_curves.png)")
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write("\n\n".join(parts) + "\n")
    print("\n\n".join(parts))


if __name__ == "__main__":
    main()
