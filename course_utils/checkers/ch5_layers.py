"""Chapter 5 · exercises 1 and 2: a tf_keras Dense layer on a DTensor mesh (its seed, its kernel_layout).

``collect`` calls the learner's ``init_kernel`` or reads the learner's layer, and sends the kernels, shapes and
layouts as plain data; ``judge`` never imports tf_keras (exercise 1's reference kernel is drawn with TensorFlow).
"""
import math
import sys

from .answers import UNSHARDED, global_numpy, layout_of, mesh_dims, short_error, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback

NOTEBOOK_MESH = [("batch", 4), ("model", 2)]  # the notebook's `mesh` (checker_mesh() on its 8 logical CPUs)
SEED_KERNEL = (6, 4)  # the colleague's Dense(4) on 6 inputs (exercise 1)


def _keras_seed_generator():
    """tf_keras' thread-local seed holder, if tf_keras is loaded (it is what the DTensor seed check reads)."""
    backend = sys.modules.get("tf_keras.src.backend")
    return getattr(backend, "_SEED_GENERATOR", None)


def _variable_layout(variable):
    return layout_of(variable.read_value() if hasattr(variable, "read_value") else variable)


def _seed_pair(seed):
    """The two seeds the checker passes to init_kernel (7 and 8 for seed 0)."""
    first = 7 + 2 * (int(seed) % 500_000)
    return first, first + 1


def _reference_kernel(seed, shape=SEED_KERNEL):
    """The kernel tf_keras draws for a Dense kernel of ``shape`` built on a mesh right after
    ``tf.keras.utils.set_random_seed(seed)``: Glorot uniform, stateless, seeded by the first draw of
    the seed generator (``random.Random(seed)``). TensorFlow only."""
    import random

    import tensorflow as tf

    draw = random.Random(seed).randint(1, int(1e9))
    limit = math.sqrt(3.0 / max(1.0, (shape[0] + shape[1]) / 2.0))
    return tf.random.stateless_uniform(shape, seed=[draw, 0], minval=-limit, maxval=limit).numpy()


class Seeds(Exercise):
    title = "Seeds for DTensor-aware layers"
    points = 2
    hints = (
        "What does tf_keras ask for before it initialises a DTensor layer, and why must every client do the same?",
        "tf_keras refuses to initialise a DTensor layer without a global seed, because every client must draw the "
        "same 'replicated' weights. Set it inside the function, with the seed you are given.",
    )

    def collect(self, init_kernel, seed=0):
        """Call ``init_kernel`` as a fresh process would (no seed set elsewhere): twice with one seed, once with
        the next (both drawn from ``seed``).

        Crosses: ``{"callable": False, "type": name}``, or ``{"callable": True, "error": message}`` when it
        raised, or ``{"callable": True, "kernels": [three kernels as returned]}`` (DVariables cross with their
        layout and per-device blocks; anything else as itself or as an opaque type name).
        """
        if not callable(init_kernel):
            return {"callable": False, "type": type(init_kernel).__name__}
        first, second = _seed_pair(seed)
        holder = _keras_seed_generator()
        saved = getattr(holder, "generator", None) if holder is not None else None
        try:
            if holder is not None:
                holder.generator = None  # as in a fresh process: only a seed set inside init_kernel counts
            kernels = [init_kernel(s) for s in (first, first, second)]
        except Exception as err:
            return {"callable": True, "error": short_error(err)}
        finally:
            if holder is not None and getattr(holder, "generator", None) is None:
                holder.generator = saved
        return {"callable": True, "kernels": kernels}

    def judge(self, data, seed=0):
        """Feedback on the three kernels: DTensors, equal for one seed, different for two, and the very kernels
        tf_keras draws for those seeds (:func:`_reference_kernel`)."""
        import numpy as np

        fb = Feedback()
        if not data["callable"]:
            fb.wrong(f"init_kernel should be a function seed -> kernel, got {str(data['type'])[:60]}.")
            return fb
        first, second = _seed_pair(seed)
        if "error" in data:
            message = str(data["error"])[:400]
            if "global seed" in message:
                fb.wrong(f"init_kernel raised {message}. In a fresh process (as on every client of a DTensor job) no "
                         f"seed is set, and tf_keras checks its own global seed: tf.random.set_seed, or Keras 3's "
                         f"keras.utils.set_random_seed, does not set it.",
                         answer="Call tf.keras.utils.set_random_seed(seed) inside init_kernel, before creating the "
                                "layer.")
            else:
                fb.wrong(f"init_kernel raised {message}")
            return fb
        kernels = list(data["kernels"])
        if len(kernels) != 3:
            raise ValueError("three kernels expected")
        if any(_variable_layout(k) is None for k in kernels):
            fb.wrong("init_kernel should return the layer's kernel as a DTensor (a DVariable): create the Dense layer "
                     "with kernel_layout=... on the mesh and return layer.kernel.")
            return fb
        values = [global_numpy(k) for k in kernels]
        if not np.array_equal(values[0], values[1]):
            fb.wrong("Two calls with the same seed gave different kernels: every client must build identical "
                     "'replicated' weights, or they silently differ.",
                     answer="Set the seed inside init_kernel with tf.keras.utils.set_random_seed(seed) right before "
                            "building the layer.")
            return fb
        fb.right("the same seed gives the same kernel")
        if np.array_equal(values[0], values[2]):
            fb.wrong(f"seeds {first} and {second} gave the same kernel: use the seed argument.")
        elif not all(self._judge_drawn(value, s) for value, s in ((values[0], first), (values[2], second))):
            fb.wrong(f"the kernels for seeds {first} and {second} are not the ones tf_keras draws for the colleague's "
                     f"layer (Dense(4) on 6 inputs) in a fresh process given only that seed.",
                     answer="Keep the colleague's layer as it is and call tf.keras.utils.set_random_seed(seed) inside "
                            "init_kernel, right before creating it.")
        else:
            fb.right("another seed gives another kernel: every client that sets the same seed builds identical "
                     "replicated weights.")
        return fb

    @staticmethod
    def _judge_drawn(value, seed):
        import numpy as np

        value = np.asarray(value)
        return value.shape == SEED_KERNEL and np.allclose(value, _reference_kernel(seed), rtol=0, atol=1e-6)


def _layer_variable(variable):
    """A layer's variable as plain data: its shape and DTensor layout (None when it is not a DTensor)."""
    return None if variable is None else {"shape": tuple(variable.shape), "layout": _variable_layout(variable)}


class ShardedDense(Exercise):
    title = "kernel_layout for model parallelism"
    points = 2
    hints = (
        "A Dense kernel has shape (inputs, units). Which axis holds the output units?",
        "Split the units (axis 1) over 'model'; the bias has one entry per unit, so it follows the kernel's columns.",
    )

    def collect(self, layer, seed=0):
        """Read the layer's kernel and bias.

        Crosses: ``{"built": False}`` when the layer has no kernel/bias attributes yet, else
        ``{"built": True, "kernel": ..., "bias": ...}``, each None or ``{"shape": tuple, "layout": Layout or None}``.
        """
        try:
            kernel, bias = layer.kernel, layer.bias
        except AttributeError:
            return {"built": False}
        return {"built": True, "kernel": _layer_variable(kernel), "bias": _layer_variable(bias)}

    def judge(self, data, seed=0):
        """Feedback on the kernel's and the bias's shapes and layouts (on the notebook's batch x model mesh)."""
        fb = Feedback()
        if not data["built"]:
            fb.wrong("layer has no kernel/bias yet: pass the Dense layer itself, built with layer.build((None, 784)) "
                     "(or called once on a batch).")
            return fb
        kernel, bias = data["kernel"], data["bias"]
        if kernel is None or bias is None:
            fb.wrong("the layer needs a kernel and a bias (use_bias=True) and must be built.")
            return fb
        shape = tuple(kernel["shape"])
        if shape != (784, 128):
            fb.wrong(f"the kernel's shape is {shape}; the exercise asks for Dense(128) on 784 inputs: (784, 128).")
        layout = kernel["layout"]
        if layout is None:
            fb.wrong("the kernel is not a DTensor: pass kernel_layout=dtensor.Layout(...) to Dense (tf_keras, "
                     "TF_USE_LEGACY_KERAS=1).")
            return fb
        given = specs(layout)
        if "model" not in layout.mesh.dim_names:
            fb.wrong(f"the kernel lives on a mesh {mesh_text(mesh_dims(layout.mesh))} without a 'model' axis; use the "
                     f"batch x model mesh.")
            return fb
        if mesh_dims(layout.mesh) != NOTEBOOK_MESH:
            fb.wrong(f"the kernel lives on a mesh {mesh_text(mesh_dims(layout.mesh))}; the exercise's mesh is "
                     f"{mesh_text(NOTEBOOK_MESH)} (`mesh` in the notebook): with a 'batch' axis too, every "
                     f"weight is replicated over 'batch' while the data is split over it.")
            return fb
        if given == [UNSHARDED, "model"] and shape == (784, 128):
            fb.right(f"kernel {given}: each 'model' device holds all inputs and half of the 128 output units")
        elif given == ["model", UNSHARDED]:
            fb.wrong(f"kernel {given} splits the 784 INPUTS (rows). The exercise splits the output units.")
        elif "batch" in given:
            fb.wrong(f"kernel {given} uses 'batch', the axis that splits the DATA; weights are split over 'model' "
                     f"and replicated over 'batch'.")
        elif given == [UNSHARDED, UNSHARDED]:
            fb.wrong(f"kernel {given} is replicated: that is data parallelism.")
        elif shape == (784, 128):
            fb.wrong(f"kernel {given} does not split the output units over 'model'.")
        bias_layout = bias["layout"]
        bias_specs = specs(bias_layout) if bias_layout is not None else None
        if bias_specs == ["model"]:
            fb.right("bias ['model']: each device holds the biases of its own output units")
        elif bias_specs == [UNSHARDED]:
            fb.wrong("bias is replicated, while the kernel's output units are split over 'model': which bias entries "
                     "does a device add to the units it computes?",
                     answer="Its own units' entries only: shard the bias the same way, "
                            "bias_layout=Layout(['model'], mesh).")
        else:
            fb.wrong(f"bias layout {bias_specs} does not match the kernel's columns.")
        return fb
