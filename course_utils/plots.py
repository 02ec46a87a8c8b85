"""Training-curve plots."""

__all__ = ["plot_history"]

_EVAL_PREFIXES = ("val_", "test_")


def plot_history(history, title=None):
    """Plot per-epoch metrics, one panel per metric, train and test/validation curves together.

    Args:
        history: a ``{"loss": [...], "test_loss": [...], ...}`` dict of per-epoch values, or a
            Keras ``History`` (its ``.history`` dict is used). Keys starting with ``val_`` or
            ``test_`` are drawn in the same panel as the metric they evaluate.
        title: an optional figure title.

    Returns:
        The matplotlib figure.

    Raises:
        ValueError: the history is empty, or its lists have different lengths.

    Example:
        >>> fig = plot_history({"loss": [0.9, 0.5], "test_loss": [0.8, 0.6]})
    """
    import matplotlib.pyplot as plt

    history = dict(getattr(history, "history", history))
    if not history or not all(len(v) for v in history.values()):
        raise ValueError("plot_history needs at least one metric with at least one value per epoch.")
    lengths = {k: len(v) for k, v in history.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"Every metric needs one value per epoch; the lengths differ: {lengths}.")
    base = lambda key: next((key[len(p):] for p in _EVAL_PREFIXES if key.startswith(p)), key)
    metrics = list(dict.fromkeys(base(k) for k in history))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.2), squeeze=False)
    epochs = range(1, next(iter(lengths.values())) + 1)
    for ax, metric in zip(axes[0], metrics):
        for key, values in history.items():
            if base(key) == metric:
                label = "train" if key == metric else key[: -len(metric) - 1]
                ax.plot(epochs, [float(v) for v in values], marker="o", label=label)
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.set_xticks(list(epochs))
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
