"""Round speed, side by side in one process: client strategies, conv formulations, devices,
a naive per-step baseline, optionally PyTorch, every algorithm relative to FedAvg, and R
federations (a beta sweep) as one vmapped program against R separate runs.

    python benchmarks/round_speed.py                 # CNN, the paper's round shape, all tables
    python benchmarks/round_speed.py --smoke         # CI's no-timing smoke run (tiny shapes)

The round: N clients x K local steps x batch B of 32x32x3 uint8 images (synthetic: speed does
not depend on the pixel values), SGD with clip and weight decay, as the library runs it.
Variants are timed round-robin (one round of each, repeated), so a slow patch of a shared
machine hits all of them; each figure is the median over repeats. GFLOP/s counts 3x the
forward FLOPs per training example (XLA's cost analysis) and is compared with a 2048^2 fp32
matmul measured in the same run. "memory" is XLA's own account of the compiled round on one
device (arguments + outputs + temporaries - aliased, from `memory_analysis()`), the peak that
round needs; "first round" is compile + one round. The PyTorch column is a lean per-client
loop of the same model in PyTorch (the CNN and ResNet-18-GN have twins here). The evaluation
table times the test-split evaluation the training binary runs (10,000 images, batches of
1,000) against PyTorch's; the memory table shows XLA's account of the round with and without
donating the state; the lstm table times the Shakespeare LSTM round (clients of unequal size:
fixed K steps, or one epoch each with masked steps; sequential or vmapped) against PyTorch;
the bernoulli table times a Bernoulli round (N real clients padded to the static bound of
100 clients at participation N / 100) on 2 devices with the real clients first, as `data.pad`
leaves them, and dealt over the devices (`data.spread`, what the run loop does).
Run it on a quiet machine (nothing else on the cores).
"""
import argparse
import os
import platform
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from experiments.cli import use_all_cpu_cores  # noqa: E402

use_all_cpu_cores()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from benchmarks.lstm_speed import lstm_table, masked_table  # noqa: E402
from benchmarks.timing import (  # noqa: E402
    Timed,
    compiled_bytes,
    image_loss,
    image_model,
    matmul_peak,
    mib,
    round_data,
    time_round_robin,
    timed,
)
from benchmarks.torch_twins import torch_evaluation, torch_round  # noqa: E402
from experiments.results import markdown  # noqa: E402
from fedinit_jax import RoundInput, algorithms, data, losses, models, replicas, with_runtime  # noqa: E402
from fedinit_jax.experiment import round_memory  # noqa: E402
from fedinit_jax.experiment.tasks.images import CHANNEL_STATS  # noqa: E402


class LibraryRound(Timed):
    """One library round (algorithm, strategy, conv, devices) of an image model."""

    def __init__(self, model_name, algorithm, execution, conv, num_devices, inp, chunk=None,
                 width=1.0, **hparams):
        model = image_model(model_name, conv, width)
        params = model.init(jax.random.key(0), (32, 32, 3))
        self.algo = with_runtime(algorithms.get(algorithm, image_loss(model), **hparams),
            execution=execution, chunk_size=chunk, num_devices=num_devices)
        self.state = self.algo.init(params, num_clients=len(inp.client_ids))
        self.inp = inp
        self.first_round()
        # the round apply runs (its sharding, its compilation: lower() shares jit's cache)
        self.memory_bytes = compiled_bytes(self.algo, self.state, inp, jax.random.key(1))


class NaiveRound:
    """The authors' simulator's shape in JAX: Python loops over clients and steps, one jitted
    SGD step (clip, weight decay, augmentation) per minibatch, FedAvg aggregation."""

    def __init__(self, model_name, conv, inp, width=1.0):
        model = image_model(model_name, conv, width)
        self.params = model.init(jax.random.key(0), (32, 32, 3))
        loss = image_loss(model)
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


def speed_table(args, peak):
    n, k, b = args.clients, args.steps, args.batch
    inp = round_data(n, k, b)
    samples = n * k * b
    model = image_model(args.model, "xla", args.width)
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
        variants[name] = LibraryRound(args.model, "fedavg", execution, conv, d, inp, chunk,
                                      args.width)
    for conv in args.naive_convs:
        print(f"  compiling naive per-step loop / {conv} conv", flush=True)
        variants[f"naive per-step loop / {conv} conv"] = NaiveRound(args.model, conv, inp,
                                                                       args.width)
    if args.torch:
        torch_variant = torch_round(args.model, inp, args.torch_device, args.width)
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
                     f"{variants[name].compile_seconds:.1f}", mib(variants[name].memory_bytes)])
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
        variants[name] = LibraryRound(args.model, name, args.algo_execution, "auto", d, inp,
                                      width=args.width)
    medians = time_round_robin(variants, args.repeats)
    base = medians.get("fedavg")
    header = ["algorithm", "s/round", "vs FedAvg", "first round (compile) s", "memory"]
    rows = [[name, f"{s:.3f}", f"{s / base:.3f}x" if base else "-",
             f"{variants[name].compile_seconds:.1f}", mib(variants[name].memory_bytes)]
            for name, s in medians.items()]
    return header, rows


def bernoulli_table(args):
    """A Bernoulli round's real clients first or dealt over 2 devices, against 1 device."""
    n, k, b = args.clients, args.steps, args.batch
    slots = data.bernoulli_bound(100, n / 100, multiple=2)
    base = round_data(slots, k, b)
    first = base._replace(mask=np.arange(slots) < n)
    order = data.spread(n, slots, 2)
    dealt = RoundInput(base.client_ids[order], jax.tree.map(lambda a: a[order], base.batches),
                       base.local_lr, first.mask[order])
    variants, per_device = {}, {}
    for name, inp, d in (("real first (data.pad) / 1 dev", first, 1),
                         ("real first (data.pad) / 2 dev", first, 2),
                         ("dealt over the devices (data.spread) / 2 dev", dealt, 2)):
        if d <= len(jax.devices()):
            print(f"  compiling {name}", flush=True)
            variants[name] = LibraryRound(args.model, "fedavg", "sequential", "auto", d, inp,
                                          width=args.width)
            per_device[name] = " + ".join(str(c) for c in inp.mask.reshape(d, -1).sum(1))
    medians = time_round_robin(variants, args.repeats)
    one = medians[next(iter(medians))]
    header = [f"Bernoulli round, {n} real clients in {slots} slots, sequential", "s/round",
              "speed vs 1 device", "real clients per device"]
    rows = [[name, f"{s:.3f}", f"{one / s:.2f}x", per_device[name]]
            for name, s in medians.items()]
    return header, rows


class ReplicaRounds:
    """R federations (a beta sweep on one round input) as one vmapped program."""

    def __init__(self, model_name, betas, execution, inp, width=1.0):
        model = image_model(model_name, "auto", width)
        params = model.init(jax.random.key(0), (32, 32, 3))
        algo = with_runtime(algorithms.get("fedavg", image_loss(model)), execution=execution)
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

    def __init__(self, model_name, betas, execution, inp, width=1.0):
        self.runs = [LibraryRound(model_name, "fedavg", execution, "auto", 1, inp, width=width,
                                  beta=b) for b in betas]
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
            args.model, betas, execution, inp, args.width)
    print(f"  compiling {len(betas)} separate runs", flush=True)
    variants[f"{len(betas)} separate runs / sequential clients"] = SeparateRounds(
        args.model, betas, "sequential", inp, args.width)
    medians = time_round_robin(variants, args.repeats)
    base = medians[next(v for v in variants if "separate" in v)]
    header = ["federations (one device)", "s per round of all", "vs separate",
              "first round (compile) s"]
    rows = [[name, f"{s:.3f}", f"{base / s:.2f}x", f"{variants[name].compile_seconds:.1f}"]
            for name, s in medians.items()]
    return header, rows


def evaluation_table(args, test_size=10_000):
    """Seconds to evaluate the global model on a CIFAR-sized test split (batches of 1,000),
    the library's jitted evaluator against the PyTorch twin in no-grad mode, round-robin."""
    model = image_model(args.model, "auto", args.width)
    params = model.init(jax.random.key(0), (32, 32, 3))
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (test_size, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, test_size).astype(np.int32)
    evaluate = losses.make_evaluator(model.apply, images, labels, *CHANNEL_STATS["cifar10"])
    runs = {"library (jit, conv=auto)": lambda: jax.block_until_ready(evaluate(params))}
    torch_evaluate = (torch_evaluation(args.model, images, labels, device=args.torch_device,
                                       width=args.width) if args.torch else None)
    if torch_evaluate is not None:
        import torch

        runs[f"PyTorch {torch.__version__} (no_grad)"] = torch_evaluate
    first = {name: timed(run) for name, run in runs.items()}
    medians = time_round_robin({name: types.SimpleNamespace(step=run)
                                for name, run in runs.items()}, args.repeats)
    torch_name = next((n for n in runs if n.startswith("PyTorch")), None)
    header = [f"evaluation of {test_size:,} images", "s", "images/s", "vs PyTorch",
              "first call (compile) s"]
    rows = [[name, f"{s:.3f}", f"{test_size / s:.0f}",
             f"{medians[torch_name] / s:.2f}x" if torch_name else "-", f"{first[name]:.1f}"]
            for name, s in medians.items()]
    return header, rows


def memory_table(args):
    """XLA's memory account of the compiled round, state not donated vs donated, for a
    federation of --state-clients clients (the [C, ...] tables dominate)."""
    n = args.clients
    inp = round_data(n, args.steps, args.batch)
    model = image_model(args.model, "auto", args.width)
    params = model.init(jax.random.key(0), (32, 32, 3))
    algo = with_runtime(algorithms.get("fedavg", image_loss(model)), execution="sequential")
    state = jax.eval_shape(lambda p: algo.init(p, num_clients=args.state_clients), params)
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    rows = []
    for donate in (False, True):
        lowered = with_runtime(algo, donate_state=donate).apply.lower(state, inp,
                                                                    jax.random.key(1))
        compiled = lowered.compile()
        m, total = compiled.memory_analysis(), round_memory(compiled)["peak"]
        rows.append(["donated" if donate else "not donated", mib(state_bytes),
                     mib(m.argument_size_in_bytes), mib(m.output_size_in_bytes),
                     mib(m.alias_size_in_bytes), mib(m.temp_size_in_bytes), mib(total),
                     f"{total / (state_bytes + m.temp_size_in_bytes):.2f}x"])
    header = [f"round's state (C={args.state_clients}, N={n})", "state", "arguments",
              "outputs", "aliased", "temporaries", "total", "total / (state + temporaries)"]
    return header, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", choices=models.NAMES)
    parser.add_argument("--width", type=float, default=1.0, help="cnn width multiplier")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="local steps K per client")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="*", help="execution:conv:devices",
                        default=["sequential:auto:1", "sequential:auto:2", "chunked:auto:2",
                                 "vmap:auto:2", "sequential:xla:2"])
    parser.add_argument("--naive-convs", nargs="*", default=["auto", "xla"])
    parser.add_argument("--no-torch", dest="torch", action="store_false")
    parser.add_argument("--torch-device", default="cpu", help="cpu or cuda")
    parser.add_argument("--algorithms", nargs="*", default=list(algorithms.REGISTRY))
    parser.add_argument("--algo-execution", default="sequential")
    parser.add_argument("--tables", nargs="*",
                        default=["speed", "algorithms", "replicas", "eval", "memory", "lstm", "masked",
                                 "bernoulli"])
    parser.add_argument("--state-clients", type=int, default=100,
                        help="clients C in the state of the memory table")
    parser.add_argument("--replica-betas", nargs="*", type=float, default=[0.0, 0.05, 0.1])
    parser.add_argument("--lstm-steps", type=int, default=10, help="lstm table: fixed K")
    parser.add_argument("--lstm-batch", type=int, default=4, help="lstm table: windows per step")
    parser.add_argument("--lstm-executions", nargs="*", default=["sequential", "vmap"])
    parser.add_argument("--eval-images", type=int, default=10_000,
                        help="eval table: test images evaluated")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one repeat")
    args = parser.parse_args()
    if args.smoke:
        args.clients, args.steps, args.batch, args.repeats = 2, 1, 2, 1
        args.model = "mlp" if args.model == "cnn" else args.model  # every table, compiled fast
        args.variants = ["sequential:auto:2", "vmap:xla:1"]
        args.naive_convs = args.naive_convs[:1]
        args.algorithms = args.algorithms[:2]
        args.replica_betas = [0.0, 0.1]
        args.torch = False
        args.state_clients = 4
        args.lstm_steps, args.lstm_batch, args.lstm_executions = 1, 1, ["sequential"]
        args.eval_images = 200
    peak = matmul_peak()
    print(f"# round_speed: {args.model} (width {args.width:g}), {args.clients} clients x "
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
        print(markdown(*evaluation_table(args, args.eval_images)) + "\n", flush=True)
    if "memory" in args.tables:
        print(markdown(*memory_table(args)) + "\n", flush=True)
    if "lstm" in args.tables:
        print(markdown(*lstm_table(args)) + "\n", flush=True)
    if "masked" in args.tables:
        print(markdown(*masked_table(args)) + "\n", flush=True)
    if "bernoulli" in args.tables:
        print(markdown(*bernoulli_table(args)) + "\n", flush=True)


if __name__ == "__main__":
    main()
