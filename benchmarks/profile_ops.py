"""Where one client's local update spends its time, per XLA op, from jax.profiler.

    python benchmarks/profile_ops.py --model resnet18_gn --convs xla fast im2col

Profiles the library's own round (FedAvg, one client, one device, K local steps of batch B,
inside the round's `lax.scan`) with `jax.profiler.trace`, reads the trace's per-op events
(`jax.profiler.ProfileData`) and joins them with the compiled HLO: each op's source (the flax
module path in its metadata: which conv, forward or backward), its kind, and for dots and
convolutions its FLOPs (2 x output elements x contracted size), hence its GFLOP/s. Prints,
per conv implementation, a table by kind and the top ops, with the share of the summed op
time. XLA:CPU runs some thunks (plain dots) asynchronously, so their event covers only the
dispatch: a rate above the matmul peak measured in the run is shown as "async" (its time is
then missing from the sums). Timings are from one profiled call after a warm-up (the profiler
slows ops down, so only the shares compare across rows; the unprofiled wall time is printed
too): run it on a quiet machine.
"""
import argparse
import collections
import math
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.timing import image_loss, matmul_peak, round_data  # noqa: E402
from experiments.results import markdown  # noqa: E402
from fedinit_jax import algorithms, models, with_runtime  # noqa: E402

_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\S+?)(?:\{[^}]*\})? ([\w\-]+)\((.*)$")
_SHAPE = re.compile(r"\[([\d,]*)\]")
_CONTROL = {"while", "conditional", "call", "tuple", "get-tuple-element", "parameter",
            "constant", "bitcast"}


def _dims(shape):
    m = _SHAPE.search(shape)
    return [int(d) for d in m.group(1).split(",") if d] if m else []


def parse_hlo(text):
    """{instruction: (opcode, shape, rest of line, computation)} and {computation: [names]}."""
    ops, computations, current = {}, collections.defaultdict(list), None
    for line in text.splitlines():
        if line and not line.startswith(" ") and "{" in line:
            current = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
            continue
        m = _INSTRUCTION.match(line)
        if m:
            name, shape, opcode, rest = m.groups()
            ops[name] = (opcode, shape, rest, current)
            computations[current].append(name)
    return ops, computations


def _flops(name, ops):
    """FLOPs of one dot or convolution instruction (2 x outputs x contracted size)."""
    opcode, shape, rest, _ = ops[name]
    operands = re.findall(r"%([\w.\-]+)", rest.split(")")[0])
    out = math.prod(_dims(shape))
    if opcode == "dot":
        lhs = _dims(ops[operands[0]][1])
        contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest).group(1)
        return 2 * out * math.prod(lhs[int(d)] for d in contracting.split(",") if d)
    window = re.search(r"size=([\dx]+)", rest)
    labels = re.search(r"dim_labels=\w+_(\w+)->", rest).group(1)
    rhs = _dims(ops[operands[1]][1])
    taps = math.prod(int(d) for d in window.group(1).split("x")) if window else 1
    return 2 * out * taps * rhs[labels.index("i")]


def describe(name, ops, computations):
    """(kind, source, flops) of one executed instruction."""
    opcode, _, rest, _ = ops[name]
    called = re.search(r"calls=%([\w.\-]+)", rest)
    inner = computations.get(called.group(1), []) if called else []
    inner_ops = {ops[i][0] for i in inner} | {opcode}
    source = re.search(r'op_name="([^"]*)"', rest)
    source = source.group(1) if source else ""
    passage = "backward" if "transpose(" in source else "forward"
    path = [p for p in source.split("/") if re.match(r"^(Conv|BasicBlock|GroupNorm|Dense)_", p)]
    where = "/".join(path) or "-"
    flops = sum(_flops(i, ops) for i in inner + [name] if ops[i][0] in ("dot", "convolution"))
    if "convolution" in inner_ops:
        kind = "XLA convolution"
    elif "dot" in inner_ops:
        kind = "dense" if "Dense" in where else "GEMM (im2col conv)"
    elif "select-and-scatter" in inner_ops or "reduce-window" in inner_ops:
        kind = "max-pool"
    elif "GroupNorm" in where:
        kind = "GroupNorm"
    elif inner_ops & {"concatenate", "pad", "slice", "copy", "transpose", "dynamic-slice",
                      "dynamic-update-slice"}:
        kind = "data movement (pad/slice/concat/copy)"
    else:
        kind = "elementwise/other (ReLU, loss, SGD, augmentation)"
    return kind, f"{where} {passage} ({opcode})", flops


def profile(model_name, conv, steps, batch):
    """{instruction: seconds per local step}, the compiled text, the wall time per step."""
    model = models.get(model_name, 10, conv=conv)
    params = model.init(jax.random.key(0), (32, 32, 3))
    loss = image_loss(model)
    algo = with_runtime(algorithms.get("fedavg", loss), execution="sequential")
    state = algo.init(params, num_clients=1)
    inp = round_data(1, steps, batch)
    compiled = jax.jit(algo.apply).lower(state, inp, jax.random.key(1)).compile()
    jax.block_until_ready(compiled(state, inp, jax.random.key(1)))
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(state, inp, jax.random.key(1)))
    wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            jax.block_until_ready(compiled(state, inp, jax.random.key(1)))
        (path,) = [os.path.join(d, f) for d, _, fs in os.walk(trace_dir) for f in fs
                   if f.endswith(".xplane.pb")]
        data = jax.profiler.ProfileData.from_file(path)
    ops, computations = parse_hlo(compiled.as_text())
    seconds = collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                if event.name in ops and ops[event.name][0] not in _CONTROL:
                    seconds[event.name] += event.duration_ns * 1e-9 / steps
    return seconds, ops, computations, wall / steps


def tables(model_name, conv, steps, batch, top, peak):
    seconds, ops, computations, wall = profile(model_name, conv, steps, batch)
    total = sum(seconds.values())
    by_kind = collections.defaultdict(lambda: [0.0, 0.0])
    rows = []
    for name, s in seconds.items():
        kind, source, flops = describe(name, ops, computations)
        by_kind[kind][0] += s
        by_kind[kind][1] += flops
        rows.append((s, kind, source, flops))

    def gflops(flops, seconds):
        if not flops:
            return "-"
        rate = flops / seconds / 1e9
        return f"{rate:.0f}" if rate <= peak else "async"

    kind_rows = [[k, f"{1e3 * s:.1f}", f"{100 * s / total:.0f}%", gflops(f, s)]
                 for k, (s, f) in sorted(by_kind.items(), key=lambda kv: -kv[1][0])]
    top_rows = [[source, kind, f"{1e3 * s:.2f}", f"{100 * s / total:.1f}%", gflops(f, s)]
                for s, kind, source, f in sorted(rows, key=lambda r: -r[0])[:top]]
    head = (f"## {model_name}, conv={conv}: one local step of batch {batch} (one client, "
            f"{steps} steps in the round's scan): {1e3 * wall:.0f} ms unprofiled "
            f"({batch / wall:.0f} samples/s); profiled, the ops' events sum to "
            f"{1e3 * total:.0f} ms (ops on both cores' threads add up)\n")
    return (head + "\n" + markdown(["kind", "ms/step", "share", "GFLOP/s"], kind_rows)
            + "\n\n" + markdown(["op (module, pass, HLO op)", "kind", "ms/step", "share",
                                 "GFLOP/s"], top_rows) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18_gn", choices=models.NAMES)
    parser.add_argument("--convs", nargs="*", default=["xla", "fast", "im2col", "auto"],
                        choices=models.CONV_IMPLEMENTATIONS)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    print(f"# profile_ops: jax {jax.__version__} {jax.default_backend()}, {os.cpu_count()} "
          f"cores, numpy {np.__version__}; {time.strftime('%Y-%m-%d %H:%M')}\n")
    peak = matmul_peak()
    print(f"2048^2 fp32 matmul: {peak:.1f} GFLOP/s\n")
    for conv in args.convs:
        print(tables(args.model, conv, args.steps, args.batch, args.top, peak), flush=True)


if __name__ == "__main__":
    main()
