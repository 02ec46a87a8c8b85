"""Chapter 1 · Tensors and devices: the exercises' graders and hints."""
from .answers import as_bool, as_float, close, logical_cpus, short_error
from .core import Exercise, Feedback, chapter

A = [[1.0, 2.0], [3.0, 4.0]]
B = [[0.0, 1.0], [1.0, 0.0]]
DEVICE_INDEX = 5


class PlaceMatmul(Exercise):
    title = "Place a matmul on virtual CPU 5"
    points = 2
    hints = (
        "Devices can only be configured before TensorFlow's runtime starts. Which call splits the CPU, and which "
        "`with` block chooses where an operation runs?",
        "Split the one physical CPU into 8 logical ones BEFORE anything starts TensorFlow's runtime "
        "(configure_virtual_cpus(8), or tf.config.set_logical_device_configuration). Then compute inside "
        "`with tf.device(cpus[5]):` and look at product.device.",
    )

    def grade(self, cpus, product):
        import numpy as np
        import tensorflow as tf

        fb = Feedback()
        try:
            names = [n for n in (getattr(d, "name", d) for d in cpus) if isinstance(n, str)]
        except TypeError:
            names = []
        if not names:
            fb.wrong(f"cpus: give the list of logical CPU names (what configure_virtual_cpus(8) or "
                     f"tf.config.list_logical_devices('CPU') returns), not a {type(cpus).__name__}.")
        elif len(names) != 8 or not all("CPU" in n.upper() for n in names):
            fb.wrong(f"cpus: your list has {len(names)} CPU device(s); the exercise asks for 8 virtual CPUs. This "
                     f"kernel has {len(logical_cpus())}. Devices can only be configured before TensorFlow's runtime "
                     f"starts: restart the kernel and configure them first.")
        else:
            fb.right("cpus: 8 logical CPUs")

        expected = np.array(A) @ np.array(B)
        if isinstance(product, np.ndarray):
            fb.wrong("product is a NumPy array. .numpy() copies the result to the host and forgets where it was "
                     "computed; pass the tf.Tensor itself.")
            return fb
        if not isinstance(product, (tf.Tensor, tf.Variable)):
            fb.wrong(f"product should be the tf.Tensor that tf.matmul returned, not a {type(product).__name__}.")
            return fb
        value = product.numpy()
        if value.shape != expected.shape or not np.allclose(value, expected):
            if value.shape == expected.shape and np.allclose(value, np.array(A) * np.array(B)):
                fb.wrong("product: that is the elementwise product a * b; the exercise asks for the matrix "
                         "product tf.matmul(a, b) (or a @ b).")
            elif value.shape == expected.shape and np.allclose(value, np.array(B) @ np.array(A)):
                fb.wrong("product: that is b @ a; matrix products don't commute.", answer="Compute tf.matmul(a, b).")
            else:
                fb.wrong(f"product: got {value.tolist()}, which is not the matrix product of a and b.",
                         answer=f"tf.matmul(a, b) = {expected.tolist()}.")
            return fb
        spec = tf.DeviceSpec.from_string(product.device or "")
        if (spec.device_type or "").upper() == "CPU" and spec.device_index == DEVICE_INDEX:
            fb.right(f"product: computed on {product.device}")
        elif spec.device_index in (0, None):
            fb.wrong(f"product was computed on {product.device or 'the default device'}, TensorFlow's default "
                     f"choice: place it on CPU:{DEVICE_INDEX}.",
                     answer=f"Run the matmul inside `with tf.device(cpus[{DEVICE_INDEX}]):`.")
        else:
            fb.wrong(f"product was computed on CPU:{spec.device_index}, the task asks for CPU:{DEVICE_INDEX}. "
                     f"Device indices count from 0.", answer=f"It is cpus[{DEVICE_INDEX}].")
        return fb


CALLS = ["f(tf.constant(1))", "f(tf.constant(2))", "f(tf.constant([1, 2]))", "f(tf.constant([3, 4]))",
         "f(3)", "f(3)", "f(4)"]
TRACES = [True, False, True, False, True, False, True]
WHY = [
    "The first call always traces: there is no concrete function yet.",
    "tf.constant(2) has the same dtype (int32) and shape () as tf.constant(1). A tf.function keys its traces on "
    "the dtype and shape of tensor arguments, not on their values, so call 1's trace is reused.",
    "The shape (2,) is new, so this call traces a new concrete function.",
    "Same dtype and shape (2,) as the previous call: its trace is reused. The values [3, 4] don't matter.",
    "A Python number is part of the signature by its *value*, and 3 has not been seen: this call traces.",
    "The Python value 3 was seen by the previous call, so its trace is reused.",
    "4 is a new Python value, so this call traces again. That is why loops pass tensors, not Python numbers, "
    "to a tf.function.",
]


class PredictTracing(Exercise):
    title = "Predict which calls trace"
    points = 2
    hints = (
        "A tf.function keeps one trace per input signature. What is the signature of a tensor argument, and what "
        "is the signature of a Python number?",
        "For a tensor argument the signature is its dtype and shape; for a Python argument it is the value itself.",
    )

    def grade(self, predictions):
        fb = Feedback()
        if isinstance(predictions, (str, bytes, dict)) or not hasattr(predictions, "__len__"):
            fb.wrong(f"Give a list of {len(CALLS)} booleans, one per call (True = this call traces).")
            return fb
        values = [as_bool(p) for p in predictions]
        if len(values) != len(CALLS):
            fb.wrong(f"Give one True/False per call: {len(CALLS)} values, not {len(values)}.")
            return fb
        if any(v is None for v in values):
            fb.wrong("Use True or False for every call (None means you have not answered that call yet).")
            return fb
        wrong = [i for i, (v, t) in enumerate(zip(values, TRACES)) if v != t]
        if not wrong:
            fb.right(f"Traces happen on calls {[i + 1 for i, t in enumerate(TRACES) if t]}: a new trace for each new "
                     f"input signature (dtype and shape of tensors, value of Python arguments).", points=2)
            return fb
        if all(values):
            fb.note("Not every call traces: tf.function reuses a trace when the input signature repeats.")
        elif sum(values) == 1 and values[0]:
            fb.note("A tf.function traces again whenever it sees a new input signature, not only once.")
        for i in wrong:
            fb.wrong(f"call {i + 1}, {CALLS[i]}: think again.", answer=WHY[i])
        fb.points = 1 if len(wrong) == 1 else 0
        return fb


W, X = 2.0, 3.0  # y = w * x**2 = 18: dy/dw = x**2 = 9, dy/dx = 2 * w * x = 12


class GradientTape(Exercise):
    title = "Gradients with GradientTape"
    points = 2
    none_is_answer = True
    hints = (
        "Which values does a tape watch by itself, and which must you ask it to watch?",
        "A tape records operations on trainable variables automatically; a tf.constant must be watched with "
        "tape.watch(x). Compute y inside the `with` block, then tape.gradient(y, [w, x]).",
    )

    def grade(self, grad_w, grad_x):
        fb = Feedback()
        right_w, right_x = X ** 2, 2 * W * X
        if grad_w is None and grad_x is None:
            fb.wrong("Both gradients are None: the tape recorded nothing. Compute y *inside* the "
                     "`with tf.GradientTape() as tape:` block.")
            return fb
        values = {}
        for name, value in (("grad_w", grad_w), ("grad_x", grad_x)):
            values[name] = None
            if value is not None and value is not Ellipsis:
                try:
                    values[name] = as_float(value)
                except Exception as err:
                    fb.wrong(f"{name}: expected one number (a scalar tensor), {short_error(err)}.")
        gw, gx = values["grad_w"], values["grad_x"]
        if close(gw, right_x) and close(gx, right_w):
            fb.wrong("The two gradients are swapped: tape.gradient(y, [w, x]) returns them in the order of the "
                     "sources you list, dy/dw first.")
            return fb
        if grad_w is Ellipsis:
            fb.wrong("grad_w: not answered yet.")
        elif grad_w is None:
            fb.wrong("grad_w is None: w must be used to compute y inside the tape's `with` block.")
        elif close(gw, right_w):
            fb.right(f"grad_w = dy/dw = x**2 = {right_w:g}")
        elif gw is not None:
            fb.wrong(f"grad_w = {gw:g} is not dy/dw of y = w * x**2.", answer="It is x**2.")
        if grad_x is Ellipsis:
            fb.wrong("grad_x: not answered yet.")
        elif grad_x is None:
            fb.wrong("grad_x is None: x is a tf.constant, and a tape only watches trainable variables "
                     "automatically.", answer="Call tape.watch(x) inside the `with` block, before computing y.")
        elif close(gx, right_x):
            fb.right(f"grad_x = dy/dx = 2*w*x = {right_x:g}")
        elif gx is not None:
            if close(gx, W * X ** 2):
                fb.wrong(f"grad_x = {gx:g} is y itself, not its derivative: use tape.gradient.")
            else:
                fb.wrong(f"grad_x = {gx:g} is not dy/dx of y = w * x**2.", answer="It is 2*w*x.")
        return fb


CHAPTER = chapter(1, "Tensors and devices", [PlaceMatmul, PredictTracing, GradientTape])
