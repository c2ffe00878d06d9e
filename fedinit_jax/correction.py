"""The plug-in through which every baseline changes the one shared round.

FedAvg is the empty correction. SCAFFOLD, FedDyn, FedCM and FedProx are small pure functions
filling some of these slots (docs/algorithms.md, "The methods"); FedSAM swaps the gradient
function instead, and relaxed initialization (RI) is an option of every algorithm, not a
correction.

Slots (all pure; `ctx` is one client's LocalContext):
  init_server(w) -> server_extra                  e.g. SCAFFOLD's c = 0
  init_client(w) -> one client's extra            e.g. c_i = 0, h_i = 0 (stacked over C)
  gradient(g, w_k, ctx) -> g                      added to the local gradient at iterate w_k,
      before clipping
  decay: float                                    added to the weight decay after clipping
      (FedDyn's lam, FedProx's mu: the authors' clip form, see feddyn.py)
  client_update(ctx, p_i, steps_lr, carry) -> extra   after local training;
      p_i = w_iK - w_i0, the local progress; steps_lr = K * eta_l; carry = the gradient's
      final per-client carry (FedSMOO's mu_i)
  server_update(server_extra, old_S, new_S, mean_p, steps_lr, num_clients, weights)
      -> server_extra; mean_p = mean_S(p_i); weights [N]: 1 for a sampled client, 0 for a
      padded slot (Bernoulli participation), which must not count
  global_model(w_candidate, mean_w_end, server_extra, client_extra_all) -> w
      w_candidate = w after the server optimizer step; FedDyn replaces it.

Every correction state is built from the local progress p_i = w_iK - w_i0, never from the
server's delta_i: under relaxed initialization w_iK - w also holds the RI offset
beta (w - w_i), which would feed back through c_i, h_i or d (the authors' code builds every
state from p_i; with beta = 0 the two are the same). `delta_from` only decides how a
FedAvg-type server moves w (round.py).
"""
from collections.abc import Callable
from typing import Any, NamedTuple

from fedinit_jax.types import Costs


class LocalContext(NamedTuple):
    """What a client's correction may read during local training.

    w_global: w, the global model sent down. w_start: w_i0, the (relaxed) start point.
    server_extra: the server's algorithm state as sent down. client_extra: this client's.
    """

    w_global: Any
    w_start: Any
    server_extra: Any
    client_extra: Any


def _no_state(_params):
    return ()


def _keep_gradient(g, _w, _ctx):
    return g


def _keep_client(ctx, _progress, _steps_lr, _carry):
    return ctx.client_extra


def _keep_server(server_extra, _old, _new, _mean_progress, _steps_lr, _num_clients, _weights):
    return server_extra


def _keep_global(w_candidate, _mean_w_end, _server_extra, _client_extra):
    return w_candidate


class Correction(NamedTuple):
    """An algorithm's additions to FedAvg; every slot defaults to 'do nothing'."""

    init_server: Callable = _no_state
    init_client: Callable = _no_state
    gradient: Callable = _keep_gradient
    decay: float = 0.0
    client_update: Callable = _keep_client
    server_update: Callable = _keep_server
    global_model: Callable = _keep_global
    costs: Costs = Costs()


NONE = Correction()
