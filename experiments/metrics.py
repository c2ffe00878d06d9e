"""Reporting metrics: the paper's smoothed accuracy, rounds to a target, and Table 9 costs.

Paper reporting (Section 5): smooth the test-accuracy curve with a moving-average
(convolution) filter, take the max over the last 50 rounds, report mean +- std over seeds.
The paper does not give the window; the default here is 5.
"""
import numpy as np

from fedinit_jax.types import Costs


def smooth(values, window: int = 5) -> np.ndarray:
    """Moving average with a `window`-wide box filter ('valid' part; the raw curve if shorter)."""
    values = np.asarray(values, np.float64)
    if window < 1:
        raise ValueError(f"window={window} must be >= 1")
    if window == 1 or len(values) < window:
        return values
    return np.convolve(values, np.ones(window) / window, mode="valid")


def rounds_to_target(rounds, values, target: float):
    """First round whose value reaches `target`, or None."""
    for r, v in zip(rounds, values):
        if v >= target:
            return int(r)
    return None


def cost_row(costs: Costs) -> dict:
    """Per-round communication and storage in units of the model size d.

    down/up: vectors per sampled client per round (x N d in total); the paper's Table 9
    'Communication' counts the downlink. client_storage: the client's own model, its
    persistent state and the extra vectors it holds while training (x C d over all clients).
    server_storage: w and the server's state.
    """
    return {
        "down": len(costs.down), "up": len(costs.up),
        "client_storage": 1 + len(costs.client_state) + len(costs.client_work),
        "server_storage": 1 + len(costs.server_state),
    }


def cost_table(named_costs: dict, num_params: int, clients_per_round: int,
               num_clients: int, bytes_per_float: int = 4) -> list[dict]:
    """Table 9 rows (floats, bytes and ratio to the first entry) from the algorithms' Costs."""
    rows = []
    base = None
    for name, costs in named_costs.items():
        row = cost_row(costs)
        base = base or row
        down = row["down"] * clients_per_round * num_params
        up = row["up"] * clients_per_round * num_params
        store = row["client_storage"] * num_clients * num_params
        rows.append({
            "method": name,
            "down_floats": down, "up_floats": up, "client_storage_floats": store,
            "down_bytes": down * bytes_per_float, "up_bytes": up * bytes_per_float,
            "client_storage_bytes": store * bytes_per_float,
            "down_ratio": row["down"] / base["down"], "up_ratio": row["up"] / base["up"],
            "storage_ratio": row["client_storage"] / base["client_storage"],
            "server_storage_floats": row["server_storage"] * num_params,
        })
    return rows
