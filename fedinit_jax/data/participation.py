"""Which clients take part in a round: the two participation rules, and the static bound
that keeps Bernoulli rounds in one compiled program.

fixed (this library's default; the paper's Section 5.1 "10%-100", Algorithm 1 line 4):
    S = a uniform sample of N = round(participation * C) distinct clients.
bernoulli (the authors' code, with which the paper's tables were made):
    every client takes part with probability `participation`, independently, every round;
    |S| ~ Binomial(C, participation) varies from round to round, and an empty draw is
    redrawn. (The authors seed numpy with seed + round + redraw count; here the draws come
    from this library's per-round Generator, the same distribution.) Two ways to make the
    draw (BERNOULLI_DRAWS), one distribution, different random streams:
      per_client: one uniform number per client, u_i < p: O(C) a round (the default; the
        stream of every run made before `count` existed);
      count: |S| ~ Binomial(C, p), then |S| distinct clients uniformly (numpy's
        Generator.choice without replacement): O(|S|) a round, whatever C. Independent
        inclusions with probability p are exactly a binomial count and a uniform subset of
        that size, so both draws give every non-empty S the probability
        p^|S| (1 - p)^(C - |S|) / (1 - (1 - p)^C) (an empty draw is redrawn).

A compiled round has a static client axis N. Bernoulli rounds pad S to the bound
N = bernoulli_bound(C, p): the smallest n with P(|S| > n) <= 1e-6, rounded up to a multiple
of the devices the clients are split over. Padded slots are masked (RoundInput.mask): they
train nothing and count in nothing, so the bound never changes a result. A round that samples
more than the bound (about once in a million rounds) is not cut: it is padded to the next
multiple of the bound, which compiles that larger round once more.

Split over D devices, the slot axis is cut into D contiguous blocks (one per device), and
padded slots cost (almost) nothing: `spread` deals the real clients evenly over the blocks,
so that a Bernoulli round of |S| clients keeps every device busy (padded after the real ones,
all |S| would land on the first devices). Where a client sits never changes what it computes:
its batches are built before the deal and its PRNG key comes from its id
(federated_round.train_clients).
"""
import math

import numpy as np

__all__ = ["PARTICIPATION_MODES", "BERNOULLI_DRAWS", "TAIL", "round_rng", "expected_clients",
           "sample_clients",
           "MIN_NONEMPTY",
           "MAX_DRAWS", "nonempty_probability", "sample_bernoulli", "binomial_tail",
           "bernoulli_bound", "spread", "pad"]

PARTICIPATION_MODES = ("fixed", "bernoulli")
BERNOULLI_DRAWS = ("per_client", "count")  # how a Bernoulli S is drawn (module doc)
TAIL = 1e-6  # the probability per round that |S| exceeds the static bound


def round_rng(seed: int, t: int) -> np.random.Generator:
    """Round t's (0-based) client-sampling Generator of a run of `seed`: every draw of the
    round's clients comes from it (experiment/simulation.py), so any code that needs to know
    which clients a round samples (a task's test clients) draws the same."""
    return np.random.default_rng([seed, 1, t])


def expected_clients(participation: float, num_clients: int) -> int:
    """E|S| = round(participation * C), at least 1, under either participation rule (the
    paper's Table 9 N)."""
    return max(1, int(round(participation * num_clients)))


def sample_clients(rng: np.random.Generator, num_clients: int, per_round: int) -> np.ndarray:
    """A uniform sample of `per_round` distinct clients, sorted (int32 [N])."""
    if not 1 <= per_round <= num_clients:
        raise ValueError(f"clients per round={per_round} must be in [1, {num_clients}]")
    return np.sort(rng.choice(num_clients, size=per_round, replace=False)).astype(np.int32)


MIN_NONEMPTY = 1e-3  # refused below: P(|S| >= 1) per draw, so a round needs < 1,000 draws
MAX_DRAWS = 100_000  # a round's redraws are bounded (never reached above MIN_NONEMPTY)


def nonempty_probability(num_clients: int, p: float) -> float:
    """P(|S| >= 1) = 1 - (1 - p)^C of one Bernoulli draw."""
    return 1.0 if p >= 1.0 else -math.expm1(num_clients * math.log1p(-p))


def sample_bernoulli(rng: np.random.Generator, num_clients: int, p: float,
                     draw: str = "per_client") -> np.ndarray:
    """Every client with probability p (redrawn while none is drawn), sorted (int32 [|S|]),
    drawn per client (O(C)) or as a count and a subset (O(|S|)): the module doc.

    ValueError when a draw is almost never non-empty (P < MIN_NONEMPTY), so that the redraws
    of a round are bounded."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"participation={p!r} must be in (0, 1]")
    if draw not in BERNOULLI_DRAWS:
        raise ValueError(f"draw={draw!r}: allowed: {', '.join(BERNOULLI_DRAWS)}")
    if nonempty_probability(num_clients, p) < MIN_NONEMPTY:
        raise ValueError(f"participation={p!r} with {num_clients} clients draws nobody with "
                         f"probability {1 - nonempty_probability(num_clients, p):.6f}: needs "
                         f"1 - (1 - participation)^num_clients >= {MIN_NONEMPTY}")
    for _ in range(MAX_DRAWS):
        if draw == "count":
            ids = np.sort(rng.choice(num_clients, rng.binomial(num_clients, p),
                                     replace=False)).astype(np.int32)
        else:
            ids = np.flatnonzero(rng.random(num_clients) < p).astype(np.int32)
        if ids.size:
            return ids
    raise RuntimeError(f"{MAX_DRAWS} empty Bernoulli draws in a row (p={p}, C={num_clients})")


def binomial_tail(n: int, c: int, p: float) -> float:
    """P(X > n) for X ~ Binomial(c, p): the terms k = n+1.. in log space, stopped once past
    the mean they fall below 1e-30 (so a bound over 10^7 clients takes milliseconds)."""
    if p >= 1.0:
        return 0.0 if n >= c else 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total, mean = 0.0, c * p
    for k in range(n + 1, c + 1):
        term = math.exp(math.lgamma(c + 1) - math.lgamma(k + 1) - math.lgamma(c - k + 1)
                        + k * log_p + (c - k) * log_q)
        total += term
        if k > mean and term < 1e-30:
            break
    return total


def bernoulli_bound(num_clients: int, p: float, multiple: int = 1, tail: float = TAIL) -> int:
    """The static client axis of a Bernoulli round: the smallest n with P(|S| > n) <= tail,
    rounded up to a multiple of `multiple` (the devices). Binary search: the tail falls in n."""
    lo, hi = max(1, math.ceil(num_clients * p)), num_clients
    if lo >= hi or binomial_tail(lo, num_clients, p) <= tail:
        hi = lo
    while lo < hi:  # invariant: tail(hi) <= tail < tail(lo)
        mid = (lo + hi) // 2
        if binomial_tail(mid, num_clients, p) <= tail:
            hi = mid
        else:
            lo = mid + 1
    return -(-hi // multiple) * multiple


def spread(num_real: int, num_slots: int, devices: int) -> np.ndarray:
    """The slot order that deals a padded round's real clients evenly over `devices`
    contiguous blocks: `a[order]` for every per-slot array `a` of a round padded by `pad`
    (its num_real real slots first). The j-th real client goes to block j mod D, at place
    j div D of it; each block's padded slots follow its real ones. num_slots must be a
    multiple of devices (`bernoulli_bound(..., multiple=devices)` and `pad` keep it so)."""
    if num_slots % devices:
        raise ValueError(f"{num_slots} slots do not split over {devices} devices")
    block = num_slots // devices
    real = np.arange(num_real)
    place = np.empty(num_slots, np.int64)  # place[i]: the slot of padded-round entry i
    place[:num_real] = (real % devices) * block + real // devices
    filled = np.zeros(num_slots, bool)
    filled[place[:num_real]] = True
    place[num_real:] = np.flatnonzero(~filled)
    order = np.empty(num_slots, np.int64)
    order[place] = np.arange(num_slots)
    return order


def pad(ids: np.ndarray, size: int):
    """(client ids [size], mask [size]): ids followed by padded slots (id 0, mask False).

    When |S| > size, the slots grow to the next multiple of size (one more compilation)."""
    ids = np.asarray(ids, np.int32)
    if ids.size > size:
        size = -(-ids.size // size) * size
    padded = np.zeros(size, np.int32)
    padded[:ids.size] = ids
    return padded, np.arange(size) < ids.size
