"""A stand-in for Colab's ``google.colab``, for the course's Colab-like test environment.

Colab's kernel loads ``google.colab`` as an IPython extension at start-up, so every notebook on
Colab finds it in ``sys.modules``: the course's set-up cell and ``load_mnist`` test exactly that.
Libraries only import it to find out where they run; of its submodules, JAX imports ``output``
when it sees Colab. This package gives them those names. It has no browser front end, so the
functions that would talk to one raise :class:`NotImplementedError`.
"""
from google.colab import output

__all__ = ["output"]


def load_ipython_extension(ipython):
    """Called when the kernel loads this package as an extension (as Colab's kernel does); a no-op."""
