"""FedAvg and FedInit (paper Algorithm 1).

FedAvg (McMahan et al., 2017): every sampled client starts from w, runs K SGD steps, and the
server moves w by the mean update: w <- w + eta_g * mean_S(w_iK - w).

FedInit (this paper): the same, but client i starts from the personalized relaxed
initialization  w_i0 = w + beta * (w - w_i)  (Algorithm 1, line 6), beta = 0.1 by default.
Every other baseline is this builder with a Correction or a server optimizer plugged in, so
"+RI" is the `beta` argument of any of them.
"""
import optax

from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.builder import build_algorithm
from fedinit_jax.checks import check_number
from fedinit_jax.correction import NONE
from fedinit_jax.types import DEFAULT_RUNTIME, Runtime

__all__ = ["fedavg", "fedinit"]


def fedavg(loss_fn, *, server_lr: float = 1.0, server_optimizer=None, client_optimizer=None,
           beta: float = 0.0, delta_from: str = "global", weight_decay: float | None = 1e-3,
           clip_norm: float | None = 10.0, first_visit: str = "init",
           ri_offset: str = "model", runtime: Runtime = DEFAULT_RUNTIME, correction=NONE):
    """FedAvg (+RI when beta != 0) for `loss_fn(params, batch, key) -> scalar mean loss`.

    Defaults are the paper's (Section 5): eta_g = 1, weight decay 1e-3 and clipping at
    global norm 10 (the authors' code clips every local gradient); pass weight_decay=None,
    clip_norm=None for a plain loss.
    server_optimizer: an optax transformation that replaces sgd(server_lr) on the
      pseudo-gradient -mean_S(delta_i) (e.g. optax.adam(1e-2): FedAdam with bias correction);
      server_lr is then refused unless left at 1. With beta != 0 and delta_from="global" a
      server optimizer that keeps state (momentum, Adam's moments) is refused: the
      pseudo-gradient then holds the RI offset beta * mean_S(w - w_i), which is no descent
      direction, and such an optimizer accumulates it (Adam also normalises it to a full
      step per coordinate), so w drifts away from the clients' models round after round
      (tests/test_algorithms.py shows it). Use delta_from="start" (the authors' code:
      the server sees only the local progress), or a stateless sgd(eta_g).
    client_optimizer: an optax transformation applied after clipping and weight decay, whose
      updates each local step scales by -eta_l (default: none, the paper's SGD; e.g.
      optax.trace(0.9) for local momentum). Its state starts fresh each round (local.py).
    beta: relaxed initialization w_i0 = w + beta (w - w_i), the value init writes into the
      state (FedState.beta: a round reads the state's, so fedavg and fedinit make one round
      and differ in their states); delta_from: "global" (the paper,
      delta_i = w_iK - w) or "start" (the authors' code, delta_i = w_iK - w_i0).
    first_visit: where a client sampled for the first time starts: "init" (Algorithm 1
      as written: w_i = w^0, so w + beta (w - w^0)) or "global" (from w: its RI offset is
      zero until it has a last local model of its own). They differ only with beta != 0 and
      only while clients are new; with delta_from="global" the first visits' offsets are
      carried into w, which is what "global" avoids when most sampled clients are new
      (cross-device federations: docs/algorithms.md, "First visit").
    ri_offset: the RI offset o_i in w_i0 = w + beta o_i: "model" (the paper's Algorithm 1,
      o_i = w - w_i, the default), or a departure from the paper whose offset does not grow
      with the time since the client's last visit: "next" (o_i = w^{tau_i + 1} - w_i, the
      offset Algorithm 1 would have used had the client returned the next round; equal to
      Algorithm 1 when clients return every round), "drift" (o_i = w^{tau_i} - w_i, the
      client's own last drift) or "momentum" (o_i = w^{tau_i + 1} - w_i + m^t: the server
      steps since the visit replaced by their expectation m^t, a decaying sum of w's steps
      whose feedback gain is capped below 1; FedState.ri_state, one model-sized vector on
      the server) or "shared" (o_i = m^t, the same for every client: "momentum" without the
      client's own part, a server momentum the clients start from) or "lookahead" (o_i =
      w^t - w^{t-1}, the server's last step: FedACG's start, algorithms/fedacg.py). An offset
      rule stores its row's part of o_i instead of w_i (same cost) and needs
      first_visit="global" (a first offset is zero). Every rule is an OffsetRule of
      fedinit_jax/ri_offset.py, and ri_offset.register adds one (docs/algorithms.md,
      "Clients that return late").
    runtime: how the round runs (fedinit_jax.Runtime), never what it computes; or later
      with `fedinit_jax.with_runtime(algo, execution="sequential")`.
    correction: the plug-in the other builders are made of (not an option of theirs).
    """
    check_number("server_lr", server_lr, 0.0, low_open=True)
    if server_optimizer is None:
        server_optimizer = optax.sgd(server_lr)
    elif server_lr != 1.0:
        raise ValueError(f"server_lr={server_lr!r}: server_optimizer replaces sgd(server_lr), "
                         "so server_lr would be ignored; put the step size into the optimizer "
                         "(e.g. optax.adam(server_lr))")
    return build_algorithm(
        loss_fn, correction=correction, beta=beta, delta_from=delta_from,
        server_optimizer=server_optimizer, client_optimizer=client_optimizer,
        clip_norm=clip_norm, weight_decay=weight_decay, first_visit=first_visit,
        ri_offset=ri_offset, runtime=runtime)


@shares_fedavg_options(fedavg)
def fedinit(loss_fn, *, beta: float = 0.1, **options):
    """FedInit (the paper's Algorithm 1): FedAvg with relaxed initialization
    w_i0 = w + beta (w - w_i), beta = 0.1.

    Args:
      loss_fn: `loss_fn(params, batch, key) -> scalar mean loss`.
      beta: the RI coefficient (the paper's default 0.1; 0 is FedAvg).
      **options: every option of fedavg, with its default (help(fedavg) gives each in full):
        delta_from="global" (the paper: delta_i = w_iK - w; it carries the RI offset
        beta mean_S(w - w_i) into w) or "start" (the authors' code: w_iK - w_i0);
        first_visit="init" (Algorithm 1: a new client's w_i is w^0) or "global" (a new
        client starts from w); ri_offset="model" (Algorithm 1, o_i = w - w_i) or an offset
        rule, "next", "drift", "momentum", "shared" or "lookahead" (each needs
        first_visit="global"; ri_offset.RULES holds every registered one);
        server_lr=1, server_optimizer (an optax transformation; one with state, e.g. momentum
        or Adam, is refused with delta_from="global", which would accumulate the offset),
        client_optimizer, weight_decay=1e-3, clip_norm=10, runtime (vmap, sequential or
        chunked clients, devices), correction.

    Returns:
      a FederatedAlgorithm: `init(params, num_clients) -> FedState`, `apply(state,
      round_input, key) -> (state, metrics)`.
    """
    return fedavg(loss_fn, beta=beta, **options)
