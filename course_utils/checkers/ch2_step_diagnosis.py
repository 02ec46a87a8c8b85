"""Chapter 2 · exercise 4's diagnosis (the judging side): what the learner's step did to each batch's variables
(the right change, a scaled one, one per replica, ...), the ✗ line that explains it, and the grade of the loss the
step returned. Judged against one device's step (``ch2_step_run._reference_step_expected``) by
``ch2_build.DistributedStep.judge``."""

from .answers import close
from .ch2_step_run import STEP_BATCH, STEP_EXAMPLES, STEP_NOTEBOOK_BATCH, STEP_RATE, STEP_VARIABLES, _StepAnswerError


def _factor(change, reference):
    """The number k with change = k x reference for every variable (to float32 rounding), or None."""
    import numpy as np

    u = np.concatenate([a.ravel() for a in change])
    r = np.concatenate([a.ravel() for a in reference])
    k = float(u @ r / (r @ r))
    return k if np.linalg.norm(u - k * r) <= 1e-3 * np.linalg.norm(r) * max(abs(k), 1e-3) else None


def _diagnose_change(record):
    """What one batch's step did: ("right",), ("diverged",), ("unchanged",), ("scaled", k) (k x the right change),
    ("weighted", k) (k x the change of a loss divided by the per-replica batch x replicas) or ("other", names)."""
    import numpy as np

    copies, start = record["copies"], record["start"]
    if any(not np.allclose(c, cs[0], rtol=1e-5, atol=1e-7) for cs in copies for c in cs[1:]):
        return ("diverged",)
    change = [cs[0] - s for cs, s in zip(copies, start)]
    right = record["change"]
    wrong = [name for name, u, r in zip(STEP_VARIABLES, change, right) if not np.allclose(u, r, rtol=1e-4, atol=1e-6)]
    if not wrong:
        return ("right",)
    if all(np.abs(u).max() < 1e-9 for u in change):
        return ("unchanged",)
    for kind, reference in (("scaled", right), ("weighted", record["weighted_change"])):
        k = _factor(change, reference)
        if k is not None:
            return (kind, k)
    return ("other", wrong)


def _close_to(k, value):
    return abs(k - value) <= 1e-3 * abs(value)


def _fixed_divisor(diagnoses, records):
    """The number the step divided every batch's summed loss by, if it was the same for every batch, else None."""
    divisors = [sum(r["sizes"]) / d[1] for d, r in zip(diagnoses, records) if d[0] == "scaled" and d[1] > 0]
    if len(divisors) == len(records) and all(_close_to(d, round(d)) for d in divisors) and \
            len({round(d) for d in divisors}) == 1:
        return round(divisors[0])
    return None


def _same_mistake(first, diagnosis, replicas, fixed):
    """Whether the last batch's diagnosis is the full batch's mistake again (a fixed divisor, or the same factor)."""
    if first[0] == "right":
        return False
    if fixed is not None or first[0] == diagnosis[0] and first[0] in ("diverged", "unchanged", "other"):
        return True
    if first[0] in ("scaled", "weighted") and diagnosis[0] in ("scaled", "weighted"):
        return _close_to(diagnosis[1], first[1])  # e.g. 4x: per-replica means (a 'weighted' step once uneven)
    return False


def _returned_scaled(record, replicas):
    """Whether train_step returned 1/replicas of the batch's mean loss (or of the loss of a step that weighted each
    replica's examples by its own batch)."""
    try:
        got = _returned_loss(record["returned"])
    except _StepAnswerError:
        return False
    return any(close(got, record[key] / replicas, 1e-4) for key in ("loss", "weighted_loss"))


def _reference_divide_once():
    """The fix of a loss scaled twice (given away only after a wrong try)."""
    return ("Divide each replica's summed loss only by the examples of the whole step (tf.nn.compute_average_loss("
            "per_example_loss, global_batch_size=examples)), drop the division by num_replicas_in_sync, and combine "
            "the replicas' losses with ReduceOp.SUM: apply_gradients then sums the replicas' gradients into the "
            "gradient of the mean.")


def _reference_count_it():
    """The fix of 2.4's loss scaling, in words (given away only after a wrong try)."""
    return ("Count the examples of the whole step, over all replicas: inside the replica function "
            "examples = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, "
            "tf.shape(labels)[0]), then tf.nn.compute_average_loss(per_example_loss, global_batch_size=examples).")


def _judge_explain_change(fb, diagnosis, record, replicas, fixed, first):
    """One ✗ line about one batch's change. ``first`` is the diagnosis of the full batch (None for the full batch)."""
    what = "the full batch" if first is None else "the last batch"
    head = f"{what} of {sum(record['sizes'])} examples (split {', '.join(map(str, record['sizes']))}):"
    kind = diagnosis[0]
    if first is not None and _same_mistake(first, diagnosis, replicas, fixed):
        fb.wrong(f"{head} the same mistake.")
    elif kind == "diverged":
        fb.wrong(f"{head} after your step the {replicas} copies of a mirrored variable differ: each replica applied "
                 f"its own gradient, so the replicas no longer hold the same model.",
                 answer="apply_gradients sums the replicas' gradients unless told not to "
                        "(skip_gradients_aggregation=True); if you skip that, all-reduce them yourself with SUM.")
    elif kind == "unchanged":
        fb.wrong(f"{head} the variables of the model make_train_step received did not change. Does train_step apply "
                 f"the gradients to that model's variables, with that optimizer (its arguments, not this notebook's "
                 f"model and optimizer)?")
    elif fixed == 1 or (kind == "scaled" and _close_to(diagnosis[1], sum(record["sizes"]))):
        fb.wrong(f"{head} every variable changed {diagnosis[1]:.3g}x as much as in one step on one device: the loss "
                 f"is the SUM over the examples, not their mean.", answer=_reference_count_it())
    elif (kind in ("scaled", "weighted")) and _close_to(diagnosis[1], replicas):
        fb.wrong(f"{head} every variable changed {replicas}x as much as in one step on one device: each replica "
                 f"divided its loss by its OWN batch, and the strategy SUMS the {replicas} replicas' gradients "
                 f"(the chapter's 'why the loss is divided by the global batch size').",
                 answer=_reference_count_it())
    elif kind in ("scaled", "weighted") and _close_to(diagnosis[1], 1 / replicas) and \
            _returned_scaled(record, replicas):
        fb.wrong(f"{head} every variable changed 1/{replicas} as much as in one step on one device, and the loss "
                 f"train_step returned is 1/{replicas} of the batch's mean loss too: the loss was scaled twice, "
                 f"divided by the examples of the whole step AND by the number of replicas (a division by "
                 f"num_replicas_in_sync, or a mean over the replicas). The strategy SUMS the replicas' gradients: "
                 f"which of the two divisions does that sum need?", answer=_reference_divide_once())
    elif kind == "scaled" and _close_to(diagnosis[1], 1 / replicas):
        fb.wrong(f"{head} every variable changed 1/{replicas} as much as in one step on one device: the loss was "
                 f"divided by the whole batch AND the gradients averaged over the {replicas} replicas (ReduceOp.MEAN, "
                 f"or a division by num_replicas_in_sync). Dividing by the whole batch already makes the mean.",
                 answer="Sum the replicas' gradients: apply_gradients does it by default (or all-reduce with "
                        "ReduceOp.SUM).")
    elif fixed is not None:
        which = (", this notebook's batch size" if fixed == STEP_NOTEBOOK_BATCH else
                 ", the size of the checker's full batch" if fixed == STEP_BATCH else "")
        fb.wrong(f"{head} every variable changed {diagnosis[1]:.3g}x as much as in one step on one device: your step "
                 f"divides the summed loss by {fixed}{which}, whatever batch it gets. The checker's batches have "
                 f"{STEP_BATCH} and {STEP_EXAMPLES - STEP_BATCH} examples: the divisor must come from the batch the "
                 f"step receives.", answer=_reference_count_it())
    elif kind == "weighted" and _close_to(diagnosis[1], 1):
        small = min(size for size in record["sizes"] if size)
        fb.wrong(f"{head} each replica divided its summed loss by its own batch x {replicas}, which is the number "
                 f"of examples of the whole step only when the shares are equal: here the {small} examples of the "
                 f"last replica count {max(record['sizes']) / small:.3g}x as much as the others'. "
                 f"(tf.nn.compute_average_loss without global_batch_size assumes equal shares, and so does averaging "
                 f"the replicas' mean gradients.)",
                 answer=_reference_count_it())
    elif kind == "scaled" and first is not None and _close_to(diagnosis[1] * STEP_BATCH, sum(record["sizes"])):
        fb.wrong(f"{head} it was divided by {STEP_BATCH}, the size of the full batches, not by its own "
                 f"{sum(record['sizes'])} examples.", answer=_reference_count_it())
    elif kind in ("scaled", "weighted"):
        fb.wrong(f"{head} every variable changed {diagnosis[1]:.3g}x as much as it should"
                 + (" (with each replica's examples weighted by its own batch)" if kind == "weighted" else "") + ".",
                 answer=_reference_count_it())
    else:
        names = "every variable" if len(diagnosis[1]) == len(STEP_VARIABLES) else ", ".join(diagnosis[1])
        fb.wrong(f"{head} {names} changed otherwise than in one SGD step (learning rate {STEP_RATE}) on one "
                 f"device with the mean cross-entropy of the whole batch. The model outputs logits.")


def _returned_loss(value):
    """What train_step returned (as _returned_as_data gives it), as a float; raises _StepAnswerError with what is
    wrong."""
    import numpy as np

    if value is None:
        raise _StepAnswerError("train_step returned None; it should return the mean loss of the batch.")
    if isinstance(value, dict) and value.get("type") == "PerReplica":
        raise _StepAnswerError("train_step returned a PerReplica value (one loss per replica); combine them into the "
                               "loss of the whole batch with strategy.reduce(..., axis=None).")
    if isinstance(value, dict) and "type" in value:
        raise _StepAnswerError(f"train_step returned a {value['type']}; it should return one number, the mean "
                               f"loss of the batch.")
    shape = [int(n) for n in value["shape"]] if isinstance(value, dict) else list(np.shape(value))
    size = int(np.prod(shape))
    if size != 1:
        raise _StepAnswerError(f"train_step returned {size} numbers (shape {shape}); it should "
                               f"return one, the mean loss of the batch.")
    return float(np.asarray(value, dtype="float64").ravel()[0])


def _grade_returned_loss(fb, records, replicas):
    try:
        got = [_returned_loss(r["returned"]) for r in records]
    except _StepAnswerError as err:
        fb.wrong(str(err))
        return
    want = [r["loss"] for r in records]
    if all(close(g, w, 1e-4) for g, w in zip(got, want)):
        fb.right(f"train_step returned {got[0]:.4f} and {got[1]:.4f}, the mean cross-entropy of each batch on one "
                 f"device")
        return
    said = (f"train_step returned {got[0]:.4f} for the full batch and {got[1]:.4f} for the last; their mean "
            f"cross-entropies on one device are {want[0]:.4f} and {want[1]:.4f}")
    if all(_returned_scaled(r, replicas) for r in records) and \
            all(_diagnose_change(r)[0] in ("scaled", "weighted") and _close_to(_diagnose_change(r)[1], 1 / replicas)
                for r in records):
        fb.wrong(f"{said}: 1/{replicas} of them, the same double scaling as the step's change above.")
    elif all(close(g, w / replicas, 1e-4) for g, w in zip(got, want)):
        fb.wrong(f"{said}: 1/{replicas} of them. Each replica's loss is already divided by the whole batch: what "
                 f"does the reduction of the replicas' losses divide by on top?",
                 answer="ReduceOp.MEAN divides by the number of replicas once more: combine the replicas' losses "
                        "with strategy.reduce(tf.distribute.ReduceOp.SUM, ..., axis=None).")
    elif all(close(g, r["weighted_loss"], 1e-4) for g, r in zip(got, records)):
        fb.wrong(f"{said}: each replica's loss was divided by its own batch x {replicas}, which weights the examples "
                 f"of an uneven batch unequally.")
    else:
        fb.wrong(f"{said}.")
