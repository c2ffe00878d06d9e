"""The CPU Shakespeare study's mean test-accuracy curves -> docs/shakespeare_curves.png, and
both accuracies (test_accuracy, test_accuracy_in_vocab) at the last round, mean +- sample std.

    .venv/bin/python studies/shakespeare_cpu/plot_curves.py   (from the repository root)
"""
import glob
import json
import os
import sys

import matplotlib
import numpy as np

sys.path.insert(0, os.getcwd())  # the repository root: experiments/ is not installed
from experiments.figures import legend_outside, plot_line, styles  # noqa: E402
from experiments.results import sample_std  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GROUPS = {"FedAvg": "fedavg-roles-beta0-E1-global",
          "FedInit": "fedinit-roles-beta0.1-E1-global",
          "FedInit [start]": "fedinit-roles-beta0.1-E1-start",
          "SCAFFOLD": "scaffold-roles-beta0-E1-global",
          "SCAFFOLD+RI": "scaffold-roles-beta0.1-E1-global"}

def curves(prefix, field):
    """(rounds, [seeds, evaluations] in %) of `field` over the seeds of one method."""
    runs = []
    for folder in sorted(glob.glob(f"studies/shakespeare_cpu/{prefix}-s*")):
        with open(os.path.join(folder, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        runs.append([(r["round"], r[field]) for r in rows if field in r])
    return [r for r, _ in runs[0]], 100 * np.array([[a for _, a in run] for run in runs])


fig, ax = plt.subplots(figsize=(7, 4))
look = styles(GROUPS)
for name, prefix in GROUPS.items():
    for field in ("test_accuracy", "test_accuracy_in_vocab"):
        rounds, c = curves(prefix, field)
        print(f"{name}: {field} round {rounds[-1]} {c[:, -1].mean():.2f} +- "
              f"{sample_std(c[:, -1]):.2f} (n={len(c)})")
    rounds, c = curves(prefix, "test_accuracy")
    plot_line(ax, rounds, c.mean(0), look[name], f"{name} (n={len(c)})")
    if len(c) >= 3:
        ax.fill_between(rounds, c.min(0), c.max(0), alpha=0.2, color=look[name]["color"])
ax.set_xlabel("round")
ax.set_ylabel("test accuracy (%)")
legend_outside(ax, 8)
ax.grid(alpha=0.3)
ax.set_title(f"Shakespeare (LSTM, CPU preset): 100 roles, 10 per round, K = 10 x 4 windows, "
             f"{rounds[-1]} rounds\nmean over seeds, band min-max", fontsize=9)
fig.savefig("docs/shakespeare_curves.png", dpi=100, bbox_inches="tight")
