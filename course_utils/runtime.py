"""Where the notebook runs (Colab or a local Jupyter) and the words for restarting its kernel there."""
import sys

__all__ = ["on_colab", "restart_advice"]


def on_colab():
    """Whether this Python process is a Colab runtime (Colab imports ``google.colab`` at start-up).

    Example:
        >>> on_colab()
        False
    """
    return "google.colab" in sys.modules


def restart_advice():
    """How to restart the kernel where the learner is, as a phrase for error messages.

    Example:
        >>> restart_advice()
        'restart the kernel (Kernel → Restart Kernel in JupyterLab)'
    """
    if on_colab():
        return "restart the runtime (Runtime → Restart session in Colab)"
    return "restart the kernel (Kernel → Restart Kernel in JupyterLab)"
