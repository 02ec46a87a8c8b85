"""Chapter 7 · exercise 1: restore a checkpoint onto another mesh, in a layout whose order differs from the mesh's.

``collect`` saves a checkpoint of its own (its weight drawn from the check's seed), calls the learner's
``restore_blocks`` with its path and sends what came back (a DTensor's layout and blocks, and the id a
``tf.train.Checkpoint`` restore stamped on it); ``judge`` compares it with the weight it draws again from the seed.
"""
import math

from .answers import UNSHARDED, checker_mesh, global_numpy, layout_of, mesh_dims, on_mesh, short_error
from ..meshes import mesh_text
from .core import Exercise, Feedback

# Exercise 1: a function that restores a [16, 32] float32 weight saved as `w` (on batch=4 x model=2, split by
# columns over model) onto a 2-D mesh x=2 x y=4, its rows split over y and its columns over x (a layout whose
# order differs from the mesh's, which chapter 7 does not show). The checker saves a checkpoint of its own.
SAVED_SHAPE = (16, 32)
RESTORE_MESH = [("x", 2), ("y", 4)]
RESTORE_SPECS = ["y", "x"]
CHAPTER_MESH = [("rows", 8)]  # chapter 7's restore (section 4): rows over a 1-D mesh
MISSING, NOT_CALLABLE, ERROR = "missing", "not callable", "error"


def saved_value():
    """The weight the exercise notebook saves: 0, 0.01, 0.02, ... row by row (NumPy)."""
    import numpy as np

    return (np.arange(math.prod(SAVED_SHAPE), dtype="float32") / 100).reshape(SAVED_SHAPE)


def _checkpoint_values(seed):
    """The weight of the checkpoint a check saves: drawn from ``seed``, never the notebook's (NumPy, float32)."""
    import numpy as np

    return np.random.default_rng([7, int(seed)]).normal(size=SAVED_SHAPE).astype("float32")


class RestoreOnAnotherMesh(Exercise):
    title = "Restore a checkpoint onto another mesh"
    points = 3
    hints = (
        "Create the variable first, on the new mesh and in the new layout (zeros will do): make_mesh([('x', 2), "
        "('y', 4)]), and a dtensor.Layout with one entry per TENSOR axis, the mesh axis that splits it.",
        "Then restore into it with tf.train.Checkpoint, under the SAME name the checkpoint used when it was saved (w): "
        "tf.train.Checkpoint(w=restored).restore(checkpoint_path), with the path the function is given. Return it.",
    )

    def collect(self, restore_blocks, seed=0):
        """Saves a checkpoint of its own (``w``: a [16, 32] float32 weight drawn from ``seed``, on the checker's
        batch=4 x model=2 mesh, split by columns over model) and calls ``restore_blocks`` with its path.

        What crosses: ``{"kind": "returned", "type": the type name of what it returned}``, and when that has
        ``read_value``, ``"value"`` (what it reads: a DTensor crosses as its layout and per-device blocks) and
        ``"restore_uid"`` (:func:`restore_uid`: the id a ``tf.train.Checkpoint`` restore stamped on it, ``-1``
        if none did, ``None`` if it has none); the error it raised, as text; the type's name of an answer that is
        not callable."""
        import os
        import tempfile

        import tensorflow as tf
        from tensorflow.experimental import dtensor

        if not callable(restore_blocks):
            return {"kind": MISSING if restore_blocks is None else NOT_CALLABLE, "type": type(restore_blocks).__name__}
        saved = dtensor.DVariable(on_mesh(_checkpoint_values(seed), dtensor.Layout([UNSHARDED, "model"],
                                                                                   checker_mesh())))
        with tempfile.TemporaryDirectory(prefix="ch7_q1_") as folder:
            path = tf.train.Checkpoint(w=saved).save(os.path.join(folder, "weights"))
            try:
                restored = restore_blocks(path)
            except Exception as err:
                return {"kind": ERROR, "error": short_error(err)}
            data = {"kind": "returned", "type": type(restored).__name__}
            if hasattr(restored, "read_value"):
                data["value"] = restored.read_value()
                data["restore_uid"] = restore_uid(restored)
        return data

    def judge(self, data, seed=0):
        """Reads what :meth:`collect` sent: the value's layout, mesh, shape, dtype and numbers (compared with the
        checkpoint of ``seed``), and whether a restore wrote into it (a restore id of 0 or more)."""
        fb = Feedback()
        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("restore_blocks: not answered yet." if data["kind"] == MISSING else
                     f"restore_blocks should be a function checkpoint_path -> DVariable, not a {data['type']}.")
            return fb
        if data["kind"] == ERROR:
            error = str(data["error"])
            if "expected dtype" in error and "original dtype" in error:
                why = (" The variable's dtype is not the saved weight's (float32): a restore needs the same dtype and "
                       "shape. (A failed restore leaves DTensor refusing every later operation in this kernel: "
                       "restart it after the fix.)")
            elif "CancelledError" in error:
                why = (" An earlier DTensor operation failed in this kernel, and DTensor now refuses every operation: "
                       "restart the kernel and run the notebook again.")
            else:
                why = ""
            fb.wrong(f"restore_blocks raised {error}.{why} The checker calls it with the path of a checkpoint of its "
                     f"own, saved as the notebook's is: w, a [16, 32] float32 weight (other values).")
            return fb
        value = data.get("value")
        layout = None if value is None else layout_of(value)
        if layout is None:
            fb.wrong(f"restore_blocks should return a dtensor.DVariable, not a {data['type']}.")
            return fb
        self._judge_placement(fb, mesh_dims(layout.mesh), list(layout.sharding_specs), layout.is_fully_replicated())
        if tuple(value.shape) != SAVED_SHAPE:
            fb.wrong(f"the variable has shape {tuple(value.shape)}; the saved weight is {SAVED_SHAPE}.")
            return fb
        self._judge_values(fb, value, data.get("restore_uid"), seed)
        return fb

    @staticmethod
    def _judge_placement(fb, dims, got_specs, replicated):
        if sorted(dims) == sorted(RESTORE_MESH):
            fb.right(f"on the mesh {mesh_text(RESTORE_MESH)}")
        elif dims == CHAPTER_MESH:
            fb.wrong(f"the variable lives on the chapter's mesh {mesh_text(dims)}; this exercise asks for the 2-D mesh "
                     f"{mesh_text(RESTORE_MESH)}.")
        else:
            fb.wrong(f"the variable lives on the mesh {mesh_text(dims)}; the exercise asks for "
                     f"{mesh_text(RESTORE_MESH)}.")
        if got_specs == RESTORE_SPECS:
            fb.right(f"layout {RESTORE_SPECS}: rows over 'y', columns over 'x'")
        elif replicated:
            fb.wrong("the variable is replicated: every device holds the whole weight. Split its rows over 'y' and its "
                     "columns over 'x'.")
        elif got_specs == list(reversed(RESTORE_SPECS)):
            fb.wrong(f"its sharding specs {got_specs} split the rows over {got_specs[0]!r} and the columns over "
                     f"{got_specs[1]!r}: the specs name, for each TENSOR axis in order, the mesh axis that splits it, "
                     f"whatever the order of the mesh's axes.", answer=f"sharding_specs = {RESTORE_SPECS}")
        elif UNSHARDED in got_specs:
            fb.wrong(f"its sharding specs {got_specs} split only one tensor axis: the exercise splits both, the rows "
                     f"over 'y' and the columns over 'x'.")
        else:
            fb.wrong(f"its sharding specs are {got_specs}: the rows (the first tensor axis) go over 'y', the columns "
                     f"over 'x'.")

    @staticmethod
    def _judge_values(fb, value, uid, seed):
        import numpy as np

        numbers = global_numpy(value)
        if value.dtype.name != "float32":
            fb.wrong(f"the variable is {value.dtype.name}; the checkpoint holds float32: create the variable with the "
                     f"saved weight's dtype, then restore into it.")
        elif not numbers.any():
            fb.wrong("the variable still holds zeros: did the restore run, from the path the function is given, and "
                     "under the name the checkpoint used (w)?")
        elif np.array_equal(numbers, saved_value()):
            fb.wrong("the variable holds the notebook's weight (saved_value()), not the one saved at the "
                     "checkpoint_path your function is given: the checker calls it with a checkpoint of its own, with "
                     "other values. Restore from the argument, not from the notebook's checkpoint or values.")
        elif not np.array_equal(numbers, _checkpoint_values(seed)):
            fb.wrong("the variable holds other values than the weight saved at checkpoint_path: restore that "
                     "checkpoint into it.")
        elif type(uid) is not int or uid < 0:
            fb.wrong("the variable holds the saved values, but no checkpoint was restored into it: the exercise is to "
                     "restore them with tf.train.Checkpoint, which reads each device's block from the file, not to "
                     "read the whole weight and pack it again.")
        else:
            fb.right("the saved values, restored from the checkpoint it was given")


def restore_uid(variable):
    """The id of the last ``tf.train.Checkpoint`` restore that wrote into ``variable``: -1 if none did,
    None when it has no such id (it is no trackable object).

    A restore stamps every object it restores with its restore id (``_update_uid``, set in
    ``tensorflow/python/checkpoint/restore.py``); a variable that was never restored has -1 there.
    """
    try:
        uid = getattr(variable, "_update_uid", None)
        return None if uid is None or isinstance(uid, bool) else int(uid)
    except (TypeError, ValueError, AttributeError):
        return None


def was_restored(variable):
    """Whether a ``tf.train.Checkpoint`` restore has written into ``variable`` (see :func:`restore_uid`)."""
    uid = restore_uid(variable)
    return uid is not None and uid >= 0
