"""The Shakespeare LSTM round's speed tables of round_speed.py (--tables lstm masked): fixed K
steps against masked epochs of unequal clients, sequential against vmapped clients, the
federation's largest client against a bucket of the sampled largest, and PyTorch's loop over
the real steps only."""
import jax
import numpy as np

from benchmarks.timing import Timed, time_round_robin
from benchmarks.torch_twins import torch_lstm_round
from fedinit_jax import RoundInput, algorithms, losses, models, with_runtime

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


class LstmRound(Timed):
    """One library FedAvg round of the Shakespeare LSTM (lr 1, no clip or decay)."""

    def __init__(self, execution, num_devices, inp):
        from fedinit_jax.data import shakespeare

        model = models.get("lstm", shakespeare.VOCAB_SIZE)
        params = model.init(jax.random.key(0), (80,))
        loss = losses.next_character_loss(model.apply)
        self.algo = algorithms.get("fedavg", loss, weight_decay=0.0, clip_norm=0.0)
        self.algo = with_runtime(self.algo, execution=execution, num_devices=num_devices)
        self.state = self.algo.init(params, num_clients=len(inp.client_ids))
        self.inp = inp
        self.first_round()
        self.memory_bytes = None


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
            torch_variant = torch_lstm_round(inp, args.torch_device)
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
