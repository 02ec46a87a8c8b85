"""Pictures of who talks to whom in a job: chapter 2's strategies (where the weights live, what travels each
step) and chapter 12's tf.data service (who sends the trainers their batches).

Drawn from the rules the chapters state and check, not measured: boxes are devices or processes, arrows
are what one training step sends.
"""
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

__all__ = ["STRATEGIES", "draw_cluster_topology", "draw_data_flow", "draw_data_service"]

STRATEGIES = ("mirrored", "central storage", "parameter server")
WEIGHTS, GRADIENTS, CONTROL, BATCHES = "tab:blue", "tab:red", "tab:grey", "tab:green"


def _box(ax, x, y, text, color="#e8eef7", width=1.6, height=0.8):
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.05",
                                facecolor=color, edgecolor="black", linewidth=0.8))
    ax.text(x, y, text, ha="center", va="center", fontsize=7.5)


def _arrow(ax, start, end, color, bend=0.0, style="-|>", dashed=False, gid=None):
    """An arrow; ``gid`` names the link it draws (``"coordinator-worker 0"``), so that tests can find it."""
    patch = FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=10, color=color, linewidth=1.2,
                            connectionstyle=f"arc3,rad={bend}", linestyle="--" if dashed else "-",
                            shrinkA=4, shrinkB=4)
    patch.set_gid(gid)
    ax.add_patch(patch)


def _frame(ax, title, legend):
    ax.set(xlim=(-0.5, 8.5), ylim=(-1.4, 4.0), title=title)
    ax.title.set_fontsize(9)
    ax.axis("off")
    ax.text(4, -1.25, legend, ha="center", va="bottom", fontsize=7.5, wrap=True)


def _mirrored(ax, devices):
    xs = [1 + i * 6 / (devices - 1) for i in range(devices)]
    for i, x in enumerate(xs):
        _box(ax, x, 1.5, f"CPU:{i}\nall weights\n1/{devices} of the batch", height=1.0, width=1.75)
    for a, b in zip(xs, xs[1:] + xs[:1]):  # the ring, one hop per neighbour
        _arrow(ax, (a, 2.05), (b, 2.05), GRADIENTS, bend=-0.35 if b > a else 0.25)
    _frame(ax, "MirroredStrategy: a copy per device",
           "red: gradient pieces passed round a ring (all-reduce);\nevery copy applies the same update")


def _central(ax, devices):
    _box(ax, 4, 3.2, "parameter device\nthe one copy of the weights", color="#fdf1dc", width=3.2)
    for i in range(devices):
        x = 1 + i * 6 / (devices - 1)
        _box(ax, x, 0.6, f"CPU:{i}\ncompute only\n1/{devices} of the batch", height=1.0, width=1.75)
        _arrow(ax, (4 - 0.2, 2.8), (x - 0.15, 1.1), WEIGHTS)
        _arrow(ax, (x + 0.15, 1.1), (4 + 0.2, 2.8), GRADIENTS)
    _frame(ax, "CentralStorageStrategy: one copy",
           "blue: weights read by every replica; red: gradients sent\nto the parameter device, aggregated, applied once")


def _parameter_server(ax, devices):
    servers = [2.5, 5.5]
    for i, x in enumerate(servers):
        _box(ax, x, 3.2, f"ps {i}\nhalf of the variables", color="#fdf1dc")
    workers = [1 + i * 6 / (devices - 1) for i in range(devices)]
    for i, x in enumerate(workers):
        _box(ax, x, 0.6, f"worker {i}\nwhole model\nits own batches", height=1.0, width=1.75)
        for s in servers:
            _arrow(ax, (s - 0.1, 2.8), (x - 0.1, 1.1), WEIGHTS)
            _arrow(ax, (x + 0.1, 1.1), (s + 0.1, 2.8), GRADIENTS, dashed=True)
    _frame(ax, "ParameterServerStrategy: asynchronous",
           "blue: variables read; red dashed: updates pushed to the servers\nwhen a worker is done, without waiting for the others")


def draw_data_flow(strategies=STRATEGIES, devices=4):
    """Draw what one training step moves under each strategy, one panel per strategy.

    Args:
        strategies: names from :data:`STRATEGIES`.
        devices: replicas (or workers) to draw, 2 to 6.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: an unknown strategy, none at all, or a number of devices outside 2–6.

    Example:
        >>> figure = draw_data_flow(["mirrored", "central storage"])
    """
    strategies = list(strategies)
    if not strategies or any(s not in STRATEGIES for s in strategies):
        raise ValueError(f"strategies must be a non-empty list of {STRATEGIES}, not {strategies!r}.")
    if not 2 <= devices <= 6:
        raise ValueError(f"devices must be between 2 and 6 (boxes must fit side by side), not {devices}.")
    draw = {"mirrored": _mirrored, "central storage": _central, "parameter server": _parameter_server}
    figure, axes = plt.subplots(1, len(strategies), figsize=(4.8 * len(strategies), 3.4), squeeze=False)
    for ax, name in zip(axes[0], strategies):
        draw[name](ax, devices)
    figure.tight_layout()
    return figure


def draw_cluster_topology(workers=3, parameter_servers=2):
    """Draw the processes of a MultiWorkerMirrored cluster beside those of a parameter-server cluster.

    Args:
        workers: worker processes in each cluster, 2 to 4.
        parameter_servers: parameter-server processes of the second cluster, 1 to 3.

    Returns:
        The matplotlib ``Figure`` (two panels).

    Raises:
        ValueError: a count outside its range.

    Example:
        >>> figure = draw_cluster_topology(workers=2, parameter_servers=1)
    """
    if not 2 <= workers <= 4 or not 1 <= parameter_servers <= 3:
        raise ValueError(f"workers must be 2–4 and parameter_servers 1–3, not {workers} and {parameter_servers}.")
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    xs = [1 + i * 6 / (workers - 1) for i in range(workers)]
    for i, x in enumerate(xs):
        _box(left, x, 1.6, f"worker {i}{' (chief)' if i == 0 else ''}\nsame program,\nits own batches",
             height=1.1, width=1.9)
    for a, b in zip(xs, xs[1:] + xs[:1]):
        _arrow(left, (a, 2.2), (b, 2.2), GRADIENTS, bend=-0.3 if b > a else 0.3)
    _frame(left, "MultiWorkerMirroredStrategy: peers",
           "every worker runs the same script; red: gradients all-reduced\nbetween the workers every step (synchronous)")

    _box(right, 4, 3.3, "chief = coordinator\nschedules steps, holds no variables", color="#eeeeee", width=3.6)
    servers = [4 + (i - (parameter_servers - 1) / 2) * 2.6 for i in range(parameter_servers)]
    for i, x in enumerate(xs):
        _box(right, x, 0.2, f"worker {i}\nruns scheduled steps", width=2.1)
        _arrow(right, (4, 2.9), (x, 0.6), CONTROL, dashed=True, style="<|-|>", gid=f"coordinator-worker {i}")
    for i, s in enumerate(servers):
        _box(right, s, 1.7, f"ps {i}\nvariables", color="#fdf1dc", width=1.5)
        top = min(max(s - 0.35, 2.4), 5.6)  # a point on the coordinator's lower edge
        _arrow(right, (top, 2.9), (s - 0.35, 2.1), WEIGHTS, style="<|-|>", gid=f"coordinator-ps {i}")
        for w, x in enumerate(xs):
            _arrow(right, (x + 0.2, 0.6), (s + 0.1, 1.3), GRADIENTS, style="<|-|>", gid=f"worker {w}-ps {i}")
    _frame(right, "ParameterServerStrategy: roles",
           "grey: the coordinator sends steps, the workers send results back; blue: the coordinator\n"
           "creates and reads the variables; red: each worker reads and updates them on its own (asynchronous)")
    figure.tight_layout()
    return figure


def draw_data_service(workers=2, trainers=2):
    """Draw a tf.data service feeding a job: the dispatcher, its workers and the trainers they send batches to.

    Args:
        workers: the service's worker processes, 1 to 4.
        trainers: the job's trainer processes (e.g. the workers of a ``MultiWorkerMirroredStrategy``), 1 to 4.

    Returns:
        The matplotlib ``Figure``. Each arrow's gid names its link, e.g. ``"trainer 0-dispatcher"``,
        ``"dispatcher-worker 1"`` or ``"worker 1-trainer 0"``.

    Raises:
        ValueError: a count outside its range.

    Example:
        >>> figure = draw_data_service(workers=3, trainers=2)
    """
    if not 1 <= workers <= 4 or not 1 <= trainers <= 4:
        raise ValueError(f"workers and trainers must each be 1–4 (boxes must fit side by side), "
                         f"not {workers} and {trainers}.")
    figure, ax = plt.subplots(figsize=(8.5, 4.2))
    spread = lambda n: [4 + (i - (n - 1) / 2) * min(2.6, 7 / n) for i in range(n)]
    _box(ax, 0.9, 3.3, "dispatcher\nsplits the datasets,\nassigns work", color="#eeeeee", width=1.9, height=1.0)
    for i, x in enumerate(spread(workers)):
        _box(ax, x + 1, 1.9, f"tf.data worker {i}\nruns the pipeline\nbefore distribute()", color="#e3f4e1",
             width=1.9, height=1.0)
        _arrow(ax, (1.85, 3.1), (x + 0.1, 2.35), CONTROL, dashed=True, gid=f"dispatcher-worker {i}")
    for t, x in enumerate(spread(trainers)):
        _box(ax, x + 1, 0.15, f"trainer {t}\nruns the rest,\nthen its step", width=1.9, height=1.0)
        _arrow(ax, (x + 0.1, 0.65), (0.9, 2.8), CONTROL, dashed=True, style="<|-|>", gid=f"trainer {t}-dispatcher")
        for w, wx in enumerate(spread(workers)):
            _arrow(ax, (wx + 1, 1.4), (x + 1, 0.65), BATCHES, gid=f"worker {w}-trainer {t}")
    ax.set(xlim=(-0.5, 8.5), ylim=(-1.5, 4.0))
    ax.axis("off")
    ax.set_title("The tf.data service: input on workers of its own", fontsize=9)
    ax.text(4, -1.4, "grey dashed: a trainer registers its dataset and asks for a job; the dispatcher hands\n"
                     "the workers their parts (splits, or the whole dataset); green: batches, over the network",
            ha="center", va="bottom", fontsize=7.5)
    figure.tight_layout()
    return figure
