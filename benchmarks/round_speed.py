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
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from experiments.cli import use_all_cpu_cores  # noqa: E402

use_all_cpu_cores()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from experiments.results import markdown  # noqa: E402
from fedinit_jax import RoundInput, algorithms, data, losses, models, replicas  # noqa: E402

MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]


WIDTH = 1.0  # --width: the cnn's width multiplier
TORCH_DEVICE = "cpu"  # --torch-device: where the PyTorch twins run


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
        loss = losses.classification_loss(model.apply, MEAN, STD, augment=True)
        self.algo = algorithms.get(algorithm, loss, **hparams).with_runtime(
            execution=execution, chunk_size=chunk, num_devices=num_devices)
        self.state = self.algo.init(params, num_clients=len(inp.client_ids))
        self.inp = inp
        t0 = time.perf_counter()
        self.step()
        self.compile_seconds = time.perf_counter() - t0
        # the round apply runs (its sharding, its compilation: lower() shares jit's cache)
        self.memory_bytes = compiled_bytes(self.algo, self.state, inp, jax.random.key(1))

    def step(self):
        self.state, metrics = self.algo.apply(self.state, self.inp, jax.random.key(1))
        jax.block_until_ready((self.state.params, metrics))


def account_bytes(m):
    """XLA's memory account of a compiled call: arguments + outputs + temporaries - aliased."""
    return (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
            - m.alias_size_in_bytes)


def compiled_bytes(jitted, *args):
    """XLA's memory account of one compiled call (per device), or None where unavailable;
    `jitted` is a jax.jit function or a FederatedAlgorithm (its `lower`)."""
    try:
        return account_bytes(jitted.lower(*args).compile().memory_analysis())
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
        loss = losses.classification_loss(model.apply, MEAN, STD, augment=True)
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


def torch_model(name):
    """The PyTorch twin of a library model (same layers and sizes), or None: the reference
    CNN, or the ImageNet-stem ResNet-18 with GroupNorm(2) (no torchvision needed)."""
    import torch

    nn = torch.nn
    if name == "cnn" and WIDTH == 1.0:
        return nn.Sequential(nn.Conv2d(3, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(64, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(1600, 384), nn.ReLU(), nn.Linear(384, 192), nn.ReLU(),
                             nn.Linear(192, 10))
    if name != "resnet18_gn":
        return None

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.norm1, self.norm2 = nn.GroupNorm(2, cout), nn.GroupNorm(2, cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.GroupNorm(2, cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))
            return torch.relu(y + self.down(x))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.GroupNorm(2, 64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            layers.append(Block(cin, cout, 2 if stage > 0 and block == 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10))


def _torch_images(images):
    """uint8 [..., H, W, C] -> normalised float [..., C, H, W], as the library's normalize."""
    import torch

    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    x = torch.from_numpy(np.ascontiguousarray(images)).float()
    return (x.permute(*range(x.ndim - 3), -1, -3, -2) / 255.0 - mean) / std


def torch_round(model_name, inp):
    """The round as a lean PyTorch per-client loop (a fresh model and SGD per client, as the
    authors' simulator; flip per example and one padded random crop per batch, clip 10, weight
    decay 1e-3, FedAvg mean), or None without torch or a PyTorch twin of the model."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    global_model = torch_model(model_name)
    if global_model is None:
        return None
    images, labels = inp.batches
    device = torch.device(TORCH_DEVICE)
    x_all = _torch_images(images).to(device)
    y_all = torch.from_numpy(labels).long().to(device)
    global_model = global_model.to(device)

    def train_client(i, model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-3)
        for k in range(x_all.shape[1]):
            x = x_all[i, k]
            flip = torch.rand(x.shape[0], device=device) < 0.5
            x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
            dy, dx = torch.randint(0, 9, (2,)).tolist()
            x = torch.nn.functional.pad(x, (4, 4, 4, 4))[:, :, dy:dy + 32, dx:dx + 32]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y_all[i, k]).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()

    return torch_fedavg(global_model, lambda: torch_model(model_name).to(device),
                        train_client, x_all.shape[0])


def torch_fedavg(global_model, new_model, train_client, num_clients):
    """A PyTorch FedAvg round ready to be timed: per client a fresh model loaded with the
    global state (as the authors' simulator), train_client(i, model) trains it, the mean of
    the clients' states becomes the global model. One warm-up round runs first, as the
    library variants' compiling one (PyTorch's first round pays one-time kernel set-up)."""
    import torch

    class Round:
        memory_bytes = None

        def step(self):
            state = {k: v.clone() for k, v in global_model.state_dict().items()}
            ends = []
            for i in range(num_clients):
                model = new_model()
                model.load_state_dict(state)
                train_client(i, model)
                ends.append(model.state_dict())
            global_model.load_state_dict({k: sum(e[k] for e in ends) / len(ends) for k in state})
            if next(global_model.parameters()).is_cuda:
                torch.cuda.synchronize()

    variant = Round()
    t0 = time.perf_counter()
    variant.step()
    variant.compile_seconds = time.perf_counter() - t0
    return variant


def time_round_robin(variants, repeats):
    """{name: median seconds of variant.step()}, one call of each in turn per repeat."""
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
    if args.torch:
        torch_variant = torch_round(args.model, inp)
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
            variants[name] = LibraryRound(args.model, "fedavg", "sequential", "auto", d, inp)
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

    def __init__(self, model_name, betas, execution, inp):
        model = get_model(model_name, "auto")
        params = model.init(jax.random.key(0), (32, 32, 3))
        loss = losses.classification_loss(model.apply, MEAN, STD, augment=True)
        algo = algorithms.get("fedavg", loss).with_runtime(execution=execution)
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


def torch_evaluation(model_name, images, labels, batch_size=1000):
    """() -> accuracy: the PyTorch twin evaluated in no-grad batches, or None."""
    try:
        import torch
    except ImportError:
        return None
    model = torch_model(model_name)
    if model is None:
        return None
    device = torch.device(TORCH_DEVICE)
    model = model.to(device).eval()
    x_all = _torch_images(images).to(device)
    y_all = torch.from_numpy(labels).long().to(device)

    def evaluate():
        correct = 0
        with torch.no_grad():
            for i in range(0, len(y_all), batch_size):
                logits = model(x_all[i:i + batch_size])
                correct += (logits.argmax(-1) == y_all[i:i + batch_size]).sum()
        return int(correct) / len(y_all)  # int(): waits for the device

    return evaluate


def evaluation_table(args, test_size=10_000):
    """Seconds to evaluate the global model on a CIFAR-sized test split (batches of 1,000),
    the library's jitted evaluator against the PyTorch twin in no-grad mode, round-robin."""
    model = get_model(args.model, "auto")
    params = model.init(jax.random.key(0), (32, 32, 3))
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (test_size, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, test_size).astype(np.int32)
    evaluate = losses.make_evaluator(model.apply, images, labels, MEAN, STD)
    runs = {"library (jit, conv=auto)": lambda: jax.block_until_ready(evaluate(params))}
    torch_evaluate = torch_evaluation(args.model, images, labels) if args.torch else None
    if torch_evaluate is not None:
        import torch

        runs[f"PyTorch {torch.__version__} (no_grad)"] = torch_evaluate
    first = {name: _timed(run) for name, run in runs.items()}
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
    model = get_model(args.model, "auto")
    params = model.init(jax.random.key(0), (32, 32, 3))
    loss = losses.classification_loss(model.apply, MEAN, STD, augment=True)
    algo = algorithms.get("fedavg", loss).with_runtime(execution="sequential")
    state = jax.eval_shape(lambda p: algo.init(p, num_clients=args.state_clients), params)
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    rows = []
    for donate in (False, True):
        lowered = algo.with_runtime(donate_state=donate).lower(state, inp, jax.random.key(1))
        m = lowered.compile().memory_analysis()
        total = account_bytes(m)
        rows.append(["donated" if donate else "not donated", _mib(state_bytes),
                     _mib(m.argument_size_in_bytes), _mib(m.output_size_in_bytes),
                     _mib(m.alias_size_in_bytes), _mib(m.temp_size_in_bytes), _mib(total),
                     f"{total / (state_bytes + m.temp_size_in_bytes):.2f}x"])
    header = [f"round's state (C={args.state_clients}, N={n})", "state", "arguments",
              "outputs", "aliased", "temporaries", "total", "total / (state + temporaries)"]
    return header, rows


# windows per client of the Shakespeare-shaped round: sizes that differ by 20x, as roles do
LSTM_SIZES = (2, 3, 5, 8, 12, 16, 20, 25, 32, 40)


def lstm_round_data(n, batch, fixed_steps, seed=0):
    """A Shakespeare-shaped round of n clients of LSTM_SIZES windows (80 random characters):
    fixed_steps > 0 draws K = fixed_steps batches per client; 0 runs one epoch over each
    client's windows, padded with masked steps to the largest client's."""
    from fedinit_jax.data import shakespeare

    rng = np.random.default_rng(seed)
    sizes = [LSTM_SIZES[i % len(LSTM_SIZES)] for i in range(n)]
    data = shakespeare.pack([tuple(rng.integers(3, shakespeare.OOV, (m, 2, 80)).transpose(
        1, 0, 2).astype(np.int32)) for m in sizes])
    ids = np.arange(n, dtype=np.int32)
    batches, mask = shakespeare.round_batches(
        data, ids, batch_size=batch, rng=rng, steps=fixed_steps,
        max_steps=shakespeare.max_local_steps(data.sizes, batch, 1))
    return RoundInput(ids, batches, np.float32(1.0), step_mask=mask)


class LstmRound:
    """One library FedAvg round of the Shakespeare LSTM (lr 1, no clip or decay)."""

    def __init__(self, execution, num_devices, inp):
        from fedinit_jax.data import shakespeare

        model = models.get("lstm", shakespeare.VOCAB_SIZE)
        params = model.init(jax.random.key(0), (80,))
        loss = losses.next_character_loss(model.apply)
        self.algo = algorithms.get("fedavg", loss, weight_decay=0.0, clip_norm=0.0)
        self.algo = self.algo.with_runtime(execution=execution, num_devices=num_devices)
        self.state = self.algo.init(params, num_clients=len(inp.client_ids))
        self.inp = inp
        t0 = time.perf_counter()
        self.step()
        self.compile_seconds = time.perf_counter() - t0
        self.memory_bytes = None

    step = LibraryRound.step


def torch_lstm_round(inp):
    """The LSTM round as a PyTorch per-client loop over each client's real steps only
    (Embedding 8, LSTM 2 x 256, Linear; SGD lr 1; cross-entropy ignoring PAD), or None."""
    try:
        import torch
    except ImportError:
        return None
    from fedinit_jax.data import shakespeare

    nn = torch.nn
    torch.manual_seed(0)

    class CharLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(shakespeare.VOCAB_SIZE, 8)
            self.lstm = nn.LSTM(8, 256, num_layers=2, batch_first=True)
            self.out = nn.Linear(256, shakespeare.VOCAB_SIZE)

        def forward(self, x):
            return self.out(self.lstm(self.embed(x))[0])

    device = torch.device(TORCH_DEVICE)
    global_model = CharLSTM().to(device)
    x_all, y_all = (torch.from_numpy(a).long().to(device) for a in inp.batches)
    real = (np.ones(x_all.shape[:2], bool) if inp.step_mask is None
            else np.asarray(inp.step_mask))

    def train_client(i, model):
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        for k in np.flatnonzero(real[i]):
            opt.zero_grad()
            logits = model(x_all[i, k])
            torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y_all[i, k].reshape(-1),
                ignore_index=shakespeare.PAD).backward()
            opt.step()

    return torch_fedavg(global_model, lambda: CharLSTM().to(device), train_client,
                        x_all.shape[0])


def shakespeare_sizes(seed=0):
    """Every role's training windows: the real texts' (data_dir, the cache or
    ../shared/shakespeare), else 1,108 draws matched to them (lognormal, median 13, max 689)."""
    from fedinit_jax.data import shakespeare

    try:
        from fedinit_jax.experiment import fetch

        _, train, _ = shakespeare.load(fetch.shakespeare_texts())
        return train.sizes, "the real roles"
    except (FileNotFoundError, ValueError, ImportError):
        rng = np.random.default_rng(seed)
        sizes = np.clip(np.round(rng.lognormal(np.log(13), 1.5, 1108)), 1, 689).astype(int)
        return sizes, "1,108 lognormal draws (no texts found)"


def masked_table(args):
    """Seconds per real local step of the Shakespeare LSTM round on a Shakespeare-shaped
    federation (B = --lstm-batch, one epoch, N = --clients sampled): fixed K (every step
    real), masked epochs padded to the federation's largest client (one shape per run), and
    padded to a power-of-two bucket of the sampled clients' largest (data/shakespeare.py)."""
    from fedinit_jax.data import shakespeare

    sizes, source = shakespeare_sizes()
    n, b = args.clients, args.lstm_batch
    rng = np.random.default_rng(0)
    ids = np.sort(rng.choice(len(sizes), n, replace=False)).astype(np.int32)
    data = shakespeare.pack([tuple(rng.integers(3, shakespeare.OOV, (2, m, 80)).astype(
        np.int32)) for m in sizes[ids]])  # only the sampled clients' windows are needed
    cap = shakespeare.max_local_steps(sizes, b, 1)
    local = np.arange(n, dtype=np.int32)
    inputs, real = {}, {}
    for name, bucketed in (("masked, K = federation's largest", False),
                           ("masked, K = bucket of the sampled largest", True)):
        batches, mask = shakespeare.round_batches(data, local, batch_size=b,
                                                  rng=np.random.default_rng(1), max_steps=cap,
                                                  bucketed=bucketed)
        label = f"{name} (K={mask.shape[1]})"
        inputs[label] = RoundInput(local, batches, np.float32(1.0), step_mask=mask)
        real[label] = int(mask.sum())
    k_fixed = int(np.ceil(max(real.values()) / n))  # about the same real steps, none masked
    inputs[f"fixed K={k_fixed}"] = lstm_round_data(n, b, k_fixed)
    real[f"fixed K={k_fixed}"] = n * k_fixed
    variants = {f"{name} / {execution}": LstmRound(execution, 1, inp)
                for execution in args.lstm_executions for name, inp in inputs.items()}
    medians = time_round_robin(variants, args.repeats)
    header = [f"LSTM round, {n} of {len(sizes)} clients ({source}), B={b}", "real steps",
              "s/round", "ms per real step", "vs fixed K (same execution)"]
    rows = []
    for name, seconds in medians.items():
        mode, execution = name.rsplit(" / ", 1)
        fixed = medians[f"fixed K={k_fixed} / {execution}"] / real[f"fixed K={k_fixed}"]
        per_step = seconds / real[mode]
        rows.append([name, real[mode], f"{seconds:.3f}", f"{1e3 * per_step:.2f}",
                     f"{per_step / fixed:.2f}x"])
    return header, rows


def lstm_table(args):
    """The Shakespeare LSTM round: fixed K steps per client vs one epoch of each client's own
    windows with masked steps, sequential vs vmapped clients, and PyTorch's loop over the
    real steps only."""
    n, b = args.clients, args.lstm_batch
    devices = max(x for x in range(1, len(jax.devices()) + 1) if n % x == 0)
    variants = {}
    for mode, fixed in (("fixed K", args.lstm_steps), ("masked epoch", 0)):
        inp = lstm_round_data(n, b, fixed)
        real = (inp.step_mask.sum() if inp.step_mask is not None
                else n * fixed)
        k = inp.batches[0].shape[1]
        for execution in args.lstm_executions:
            name = f"{mode} (K={k}, {real} real steps) / {execution} / {devices} dev"
            print(f"  compiling {name}", flush=True)
            variants[name] = LstmRound(execution, devices, inp)
        if args.torch:
            torch_variant = torch_lstm_round(inp)
            if torch_variant is not None:
                import torch

                variants[f"{mode}: PyTorch {torch.__version__} loop, real steps"] = \
                    torch_variant
    medians = time_round_robin(variants, args.repeats)
    header = ["LSTM round (N clients of 2-40 windows, B x 80 characters)", "s/round",
              "vs PyTorch (same mode)", "first round (compile) s"]
    rows = []
    for name, seconds in medians.items():
        mode = name.split(" ")[0]
        torch_name = next((v for v in medians if v.startswith(mode) and "PyTorch" in v), None)
        rows.append([name, f"{seconds:.3f}",
                     f"{medians[torch_name] / seconds:.2f}x" if torch_name else "-",
                     f"{variants[name].compile_seconds:.1f}"])
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
    global WIDTH, TORCH_DEVICE
    WIDTH, TORCH_DEVICE = args.width, args.torch_device
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
