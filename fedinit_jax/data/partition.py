"""Partitioners: seeded numpy functions returning a [C, S] array of train-set indices.

Every client gets exactly S = n // C samples (the remainder n - C*S is left out).

  iid(labels, C, seed)                  a random permutation cut into C shards.
  dirichlet(labels, C, alpha, seed)     "Dirichlet with replacement" as in the authors' code
      (from FedSpeed): per-client class priors p_i ~ Dir(alpha * 1); repeatedly pick a random
      client with free slots, draw a class from p_i and take that class's next unused sample;
      when a class runs out, its pointer is reset (its samples get reused) and the class is
      drawn again. Small alpha: nearly one class per client; large alpha: close to IID.
  pathological(labels, C, classes_per_client, seed)   each client holds exactly c classes,
      S // c samples of each (the first S % c classes one more); classes are spread evenly
      over clients; a class pool that runs out is reshuffled and reused.
"""
import numpy as np

__all__ = ["iid", "dirichlet", "pathological", "Summary", "summarize"]


def _check(labels, num_clients):
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise ValueError(f"labels must be integers >= 0 (class indices), got dtype "
                         f"{labels.dtype}, min {labels.min()}")
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ValueError(f"num_clients={num_clients!r} must be a positive int")
    if num_clients > labels.size:
        raise ValueError(f"num_clients={num_clients} is more than the {labels.size} training "
                         "samples: every client needs at least one")
    return labels, labels.size // num_clients


def _class_pools(labels, num_classes, rng):
    return [rng.permutation(np.flatnonzero(labels == k)) for k in range(num_classes)]


def iid(labels, num_clients: int, seed: int = 0) -> np.ndarray:
    """[C, S] indices: a seeded permutation cut into equal shards."""
    labels, size = _check(labels, num_clients)
    rng = np.random.default_rng(seed)
    return rng.permutation(labels.size)[: num_clients * size].reshape(num_clients, size)


def dirichlet(labels, num_clients: int, alpha: float, seed: int = 0) -> np.ndarray:
    """[C, S] indices, Dirichlet(alpha) label skew with replacement (authors' code)."""
    labels, size = _check(labels, num_clients)
    if not np.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"alpha={alpha!r} must be a finite number > 0 (the paper uses 0.1, 0.6)")
    num_classes = int(labels.max()) + 1
    empty = np.flatnonzero(np.bincount(labels, minlength=num_classes) == 0)
    if empty.size:  # its prior mass would be drawn forever: a client could never be filled
        raise ValueError(f"labels: class(es) {empty.tolist()} of 0..{num_classes - 1} have no "
                         "example; the Dirichlet split needs every class index 0..K-1 present "
                         "(relabel the classes contiguously)")
    rng = np.random.default_rng(seed)
    priors = np.cumsum(rng.dirichlet(np.full(num_classes, float(alpha)), size=num_clients), 1)
    pools = _class_pools(labels, num_classes, rng)
    left = [len(p) for p in pools]
    out = np.empty((num_clients, size), np.int64)
    free = np.full(num_clients, size)
    open_clients = list(range(num_clients))
    while open_clients:
        slot = rng.integers(len(open_clients))
        i = open_clients[slot]
        while True:
            k = min(int(np.searchsorted(priors[i], rng.random(), side="left")), num_classes - 1)
            if left[k] > 0:
                break
            left[k] = len(pools[k])  # class exhausted: reset its pointer, reuse, redraw
        left[k] -= 1
        free[i] -= 1
        out[i, free[i]] = pools[k][left[k]]
        if free[i] == 0:
            open_clients[slot] = open_clients[-1]
            open_clients.pop()
    return out


def pathological(labels, num_clients: int, classes_per_client: int, seed: int = 0) -> np.ndarray:
    """[C, S] indices, each client holding exactly `classes_per_client` classes."""
    labels, size = _check(labels, num_clients)
    num_classes = int(labels.max()) + 1
    if not isinstance(classes_per_client, (int, np.integer)) or not (
            1 <= classes_per_client <= min(num_classes, size)):
        raise ValueError(f"classes_per_client={classes_per_client!r} must be an int in "
                         f"[1, {min(num_classes, size)}]")
    rng = np.random.default_rng(seed)
    pools = _class_pools(labels, num_classes, rng)
    pointer = np.zeros(num_classes, np.int64)
    class_order = rng.permutation(num_classes)
    out = np.empty((num_clients, size), np.int64)
    for i in range(num_clients):
        chosen = class_order[(i * classes_per_client + np.arange(classes_per_client)) % num_classes]
        counts = np.full(classes_per_client, size // classes_per_client)
        counts[: size % classes_per_client] += 1
        taken = []
        for k, count in zip(chosen, counts):
            take = []
            while count > 0:
                if pointer[k] == len(pools[k]):
                    pools[k], pointer[k] = rng.permutation(pools[k]), 0
                step = min(count, len(pools[k]) - pointer[k])
                take.append(pools[k][pointer[k]: pointer[k] + step])
                pointer[k] += step
                count -= step
            taken.extend(take)
        out[i] = rng.permutation(np.concatenate(taken))
    return out


class Summary(dict):
    """histogram [C, classes], samples_per_client [C], reused samples, classes per client."""

    def __str__(self):
        hist = self["histogram"]
        lines = [f"{hist.shape[0]} clients x {self['samples_per_client'][0]} samples, "
                 f"{hist.shape[1]} classes; {self['reused']} samples reused "
                 f"({self['distinct']} distinct); classes per client (>0 samples): "
                 f"min {self['classes_per_client'].min()} mean "
                 f"{self['classes_per_client'].mean():.2f} max {self['classes_per_client'].max()}"]
        for i, row in enumerate(hist[: min(10, len(hist))]):
            lines.append(f"  client {i:3d}: " + " ".join(f"{v:4d}" for v in row))
        if len(hist) > 10:
            lines.append(f"  ... {len(hist) - 10} more clients")
        return "\n".join(lines)


def summarize(indices, labels, num_classes: int) -> Summary:
    """Per-client class histogram, sizes and how many samples are reused."""
    labels = np.asarray(labels)
    hist = np.stack([np.bincount(labels[row], minlength=num_classes) for row in indices])
    distinct = int(np.unique(indices).size)
    return Summary(histogram=hist, samples_per_client=np.array([len(r) for r in indices]),
                   reused=int(indices.size - distinct), distinct=distinct,
                   classes_per_client=(hist > 0).sum(1))
