"""The runtime matrix: every registered algorithm under every runtime option, on 1 to 8 devices,
against sequential clients on one device (tests/test_runtime_matrix.py runs it).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/runtime_matrix.py 0/1
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/runtime_matrix.py binaries DIR

The options (OPTIONS) and what each case must equal: the same algorithm with the same round
inputs run with execution="sequential", num_devices=1, donate_state=False and the case's
client_state_dtype; state and metrics after two rounds to float32 rounding (bf16 storage: to
bf16's). The full product (12 algorithms x 3 x 4 x 2^5 = 4,608 cases) is too large for CI, so
`cases()` is a covering array: every pair of option values meets in at least one case, and
every algorithm runs on all four device counts, two under fixed and two under Bernoulli
participation. The federation: C = 24 clients of linear regression, N = 16 slots per round
(Bernoulli: a mask with 5 to 13 real slots), K = 3 steps of 4 examples; chunked runs 3
clients at a time, which divides no device's share but the 8-device one's (2 clients).
"""
import itertools
import json
import os
import sys

import numpy as np

DEVICE_COUNTS = (1, 2, 4, 8)
NUM_CLIENTS, SLOTS, STEPS, BATCH, DIM, CHUNK = 24, 16, 3, 4, 3, 3


def options():
    """Each option of the runtime matrix and its values (algorithms from the registry)."""
    from fedinit_jax import algorithms

    return {"algorithm": tuple(algorithms.REGISTRY),
            "execution": ("vmap", "sequential", "chunked"),
            "devices": DEVICE_COUNTS,
            "participation": ("fixed", "bernoulli"),
            "step_mask": (False, True),
            "weights": (False, True),
            "dtype": ("float32", "bfloat16"),
            "donate": (False, True)}


def _pairs(case, names):
    return {((a, case[a]), (b, case[b])) for a, b in itertools.combinations(names, 2)}


DATA_OPTIONS = ("participation", "step_mask", "weights", "dtype")  # what a reference depends on


def cases(opts=None):
    """A covering array over opts (a list of {option: value}), deterministic.

    Seeded with one case per (algorithm, device count), participation alternating, so that
    each algorithm meets both modes on two device counts each; the two cases of an
    (algorithm, participation) share their data options (one reference run serves both).
    Options are filled greedily (the value covering most pairs not yet covered), then cases
    are added until every pair of values has met."""
    opts = opts or options()
    names = list(opts)
    uncovered = set()
    for a, b in itertools.combinations(names, 2):
        uncovered |= {((a, x), (b, y)) for x in opts[a] for y in opts[b]}
    rows = []

    def gain(group, name, value):  # pairs not yet covered that value would cover
        return sum(((n, v), (name, value)) in uncovered or ((name, value), (n, v)) in uncovered
                   for case in group for n, v in case.items() if n != name)

    def fill(group, order):
        for name in order:
            if name not in group[0]:  # the first of the best values: deterministic
                value = max(opts[name], key=lambda v: gain(group, name, v))  # noqa: B023
                for case in group:
                    case[name] = value
        for case in group:
            uncovered.difference_update(_pairs(case, names))
            rows.append(case)

    data_first = [n for n in names if n in DATA_OPTIONS] + [n for n in names
                                                            if n not in DATA_OPTIONS]
    for i, algorithm in enumerate(opts["algorithm"]):
        for mode in (0, 1):
            devices = [d for j, d in enumerate(opts["devices"]) if (i + j) % 2 == mode]
            group = [{"algorithm": algorithm, "participation": opts["participation"][mode],
                      "devices": d} for d in devices]
            fill(group[:1], data_first)  # data options for the pair, chosen on the first
            group[1].update({k: group[0][k] for k in DATA_OPTIONS})
            rows.pop()
            for case in group:
                fill([case], names)
    while uncovered:
        (a, x), (b, y) = min(uncovered, key=lambda p: (names.index(p[0][0]), str(p)))
        fill([{a: x, b: y}], names)
    return rows


def round_inputs(case, seed=0):
    """Two rounds of the case's data options (the same for the case and its reference)."""
    from fedinit_jax.types import RoundInput

    rng = np.random.default_rng(seed)
    true_w = rng.normal(size=(NUM_CLIENTS, DIM))
    sizes = rng.integers(10, 100, NUM_CLIENTS).astype(np.float32)
    rounds = []
    for _ in range(2):
        if case["participation"] == "bernoulli":
            real = int(rng.integers(5, 14))
            ids = np.zeros(SLOTS, np.int32)
            ids[:real] = np.sort(rng.choice(NUM_CLIENTS, real, replace=False))
            mask = np.arange(SLOTS) < real
            rng.shuffle(perm := np.arange(SLOTS))  # padded slots anywhere, not only at the end
            ids, mask = ids[perm], mask[perm]
        else:
            ids, mask = np.sort(rng.choice(NUM_CLIENTS, SLOTS, replace=False)).astype(np.int32), None
        xs = rng.normal(size=(SLOTS, STEPS, BATCH, DIM)).astype(np.float32)
        ys = (np.einsum("nkbd,nd->nkb", xs, true_w[ids]) + 0.5).astype(np.float32)
        step_mask = None
        if case["step_mask"]:
            step_mask = rng.random((SLOTS, STEPS)) < 0.6
            step_mask[:, 0] = True  # every client keeps >= 1 real step
        weights = sizes[ids] if case["weights"] else None
        rounds.append(RoundInput(ids, (xs, ys), np.float32(0.05), mask, step_mask, weights))
    return rounds


def _loss(params, batch, key):
    import jax.numpy as jnp

    del key
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def run_case(case, runtime):
    """(state leaves as float32 numpy, metrics per round) of two rounds under `runtime`."""
    import jax
    import jax.numpy as jnp

    from fedinit_jax import algorithms, with_runtime

    # FedAdam + RI: the authors' aggregation (its server optimizer refuses `global`)
    start = {"delta_from": "start"} if case["algorithm"] in ("fedadam", "fedyogi", "fedavgm") else {}
    algo = with_runtime(algorithms.get(case["algorithm"], _loss, beta=0.1, **start), **runtime)
    state = algo.init({"w": jnp.asarray([0.3, -0.2, 0.1]), "b": jnp.asarray(0.05)}, NUM_CLIENTS)
    history = []
    for t, inp in enumerate(round_inputs(case)):
        state, metrics = algo.apply(state, inp, jax.random.fold_in(jax.random.key(1), t))
        history.append({k: float(v) for k, v in metrics.items()})
    return [np.asarray(x, np.float32) for x in jax.tree.leaves(state)], history


def runtime_of(case):
    return {"execution": case["execution"], "num_devices": case["devices"],
            "chunk_size": CHUNK if case["execution"] == "chunked" else None,
            "client_state_dtype": case["dtype"], "donate_state": case["donate"]}


def compare(case, got, want):
    """'' when the case equals its reference, else what differs."""
    rtol, atol = (2e-2, 2e-3) if case["dtype"] == "bfloat16" else (2e-5, 2e-6)
    for i, (a, b) in enumerate(zip(got[0], want[0])):
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol):
            return f"state leaf {i}: max |diff| {np.max(np.abs(a - b)):.3g}"
    for t, (a, b) in enumerate(zip(got[1], want[1])):
        for k in b:
            if not np.isclose(a[k], b[k], rtol=rtol, atol=atol):
                return f"round {t + 1} {k}: {a[k]} vs {b[k]}"
    return ""


def binaries(folder):
    """The binaries' run loop (simulation.run) with Bernoulli participation and vmapped
    clients on 2 and 4 devices: the default config (digits) and Shakespeare (plays
    written here, masked epochs). Prints {"<dataset> <devices>": metrics rows}."""
    from conftest import QUIET, planned_run, quiet_config, write_plays


    runs = {}
    bernoulli = {"participation_mode": "bernoulli", "execution": "vmap", "rounds": 2,
                 "eval_every": 2, "checkpoint_every": 0}
    texts = write_plays(os.path.join(folder, "texts"), 3)
    configs = {
        "digits": quiet_config(**bernoulli, num_clients=8, participation=0.5),
        "shakespeare": quiet_config(**bernoulli, dataset="shakespeare", model="lstm",
                                    data_dir=texts, num_clients=6, participation=0.5,
                                    batch_size=2, local_lr=1.0, weight_decay=0.0,
                                    clip_norm=0.0, local_steps=0)}
    for name, config in configs.items():
        for devices in (2, 4):
            rows = planned_run({**config, "num_devices": devices},
                                  os.path.join(folder, f"{name}-{devices}"), **QUIET)
            runs[f"{name} {devices}"] = [{k: v for k, v in r.items() if "seconds" not in k}
                                         for r in rows]
    print(json.dumps(runs))


def reference_key(case) -> tuple:
    """What a case's reference run depends on: cases with one key share one reference."""
    return tuple(case[k] for k in ("algorithm", *DATA_OPTIONS))


def shard_cases(index: int, count: int) -> list:
    """Shard index/count of the cases, whole reference groups to a shard (a reference is
    compiled and run once)."""
    keys = list(dict.fromkeys(reference_key(case) for case in cases()))
    mine = set(keys[index::count])
    return [case for case in cases() if reference_key(case) in mine]


def main(shard: str):
    """Run shard i/n of the cases; print one JSON line: {"ran": count, "failures": [...]}."""
    index, count = (int(v) for v in shard.split("/"))
    references, failures, ran = {}, [], 0
    for case in shard_cases(index, count):
        key = reference_key(case)
        if key not in references:
            references[key] = run_case(case, {"execution": "sequential",
                                              "client_state_dtype": case["dtype"]})
        try:
            why = compare(case, run_case(case, runtime_of(case)), references[key])
        except Exception as err:  # noqa: BLE001 - a crash is a failure of the case, reported
            why = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        ran += 1
        if why:
            failures.append({"case": case, "why": why})
    print(json.dumps({"ran": ran, "failures": failures}))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if sys.argv[1] == "binaries":
        binaries(sys.argv[2])
    else:
        main(sys.argv[1])
