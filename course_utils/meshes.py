"""Mesh shapes in words, written the same way wherever the course prints one (no TensorFlow needed)."""

__all__ = ["mesh_text"]


def mesh_text(dims):
    """A mesh's axes ``[(name, size), ...]`` as text.

    Example:
        >>> mesh_text([("batch", 4), ("model", 2)])
        'batch=4 x model=2'
    """
    return " x ".join(f"{name}={size}" for name, size in dims) or "(no axes)"
