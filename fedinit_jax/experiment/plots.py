"""Figures of a federation's data: the clients x classes histogram of a partition, and the
Shakespeare clients' sizes (matplotlib, Agg backend: files only)."""
import numpy as np

from fedinit_jax.data import shakespeare
from fedinit_jax.data.partition import Summary

__all__ = ["save_heatmap", "save_histogram"]


def save_heatmap(summary: Summary, path: str, title: str = "") -> str:
    """A PNG heatmap of the per-client class histogram (clients x classes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = summary["histogram"]
    fig, ax = plt.subplots(figsize=(min(12, 2 + 0.5 * hist.shape[1]), min(10, 2 + 0.08 * hist.shape[0])))
    image = ax.imshow(hist, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(title or f"samples per client and class ({summary['reused']} reused)")
    fig.colorbar(image, ax=ax, label="samples")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def save_histogram(clients, path: str) -> str:
    """A PNG histogram of the clients' training characters (log-spaced bins)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = np.array([max(1, sum(len(s) for s in c.train)) for c in clients])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.hist(sizes, bins=np.logspace(0, np.log10(sizes.max()) + 0.05, 40), color="tab:blue")
    ax.set_xscale("log")
    ax.set_xlabel("training characters per client (role)")
    ax.set_ylabel("clients")
    stats = shakespeare.statistics(clients)
    ax.set_title(f"{stats['clients']} clients in {stats['plays']} plays, "
                 f"{stats['characters']:,} characters (median {stats['median']:,.0f} per client)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
