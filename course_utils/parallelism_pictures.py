"""Small pictures of the kinds of parallelism chapter 7 names but does not run: pipeline, sequence, expert.

Each picture shows the same four devices and what each one holds and sends. They are drawn from
the rules of each scheme (a GPipe-style schedule, a ring over sequence chunks, tokens routed to
experts), not measured.
"""
import matplotlib.pyplot as plt
import numpy as np

__all__ = ["KINDS", "draw_parallelism"]

KINDS = ("pipeline", "sequence", "expert")


def draw_parallelism(kinds=KINDS, devices=4, micro_batches=4):
    """Draw one panel per kind of parallelism over ``devices`` devices.

    Args:
        kinds: a sequence of names from :data:`KINDS`.
        devices: how many devices (2 to 8).
        micro_batches: for ``pipeline``: how many micro-batches go through the stages (1 to 8).

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: an unknown kind, no kind, or a number of devices or micro-batches outside its range.

    Example:
        >>> figure = draw_parallelism(["pipeline"], devices=4, micro_batches=4)
    """
    kinds = list(kinds)
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"kinds must be a non-empty list of {KINDS}, not {kinds!r}.")
    if not 2 <= devices <= 8:
        raise ValueError(f"devices must be between 2 and 8 (one row or colour each), not {devices}.")
    if not 1 <= micro_batches <= 8:
        raise ValueError(f"micro_batches must be between 1 and 8, not {micro_batches}.")
    figure, axes = plt.subplots(1, len(kinds), figsize=(4.6 * len(kinds), 3.2), squeeze=False)
    draw = {"pipeline": _pipeline, "sequence": _sequence, "expert": _expert}
    for ax, kind in zip(axes[0], kinds):
        draw[kind](ax, devices, micro_batches)
    figure.tight_layout()
    return figure


def _pipeline(ax, devices, micro_batches):
    """Forward then backward passes of each micro-batch through the stages (one stage per device)."""
    steps = 2 * (micro_batches + devices - 1)
    grid = np.full((devices, steps), np.nan)
    for stage in range(devices):
        for batch in range(micro_batches):
            grid[stage, stage + batch] = batch  # forward: stage s starts micro-batch b at step s + b
            grid[stage, steps - 1 - stage - (micro_batches - 1 - batch)] = batch  # backward, in reverse
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, aspect="auto")
    for stage, step in zip(*np.nonzero(~np.isnan(grid))):
        ax.text(step, stage, f"{'F' if step < steps // 2 else 'B'}{int(grid[stage, step])}", ha="center",
                va="center", fontsize=7)
    idle = np.isnan(grid).sum() / grid.size
    ax.set(title=f"pipeline: layers split into {devices} stages\nwhite = idle ('bubble'): {idle:.0%} of the time",
           xlabel="time step", ylabel="device (stage)", yticks=range(devices))


def _sequence(ax, devices, micro_batches):
    """A long sequence split into one chunk per device; keys and values pass round a ring."""
    colors = plt.get_cmap("tab10")
    for device in range(devices):
        ax.add_patch(plt.Rectangle((device * 2, 0), 1.8, 1, color=colors(device), alpha=0.6))
        ax.text(device * 2 + 0.9, 0.5, f"chunk {device}\nof the tokens", ha="center", va="center", fontsize=8)
        nxt = (device + 1) % devices
        if nxt:
            ax.annotate("", xy=(nxt * 2 + 0.2, 1.15), xytext=(device * 2 + 1.6, 1.15),
                        arrowprops={"arrowstyle": "->"})
    ax.annotate("", xy=(0.2, -0.15), xytext=(devices * 2 - 0.4, -0.15),
                arrowprops={"arrowstyle": "->", "connectionstyle": "arc3,rad=0.15"})
    ax.text(devices - 0.1, 1.45, "keys/values travel round the ring", ha="center", fontsize=8)
    ax.set(title="sequence / context: the sequence split over devices", xlim=(-0.3, devices * 2),
           ylim=(-0.8, 1.8))
    ax.axis("off")


def _expert(ax, devices, micro_batches):
    """Tokens on every device sent to the expert (one per device) their router picks: an all-to-all."""
    rng = np.random.default_rng(0)
    colors = plt.get_cmap("tab10")
    for device in range(devices):
        ax.text(0, device, f"tokens on {device}", ha="right", va="center", fontsize=8)
        ax.text(3, device, f"expert {device}", ha="left", va="center", fontsize=8,
                bbox={"facecolor": colors(device), "alpha": 0.5})
        for expert in rng.choice(devices, size=2, replace=False):
            ax.annotate("", xy=(2.9, expert), xytext=(0.1, device),
                        arrowprops={"arrowstyle": "->", "color": colors(int(expert)), "alpha": 0.8})
    ax.set(title="expert: each token goes to the expert its router picks\n(an all-to-all there and back)",
           xlim=(-1.5, 4.5), ylim=(-0.7, devices - 0.3))
    ax.invert_yaxis()
    ax.axis("off")
