"""An independent plain-numpy simulator of every algorithm, written from docs/algorithms.md.

Loops over rounds, clients and steps; float64; a linear-regression model whose parameters
are one flat vector theta = [w (d), b]. It shares no code with the library.

As the authors' simulator: every correction state (c_i, c, h_i, d, mu_i, s) is built from
the local progress p_i = w_iK - w_i0; `delta_from` only moves a FedAvg-type server; FedDyn's
and FedProx's pull lam * w is added after clipping, with the weight decay. A round's ids may
have any length (Bernoulli participation: |S| varies).
"""
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np


class NumpyRule(NamedTuple):
    """An RI offset rule in numpy, o_i of w_i0 = w + beta o_i (one client's flat vectors).

    first_row(theta0) -> a row before the client's first visit.
    offset(w, row, state) -> o_i.  stored(w_old, w_new, end) -> the row after its round.
    init(theta0) -> the rule's server state (None: none).
    update(state, w_old, w_new, cohort_size, num_clients, beta) -> the state after a round.
    from_model: Delta^t measures the rows from w (they are models), else from zero.
    """

    first_row: Callable
    offset: Callable
    stored: Callable
    init: Callable = lambda theta0: None
    update: Callable = lambda state, *args: state
    from_model: bool = False


def _gamma(cohort_size, num_clients, beta):
    return min(1.0 - cohort_size / num_clients, 0.9 / (0.9 + abs(beta)))


def _momentum_update(m, w_old, w_new, cohort_size, num_clients, beta):
    return _gamma(cohort_size, num_clients, beta) * (m + w_new - w_old)


_NEXT = NumpyRule(first_row=np.zeros_like, offset=lambda w, row, m: row,
                  stored=lambda w_old, w_new, end: w_new - end)
# written from docs/algorithms.md ("Clients that return late"), one per ri_offset
OFFSET_RULES: dict[str, Any] = {
    "model": NumpyRule(first_row=np.copy, offset=lambda w, row, m: w - row,
                       stored=lambda w_old, w_new, end: end, from_model=True),
    "next": _NEXT,
    "drift": _NEXT._replace(stored=lambda w_old, w_new, end: w_old - end),
    "momentum": _NEXT._replace(offset=lambda w, row, m: row + m, init=np.zeros_like,
                               update=_momentum_update),
    "shared": _NEXT._replace(offset=lambda w, row, m: m, init=np.zeros_like,
                             update=_momentum_update),
}


def mse_grad(theta, x, y):
    """Gradient of mean((x @ w + b - y)^2) with theta = [w, b]."""
    r = x @ theta[:-1] + theta[-1] - y
    return np.concatenate([2.0 * x.T @ r / len(y), [2.0 * r.mean()]])


def mse_loss(theta, x, y):
    return float(np.mean((x @ theta[:-1] + theta[-1] - y) ** 2))


def simulate(alg, theta0, num_clients, rounds, *, beta=0.0, delta_from="global", clip=None,
             wd=None, server_lr=1.0, rho=0.0, lam=0.1, alpha=0.1, mu=0.0,
             b1=0.9, b2=0.99, eps=0.01, momentum=0.9, client_momentum=None,
             ri_offset="model"):
    """rounds: list of (ids, xs [N, K, B, d], ys [N, K, B], lr). Returns a dict of final state.

    The SAM family composes: fedspeed = SAM + FedDyn, fedgamma = SAM + SCAFFOLD,
    mofedsam = SAM + FedCM, fedsmoo = dynamic SAM (mu_i, s) + FedDyn; fedadam and fedyogi
    are FedAvg with Reddi et al.'s Adam / Yogi server step (m, v; no bias correction),
    fedavgm with Hsu et al.'s server momentum (m <- momentum m - dbar, w <- w - eta_g m).
    client_momentum: heavy-ball momentum in every client's local steps, u = m u + g,
    x -= lr u, u = 0 at the start of each client's round.
    ri_offset: the RI offset o_i of w_i0 = w + beta o_i, a name of OFFSET_RULES or a
    NumpyRule: "model" o_i = w - w_i (Algorithm 1); "next" o_i = w^{t+1} - w_iK kept from the
    client's last round t; "drift" o_i = w^t - w_iK; "momentum" o_i = (w^{t+1} - w_iK) + m,
    m <- gamma (m + w_new - w) after each round, gamma = min(1 - |S|/C, 0.9 / (0.9 +
    |beta|)), m = 0 at first, added for new clients too; "shared" o_i = m alone (each
    client's w^{t+1} - w_iK still kept, for divergence_all); an offset starts at 0 (a client
    never sampled starts from w). Returns "w_local" as the stored rows: w_i ("model") or
    o_i, "ri_state" the rule's server state; divergence_all is (1/C) sum ||o_i||^2 under
    each.
    fedacg (Kim et al. 2024): start w + beta m (beta its lambda), the pull mu (x - start)
    added to the gradient before clipping, m <- beta m + mean_S(progress), w <- w + m; its
    rows keep w^{t+1} - w_iK.
    """
    rule = OFFSET_RULES[ri_offset] if isinstance(ri_offset, str) else ri_offset
    acg = alg == "fedacg"
    if acg:
        rule = OFFSET_RULES["next"]  # what FedACG's rows keep (Delta^t); its start is below
    sam = alg in ("fedsam", "fedspeed", "fedgamma", "mofedsam")
    dyn = alg in ("feddyn", "fedspeed", "fedsmoo")
    scaf = alg in ("scaffold", "fedgamma")
    cm = alg in ("fedcm", "mofedsam")
    w = theta0.astype(np.float64).copy()
    rows = [rule.first_row(w) for _ in range(num_clients)]
    c = np.zeros_like(w)
    c_i = [np.zeros_like(w) for _ in range(num_clients)]
    h_i = [np.zeros_like(w) for _ in range(num_clients)]
    d = np.zeros_like(w)
    m = np.zeros_like(w)
    v = np.full_like(w, eps ** 2) if alg == "fedyogi" else np.zeros_like(w)
    mu_i = [np.zeros_like(w) for _ in range(num_clients)]
    s = np.zeros_like(w)
    ri_state = rule.init(w)
    m_acg = np.zeros_like(w)  # FedACG's server momentum, its clients' shared offset
    history = []
    clipped = []  # per local step: was the gradient clipped?
    for ids, xs, ys, lr in rounds:
        num_steps = xs.shape[1]
        ends, deltas, progresses, new_ci, losses = [], [], [], {}, []
        for n, i in enumerate(ids):
            start = w + beta * (m_acg if acg else rule.offset(w, rows[i], ri_state))
            x = start.copy()
            dual = mu_i[i].copy()
            u = np.zeros_like(x)
            for k in range(num_steps):
                bx, by = xs[n, k].astype(np.float64), ys[n, k].astype(np.float64)
                losses.append(mse_loss(x, bx, by))
                g = mse_grad(x, bx, by)
                if sam:
                    e = rho * g / (np.linalg.norm(g) + 1e-7)
                    g = mse_grad(x + e, bx, by)
                if alg == "fedsmoo":
                    g_tilde = g - (dual + s)
                    e = rho * g_tilde / (np.linalg.norm(g_tilde) + 1e-7)
                    dual = dual + e - s
                    g = mse_grad(x + e, bx, by)
                pull = 0.0  # the proximal / dual pull, added after clipping
                if scaf:
                    g = g + (c - c_i[i])
                elif dyn:
                    g = g + lam * (h_i[i] - start)
                    pull = lam
                elif cm:
                    g = alpha * g + (1 - alpha) * d
                elif acg:
                    g = g + mu * (x - start)
                elif alg == "fedprox":
                    g = g - mu * start
                    pull = mu
                clipped.append(bool(clip) and np.linalg.norm(g) > clip)
                if clipped[-1]:
                    g = g * clip / np.linalg.norm(g)
                g = g + ((wd or 0.0) + pull) * x
                if client_momentum is not None:
                    u = client_momentum * u + g
                    g = u
                x = x - lr * g
            progress = x - start
            ends.append(x)
            deltas.append(x - w if delta_from == "global" else progress)
            progresses.append(progress)
            if scaf:
                new_ci[i] = c_i[i] - c - progress / (num_steps * lr)
            if dyn:
                h_i[i] = h_i[i] + progress
            if alg == "fedsmoo":
                mu_i[i] = dual
        w_old = w.copy()
        mean_delta = np.mean(deltas, axis=0)
        mean_progress = np.mean(progresses, axis=0)
        if alg == "fedavgm":  # Hsu et al.: heavy-ball server momentum on -mean_S(delta)
            m = momentum * m - mean_delta
            w = w - server_lr * m
        elif alg in ("fedadam", "fedyogi"):
            m = b1 * m + (1 - b1) * mean_delta
            if alg == "fedadam":
                v = b2 * v + (1 - b2) * mean_delta ** 2
            else:  # Yogi (Reddi et al. 2021, Algorithm 2), v starting at eps^2
                v = v - (1 - b2) * mean_delta ** 2 * np.sign(v - mean_delta ** 2)
            w = w + server_lr * m / (np.sqrt(v) + eps)
        elif dyn:
            w = np.mean(ends, axis=0) + np.mean(h_i, axis=0)
        elif acg:
            m_acg = beta * m_acg + mean_progress
            w = w + m_acg
        else:
            w = w + server_lr * mean_delta
        if alg == "fedsmoo":
            mean_mu = np.mean([mu_i[i] for i in ids], axis=0)
            s = rho * mean_mu / (np.linalg.norm(mean_mu) + 1e-7)
        if scaf:
            c = c + sum(new_ci[i] - c_i[i] for i in ids) / num_clients
            for i in ids:
                c_i[i] = new_ci[i]
        if cm:
            d = -mean_progress / (num_steps * lr)
        for n, i in enumerate(ids):
            rows[i] = rule.stored(w_old, w, ends[n])
        ri_state = rule.update(ri_state, w_old, w, len(ids), num_clients, beta)
        measured_from = w if rule.from_model else 0.0
        history.append({
            "train_loss": float(np.mean(losses)),
            "divergence": float(np.mean([np.sum((e - w) ** 2) for e in ends])),
            "divergence_all": float(np.mean([np.sum((r - measured_from) ** 2) for r in rows])),
        })
    return {"w": w, "w_local": np.stack(rows), "c": c, "c_i": np.stack(c_i),
            "h_i": np.stack(h_i), "d": d, "mu_i": np.stack(mu_i), "s": s, "m": m, "v": v,
            "ri_state": m_acg if acg else ri_state, "history": history,
            "clipped_steps": int(np.sum(clipped)), "steps": len(clipped)}
