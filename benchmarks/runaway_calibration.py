"""The runaway rule (fedinit_jax.experiment.stopping.runaway) on every committed run.

For each studies/**/runs/metrics.jsonl: its rows / config.rounds, the round where the rule meets
its recorded train losses (or -), and the round where the rule before it (100x the lowest
loss for 5 rounds) did. A run that reached config.rounds must read "-".

    .venv/bin/python benchmarks/runaway_calibration.py
"""
import glob
import json
import os

from fedinit_jax.experiment import stopping

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lowest_times_100(rows, factor=100.0, k=5):
    """The rule before: each of the last k losses above factor x the lowest before it."""
    losses = [r["train_loss"] for r in rows]
    n = len(losses)
    return n > k and all(losses[i] > factor * min(losses[:i]) for i in range(n - k, n))


def first(rule, rows):
    return next((n for n in range(1, len(rows) + 1) if rule(rows[:n])), None)


def main():
    runs = sorted(glob.glob(os.path.join(ROOT, "studies", "**", "metrics.jsonl"),
                            recursive=True))
    finished_hit, stopped = [], []
    print("| run | rows / rounds | today's rule | the rule before |\n|---|---|---|---|")
    for path in runs:
        rows = [json.loads(line) for line in open(path) if line.strip()]
        config = os.path.join(os.path.dirname(path), "config.json")
        rounds = json.load(open(config))["rounds"] if os.path.exists(config) else len(rows)
        today, before = first(stopping.runaway, rows), first(lowest_times_100, rows)
        if today and len(rows) >= rounds:
            finished_hit.append(path)
        if before:
            stopped.append((today, before))
        if today or before:
            name = os.path.relpath(os.path.dirname(path), os.path.join(ROOT, "studies"))
            print(f"| {name} | {len(rows)} / {rounds} | {today or '-'} | {before or '-'} |")
    gaps = [b - t for t, b in stopped if t]
    print(f"\n{len(runs)} runs; finished runs the rule meets: {len(finished_hit)}; runs the rule "
          f"before stopped: {len(stopped)}, today's meets {len(gaps)} of them, "
          f"{min(gaps)}-{max(gaps)} rounds earlier")


if __name__ == "__main__":
    main()
