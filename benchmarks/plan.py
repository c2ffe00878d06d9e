"""Plan the accelerator runs: every preset's round compiled ahead of time (no training, no
image data) for a mesh of D simulated devices with vmapped clients; XLA's memory account per
device, the round's FLOPs, whether it fits each chip, and a predicted round and run time.

    python benchmarks/plan.py                        # every paper preset + shakespeare:paper, D = 1, 8
    python benchmarks/plan.py --devices 8 --presets experiments/configs/paper.py:cifar10-vgg11-dir0.1-10-100
    python benchmarks/plan.py --dry-run              # CI: the default config, D = 1, 2

What is measured and what is predicted:
  * memory: XLA's `memory_analysis()` of the compiled round on one device of the mesh
    (arguments + outputs + temporaries - aliased; the state is donated, as the binaries do);
    "fits" says yes, "host store" when only the round without the [C, ...] client tables
    fits (--config.client_store=host keeps them in host memory), or NO; a config whose
    client_store is host or disk is planned as the cohort round it runs (the server state
    and the N sampled rows: no client tables on the device),
    by the CPU compiler for simulated devices, or by the GPU's with --on-device. A GPU or TPU
    compiler fuses differently from the CPU's, so its temporaries differ: a plan, not a
    promise (the binaries check the real compiled round on the real device before training).
  * FLOPs: the matrix-multiply and convolution FLOPs of the round's jaxpr (scan and map
    bodies times their length; elementwise work not counted), i.e. every slot of the static
    client axis, padded Bernoulli slots included, as vmap computes them; per device: / D.
  * time: a PREDICTION, FLOPs per device / (chip peak x --utilization); run = rounds x round
    (evaluation not included). Peaks: dense TF32 for the GPUs (JAX's default float32 matmul
    precision there), bf16 for the TPUs (their default), from the vendors' data sheets.
The shapes come from each dataset family's `abstract` (fedinit_jax/experiment/tasks: CIFAR
needs no download); Shakespeare's K (masked epochs: the largest client's steps) comes from the
texts (../shared/shakespeare or data_dir).
"""
import argparse
import functools
import importlib.util
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# name: (memory in bytes, peak FLOP/s at JAX's default float32 precision)
CHIPS = {
    "H200 141GB": (141e9, 494e12),   # TF32 tensor core, dense
    "A100 80GB": (80e9, 156e12),     # TF32 tensor core, dense
    "TPU v4 chip 32GB": (32e9, 275e12),   # bf16
    "TPU v5e chip 16GB": (16e9, 197e12),  # bf16
}
# training examples, classes, example shape: what a preset's round needs without the data
# the config fields that decide the compiled round (others, e.g. the Dirichlet alpha, do not)
SHAPE_FIELDS = ("dataset", "model", "model_width", "algorithm", "num_clients", "participation",
                "participation_mode", "batch_size", "local_epochs", "local_steps",
                "client_state_dtype", "aggregation")


def all_presets():
    from experiments.configs import paper

    return ([f"experiments/configs/paper.py:{'-'.join(k)}" for k in paper.PAPER_ACCURACY]
            + ["experiments/configs/shakespeare.py:paper"])


def resolve_spec(spec: str) -> str:
    """'path.py[:argument]' as the binaries' --config takes it, or a preset's bare name as
    the README prints it ('cifar10-resnet18_gn-dir0.1-10-100', 'shakespeare:paper'):
    ValueError naming the spec otherwise."""
    path = spec.partition(":")[0]
    if path.endswith(".py"):
        if not os.path.isfile(os.path.join(ROOT, path)):
            raise ValueError(f"--presets {spec}: no config file {path!r}")
        return spec
    named = {p.rsplit("/", 1)[-1].replace(".py", ""): p for p in all_presets()}
    named.update({p.split(":", 1)[1]: p for p in all_presets() if "paper.py:" in p})
    if spec not in named:
        raise ValueError(f"--presets {spec}: not a config file (path.py[:argument]) nor a "
                         "preset name (the names: experiments/configs/paper.py's header, "
                         "shakespeare:paper)")
    return named[spec]


def load_config(spec: str) -> dict:
    """A validated config from 'path.py[:argument]' or a preset name (resolve_spec), as the
    binaries' --config reads it; ValueError naming the spec or the field when it is bad."""
    from fedinit_jax import experiment

    spec = resolve_spec(spec)
    path, _, arg = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location("preset", os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
        config = (module.get_config(arg) if arg else module.get_config()).to_dict()
    except Exception as err:  # noqa: BLE001 - a config file may raise anything
        raise ValueError(f"--presets {spec}: {type(err).__name__}: {err}") from None
    return experiment.checked(config)


def round_parts(config: dict, devices: int):
    """(algorithm, abstract params, round input with abstract batches, K, N) of a preset
    planned (experiment.plan) for D devices, its clients side by side."""
    import jax
    import numpy as np

    from fedinit_jax import RoundInput, algorithms, experiment

    run_plan = experiment.plan({**config, "num_devices": devices, "execution": "vmap",
                                "chunk_size": None})
    config, n = run_plan.config, run_plan.client_slots
    parts = run_plan.data.family.abstract(run_plan, n)
    algo = algorithms.get(run_plan.algorithm.name, parts.loss_fn, **run_plan.algorithm.kwargs,
                          runtime=run_plan.runtime)
    params = jax.eval_shape(lambda key: parts.model.init(key, parts.input_shape),
                            jax.random.key(0))
    mask = np.ones(n, bool) if experiment.masked(run_plan) else None
    sizes = np.ones(n, np.float32) if run_plan.algorithm.aggregation == "size" else None
    inp = RoundInput(np.arange(n, dtype=np.int32), parts.batches,
                     np.float32(run_plan.schedule.local_lr),
                     mask, parts.step_mask, sizes)
    return algo, params, inp, parts.steps, n


def plan(spec: str, config: dict, devices: int, utilization: float) -> dict:
    """One preset on D devices: sizes, XLA's memory account per device, FLOPs, predictions."""
    import jax

    from fedinit_jax import client_store, experiment, with_runtime
    from fedinit_jax.builder import as_arrays
    from fedinit_jax.federated_round import Cohort, cohort_round
    from fedinit_jax.models.flops import matmul_flops

    algo, params, inp, k, n = round_parts(config, devices)
    c = config["num_clients"]
    state = jax.eval_shape(lambda p: algo.init(p, c), params)
    key = jax.random.key(0)
    stored = config["client_store"] in ("host", "disk")  # the tables never on the device
    t0 = time.perf_counter()
    if stored:  # the cohort round: the server state and the N sampled rows only
        server = jax.eval_shape(lambda p: client_store.server_state(algo, p), params)
        rows = jax.eval_shape(lambda p: algo.init(p, n), params)
        cohort = Cohort(rows.ri_rows, rows.client_state, rows.client_visited)
        compiled = jax.jit(functools.partial(cohort_round, algo.spec, algo.runtime),
                           static_argnums=4).lower(server, cohort, as_arrays(inp), key,
                                                   c).compile()
    else:
        compiled = algo.apply.lower(state, inp, key).compile()
    compile_seconds = time.perf_counter() - t0
    account = experiment.round_memory(compiled)
    unsharded = with_runtime(algo, execution="vmap", num_devices=None)
    flops = matmul_flops(jax.make_jaxpr(unsharded.apply)(state, inp, key).jaxpr) / devices
    d = sum(math.prod(x.shape) for x in jax.tree.leaves(params))
    # the [C, ...] client tables in the round's arguments (its outputs alias them): what a
    # host or disk client store keeps off the device (fedinit_jax/client_store/)
    client_tables = 0 if stored else sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(
        (state.ri_rows, state.client_state, state.client_visited)))
    account["client_tables"] = client_tables
    row = {"preset": spec.split(":", 1)[-1] or spec, "devices": devices, "clients": c,
           "slots": n, "steps": k, "batch": config["batch_size"], "params": d,
           "rounds": config["rounds"], "flops_per_device": flops,
           "compile_seconds": compile_seconds, **account}
    for chip, (memory, peak) in CHIPS.items():
        fits = ("yes" if account["peak"] <= memory else
                "host store" if account["peak"] - client_tables <= memory else "NO")
        row[chip] = (fits,
                     flops / (peak * utilization), flops / (peak * utilization)
                     * config["rounds"] / 3600)
    return row


def tables(rows, utilization):
    from experiments.results import markdown

    def size(x):
        return f"{x / 2**30:.2f} GiB" if x >= 2**30 else f"{x / 2**20:.1f} MiB"

    memory = markdown(
        ["preset", "D", "C / slots N / K / B", "params", "arguments", "client tables",
         "temporaries", "aliased", "peak per device", *[f"fits {chip}" for chip in CHIPS],
         "CPU compile s"],
        [[r["preset"], r["devices"], f"{r['clients']} / {r['slots']} / {r['steps']} / "
          f"{r['batch']}", f"{r['params']:,}", size(r["arguments"]),
          size(r["client_tables"]), size(r["temporaries"]), size(r["aliased"]),
          size(r["peak"]), *[r[c][0] for c in CHIPS], f"{r['compile_seconds']:.0f}"]
         for r in rows])
    speed = markdown(
        ["preset", "D", "GFLOP per round per device",
         *[f"{chip}: s/round, h/run" for chip in CHIPS]],
        [[r["preset"], r["devices"], f"{r['flops_per_device'] / 1e9:,.1f}",
          *[f"{r[c][1]:.3g} s, {r[c][2]:.3g} h" for c in CHIPS]] for r in rows])
    return (f"Memory (XLA's account of the compiled round, per device; measured):\n\n"
            f"{memory}\n\nTime (PREDICTED at {utilization:.0%} of each chip's peak; "
            f"evaluation not included):\n\n{speed}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="*", help="config specs (path.py[:argument]) or "
                        "preset names (default: all presets)")
    parser.add_argument("--devices", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--utilization", type=float, default=0.2,
                        help="fraction of each chip's peak assumed by the time prediction")
    parser.add_argument("--dry-run", action="store_true",
                        help="the default config on 1 and 2 devices (CI)")
    parser.add_argument("--on-device", action="store_true",
                        help="compile for this machine's own devices (e.g. a GPU) instead of "
                        "simulated CPU devices; --devices must not exceed them")
    args = parser.parse_args()
    if args.dry_run:
        args.presets, args.devices = ["experiments/configs/default.py"], [1, 2]
    if not 0 < args.utilization <= 1 or min(args.devices) < 1:
        parser.error("--utilization must be in (0, 1] and --devices >= 1")
    flags = os.environ.get("XLA_FLAGS", "")
    if not args.on_device:  # simulated CPU devices, set before JAX starts
        os.environ["JAX_PLATFORMS"] = "cpu"
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = (f"{flags} --xla_force_host_platform_device_count="
                                       f"{max(args.devices)}").strip()
    import jax

    from fedinit_jax.experiment import tasks

    if max(args.devices) > len(jax.devices()):
        parser.error(f"--devices {max(args.devices)}: only {len(jax.devices())} "
                     f"{jax.default_backend()} devices here")
    print(f"# plan: jax {jax.__version__}, {jax.default_backend()} compiler "
          f"({jax.devices()[0].device_kind}), "
          f"{time.strftime('%Y-%m-%d %H:%M')}\n", flush=True)
    try:
        configs = [(spec, load_config(spec)) for spec in args.presets or all_presets()]
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    rows, planned = [], {}
    for spec, config in configs:
        for devices in args.devices:
            augment = tasks.own_fields(config).get("augment")  # the image family's
            shape = (devices, augment, *(config[k] for k in SHAPE_FIELDS))  # alpha: the same
            if shape not in planned:
                print(f"  compiling {spec} on {devices} devices", file=sys.stderr, flush=True)
                planned[shape] = plan(spec, config, devices, args.utilization)
            rows.append({**planned[shape], "preset": spec.split(":", 1)[-1] or spec})
    print(tables(rows, args.utilization))


if __name__ == "__main__":
    main()
