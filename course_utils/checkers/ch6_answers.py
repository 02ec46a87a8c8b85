"""Chapter 6 · what the exercises' checkers share: what crosses for an answer that is missing, not callable or raised,
a weight on the checker's mesh, and whether two arrays hold the same values."""
from .answers import UNSHARDED, checker_mesh, on_mesh, short_error

MISSING, NOT_CALLABLE, ERROR = "missing", "not callable", "error"


def _not_callable(answer):
    """What crosses for an answer that should be a function or a class: ``None`` or the type's name."""
    return {"kind": MISSING if answer is None else NOT_CALLABLE, "type": type(answer).__name__}


def _raised(err):
    """What crosses for a function that raised: the error, cut to 300 characters, and the end of its message, where
    TensorFlow's errors from inside a tf.function say what went wrong."""
    return {"kind": ERROR, "error": short_error(err), "tail": " ".join(str(err).split())[-300:]}


def _checker_weight(shape=(8, 4), sharding=(UNSHARDED, "model"), value=None):
    """A DVariable of ``shape`` with the layout ``sharding`` on the checker's mesh (``value`` or 0, 0.1, 0.2,
    ...), and that layout."""
    import numpy as np
    from tensorflow.experimental import dtensor

    layout = dtensor.Layout(list(sharding), checker_mesh())
    if value is None:
        value = np.arange(np.prod(shape), dtype="float32").reshape(shape) / 10.0
    return dtensor.DVariable(on_mesh(np.asarray(value, dtype="float32"), layout)), layout


def _same_values(got, want, rtol, atol=1e-6):
    """Whether ``got`` is a numeric array of ``want``'s shape whose values are close to ``want``'s."""
    import numpy as np

    got = np.asarray(got)
    return got.shape == np.shape(want) and got.dtype.kind in "biuf" and bool(np.allclose(got, want, rtol, atol))
