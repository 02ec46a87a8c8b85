"""Predicted costs (draft)."""


def ring_bytes_sent(kind, group_size, tensor_bytes):
    n = group_size
    if kind == "all-reduce":
        return 2 * (n - 1) / n * tensor_bytes
    return (n - 1) / n * tensor_bytes
