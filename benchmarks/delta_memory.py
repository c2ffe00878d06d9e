"""Host memory of a lazy client store's checkpoint and resume (fedinit_jax/deltas.py) for
wide rows: the Shakespeare LSTM's w_i and c_i (SCAFFOLD), 2 x 820,522 float32 = 6.6 MB a
client, where a checkpoint after 100 rounds of 10 clients holds ~600 of them (4 GB).

Each case runs in a fresh process on a HostStore holding H such rows, all written since the
last checkpoint, and reports the peak resident memory above the store (VmHWM reset through
/proc/self/clear_refs just before):
  * streamed: store.checkpoint(t), the library's delta write (one block of rows at a time);
  * whole: the same rows gathered and np.savez-ed into memory, then written (a delta held
    whole, as the store wrote it before streaming);
  * restore: a new store object rebuilt from that delta (the rows come back into host
    memory, so the table's own size is the floor).

    python benchmarks/delta_memory.py [--rows 120]
"""
import argparse
import io
import multiprocessing
import os
import tempfile

import numpy as np

WIDTH = 820_522  # the Shakespeare LSTM's parameters (experiments/configs/shakespeare.py)


def _rss(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS


def _store(rows: int, folder: str):
    import jax.numpy as jnp

    from fedinit_jax import algorithms, client_store

    def loss(params, batch, key):
        del batch, key
        return jnp.sum(params["w"])

    algo = algorithms.scaffold(loss)
    store = client_store.HostStore(algo, {"w": jnp.zeros((WIDTH,), jnp.float32)}, rows)
    store.attach(folder)
    return store


def _case(mode: str, rows: int, folder: str, queue) -> None:
    import jax

    from fedinit_jax.client_store import deltas

    store = _store(rows, folder)
    if mode == "restore":
        manifest = {"format": deltas.FORMAT, "rows_held": rows,
                    "deltas": [deltas.describe(folder, deltas.delta_name(1))]}
        base = _rss("VmRSS")
        _reset_peak()
        store.restore(1, manifest)
        queue.put((mode, _rss("VmHWM") - base, sum(p.nbytes for p in store.pages)))
        return
    ids = np.arange(rows)
    rng = np.random.default_rng(0)
    for start in range(0, rows, 10):  # ten clients a round
        some = ids[start:start + 10]
        fresh = jax.tree.map(lambda x: rng.normal(size=x.shape).astype(np.float32),
                             store.gather(some)._replace(client_visited=None))
        store.scatter(some, fresh)
    base = _rss("VmRSS")
    _reset_peak()
    if mode == "streamed":
        store.checkpoint(1)
    else:
        buffer = io.BytesIO()
        np.savez(buffer, ids=ids, rows=store._read_flat(ids)[0], dtype=np.array("float32"))
        with open(os.path.join(folder, "whole.npy"), "wb") as f:
            f.write(buffer.getvalue())
    queue.put((mode, _rss("VmHWM") - base, rows * store.layout.width * 4))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=120)
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        print(f"H = {args.rows} rows of {2 * WIDTH:,} float32 "
              f"({args.rows * 2 * WIDTH * 4 / 2**30:.2f} GiB)")
        print("| case | peak above the store (GiB) | x the delta's size |")
        print("|---|---|---|")
        for mode in ("streamed", "whole", "restore"):
            queue = context.Queue()
            child = context.Process(target=_case, args=(mode, args.rows, folder, queue))
            child.start()
            name, peak, delta = queue.get()
            child.join()
            print(f"| {name} | {peak / 2**30:.2f} | {peak / delta:.2f} |", flush=True)


if __name__ == "__main__":
    main()
