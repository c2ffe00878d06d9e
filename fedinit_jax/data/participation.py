"""Which clients take part in a round: the two participation rules, and the static bound
that keeps Bernoulli rounds in one compiled program.

fixed (this library's default; the paper's Section 5.1 "10%-100", Algorithm 1 line 4):
    S = a uniform sample of N = round(participation * C) distinct clients.
bernoulli (the authors' code, with which the paper's tables were made):
    every client takes part with probability `participation`, independently, every round;
    |S| ~ Binomial(C, participation) varies from round to round, and an empty draw is
    redrawn. (The authors seed numpy with seed + round + redraw count; here the draws come
    from this library's per-round Generator, the same distribution.)

A compiled round has a static client axis N. Bernoulli rounds pad S to the bound
N = bernoulli_bound(C, p): the smallest n with P(|S| > n) <= 1e-6, rounded up to a multiple
of the devices the clients are split over. Padded slots are masked (RoundInput.mask): they
train nothing and count in nothing, so the bound never changes a result. A round that samples
more than the bound (about once in a million rounds) is not cut: it is padded to the next
multiple of the bound, which compiles that larger round once more.
"""
import math

import numpy as np

PARTICIPATION_MODES = ("fixed", "bernoulli")
TAIL = 1e-6  # the probability per round that |S| exceeds the static bound


def sample_clients(rng: np.random.Generator, num_clients: int, per_round: int) -> np.ndarray:
    """A uniform sample of `per_round` distinct clients, sorted (int32 [N])."""
    if not 1 <= per_round <= num_clients:
        raise ValueError(f"clients per round={per_round} must be in [1, {num_clients}]")
    return np.sort(rng.choice(num_clients, size=per_round, replace=False)).astype(np.int32)


def sample_bernoulli(rng: np.random.Generator, num_clients: int, p: float) -> np.ndarray:
    """Every client with probability p (redrawn while none is drawn), sorted (int32 [|S|])."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"participation={p!r} must be in (0, 1]")
    while True:
        ids = np.flatnonzero(rng.random(num_clients) < p).astype(np.int32)
        if ids.size:
            return ids


def binomial_tail(n: int, c: int, p: float) -> float:
    """P(X > n) for X ~ Binomial(c, p), summed in log space (no overflow for large c)."""
    if p >= 1.0:
        return 0.0 if n >= c else 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    return sum(math.exp(math.lgamma(c + 1) - math.lgamma(k + 1) - math.lgamma(c - k + 1)
                        + k * log_p + (c - k) * log_q) for k in range(n + 1, c + 1))


def bernoulli_bound(num_clients: int, p: float, multiple: int = 1, tail: float = TAIL) -> int:
    """The static client axis of a Bernoulli round: the smallest n with P(|S| > n) <= tail,
    rounded up to a multiple of `multiple` (the devices)."""
    n = max(1, math.ceil(num_clients * p))
    while n < num_clients and binomial_tail(n, num_clients, p) > tail:
        n += 1
    return -(-n // multiple) * multiple


def pad(ids: np.ndarray, size: int):
    """(client ids [size], mask [size]): ids followed by padded slots (id 0, mask False).

    When |S| > size, the slots grow to the next multiple of size (one more compilation)."""
    ids = np.asarray(ids, np.int32)
    if ids.size > size:
        size = -(-ids.size // size) * size
    padded = np.zeros(size, np.int32)
    padded[:ids.size] = ids
    return padded, np.arange(size) < ids.size
