"""Mesh shapes in words, written the same way wherever the course prints one, and the name of an unsharded
axis (no TensorFlow needed)."""

__all__ = ["UNSHARDED", "mesh_text"]

UNSHARDED = "unsharded"  # the value of dtensor.UNSHARDED, here without importing TensorFlow


def mesh_text(dims):
    """A mesh's axes ``[(name, size), ...]`` as text.

    Example:
        >>> mesh_text([("batch", 4), ("model", 2)])
        'batch=4 x model=2'
    """
    return " x ".join(f"{name}={size}" for name, size in dims) or "(no axes)"
