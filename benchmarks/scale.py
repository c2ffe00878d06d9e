"""Round cost against the federation's size C: a fixed cohort (10 clients x 5 local steps of
16 examples, FedInit, an MLP of 8,449 parameters, sequential clients) on federations of C =
1e2 .. 1e6 clients, for each place the per-client state can live (fedinit_jax.client_store):

    device  FedState's [C, ...] tables and algo.apply (donated), as the binaries run today
    host    client_store.HostStore (numpy rows, created when a client is first sampled)
    disk    client_store.DiskStore (tensorstore zarr, one chunk per row, lazily created)

Each (store, C) runs in a process of its own, so its peak RSS is its own; printed: the
set-up time (init), the median round time over --rounds rounds after one compiling round,
its ratio to the same store at C = 100 (side by side in this one run), the peak RSS and
the rows the store holds.

    python benchmarks/scale.py                     # the table of benchmarks/RESULTS.md
    python benchmarks/scale.py --sizes 100,1000 --rounds 5 --stores host   # a quick look
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, K, B, D_IN, HIDDEN = 10, 5, 16, 64, 128


def _loss(params, batch, key):
    import jax.numpy as jnp

    del key
    x, y = batch
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


def one(store: str, num_clients: int, rounds: int) -> dict:
    """One (store, C): set-up seconds, round seconds, peak RSS, rows held."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from fedinit_jax import RoundInput, Runtime, algorithms, client_store

    runtime = Runtime(execution="sequential", donate_state=store == "device")
    algo = algorithms.fedinit(_loss, runtime=runtime)
    rng = np.random.default_rng(0)
    params = {"w1": jnp.asarray(rng.normal(size=(D_IN, HIDDEN)) * 0.1, jnp.float32),
              "b1": jnp.zeros(HIDDEN, jnp.float32),
              "w2": jnp.asarray(rng.normal(size=(HIDDEN, 1)) * 0.1, jnp.float32),
              "b2": jnp.zeros(1, jnp.float32)}
    t0 = time.perf_counter()
    folder = tempfile.mkdtemp()
    if store == "device":
        state = algo.init(params, num_clients)
        jax.block_until_ready(state)
    else:
        rows = (client_store.HostStore(algo, params, num_clients) if store == "host" else
                client_store.DiskStore(algo, params, num_clients, folder))
        state = client_store.server_state(algo, params)
    init = time.perf_counter() - t0
    seconds = []
    for t in range(rounds + 1):
        r = np.random.default_rng([t])
        ids = r.choice(num_clients, N, replace=False).astype(np.int32)
        x = r.normal(size=(N, K, B, D_IN)).astype(np.float32)
        inp = RoundInput(ids, (x, x[..., :1] * 0.5), np.float32(0.05))
        key = jax.random.key(t)
        t1 = time.perf_counter()
        if store == "device":
            state, metrics = algo.apply(state, inp, key)
        else:
            state, metrics = client_store.run_round(algo, state, rows, inp, key)
        jax.block_until_ready((state.params, metrics))
        seconds.append(time.perf_counter() - t1)
    held = num_clients if store == "device" else rows.rows_held
    return {"init_s": init, "round_s": float(np.median(seconds[1:])),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rows_held": held, "params": sum(int(x.size) for x in jax.tree.leaves(params))}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,10000,100000,1000000")
    parser.add_argument("--stores", default="device,host,disk")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--device_max", type=int, default=100000,
                        help="largest C for the device tables (1e6 x 8,449 floats: 34 GB)")
    parser.add_argument("--figure", help="also draw round ms against C per store (PNG)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        store, c = args.one.split(":")
        print(json.dumps(one(store, int(c), args.rounds)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    stores = args.stores.split(",")
    if not set(stores) <= {"device", "host", "disk"} or min(sizes) < N or args.rounds < 1:
        parser.error("--stores from device,host,disk; --sizes >= 10; --rounds >= 1")
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    print(f"# scale: FedInit, cohort {N} clients x {K} steps x {B} examples, sequential; "
          f"{time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| store | C | params | init s | round ms | vs C=100 | peak RSS MiB | rows held |")
    print("|---|---|---|---|---|---|---|---|")
    measured = {}  # store -> [(C, round ms)]
    for store in stores:
        base = None
        for c in sizes:
            if store == "device" and c > args.device_max:
                print(f"| {store} | {c:,} | | | not run: {c:,} rows of 8,449 floats "
                      f"({c * 8449 * 4 / 2**30:.0f} GiB per table) | | | |")
                continue
            out = subprocess.run([sys.executable, __file__, "--one", f"{store}:{c}",
                                  "--rounds", str(args.rounds)], cwd=ROOT, env=env,
                                 capture_output=True, text=True)
            if out.returncode:
                print(f"| {store} | {c:,} | failed: {out.stderr.strip().splitlines()[-1]} |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            measured.setdefault(store, []).append((c, 1e3 * r["round_s"]))
            base = base or r["round_s"]
            print(f"| {store} | {c:,} | {r['params']:,} | {r['init_s']:.2f} | "
                  f"{1e3 * r['round_s']:.2f} | {r['round_s'] / base:.2f}x | "
                  f"{r['peak_rss_mib']:.0f} | {r['rows_held']:,} |", flush=True)
    if args.figure:
        _figure(measured, args.figure)


def _figure(measured, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for store, points in measured.items():
        ax.plot(*zip(*points), marker="o", label=store)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("clients in the federation, C")
    ax.set_ylabel("round time, ms (median)")
    ax.set_title(f"one round of {N} clients x {K} steps (FedInit)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
