"""The plug-in through which every baseline changes the one shared round.

A Correction has a client side (ClientCorrection: init, gradient, finalize), a server side
(ServerCorrection: init, update) and optionally its own local gradient rule (SAM's); what
it communicates is declared in the registry (algorithms.REGISTRY[name].costs). FedAvg is
the empty Correction; SCAFFOLD, FedDyn, FedCM and FedProx fill a few slots
(docs/algorithms.md, "The methods"); SAM is a Correction that only swaps the gradient, and
`compose(base, extra)` stacks two of them, so FedSpeed = compose(FedDyn, SAM), FedGamma =
compose(SCAFFOLD, SAM), MoFedSAM = compose(FedCM, SAM), FedSMOO = compose(FedDyn, SMOO).
Relaxed initialization (RI) is an option of every algorithm, not a correction.

Each algorithm keeps its state in NamedTuples of its own (SCAFFOLD: ScaffoldState(c) on the
server, ScaffoldClientState(c_i) per client, stacked over C in FedState.client_state).

Every correction state is built from the local progress p_i = w_iK - w_i0, never from the
server's delta_i: under relaxed initialization w_iK - w also holds the RI offset
beta (w - w_i), which would feed back through c_i, h_i or d (the authors' code builds every
state from p_i; with beta = 0 the two are the same). `delta_from` only decides how a
FedAvg-type server moves w (federated_round.py).
"""
from typing import Any, NamedTuple, Protocol

from fedinit_jax.types import Array, Params, PyTree

__all__ = ["LocalContext", "ServerInput", "InitFn", "GradientFn", "FinalizeFn", "ServerUpdateFn",
           "no_state", "keep_gradient", "keep_client_state", "fedavg_server", "ClientCorrection",
           "ServerCorrection", "Correction", "NONE", "Composed", "compose"]


class LocalContext(NamedTuple):
    """What a client's correction may read during local training.

    w_global: w, the global model sent down. w_start: w_i0, the (relaxed) start point.
    server_state: the correction's server state as sent down. client_state: this client's.
    """

    w_global: Params
    w_start: Params
    server_state: PyTree
    client_state: PyTree


class ServerInput(NamedTuple):
    """What the server side of a correction reads after the clients' local training.

    w_candidate: w after the server optimizer's step on -mean_S(delta_i).
    mean_w_end: mean_S(w_iK).  mean_progress: mean_S(p_i), p_i = w_iK - w_i0.
    lr_sum: K * eta_l, the sum of the round's K local step sizes (with masked steps,
      RoundInput.step_mask: the mean over S of each client's real steps times eta_l).
    old_clients / new_clients: the sampled clients' states before / after the round, [N, ...]
      (a quantity over all C, FedDyn's mean_C(h_i), is kept in the server state and moved
      by new - old: a round reads no other client's state).
    num_clients: C ([] float32, traced).  mask: None, or [N] float: 1 for a sampled client, 0 for a padded slot
      (Bernoulli participation), which must not count (RoundInput.mask as numbers).
    """

    w_candidate: Params
    mean_w_end: Params
    mean_progress: Params
    lr_sum: Array
    old_clients: PyTree
    new_clients: PyTree
    num_clients: Array
    mask: Array | None


class InitFn(Protocol):
    def __call__(self, params: Params) -> PyTree: ...


class GradientFn(Protocol):
    """g -> the corrected g at iterate w_k (before clipping)."""

    def __call__(self, g: Params, w_k: Params, ctx: LocalContext) -> Params: ...


class FinalizeFn(Protocol):
    """A client's new state after training; lr_sum = its real local steps times eta_l;
    carry is the gradient rule's final carry."""

    def __call__(self, ctx: LocalContext, progress: Params, lr_sum: Array,
                 carry: PyTree) -> PyTree: ...


class ServerUpdateFn(Protocol):
    """(new server state, the new global model w)."""

    def __call__(self, state: PyTree, inputs: ServerInput) -> tuple[PyTree, Params]: ...


def no_state(_params):
    return ()


def keep_gradient(g, _w_k, _ctx):
    return g


def keep_client_state(ctx, _progress, _lr_sum, _carry):
    return ctx.client_state


def fedavg_server(state, inputs):
    return state, inputs.w_candidate


class ClientCorrection(NamedTuple):
    """init(w) -> one client's state (stacked over C by the round); gradient; finalize.
    decay: added to the weight decay after clipping (FedDyn's lam, FedProx's mu: the
    authors' clip form, see feddyn.py)."""

    init: InitFn = no_state
    gradient: GradientFn = keep_gradient
    finalize: FinalizeFn = keep_client_state
    decay: float = 0.0


class ServerCorrection(NamedTuple):
    """init(w) -> the server's state; update(state, ServerInput) -> (state, w). The default
    keeps w_candidate (FedAvg-type servers); FedDyn replaces it."""

    init: InitFn = no_state
    update: ServerUpdateFn = fedavg_server


class Correction(NamedTuple):
    """An algorithm's additions to FedAvg; every part defaults to 'do nothing'.

    local_gradient: loss_fn -> local.Gradient (SAM's, FedSMOO's); None: the plain gradient.
    """

    client: ClientCorrection = ClientCorrection()
    server: ServerCorrection = ServerCorrection()
    local_gradient: Any = None


NONE = Correction()


class Composed(NamedTuple):
    """The state of compose(base, extra): each part's own."""

    base: PyTree
    extra: PyTree


def compose(base: Correction, extra: Correction) -> Correction:
    """`base` and `extra` in one round: extra's gradient correction applies after base's,
    its server update sees base's w; the decays add; states are Composed(base, extra), each
    part reading only its own (as if it ran alone). At most one may bring a local_gradient,
    which then sees its own part's state."""
    if base.local_gradient is not None and extra.local_gradient is not None:
        raise ValueError("compose: both corrections bring a local gradient rule; one only")

    def view(ctx, part):
        return ctx._replace(server_state=getattr(ctx.server_state, part),
                            client_state=getattr(ctx.client_state, part))

    def gradient(g, w_k, ctx):
        g = base.client.gradient(g, w_k, view(ctx, "base"))
        return extra.client.gradient(g, w_k, view(ctx, "extra"))

    def finalize(ctx, progress, lr_sum, carry):
        return Composed(base.client.finalize(view(ctx, "base"), progress, lr_sum, carry),
                        extra.client.finalize(view(ctx, "extra"), progress, lr_sum, carry))

    def update(state, inputs):
        def part(name):
            return inputs._replace(**{f: getattr(getattr(inputs, f), name)
                                      for f in ("old_clients", "new_clients")})

        base_state, w = base.server.update(state.base, part("base"))
        extra_state, w = extra.server.update(state.extra, part("extra")._replace(w_candidate=w))
        return Composed(base_state, extra_state), w

    owner, rule = (("extra", extra.local_gradient) if extra.local_gradient is not None
                   else ("base", base.local_gradient))
    local_gradient = None
    if rule is not None:
        def local_gradient(loss_fn):
            inner = rule(loss_fn)
            return inner._replace(
                init=lambda ctx: inner.init(view(ctx, owner)),
                apply=lambda w, batch, key, carry, ctx: inner.apply(w, batch, key, carry,
                                                                    view(ctx, owner)))

    return Correction(
        client=ClientCorrection(
            init=lambda w: Composed(base.client.init(w), extra.client.init(w)),
            gradient=gradient, finalize=finalize,
            decay=base.client.decay + extra.client.decay),
        server=ServerCorrection(
            init=lambda w: Composed(base.server.init(w), extra.server.init(w)), update=update),
        local_gradient=local_gradient)
