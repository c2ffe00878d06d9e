"""A Bernoulli round's draw against the federation's size C: participation_draw="per_client"
(one uniform per client, O(C)) and "count" (|S| ~ Binomial(C, p), then |S| distinct clients,
O(|S|)), side by side (round-robin, median of the repeats) at E|S| = 10 clients a round.

    python benchmarks/bernoulli_draw.py                  # the table of benchmarks/RESULTS.md
    python benchmarks/bernoulli_draw.py --sizes 1000,1000000 --repeats 20
"""
import argparse
import functools
import os
import sys
import time
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.timing import time_round_robin  # noqa: E402
from fedinit_jax import data  # noqa: E402

DRAWS = data.BERNOULLI_DRAWS


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000,10000000",
                        help="comma-separated federation sizes C")
    parser.add_argument("--cohort", type=float, default=10.0, help="E|S| = p C")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    print(f"# bernoulli_draw: E|S| = {args.cohort:g}, median of {args.repeats} round-robin "
          f"repeats; numpy {np.__version__}; {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| C | p | " + " | ".join(f"{d} ms" for d in DRAWS) + " | per_client / count |")
    print("|---|---|" + "---|" * (len(DRAWS) + 1))
    for c in (int(s) for s in args.sizes.split(",")):
        p = args.cohort / c
        variants = {d: types.SimpleNamespace(step=functools.partial(
            data.sample_bernoulli, np.random.default_rng(0), c, p, d)) for d in DRAWS}
        times = time_round_robin(variants, args.repeats)
        print(f"| {c:,} | {p:.2g} | " + " | ".join(f"{times[d] * 1e3:.3f}" for d in DRAWS)
              + f" | {times['per_client'] / times['count']:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
