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


def restart_advice(sentence_start=False):
    """How to restart the kernel where the learner is, as a phrase for error messages.

    Args:
        sentence_start: capitalise the first word, for a phrase that starts a sentence.

    Example:
        >>> restart_advice()
        'restart the kernel (Kernel → Restart Kernel in JupyterLab)'
        >>> restart_advice(sentence_start=True)
        'Restart the kernel (Kernel → Restart Kernel in JupyterLab)'
    """
    advice = ("restart the runtime (Runtime → Restart session in Colab)" if on_colab()
              else "restart the kernel (Kernel → Restart Kernel in JupyterLab)")
    return advice[0].upper() + advice[1:] if sentence_start else advice
