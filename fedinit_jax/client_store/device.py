"""DeviceStore: the [C, ...] client tables on the device, as FedState keeps them."""
import jax
import jax.numpy as jnp

from fedinit_jax import tree
from fedinit_jax.client_store.rows import check_ids
from fedinit_jax.federated_round import Cohort, divergence_all
from fedinit_jax.types import FederatedAlgorithm

__all__ = ["DeviceStore"]


class DeviceStore:
    """The [C, ...] tables on the device (FedState's), gathered and scattered by jit."""

    def __init__(self, algo: FederatedAlgorithm, params, num_clients: int):
        state = algo.init(params, num_clients)
        self.num_clients = num_clients
        self.spec = algo.spec
        self.tables = Cohort(state.ri_rows, state.client_state, state.client_visited)
        self._gather = jax.jit(tree.gather)
        self._scatter = jax.jit(tree.scatter, donate_argnums=0)

    @classmethod
    def open(cls, algo: FederatedAlgorithm, params, num_clients: int, folder: str):
        """STORES' constructor: no files (the tables are checkpointed with the state)."""
        del folder
        return cls(algo, params, num_clients)

    def gather(self, ids) -> Cohort:
        return self._gather(self.tables, jnp.asarray(check_ids(ids, self.num_clients)))

    def scatter(self, ids, rows: Cohort) -> None:
        ids = check_ids(ids, self.num_clients)
        self.tables = self._scatter(self.tables, jnp.asarray(ids), rows)

    def divergence_all(self, w) -> float:
        return float(divergence_all(self.tables.ri_rows, self.spec.ri_offset.measured_from(w)))

    @property
    def rows_held(self) -> int:
        return self.num_clients


