"""The paper's headline cell on one accelerator: FedAvg and FedInit, ResNet-18-GN, the real
CIFAR-10, Dir-0.1 over 100 clients, 10 a round, 500 rounds (Table 4: 72.53 vs 75.95), three
seeds run as replicas of one program (fedinit_jax.replicas), written as a user's own script
over the library's API.

    # where TFDS and ../shared/tfds are: the decoded data in pieces of at most --piece-mib
    .venv/bin/python -m experiments.headline pack /tmp/headline_data
    # on the accelerator: the pieces checked by sha256, then both methods (resumable)
    python -m experiments.headline run --data /tmp/headline_data --out /tmp/headline
    # every step at tiny scale on the CPU (digits, an MLP, 3 rounds)
    .venv/bin/python -m experiments.headline dry-run /tmp/headline_dry

`pack` writes <dir>/<array>.<i>.npy pieces (train_x in 5, the rest in one each at the default
36 MiB) and manifest.json (each piece's bytes and sha256), so a machine without TFDS or
internet receives the real CIFAR-10 one piece per transfer, each in a folder of its own that
git ignores (.git/info/exclude) and the transfer names; `run` refuses a missing or changed
piece in one line before any compute. The
settings are experiments/configs/paper.py's cifar10-resnet18_gn-dir0.1-10-100 (5 local epochs
of batches of 50, local lr 0.1 x 0.998^t, weight decay 1e-3, clip 10, flip and crop,
delta_from="start", the authors' code) but for participation: N = 10 of 100 clients a round,
Algorithm 1 line 4, where the authors' code draws each client with probability 0.1 (its
static bound pads the round to ~22 slots, which vmapped clients would all compute). Each
method's rows go to <out>/<method>.jsonl (round, seed, test accuracy, train loss, seconds),
its replicas' state to <out>/<method>.ckpt.npz every --checkpoint-every rounds; a rerun
resumes there exactly (every round's clients, batches and key come from (seed, round)).
"""
import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedinit_jax import RoundInput, algorithms, data, losses, models, replicas
from fedinit_jax.client_store.deltas import sha256

__all__ = ["METHODS", "SETTINGS", "pack", "load", "run", "main"]

METHODS = {"fedavg": 0.0, "fedinit": 0.1}  # name: beta (Table 4's FedAvg and FedInit)
SETTINGS = dict(num_clients=100, clients_per_round=10, dirichlet_alpha=0.1, local_epochs=5,
                batch_size=50, local_lr=0.1, lr_decay=0.998, weight_decay=1e-3, clip_norm=10.0,
                delta_from="start", rounds=500, seeds=(0, 1, 2), model="resnet18_gn")
CIFAR10_STATS = ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616])


def pack(out: str, arrays: dict, piece_bytes: int = 60 << 20) -> dict:
    """Write each array as .npy pieces of at most piece_bytes (and one row) along its first
    axis and out/manifest.json ({array: [{file, bytes, sha256, rows}]}); returns the
    manifest."""
    os.makedirs(out, exist_ok=True)
    manifest = {}
    for name, array in arrays.items():
        rows = max(1, piece_bytes // max(1, array[:1].nbytes))
        manifest[name] = []
        for i, start in enumerate(range(0, len(array), rows)):
            path = os.path.join(out, f"{name}.{i}.npy")
            np.save(path, array[start:start + rows])
            manifest[name].append({"file": os.path.basename(path),
                                   "bytes": os.path.getsize(path), "sha256": sha256(path),
                                   "rows": int(len(array[start:start + rows]))})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def _find(folders: list, name: str) -> str:
    found = [os.path.join(f, name) for f in folders if os.path.exists(os.path.join(f, name))]
    if not found:
        raise ValueError(f"{name} is in none of {', '.join(folders)}: copy every piece "
                         "manifest.json names")
    return found[0]


def load(folders) -> dict:
    """The arrays packed into one folder or spread over several (a list, or one path), every
    piece checked against manifest.json first; ValueError naming the first piece missing or
    changed."""
    folders = [folders] if isinstance(folders, str) else list(folders)
    with open(_find(folders, "manifest.json")) as f:
        manifest = json.load(f)
    paths = {}
    for pieces in manifest.values():
        for piece in pieces:
            path = paths[piece["file"]] = _find(folders, piece["file"])
            if os.path.getsize(path) != piece["bytes"] or sha256(path) != piece["sha256"]:
                raise ValueError(f"{path} differs from manifest.json (size or sha256): copy "
                                 "it again")
    return {name: np.concatenate([np.load(paths[p["file"]]) for p in pieces])
            for name, pieces in manifest.items()}


def _rows(path):
    """The rows a method's log holds; a last line cut by a kill (no newline) is dropped."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def run(arrays: dict, out: str, method: str, settings: dict, eval_every: int,
        checkpoint_every: int, log=print) -> list:
    """Train the method's replicas (one per seed) to settings["rounds"], resuming from
    <out>/<method>.ckpt.npz; returns its rows."""
    s = settings
    seeds, clients, per_round = list(s["seeds"]), s["num_clients"], s["clients_per_round"]
    train_x, train_y = arrays["train_x"], arrays["train_y"].astype(np.int32)
    num_classes = int(train_y.max()) + 1
    stats = CIFAR10_STATS if train_x.shape[-1] == 3 else ([0.5], [0.25])
    net = models.get(s["model"], num_classes, execution="vmap")  # the round vmaps its clients
    loss_fn = losses.classification_loss(net.apply, *stats, augment=train_x.shape[1] >= 32)
    evaluate = losses.make_evaluator(net.apply, arrays["test_x"], arrays["test_y"], *stats)
    algo = algorithms.fedinit(loss_fn, beta=METHODS[method], delta_from=s["delta_from"],
                              weight_decay=s["weight_decay"], clip_norm=s["clip_norm"])
    shards = [data.build_shards(train_x, train_y,
                                data.dirichlet(train_y, clients, s["dirichlet_alpha"], seed),
                                num_classes=num_classes, seed=seed) for seed in seeds]
    params = jax.tree.map(lambda *p: jnp.stack(p), *[
        net.init(jax.random.key(seed), train_x.shape[1:]) for seed in seeds])
    states = replicas.init(algo, params, clients, num_replicas=len(seeds),
                           params_per_replica=True)
    apply = replicas.make_apply(algo, shared_input=False)
    os.makedirs(out, exist_ok=True)
    ckpt, log_path = os.path.join(out, f"{method}.ckpt.npz"), os.path.join(out, f"{method}.jsonl")
    start = 0
    if os.path.exists(ckpt):
        with np.load(ckpt) as saved:
            start = int(saved["round"])
            states = jax.tree.unflatten(jax.tree.structure(states), [
                jnp.asarray(saved[f"leaf{i}"]) for i in range(len(jax.tree.leaves(states)))])
        log(f"{method}: resumed after round {start}")
    rows = [r for r in _rows(log_path) if r["round"] <= start]
    with open(log_path, "w") as f:  # the rows up to the checkpoint: a rerun appends the rest
        f.writelines(json.dumps(r) + "\n" for r in rows)
    for t in range(start, s["rounds"]):
        began = time.perf_counter()
        rngs = [data.round_rng(seed, t) for seed in seeds]
        ids = [data.sample_clients(rng, clients, per_round) for rng in rngs]
        batches = [data.round_batches(shard, i, epochs=s["local_epochs"],
                                      batch_size=s["batch_size"], rng=rng)
                   for shard, i, rng in zip(shards, ids, rngs)]
        stacked = jax.tree.map(lambda *b: np.stack(b), *batches)
        lr = np.full(len(seeds), s["local_lr"] * s["lr_decay"] ** t, np.float32)
        keys = jnp.stack([jax.random.fold_in(jax.random.key(seed), t) for seed in seeds])
        states, metrics = apply(states, RoundInput(np.stack(ids), stacked, lr), keys)
        losses_ = np.asarray(metrics["train_loss"])
        done = t + 1
        new = []
        for r, seed in enumerate(seeds):
            row = {"round": done, "seed": seed, "train_loss": float(losses_[r]),
                   "seconds": time.perf_counter() - began}
            if done % eval_every == 0 or done == s["rounds"]:
                params_r = jax.tree.map(lambda x, r=r: x[r], states.params)
                row.update({k: float(v) for k, v in evaluate(params_r).items()})
            new.append(row)
        with open(log_path, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in new)
        rows += new
        if "test_accuracy" in new[0]:
            log(f"{method} round {done}: test accuracy "
                + " ".join(f"{r['test_accuracy']:.4f}" for r in new))
        if done % checkpoint_every == 0 or done == s["rounds"]:
            leaves = {f"leaf{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(states))}
            np.savez(ckpt + ".tmp.npz", round=done, **leaves)
            os.replace(ckpt + ".tmp.npz", ckpt)
    return rows


def summary(rows: list, last: int) -> dict:
    """{seed: the mean test accuracy of the evaluations in the last `last` rounds}."""
    end = max(r["round"] for r in rows)
    out = {}
    for r in rows:
        if "test_accuracy" in r and r["round"] > end - last:
            out.setdefault(r["seed"], []).append(r["test_accuracy"])
    return {seed: float(np.mean(v)) for seed, v in out.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("pack", "run", "dry-run"))
    parser.add_argument("folder", nargs="?", help="pack / dry-run: the output folder")
    parser.add_argument("--data", help="run: the packed folder, or its folders comma-separated")
    parser.add_argument("--out", help="run: where rows, checkpoints and summary.json go")
    parser.add_argument("--piece-mib", type=int, default=36,
                        help="pack: the largest piece (a transfer that also carries the "
                             "working tree, ~23 MB, at most 64 MiB)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args(argv)
    settings, out = dict(SETTINGS), args.out
    if args.command == "pack":
        arrays = {}
        for split in ("train", "test"):
            x, y, _ = data.load("cifar10", split)
            arrays.update({f"{split}_x": x, f"{split}_y": y})
        pack(args.folder, arrays, args.piece_mib << 20)
        print(f"packed into {args.folder}: manifest.json and "
              f"{len(os.listdir(args.folder)) - 1} pieces")
        return 0
    if args.command == "dry-run":  # every step, tiny: digits, an MLP, a few rounds
        x, y, _ = data.load_digits("train")
        tx, ty, _ = data.load_digits("test")
        pack(os.path.join(args.folder, "data"), {"train_x": x, "train_y": y, "test_x": tx,
                                                 "test_y": ty}, 32 << 10)
        args.data, out = os.path.join(args.folder, "data"), os.path.join(args.folder, "out")
        settings.update(num_clients=10, clients_per_round=2, local_epochs=1, batch_size=16,
                        rounds=3, model="mlp")
        args.eval_every, args.checkpoint_every = 1, 2
    try:
        arrays = load(args.data.split(","))
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    results = {}
    for method in args.methods.split(","):
        rows = run(arrays, out, method, settings, args.eval_every, args.checkpoint_every)
        results[method] = summary(rows, last=50)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"settings": {k: list(v) if isinstance(v, tuple) else v
                                for k, v in settings.items()},
                   "final_test_accuracy_last_50_rounds": results,
                   "device": jax.devices()[0].device_kind}, f, indent=2)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
