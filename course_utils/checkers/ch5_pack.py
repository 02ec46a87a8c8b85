"""Chapter 5 · exercise 4: a time-major batch that the mesh's ``batch`` axis may not divide, padded and weighted.

``collect`` calls the learner's ``pack_fn(images, labels, mesh)`` on the checker's batches and meshes and sends the
DTensors it returned (layouts and per-device blocks); ``judge`` compares them with the batches it draws again from
the seed.
"""
import math

from .answers import UNSHARDED, global_numpy, layout_of, mesh_dims, short_error, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback

TIME_STEPS, PIXELS = 28, 28  # each image read as 28 rows of 28 pixels, time-major: (time step, example, pixel)
EXAMPLES_AXIS = 1  # in the images and in the tags
PACK_CASES = (  # the mesh (its axis sizes, 'batch' first) and the examples in the batch
    {"mesh": (4, 2), "examples": 16},  # the notebook's mesh: 4 groups divide 16
    {"mesh": (4, 2), "examples": 10},  # a last batch: 10 examples on 4 groups pad to 12 (to all 8 devices: 16)
    {"mesh": (8,), "examples": 20},    # a 1-D mesh: 20 examples on 8 groups
)
PART_NAMES = ("images", "labels", "weights")


def pack_mesh(shape):
    """The checker's mesh of ``shape``: ``batch`` (and ``model``) over this process's first logical CPUs."""
    from .answers import mesh_on_first_cpus

    return mesh_on_first_cpus(zip(("batch", "model"), shape))


def pack_case(case, seed=0):
    """The time-major images (float32) and tags (int64) of one case, drawn from ``seed``."""
    import numpy as np

    rng = np.random.default_rng([seed, 4, case["examples"], len(case["mesh"])])
    images = rng.random((TIME_STEPS, case["examples"], PIXELS), dtype="float32")
    labels = rng.integers(0, 10, size=(TIME_STEPS, case["examples"])).astype("int64")
    return images, labels


def _padded(examples, groups):
    """The fewest examples, at least ``examples``, that ``groups`` equal groups divide."""
    return -(-examples // groups) * groups


class PadTheLastBatch(Exercise):
    title = "Pack a batch the mesh does not divide"
    points = 3
    hints = (
        "Which axis of these time-major tensors holds the examples, and what must every group along 'batch' get of "
        "it? When the examples do not divide into equal groups, what can you add that changes no result?",
        "Pad the examples' axis (axis 1) up to the next multiple of mesh.dim_size('batch') with zero examples, split "
        "that axis over 'batch' (dtensor.Layout with one spec per tensor axis, or Layout.batch_sharded(..., axis=1)), "
        "and give every tag a weight: 1.0 for a real example, 0.0 for the padding.",
        "n = images.shape[1]; padded = -(-n // groups) * groups; np.pad(images, [(0, 0), (0, padded - n), (0, 0)]); "
        "the same for the labels; weights = np.zeros((28, padded), 'float32') with weights[:, :n] = 1; then "
        "pack_batch each with its layout on `mesh`.",
    )

    def collect(self, pack_fn, seed=0):
        """Call ``pack_fn(images, labels, mesh)`` on each case of :data:`PACK_CASES` (batches drawn from ``seed``).

        Crosses: ``{"callable": False}``, or ``{"callable": True, "cases": [{"mesh": [(axis, size), ...], "error":
        text} or {"mesh", "result": what it returned}, ...]}`` (DTensors cross with their layout and blocks), up to the
        first case in which pack_fn raised.
        """
        if not callable(pack_fn):
            return {"callable": False}
        cases = []
        for case in PACK_CASES:
            mesh = pack_mesh(case["mesh"])
            images, labels = pack_case(case, seed)
            found = {"mesh": mesh_dims(mesh)}
            try:
                found["result"] = pack_fn(images, labels, mesh)
            except Exception as err:
                found["error"] = short_error(err)
            cases.append(found)
            if "error" in found:
                break
        return {"callable": True, "cases": cases}

    def judge(self, data, seed=0):
        """A point per part (images, labels, weights) right in every case: on the mesh passed, the examples' axis
        split over 'batch', the batch as given padded to the fewest examples the split needs, weights 1 on the real
        examples' tags and 0 on the padding's."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong("pack_fn should be a function (images, labels, mesh) -> (images, labels, weights).")
            return fb
        given = list(data["cases"])
        if not 1 <= len(given) <= len(PACK_CASES):
            raise ValueError("no case data")
        problems = {name: None for name in PART_NAMES}
        for case, found in zip(PACK_CASES, given):
            where = f"{case['examples']} examples on {mesh_text([tuple(dim) for dim in found['mesh']])}"
            if "error" in found:
                for name, problem in problems.items():
                    if problem is not None:
                        fb.wrong(f"{name}: {problem[0]}", answer=problem[1])
                self._judge_error(fb, str(found["error"]), case, where)
                return fb
            result = found["result"]
            if not isinstance(result, (tuple, list)) or len(result) != 3:
                fb.wrong("pack_fn should return three DTensors: (images, labels, weights).")
                return fb
            images, labels = pack_case(case, seed)
            for name, value, original in zip(PART_NAMES, result, (images, labels, None)):
                if problems[name] is None:
                    problems[name] = self._judge_part(name, value, original, case, found["mesh"], where,
                                                      padded_images=result[0], real_images=images)
        for name in PART_NAMES:
            if problems[name] is None and len(given) == len(PACK_CASES):
                fb.right(f"{name}: the examples split over 'batch', padded as the split needs, in every case")
            elif problems[name] is None:
                raise ValueError("a case is missing from the data")
            else:
                why, answer = problems[name]
                fb.wrong(f"{name}: {why}", answer=answer)
        return fb

    @staticmethod
    def _judge_error(fb, message, case, where):
        import re

        groups = case["mesh"][0]
        axis = re.search(r"axis (\d+) has size (\d+)", message)
        if axis and int(axis[1]) != EXAMPLES_AXIS:
            fb.wrong(f"pack_fn raised {message[:300]} (for {where}). It splits axis {axis[1]} over 'batch', which "
                     f"holds {axis[2]} {'time steps' if axis[1] == '0' else 'pixels per row'}, not the examples.",
                     answer="The examples are axis 1 of both time-major tensors.")
        elif "divid" in message or "split" in message:
            fb.wrong(f"pack_fn raised {message[:300]} (for {where}). {case['examples']} examples do not split into "
                     f"{groups} equal groups, and every device along 'batch' must get a block of the same size. What "
                     f"can you add to the batch that changes no result?",
                     answer=f"Pad the examples' axis to {_padded(case['examples'], groups)} and give the padding "
                            f"weight 0.")
        elif "positional argument" in message or "takes" in message:
            fb.wrong(f"pack_fn raised {message[:300]}. The checker calls it as pack_fn(images, labels, mesh).")
        else:
            fb.wrong(f"pack_fn raised {message[:300]} (for {where}).")

    @staticmethod
    def _judge_part(name, value, original, case, mesh, where, padded_images=None, real_images=None):
        """None when ``value`` is right for this case, else (what is wrong, the part that gives it away).

        ``padded_images`` (what pack_fn returned as images) and ``real_images`` (the case's) let the weights' hint
        say when the padding is copies of real examples."""
        import numpy as np

        layout = layout_of(value)
        if layout is None:
            return f"not a DTensor ({where}): pack it onto the mesh pack_fn is given (pack_batch or dtensor.pack).", ""
        if mesh_dims(layout.mesh) != [tuple(dim) for dim in mesh]:
            return (f"it lives on a mesh {mesh_text(mesh_dims(layout.mesh))}, not on the mesh passed in "
                    f"({mesh_text([tuple(dim) for dim in mesh])}): build its layout on pack_fn's `mesh`.", "")
        rank = 3 if name == "images" else 2
        right = [UNSHARDED] * rank
        right[EXAMPLES_AXIS] = "batch"
        given = specs(layout)
        if given != right:
            what = {0: "the 28 time steps (rows of every image)", 2: "the 28 pixels of each row"}
            examples_first = len(value.shape) >= 2 and value.shape[1] == TIME_STEPS != value.shape[0]
            if examples_first and given[:1] == ["batch"]:
                why = ("you transposed it to put the examples first. The tagger reads every tensor time-major, as "
                       "given: pack each one as it is and split the axis that holds its examples")
            elif len(given) != rank:
                why = f"its layout has rank {len(given)}; the {name} have rank {rank} here"
            elif "model" in given:
                why = ("it uses 'model', the axis that splits WEIGHTS: the devices of a 'model' group work on the "
                       "same examples")
            elif "batch" not in given:
                why = "it is replicated: every device would hold every example"
            elif given.index("batch") != EXAMPLES_AXIS:
                split = given.index("batch")
                why = (f"'batch' splits axis {split}, {what.get(split, 'not the examples')}: each device would hold "
                       f"part of EVERY example. Which axis holds the examples here?")
            else:
                why = "it splits more than the examples"
            return f"layout {given} ({where}): {why}", f"Expected {right}: the examples (axis 1) over 'batch'."
        array = np.asarray(global_numpy(value))
        examples, groups = case["examples"], case["mesh"][0]
        padded = _padded(examples, groups)
        shape = (TIME_STEPS, padded, PIXELS)[:rank]
        if array.ndim != rank or array.shape[:1] + array.shape[2:] != shape[:1] + shape[2:]:
            layout_text = f"{TIME_STEPS} x examples" + (f" x {PIXELS}" if rank == 3 else "")
            return f"shape {array.shape} ({where}); the time-major {name} are {layout_text}.", ""
        if array.shape[EXAMPLES_AXIS] != padded:
            devices = math.prod(case["mesh"])
            if array.shape[EXAMPLES_AXIS] == _padded(examples, devices) != padded:
                return (f"{array.shape[EXAMPLES_AXIS]} examples along axis 1 ({where}): a multiple of all {devices} "
                        f"devices. Only the 'batch' axis splits the examples; the devices along 'model' hold the same "
                        f"examples as their group. How many groups share them out?",
                        f"{padded}: the next multiple of mesh.dim_size('batch') = {groups} from {examples}.")
            if array.shape[EXAMPLES_AXIS] > padded:
                return (f"{array.shape[EXAMPLES_AXIS]} examples along axis 1 ({where}): more padding than the split "
                        f"needs. Pad with as few examples as make the groups equal.",
                        f"{padded}: the next multiple of {groups} from {examples}.")
            return f"{array.shape[EXAMPLES_AXIS]} examples along axis 1 ({where}): fewer than the batch holds.", ""
        if name == "weights":
            want = np.zeros((TIME_STEPS, padded), dtype="float64")
            want[:, :examples] = 1.0
            if array.dtype.kind != "f":
                return f"the weights are {array.dtype}: give float weights, to multiply the per-tag losses.", ""
            if np.array_equal(array, np.ones_like(array)) and padded > examples:
                if _pads_with_copies(padded_images, real_images):
                    return (f"every weight is 1 ({where}), and the padded examples are copies of real ones: each "
                            f"copied example counts twice in the mean loss, so the mean is not the mean over the "
                            f"real examples, each once. Copies are fine as padding; what must their weights be?",
                            "0.0 for the padded examples (copies or zeros), 1.0 for the real ones.")
                return (f"every weight is 1 ({where}): the padding counts in the mean loss as if it were data.",
                        "0.0 for the padded examples, 1.0 for the real ones.")
            if padded > examples and np.array_equal(array, np.roll(want, padded - examples, axis=1)):
                return (f"the weights are 0.0 for the first {padded - examples} examples and 1.0 for the last "
                        f"{examples} ({where}): they mark the padding as if it came BEFORE the real examples. The "
                        f"padding goes after them, so that example i of the batch stays example i.", "")
            if not np.array_equal(array, want):
                return (f"the weights are not 1.0 for every tag of a real example and 0.0 for the padding's "
                        f"({where}).", "")
            return None
        if not np.array_equal(array[:, :examples], original):
            if padded > examples and np.array_equal(array[:, padded - examples:], original):
                return (f"the padding comes first ({where}): the {padded - examples} padded examples lead along axis "
                        f"1 and the real ones follow, so example i of the batch is no longer example i (and the "
                        f"first 'batch' group gets the padding). Put the padding after the real examples.",
                        "np.pad(..., [(0, 0), (0, extra), ...]): the extra examples at the end of axis 1.")
            return (f"the first {examples} examples along axis 1 are not the batch as given ({where}): keep every "
                    f"example, in order, and put the padding after them.", "")
        return None


def _pads_with_copies(padded_images, real_images):
    """Whether every padded example of ``padded_images`` (a DTensor, time-major) is a copy of a real one."""
    import numpy as np

    if padded_images is None or real_images is None or layout_of(padded_images) is None:
        return False
    array = np.asarray(global_numpy(padded_images))
    examples = real_images.shape[EXAMPLES_AXIS]
    if array.shape[1:2] <= (examples,) or array.shape[:1] + array.shape[2:] != real_images.shape[:1] + \
            real_images.shape[2:]:
        return False
    return all(any(np.array_equal(array[:, extra], real_images[:, real]) for real in range(examples))
               for extra in range(examples, array.shape[EXAMPLES_AXIS]))
