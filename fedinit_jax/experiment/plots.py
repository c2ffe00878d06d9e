"""Figures of a federation's data: the clients x classes histogram of a partition, and the
Shakespeare clients' sizes (matplotlib, Agg backend: files only)."""

from fedinit_jax.data.partition import Summary

__all__ = ["save_heatmap"]


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
