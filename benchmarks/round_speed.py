"""Round speed, side by side in one process: client strategies, conv formulations, devices,
a naive per-step baseline, optionally PyTorch, every algorithm relative to FedAvg, and R
federations (a beta sweep) as one vmapped program against R separate runs.

    python benchmarks/round_speed.py                 # CNN, the paper's round shape, all tables
    python benchmarks/round_speed.py --smoke         # seconds: CI's no-timing smoke run

The round: N clients x K local steps x batch B of 32x32x3 uint8 images (synthetic: speed does
not depend on the pixel values), SGD with clip and weight decay, as the library runs it.
Variants are timed round-robin (one round of each, repeated), so a slow patch of a shared
machine hits all of them; each figure is the median over repeats. GFLOP/s counts 3x the
forward FLOPs per training example (XLA's cost analysis) and is compared with a 2048^2 fp32
matmul measured in the same run. "memory" is XLA's own account of the compiled round on one
device (arguments + outputs + temporaries - aliased, from `memory_analysis()`), the peak that
round needs; "first round" is compile + one round. The evaluation line times the test-split
evaluation the training binary runs (10,000 images, batches of 1,000). Run it on a quiet
machine (nothing else on the cores).
"""
import argparse
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from experiments.cli import use_all_cpu_cores  # noqa: E402

use_all_cpu_cores()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from fedinit_jax import RoundInput, algorithms, models, replicas, tasks  # noqa: E402

MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]


WIDTH = 1.0  # --width: the cnn's width multiplier


def get_model(name, conv):
    return models.get(name, 10, conv=conv, **({"width": WIDTH} if WIDTH != 1.0 else {}))


def matmul_peak(n=2048, repeats=5):
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = min(_timed(lambda: f(a).block_until_ready()) for _ in range(repeats))
    return 2 * n ** 3 / best / 1e9


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def round_data(n, k, b, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, k, b, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, (n, k, b)).astype(np.int32)
    return RoundInput(np.arange(n, dtype=np.int32), (images, labels), np.float32(0.1))


class LibraryRound:
    """One library round (algorithm, strategy, conv, devices) ready to be timed."""

    def __init__(self, model_name, algorithm, execution, conv, num_devices, inp, chunk=None,
                 **hparams):
        model = get_model(model_name, conv)
        params = model.init(jax.random.key(0), (32, 32, 3))
        loss = tasks.classification_loss(model.apply, MEAN, STD, augment=True)
        self.algo = algorithms.get(algorithm, loss, execution=execution, chunk_size=chunk,
                                   num_devices=num_devices, **hparams)
        self.state = self.algo.init(params, num_clients=len(inp.client_ids))
        self.inp = inp
        t0 = time.perf_counter()
        self.step()
        self.compile_seconds = time.perf_counter() - t0
        self.memory_bytes = compiled_bytes(jax.jit(self.algo.round_fn), self.state, inp,
                                           jax.random.key(1))

    def step(self):
        self.state, metrics = self.algo.apply(self.state, self.inp, jax.random.key(1))
        jax.block_until_ready((self.state.params, metrics))


def compiled_bytes(jitted, *args):
    """XLA's memory account of one compiled call (per device), or None where unavailable."""
    try:
        m = jitted.lower(*args).compile().memory_analysis()
        return (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                - m.alias_size_in_bytes)
    except Exception:  # some backends / versions do not report it
        return None


def _mib(n):
    return "-" if n is None else f"{n / 2**20:.0f} MiB"


class NaiveRound:
    """The authors' simulator's shape in JAX: Python loops over clients and steps, one jitted
    SGD step (clip, weight decay, augmentation) per minibatch, FedAvg aggregation."""

    def __init__(self, model_name, conv, inp):
        model = get_model(model_name, conv)
        self.params = model.init(jax.random.key(0), (32, 32, 3))
        loss = tasks.classification_loss(model.apply, MEAN, STD, augment=True)
        opt = optax.chain(optax.clip_by_global_norm(10.0), optax.add_decayed_weights(1e-3),
                          optax.sgd(0.1))

        @jax.jit
        def sgd_step(w, batch, key):
            g = jax.grad(loss)(w, batch, key)
            updates, _ = opt.update(g, opt.init(w), w)
            return optax.apply_updates(w, updates)

        self.sgd_step, self.inp = sgd_step, inp
        t0 = time.perf_counter()
        self.step()
        self.compile_seconds = time.perf_counter() - t0
        images, labels = inp.batches
        self.memory_bytes = compiled_bytes(sgd_step, self.params, (images[0, 0], labels[0, 0]),
                                           jax.random.key(0))

    def step(self):
        images, labels = self.inp.batches
        ends = []
        for i in range(images.shape[0]):
            w = self.params
            for k in range(images.shape[1]):
                w = self.sgd_step(w, (images[i, k], labels[i, k]), jax.random.key(k))
            ends.append(w)
        self.params = jax.tree.map(lambda *x: sum(x) / len(x), *ends)
        jax.block_until_ready(self.params)


def torch_round(inp):
    """An equivalent PyTorch per-client loop of the reference CNN, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)

    def cnn():
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(3, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(64, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(1600, 384), nn.ReLU(), nn.Linear(384, 192), nn.ReLU(),
                             nn.Linear(192, 10))

    images, labels = inp.batches
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    x_all = (torch.from_numpy(images).float().permute(0, 1, 2, 5, 3, 4) / 255.0 - mean) / std
    y_all = torch.from_numpy(labels).long()
    global_model = cnn()

    class Round:
        compile_seconds = 0.0
        memory_bytes = None

        def step(self):
            state = {k: v.clone() for k, v in global_model.state_dict().items()}
            ends = []
            for i in range(x_all.shape[0]):
                model = cnn()
                model.load_state_dict(state)
                opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-3)
                for k in range(x_all.shape[1]):
                    x = x_all[i, k]
                    flip = torch.rand(x.shape[0]) < 0.5  # the same augmentation work
                    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(model(x), y_all[i, k]).backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
                    opt.step()
                ends.append(model.state_dict())
            global_model.load_state_dict({k: sum(e[k] for e in ends) / len(ends) for k in state})

    return Round()


def time_round_robin(variants, repeats):
    times = {name: [] for name in variants}
    for _ in range(repeats):
        for name, variant in variants.items():
            times[name].append(_timed(variant.step))
    return {name: statistics.median(ts) for name, ts in times.items()}


def speed_table(args, peak):
    n, k, b = args.clients, args.steps, args.batch
    inp = round_data(n, k, b)
    samples = n * k * b
    model = get_model(args.model, "xla")
    flops = 3 * models.forward_flops(model, model.init(jax.random.key(0), (32, 32, 3)),
                                     (32, 32, 3))
    variants = {}
    for spec in args.variants:
        execution, conv, d = spec.split(":")
        d = min(int(d), len(jax.devices()))
        if n % d:
            continue
        name = f"{execution} / {conv} conv / {d} dev"
        chunk = max(1, n // (2 * d)) if execution == "chunked" else None
        print(f"  compiling {name}", flush=True)
        variants[name] = LibraryRound(args.model, "fedavg", execution, conv, d, inp, chunk)
    for conv in args.naive_convs:
        print(f"  compiling naive per-step loop / {conv} conv", flush=True)
        variants[f"naive per-step loop / {conv} conv"] = NaiveRound(args.model, conv, inp)
    if args.torch and args.model == "cnn":
        torch_variant = torch_round(inp)
        if torch_variant is not None:
            import torch

            variants[f"PyTorch {torch.__version__} per-client loop"] = torch_variant
    medians = time_round_robin(variants, args.repeats)
    base_name = next((v for v in variants if v.startswith("naive")), None)
    torch_name = next((v for v in variants if v.startswith("PyTorch")), None)
    rows = []
    for name, seconds in medians.items():
        gflops = flops * samples / seconds / 1e9
        rows.append([name, f"{seconds:.3f}", f"{samples / seconds:.0f}", f"{gflops:.1f}",
                     f"{100 * gflops / peak:.0f}%",
                     f"{medians[base_name] / seconds:.2f}x" if base_name else "-",
                     f"{medians[torch_name] / seconds:.2f}x" if torch_name else "-",
                     f"{variants[name].compile_seconds:.1f}", _mib(variants[name].memory_bytes)])
    header = ["variant", "s/round", "samples/s", "GFLOP/s", "of matmul peak",
              "vs naive", "vs PyTorch", "first round (compile) s", "memory"]
    return header, rows


def algorithm_table(args):
    n, k, b = args.clients, args.steps, args.batch
    inp = round_data(n, k, b)
    devices = len(jax.devices())
    d = max(x for x in range(1, devices + 1) if n % x == 0)
    variants = {}
    for name in args.algorithms:
        print(f"  compiling {name}", flush=True)
        variants[name] = LibraryRound(args.model, name, args.algo_execution, "auto", d, inp)
    medians = time_round_robin(variants, args.repeats)
    base = medians.get("fedavg")
    header = ["algorithm", "s/round", "vs FedAvg", "first round (compile) s", "memory"]
    rows = [[name, f"{s:.3f}", f"{s / base:.3f}x" if base else "-",
             f"{variants[name].compile_seconds:.1f}", _mib(variants[name].memory_bytes)]
            for name, s in medians.items()]
    return header, rows


class ReplicaRounds:
    """R federations (a beta sweep on one round input) as one vmapped program."""

    def __init__(self, model_name, betas, execution, inp):
        model = get_model(model_name, "auto")
        params = model.init(jax.random.key(0), (32, 32, 3))
        loss = tasks.classification_loss(model.apply, MEAN, STD, augment=True)
        algo = algorithms.get("fedavg", loss, execution=execution)
        self.states = replicas.init(algo, params, len(inp.client_ids), betas=betas)
        self.apply, self.inp = replicas.make_apply(algo, shared_input=True), inp
        self.keys = jax.random.split(jax.random.key(1), len(betas))
        t0 = time.perf_counter()
        self.step()
        self.compile_seconds = time.perf_counter() - t0
        self.memory_bytes = None

    def step(self):
        self.states, metrics = self.apply(self.states, self.inp, self.keys)
        jax.block_until_ready((self.states.params, metrics))


class SeparateRounds:
    """The same R federations as R one-device runs, one round of each after the other."""

    def __init__(self, model_name, betas, execution, inp):
        self.runs = [LibraryRound(model_name, "fedavg", execution, "auto", 1, inp, beta=b)
                     for b in betas]
        self.compile_seconds = sum(r.compile_seconds for r in self.runs)
        self.memory_bytes = None

    def step(self):
        for run in self.runs:
            run.step()


def replica_table(args):
    """R = len(--replica-betas) federations: one vmapped program vs R separate rounds."""
    inp = round_data(args.clients, args.steps, args.batch)
    betas = args.replica_betas
    variants = {}
    for execution in ("sequential", "vmap"):
        print(f"  compiling {len(betas)} replicas / {execution}", flush=True)
        variants[f"{len(betas)} replicas in one program / {execution} clients"] = ReplicaRounds(
            args.model, betas, execution, inp)
    print(f"  compiling {len(betas)} separate runs", flush=True)
    variants[f"{len(betas)} separate runs / sequential clients"] = SeparateRounds(
        args.model, betas, "sequential", inp)
    medians = time_round_robin(variants, args.repeats)
    base = medians[next(v for v in variants if "separate" in v)]
    header = ["federations (one device)", "s per round of all", "vs separate",
              "first round (compile) s"]
    rows = [[name, f"{s:.3f}", f"{base / s:.2f}x", f"{variants[name].compile_seconds:.1f}"]
            for name, s in medians.items()]
    return header, rows


def evaluation_line(args, test_size=10_000):
    """Seconds to evaluate the global model on a CIFAR-sized test split (median of repeats)."""
    model = get_model(args.model, "auto")
    params = model.init(jax.random.key(0), (32, 32, 3))
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (test_size, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, test_size).astype(np.int32)
    evaluate = tasks.make_evaluator(model.apply, images, labels, MEAN, STD)
    first = _timed(lambda: jax.block_until_ready(evaluate(params)))
    seconds = statistics.median(_timed(lambda: jax.block_until_ready(evaluate(params)))
                                for _ in range(args.repeats))
    return (f"evaluation of {test_size:,} test images: {seconds:.3f} s "
            f"(first call, compiling: {first:.1f} s)")


def markdown(header, rows):
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", choices=models.NAMES)
    parser.add_argument("--width", type=float, default=1.0, help="cnn width multiplier")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="local steps K per client")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="*", help="execution:conv:devices",
                        default=["sequential:fast:1", "sequential:fast:2", "chunked:fast:2",
                                 "vmap:fast:2", "sequential:xla:2"])
    parser.add_argument("--naive-convs", nargs="*", default=["fast", "xla"])
    parser.add_argument("--no-torch", dest="torch", action="store_false")
    parser.add_argument("--algorithms", nargs="*", default=list(algorithms.REGISTRY))
    parser.add_argument("--algo-execution", default="sequential")
    parser.add_argument("--tables", nargs="*",
                        default=["speed", "algorithms", "replicas", "eval"])
    parser.add_argument("--replica-betas", nargs="*", type=float, default=[0.0, 0.05, 0.1])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one repeat")
    args = parser.parse_args()
    global WIDTH
    WIDTH = args.width
    if args.smoke:
        args.clients, args.steps, args.batch, args.repeats = 2, 1, 2, 1
        args.variants = ["sequential:fast:2", "vmap:xla:1"]
        args.algorithms = args.algorithms[:3]
        args.replica_betas = [0.0, 0.1]
        args.torch = False
    peak = matmul_peak()
    print(f"# round_speed: {args.model} (width {WIDTH:g}), {args.clients} clients x "
          f"{args.steps} steps x batch {args.batch}; {platform.machine()}, {os.cpu_count()} "
          f"cores, jax {jax.__version__} {jax.default_backend()} ({len(jax.devices())} devices); "
          f"{time.strftime('%Y-%m-%d %H:%M')}\n")
    print(f"2048^2 fp32 matmul: {peak:.1f} GFLOP/s\n")
    if "speed" in args.tables:
        print(markdown(*speed_table(args, peak)) + "\n", flush=True)
    if "algorithms" in args.tables:
        print(markdown(*algorithm_table(args)) + "\n", flush=True)
    if "replicas" in args.tables:
        print(markdown(*replica_table(args)) + "\n", flush=True)
    if "eval" in args.tables:
        print(evaluation_line(args, 200 if args.smoke else 10_000), flush=True)


if __name__ == "__main__":
    main()
