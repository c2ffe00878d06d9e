"""What a federation's state costs, from the state's own shapes: jax.eval_shape of algo.init
(nothing allocated). What an algorithm communicates is declared (Costs.down / up, client
work); what it stores is measured here, so the memory checks and the planner never count
names, and tests/test_contract.py checks that the declared storage (Costs.server_state,
Costs.client_state) matches these counts for every registered algorithm.

    state_costs(algo, params).per_client_bytes * C   # the [C, ...] tables (or a store's rows)
"""
import math
from typing import NamedTuple

import jax

from fedinit_jax.types import FederatedAlgorithm

__all__ = ["StateCosts", "state_costs"]


class StateCosts(NamedTuple):
    """d: the model's parameters. client_vectors / server_vectors: model-sized vectors kept
    per client (w_i and its correction state: c_i, h_i, ...) and by the server (w, its
    correction state and its optimizer's: c, d, Adam's m and v); smaller leaves (a step
    count) are not vectors. per_client_bytes / server_bytes: their bytes, as stored (the
    runtime's client_state_dtype)."""

    d: int
    client_vectors: int
    server_vectors: int
    per_client_bytes: int
    server_bytes: int


def _elements(tree) -> int:
    return sum(math.prod(x.shape) for x in jax.tree.leaves(tree))


def _bytes(tree) -> int:
    return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def state_costs(algo: FederatedAlgorithm, params) -> StateCosts:
    """The StateCosts of algo's state for a model with `params` (arrays or
    jax.ShapeDtypeStruct), from jax.eval_shape(algo.init) of one client."""
    state = jax.eval_shape(lambda p: algo.init(p, 1), params)
    d = _elements(state.params)
    client = (state.ri_rows, state.client_state)
    server = (state.params, state.server_state, state.server_opt_state, state.ri_state)
    return StateCosts(d, _elements(client) // d, _elements(server) // d, _bytes(client),
                      _bytes(server))
