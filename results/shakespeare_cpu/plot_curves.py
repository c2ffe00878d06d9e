"""The CPU Shakespeare study's mean test-accuracy curves -> docs/shakespeare_curves.png.

    .venv/bin/python results/shakespeare_cpu/plot_curves.py   (from the repository root)
"""
import glob
import json
import os

import matplotlib
import numpy as np

from experiments.results import sample_std

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GROUPS = {"FedAvg": "fedavg-roles-betadefault-E1-global",
          "FedInit": "fedinit-roles-betadefault-E1-global",
          "FedInit [start]": "fedinit-roles-betadefault-E1-start",
          "SCAFFOLD": "scaffold-roles-beta0-E1-global",
          "SCAFFOLD+RI": "scaffold-roles-beta0.1-E1-global"}

fig, ax = plt.subplots(figsize=(7, 4))
for name, prefix in GROUPS.items():
    curves = []
    for folder in sorted(glob.glob(f"results/shakespeare_cpu/{prefix}-s*")):
        with open(os.path.join(folder, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        points = [(r["round"], r["test_accuracy"]) for r in rows if "test_accuracy" in r]
        rounds = [r for r, _ in points]
        curves.append([a for _, a in points])
    c = 100 * np.array(curves)
    print(f"{name}: round {rounds[-1]} {c[:, -1].mean():.2f} +- {sample_std(c[:, -1]):.2f} "
          f"(n={len(c)})")
    ax.plot(rounds, c.mean(0), label=name)
    ax.fill_between(rounds, c.min(0), c.max(0), alpha=0.2)
ax.set_xlabel("round")
ax.set_ylabel("test accuracy (%), in vocabulary")
ax.legend()
ax.grid(alpha=0.3)
ax.set_title("Shakespeare, CPU preset: 100 roles, 10 per round, K = 10 x 4 windows")
fig.tight_layout()
fig.savefig("docs/shakespeare_curves.png", dpi=100)
