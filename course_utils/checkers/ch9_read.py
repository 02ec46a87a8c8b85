"""Chapter 9 · reading a learner's pipeline as plain data, for exercises 1 (:mod:`.ch9_files`) and 2
(:mod:`.ch9_pipeline`).

The checker's data are example ids (every example is its id), so the batches a pipeline gives, read as lists of ids,
show who read what: :func:`_built` calls the learner's function, :func:`_read` reads the dataset, :func:`_epochs` cuts
what was read into epochs, and :func:`_coverage` tells how the workers' parts cover the data. What is wrong
when a pipeline cannot be read, :func:`_judge_unusable` says (the graders import it inside ``judge``).
"""
from collections import Counter

from .answers import short_error

EPOCHS_READ = 2  # the checker reads each pipeline for two epochs: a shuffle must change the order between them


def _flat_ids(batch):
    return [int(value) for value in batch.numpy().reshape(-1)]


def _is_id_batches(dataset):
    """None when the elements of ``dataset`` are 1-D integer batches, else the element spec as text."""
    import tensorflow as tf

    specs = tf.nest.flatten(dataset.element_spec)
    if len(specs) == 1 and isinstance(specs[0], tf.TensorSpec) and specs[0].dtype.is_integer \
            and specs[0].shape.rank == 1:
        return None
    return str(dataset.element_spec)[:200]


def _built(build, *args):
    """``(dataset, None)`` when ``build(*args)`` returns a dataset of 1-D integer batches, else ``(None, what went
    wrong)``: {"raised": error, "when": "called"}, {"type": type name} or {"element": the element spec}."""
    import tensorflow as tf

    try:
        dataset = build(*args)
    except Exception as err:
        return None, {"raised": short_error(err), "when": "called"}
    if not isinstance(dataset, tf.data.Dataset):
        return None, {"type": type(dataset).__name__}
    element = _is_id_batches(dataset)
    return (None, {"element": element}) if element else (dataset, None)


def _judge_unusable(fb, read, called, element_hint, crash_hint=lambda error: ""):
    """Says what is wrong when a pipeline could not be read (see :func:`_built` and :func:`_read`); whether it was."""
    if "raised" in read:
        what = "raised" if read["when"] == "called" else "gave a dataset whose reading raised"
        fb.wrong(f"{called} {what} {read['raised']}.{crash_hint(str(read['raised']))}")
    elif "type" in read:
        fb.wrong(f"{called} returned a {read['type']}; it must return a tf.data.Dataset."
                 + (" The strategy makes the distributed dataset from what dataset_fn returns: don't call the "
                    "strategy inside it." if "Distributed" in read["type"] else ""))
    elif "element" in read:
        fb.wrong(f"The elements of what {called} returned are {read['element']}: {element_hint}")
    else:
        return False
    return True


def _read(dataset, most):
    """The batches of ``dataset`` as lists of ids, at most ``most`` ids (then "more": True), or what raised."""
    batches, count = [], 0
    try:
        for batch in dataset:
            if count >= most:
                return {"batches": batches, "more": True}
            batches.append(_flat_ids(batch))
            count += len(batches[-1])
    except Exception as err:
        return {"raised": short_error(err), "when": "read"}
    return {"batches": batches, "more": False}


def _epochs(ids, more, per_epoch):
    """The first two epochs of a pipeline's ids: halves of what it gave, or ``per_epoch`` each if it never ended."""
    length = per_epoch if more else len(ids) // EPOCHS_READ
    return [ids[e * length:(e + 1) * length] for e in range(EPOCHS_READ)]



def _coverage(parts, everything):
    """How the workers' (or pipelines') id lists ``parts`` cover ``everything``: one of "right", "foreign", "empty",
    "not sharded", "same part", "overlap", "missing", with counts (covered, read by more than one, missing)."""
    sets = [set(part) for part in parts]
    counts = Counter(value for ids in sets for value in ids)
    union = set(counts)
    details = {"covered": len(union & everything), "shared": sum(1 for n in counts.values() if n > 1),
               "missing": len(everything - union), "sizes": [len(ids) for ids in sets]}
    if union - everything:
        return "foreign", dict(details, values=sorted(union - everything)[:3])
    if any(not ids for ids in sets):
        return "empty", dict(details, pipeline=[not ids for ids in sets].index(True))
    if all(ids == everything for ids in sets):
        return "not sharded", details
    if all(ids == sets[0] for ids in sets):
        return "same part", details
    if details["shared"]:
        return "overlap", details
    return ("right" if union == everything else "missing"), details
