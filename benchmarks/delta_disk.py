"""Disk held by a lazy client store's record (fedinit_jax/deltas.py) over a long run,
with and without compaction, for the Shakespeare paper preset's visits: 1,108 clients, 10
drawn uniformly a round, a checkpoint every 100 rounds, the newest 2 kept (the binaries'
default), 1,200 rounds.

Rows are narrow here (WIDTH float32), since the record's size is rows x row bytes: the table
gives it in multiples of the rows held (the size of one snapshot), which is the same for
the LSTM's 6.6 MB SCAFFOLD rows. No training: each round writes random rows for the drawn
ids, as a round's scatter does; each checkpoint writes its delta (or snapshot), keeps the
manifests of the 2 newest checkpoints, and deletes the deltas neither names, as the
binaries' checkpoint does (simulation._checkpoint).

    python benchmarks/delta_disk.py [--rounds 1200] [--every 100]
"""
import argparse
import math
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from fedinit_jax import client_store
from fedinit_jax.algorithms import fedavg
from fedinit_jax.client_store import deltas

WIDTH = 256


def record(compact_after: float, args) -> list[tuple[int, int, int]]:
    """[(round, bytes of the record's deltas, rows held)] after each checkpoint."""
    deltas.COMPACT_AFTER = compact_after
    algo = fedavg(lambda p, b: jnp.sum(p["w"]) * 0.0)
    rng = np.random.default_rng(0)
    out = []
    with tempfile.TemporaryDirectory() as folder:
        store = client_store.HostStore(algo, {"w": np.zeros(WIDTH, np.float32)}, args.clients)
        store.attach(folder)
        template = jax.tree.map(lambda x: x[:args.per_round],
                                store.gather(np.arange(args.per_round)))
        kept = []
        for t in range(1, args.rounds + 1):
            ids = np.sort(rng.choice(args.clients, args.per_round, replace=False))
            values = rng.normal(size=(args.per_round, WIDTH)).astype(np.float32)
            store.scatter(ids, template._replace(ri_rows={"w": values}))
            if t % args.every == 0:
                kept = [*kept, store.checkpoint(t)][-args.keep:]
                store.committed(t)
                deltas.remove_unreferenced(folder, kept)
                size = sum(os.path.getsize(os.path.join(folder, deltas.delta_name(r)))
                           for r in deltas.delta_rounds(folder))
                out.append((t, size, store.rows_held))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1108)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1200)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--keep", type=int, default=2)
    args = parser.parse_args()
    default = deltas.COMPACT_AFTER
    plain, compacted = record(math.inf, args), record(default, args)
    row = WIDTH * 4
    print(f"C={args.clients}, {args.per_round} a round, a checkpoint every {args.every} rounds, "
          f"{args.keep} kept; the record in rows held (one snapshot's size)\n")
    print(f"| round | rows held | record, no compaction | record, COMPACT_AFTER={default} |")
    print("|---|---|---|---|")
    for (t, a, held), (_, b, _) in zip(plain, compacted):
        print(f"| {t} | {held} | {a / (held * row):.2f}x | {b / (held * row):.2f}x |")


if __name__ == "__main__":
    main()
