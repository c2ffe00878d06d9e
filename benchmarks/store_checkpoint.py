"""The cost of a client store's durable record (fedinit_jax/deltas.py): a checkpoint
writes the rows changed since the previous one (a delta, its sha256 in the manifest), and a
resume verifies every delta and rebuilds (host) or repairs (disk) the rows from their fold.

For C = 10^6 clients with rows of 8,449 floats (the MLP of benchmarks/scale.py), it fills a
store with H rows (H = 1,000 and 10,000, side by side in this run), then times:
  * a checkpoint after 10 rounds of 10 new rows (100 rows changed): should not grow with H;
  * restore(t, manifest) in a new store object (a resumed run), after 5 more rounds written
    past the checkpoint (the working copy holds rows the checkpoint does not): grows with H
    (it reads every delta and, on disk, every held row), paid once per resume.

    python benchmarks/store_checkpoint.py            # the table of benchmarks/RESULTS.md
"""
import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

WIDTH = 8449
C = 1_000_000


def _algo_and_params():
    import jax.numpy as jnp

    from fedinit_jax import algorithms

    def loss(params, batch, key):
        del batch, key
        return jnp.sum(params["w"])

    return algorithms.fedinit(loss), {"w": jnp.zeros((WIDTH,), jnp.float32)}


def _store(kind, algo, params, folder):
    from fedinit_jax import client_store

    if kind == "host":
        store = client_store.HostStore(algo, params, C)
    else:
        store = client_store.DiskStore(algo, params, C, os.path.join(folder, "zarr"),
                                       working_copy=True)
    store.attach(os.path.join(folder, "record"))
    return store


def _write(store, rng, ids):
    from fedinit_jax.federated_round import Cohort

    store.scatter(ids, Cohort({"w": rng.normal(size=(ids.size, WIDTH)).astype(np.float32)},
                              (), np.ones(ids.size, bool)))


def one(kind: str, held: int, repeats: int) -> dict:
    algo, params = _algo_and_params()
    rng = np.random.default_rng(0)
    checkpoints, restores = [], []
    for _ in range(repeats):
        folder = tempfile.mkdtemp(prefix="store_ckpt_")
        try:
            store = _store(kind, algo, params, folder)
            ids = rng.choice(C, held, replace=False)
            for start in range(0, held, 1000):
                _write(store, rng, ids[start:start + 1000])
            store.checkpoint(1)
            store.committed(1)
            for _ in range(10):  # 10 rounds of 10 clients
                _write(store, rng, rng.choice(C, 10, replace=False))
            t0 = time.perf_counter()
            manifest = store.checkpoint(2)
            checkpoints.append(time.perf_counter() - t0)
            store.committed(2)
            for _ in range(5):  # written after the checkpoint, then a kill
                _write(store, rng, rng.choice(C, 10, replace=False))
            again = _store(kind, algo, params, folder)
            t0 = time.perf_counter()
            again.restore(2, manifest)
            restores.append(time.perf_counter() - t0)
            assert again.rows_held == manifest["rows_held"]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return {"checkpoint": statistics.median(checkpoints), "restore": statistics.median(restores)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held", default="1000,10000")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(x) for x in args.held.split(",")]
    print("| store | rows held H | checkpoint of 100 changed rows, ms | vs smallest H | "
          "restore (resume), s | vs smallest H |")
    print("|---|---|---|---|---|---|")
    for kind in ("host", "disk"):
        rows = {h: one(kind, h, args.repeats) for h in sizes}
        base = rows[sizes[0]]
        for h, r in rows.items():
            print(f"| {kind} | {h:,} | {1e3 * r['checkpoint']:.1f} | "
                  f"{r['checkpoint'] / base['checkpoint']:.2f}x | {r['restore']:.2f} | "
                  f"{r['restore'] / base['restore']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
