"""Chapter 1 · the exercises whose answer is code, run by the checker on inputs of its own: gradients with a tape for
any function (exercise 3), and one piece of work on each of a list of devices, measured where it ran (exercise 4)."""
from .answers import first_cpus, short_error
from .core import Exercise, Feedback

# Exercise 3: gradients(f, w, x) -> (df/dw, df/dx) with a GradientTape, for the checker's functions f of a variable w
# and a constant x (the values drawn from the check's seed). The last case's f returns a vector: its gradient is that
# of its sum, as the chapter says.
TAPE_CASES = (  # (f in words, w's shape, x's shape)
    ("y = w * x**2", (), ()),
    ("y = sin(w) * x**3 + w", (), ()),
    ("y = sum(w**2 * x), w and x vectors of 3", (3,), (3,)),
    ("y = w * x**2 with x a vector of 3 (y is a vector)", (), (3,)),
)
GRADIENT_NAMES = ("df/dw", "df/dx")


def _tape_function(index):
    """The checker's f of case ``index`` of TAPE_CASES, made of TensorFlow operations."""
    import tensorflow as tf

    return [lambda w, x: w * x ** 2, lambda w, x: tf.sin(w) * x ** 3 + w, lambda w, x: tf.reduce_sum(w ** 2 * x),
            lambda w, x: w * x ** 2][index]


def _tape_values(seed):
    """w and x of every case, drawn from ``seed`` (float32 arrays, between 0.5 and 2)."""
    import numpy as np

    rng = np.random.default_rng([seed, 13])
    return [(rng.uniform(0.5, 2.0, size=w_shape).astype("float32"), rng.uniform(0.5, 2.0, size=x_shape).astype("float32"))
            for _, w_shape, x_shape in TAPE_CASES]


def _reference_tape_gradients(seed):
    """Exercise 3's answer: (df/dw, df/dx) of every case, worked out by calculus (float64)."""
    import numpy as np

    found = []
    for index, (w, x) in enumerate(_tape_values(seed)):
        w, x = w.astype("float64"), x.astype("float64")
        found.append([(x ** 2, 2 * w * x), (np.cos(w) * x ** 3 + 1, 3 * np.sin(w) * x ** 2),
                      (2 * w * x, w ** 2), (np.sum(x ** 2), 2 * w * x)][index])
    return found


def _reference_tape_values(seed):
    """f's value in every case: a typical wrong answer is y itself."""
    import numpy as np

    found = []
    for index, (w, x) in enumerate(_tape_values(seed)):
        w, x = w.astype("float64"), x.astype("float64")
        found.append([w * x ** 2, np.sin(w) * x ** 3 + w, np.sum(w ** 2 * x), w * x ** 2][index])
    return found


def _as_gradient(value):
    """A returned gradient as a float64 array, None for None, or the type's name when it is no array of numbers."""
    import numpy as np

    if value is None:
        return None
    try:
        return np.asarray(value, dtype="float64")
    except Exception:
        return {"type": type(value).__name__}


class GradientTape(Exercise):
    title = "Gradients with GradientTape, for any function"
    points = 2
    hints = (
        "Which values does a tape watch by itself, and which must you ask it to watch? And where must f be called "
        "for the tape to record it?",
        "A tape records operations on trainable variables automatically; a tf.constant must be watched with "
        "tape.watch(x). Call f(w, x) inside the `with tf.GradientTape() as tape:` block, then return "
        "tape.gradient(y, [w, x]).",
    )

    def collect(self, gradients, seed=0):
        """Calls ``gradients(f, w, x)`` for every case of TAPE_CASES, with w a tf.Variable and x a tf.constant drawn
        from ``seed``. What crosses: {"callable": False, "type": name}, or {"callable": True, "cases": per case
        {"raised": one line} or {"returned": [df/dw, df/dx] (see _as_gradient)} or {"shape": what came back}}."""
        import tensorflow as tf

        if not callable(gradients):
            return {"callable": False, "type": type(gradients).__name__}
        cases = []
        for index, (w, x) in enumerate(_tape_values(seed)):
            try:
                out = gradients(_tape_function(index), tf.Variable(w), tf.constant(x))
            except Exception as err:
                cases.append({"raised": short_error(err)})
                continue
            if isinstance(out, (list, tuple)) and len(out) == 2:
                cases.append({"returned": [_as_gradient(g) for g in out]})
            else:
                cases.append({"shape": f"{type(out).__name__} {out!r:.60}"})
        return {"callable": True, "cases": cases}

    def judge(self, data, seed=0):
        """Grades the gradients of :meth:`collect` against calculus, for the values of ``seed``: a point for df/dw
        and one for df/dx, each right in every case."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong(f"gradients should be a function (f, w, x) -> (df/dw, df/dx), not a {str(data['type'])[:60]}.")
            return fb
        cases, truths, values = data["cases"], _reference_tape_gradients(seed), _reference_tape_values(seed)
        if type(cases) is not list or len(cases) != len(TAPE_CASES):
            raise ValueError(f"{len(TAPE_CASES)} cases expected")
        for case, (words, _, _) in zip(cases, TAPE_CASES):
            if "raised" in case:
                fb.wrong(f"for {words}: gradients(f, w, x) raised {case['raised']}")
                return fb
            if "shape" in case:
                fb.wrong(f"for {words}: gradients(f, w, x) returned {case['shape']}; return two values: df/dw and "
                         f"df/dx, in that order.")
                return fb
        returned = [case["returned"] for case in cases]
        if all(self._same(got[0], truth[1]) and self._same(got[1], truth[0]) for got, truth in zip(returned, truths)):
            fb.wrong("The two gradients are swapped: tape.gradient returns them in the order of the sources you "
                     "list.", answer="tape.gradient(y, [w, x]) returns df/dw first.")
            return fb
        for which, name in enumerate(GRADIENT_NAMES):
            self._judge_gradient(fb, which, name, [got[which] for got in returned], truths, values)
        return fb

    @staticmethod
    def _same(got, want):
        import numpy as np

        return isinstance(got, np.ndarray) and got.shape == np.shape(want) and \
            np.allclose(got, want, rtol=1e-5, atol=1e-6)

    @staticmethod
    def _judge_gradient(fb, which, name, got, truths, values):
        """One point for gradient ``which`` when it is right in every case; else a line about the first it is not."""
        import numpy as np

        if all(GradientTape._same(g, truth[which]) for g, truth in zip(got, truths)):
            fb.right(f"{name}: right for every function the checker tried ({len(TAPE_CASES)} of them)")
            return
        index = next(i for i, (g, truth) in enumerate(zip(got, truths)) if not GradientTape._same(g, truth[which]))
        words, g, truth = TAPE_CASES[index][0], got[index], truths[index]
        head = f"{name} for {words}:"
        arrays = [a.tobytes() for a in got if isinstance(a, np.ndarray)]
        if len(arrays) == len(got) and len(set(arrays)) == 1:
            fb.wrong(f"{name}: your function returns {np.asarray(got[0]).tolist()} whatever f, w and x it is given "
                     f"(the checker tried {len(TAPE_CASES)} functions): compute it with a tape from what it receives.")
        elif g is None and which == 1:
            fb.wrong(f"{head} None: x is a tf.constant, and a tape only watches trainable variables automatically.",
                     answer="Call tape.watch(x) inside the `with` block, before calling f.")
        elif g is None:
            fb.wrong(f"{head} None: the tape recorded nothing about w. Call f(w, x) INSIDE the "
                     f"`with tf.GradientTape() as tape:` block.")
        elif isinstance(g, dict):
            fb.wrong(f"{head} a {g['type']}, not a tensor or an array of numbers.")
        elif g.shape != np.shape(truth[which]):
            fb.wrong(f"{head} shape {list(g.shape)}, but the gradient has the shape of the source "
                     f"({list(np.shape(truth[which]))}).")
        elif which == 1 and not np.any(g):
            fb.wrong(f"{head} zeros: the tape did not record x (a constant), so asking for zeros instead of None hides "
                     f"the problem; it is not df/dx.", answer="Call tape.watch(x) inside the `with` block.")
        elif np.allclose(g, values[index], rtol=1e-5):
            fb.wrong(f"{head} that is f's value itself, not its derivative: use tape.gradient.")
        elif GradientTape._same(g, truth[1 - which]):
            fb.wrong(f"{head} that is the derivative with respect to the other input.")
        elif np.size(values[index]) > 1 and np.allclose(g * np.size(values[index]), truth[which], rtol=1e-5):
            fb.wrong(f"{head} 1/{np.size(values[index])} of the derivative: this f returns a vector of "
                     f"{np.size(values[index])}, and you took the gradient of its MEAN. The chapter's rule for a "
                     f"vector is the gradient of its sum.", answer="Pass f(w, x) itself to tape.gradient.")
        elif np.allclose(g, truth[which], rtol=1e-2):
            fb.wrong(f"{head} close, but not exact: a difference quotient (f(w + h) - f(w)) / h only approximates "
                     f"the derivative. A tape computes it exactly.")
        else:
            fb.wrong(f"{head} not the derivative of f. Does gradients use the f, w and x it receives?")


# Exercise 4: sharded_sum(batch, weights, devices) -> (total, partials), the chapter's last section for any batch and
# any list of devices: consecutive shards as equal as possible (the first ones one row longer, as np.array_split
# cuts), the column sums of shard @ weights on each device, their sum on devices[0]. The checker measures where each
# result was computed (its .device) and compares the values with NumPy.
SHARD_FEATURES, SHARD_UNITS = 5, 3


def _shard_cases(seed):
    """The checker's cases, drawn from ``seed``: (the CPU numbers of the devices, in the order given; the rows of the
    batch). The first and the last case have rows that do not cut into equal shards and do not list CPU:0 first (nor
    in order); the second cuts evenly and lists CPU:0 first."""
    import numpy as np

    rng = np.random.default_rng([seed, 14])
    cases = []
    for count, uneven in ((3, True), (2, False), (4, True)):
        others = [int(c) for c in rng.permutation(7) + 1]  # CPU:1 to CPU:7, shuffled
        cpus = [0, others[0]] if not uneven else others[:count]
        if uneven and cpus == sorted(cpus):
            cpus = cpus[::-1]
        rows = count * int(rng.integers(2, 4)) + (int(rng.integers(1, count)) if uneven else 0)
        cases.append((cpus, rows))
    return cases


def _shard_data(seed, rows):
    import numpy as np

    rng = np.random.default_rng([seed, rows])
    return (rng.standard_normal((rows, SHARD_FEATURES)).astype("float32"),
            rng.standard_normal((SHARD_FEATURES, SHARD_UNITS)).astype("float32"))


def _device_name(number):
    """The full name of CPU ``number`` in this process, as configure_virtual_cpus returns it."""
    return first_cpus(number + 1)[number]


def _ran_on(value):
    """Where a returned tensor was computed ('CPU:5'), or None for a value that is no tensor (no .device)."""
    device = getattr(value, "device", None)
    return device.split("device:")[-1] if isinstance(device, str) and "device:" in device else None


MATMUL_OPS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum")  # the multiplying work


def _matmul_devices(sharded_sum, batch, weights, devices):
    """Where sharded_sum's products run: the device ('CPU:k', 'CPU:0' when no device was asked for) of each matmul
    of its graph, traced with tf.function; None when it cannot be traced (it uses NumPy on tensors, say)."""
    import tensorflow as tf

    try:
        graph = tf.function(sharded_sum).get_concrete_function(batch, weights, devices).graph
    except Exception:
        return None
    return [op.device.split("device:")[-1] if "device:" in op.device else "CPU:0"
            for op in graph.get_operations() if op.type in MATMUL_OPS]


def _collect_shards(sharded_sum, cpus, rows, seed):
    """One case: what sharded_sum returned, as plain data (values as arrays, devices as 'CPU:k' or None), and where
    its matmuls run (see :func:`_matmul_devices`)."""
    import numpy as np
    import tensorflow as tf

    batch, weights = _shard_data(seed, rows)
    devices = [_device_name(c) for c in cpus]
    try:
        out = sharded_sum(tf.constant(batch), tf.constant(weights), devices)
    except Exception as err:
        return {"raised": short_error(err)}
    matmuls = _matmul_devices(sharded_sum, tf.constant(batch), tf.constant(weights), devices)
    if not (isinstance(out, (list, tuple)) and len(out) == 2 and isinstance(out[1], (list, tuple))):
        return {"shape": f"{type(out).__name__} {out!r:.60}"}
    total, partials = out
    try:
        return {"total": np.asarray(total, dtype="float64"), "total_on": _ran_on(total),
                "partials": [np.asarray(p, dtype="float64") for p in partials], "on": [_ran_on(p) for p in partials],
                "matmuls": matmuls}
    except Exception as err:
        return {"shape": f"values that are not arrays of numbers ({short_error(err, 80)})"}


def _reference_shard_sums(seed, rows, count, extra_last=False):
    """The column sums of each shard @ weights (np.array_split's shards: the first ones longer; with ``extra_last``
    the last ones longer instead, a typical slip) and of the whole batch."""
    import numpy as np

    batch, weights = (a.astype("float64") for a in _shard_data(seed, rows))
    sizes = [len(part) for part in np.array_split(np.arange(rows), count)]
    bounds = np.cumsum([0, *(sizes[::-1] if extra_last else sizes)])
    return [(batch[a:b] @ weights).sum(axis=0) for a, b in zip(bounds[:-1], bounds[1:])], (batch @ weights).sum(axis=0)


class ShardedSum(Exercise):
    title = "One piece of work on each device, measured"
    points = 3
    hints = (
        "The chapter's last section did this for 8 equal shards on CPU:0 to CPU:7. What changes when the rows do "
        "not divide evenly, and when the devices are a list you are given, in its order?",
        "Cut the rows into len(devices) shards whose sizes differ by at most one, the first ones longer: tf.split "
        "takes a list of sizes. Compute shard i's column sums inside `with tf.device(devices[i]):`, and add them "
        "with tf.add_n inside `with tf.device(devices[0]):`. Return (total, partials).",
    )

    def collect(self, sharded_sum, seed=0):
        """Calls ``sharded_sum(batch, weights, devices)`` for the cases of ``_shard_cases(seed)``. What crosses:
        {"callable": False, "type": name}, or {"callable": True, "cases": per case what _collect_shards found}."""
        if not callable(sharded_sum):
            return {"callable": False, "type": type(sharded_sum).__name__}
        return {"callable": True, "cases": [_collect_shards(sharded_sum, cpus, rows, seed)
                                            for cpus, rows in _shard_cases(seed)]}

    def judge(self, data, seed=0):
        """A point each for where the partial sums ran, their values, and the total (its value and its device)."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong(f"sharded_sum should be a function (batch, weights, devices) -> (total, partials), not a "
                     f"{str(data['type'])[:60]}.")
            return fb
        cases = _shard_cases(seed)
        if type(data["cases"]) is not list or len(data["cases"]) != len(cases):
            raise ValueError(f"{len(cases)} cases expected")
        where, values, totals = [], [], []
        for found, (cpus, rows) in zip(data["cases"], cases):
            words = f"{rows} rows over {', '.join(f'CPU:{c}' for c in cpus)}"
            if "raised" in found:
                uneven = "split" in found["raised"].lower() and rows % len(cpus)
                fb.wrong(f"for {words}: sharded_sum raised {found['raised']}" +
                         (f" {rows} rows do not cut into {len(cpus)} equal shards: tf.split also takes a list of "
                          f"sizes." if uneven else ""))
                return fb
            if "shape" in found:
                fb.wrong(f"for {words}: sharded_sum returned {found['shape']}; return (total, partials): the combined "
                         f"sums and the list of the partial sums, one per device.")
                return fb
            if len(found["partials"]) != len(cpus):
                fb.wrong(f"for {words}: {len(found['partials'])} partial sums; give one per device, {len(cpus)} here.")
                return fb
            where.append((words, cpus, found["on"], found.get("matmuls")))
            right, whole = _reference_shard_sums(seed, rows, len(cpus))
            values.append((words, found["partials"], right, _reference_shard_sums(seed, rows, len(cpus), True)[0],
                           whole, rows % len(cpus)))
            totals.append((words, cpus, found["total"], found["total_on"], whole))
        self._judge_placement(fb, where)
        self._judge_values(fb, values)
        self._judge_total(fb, totals)
        return fb

    @staticmethod
    def _judge_placement(fb, where):
        for words, cpus, on, matmuls in where:
            wanted = [f"CPU:{c}" for c in cpus]
            products_placed = (not isinstance(matmuls, list) or not matmuls
                               or sorted(map(str, matmuls)) == sorted(wanted))
            if on == wanted and products_placed:
                continue
            if on == wanted:
                fb.wrong(f"for {words}: the partial sums end on their devices, but the matmuls ran on "
                         f"{', '.join(sorted(set(map(str, matmuls))))}: each device must do its own piece of the work "
                         f"(its shard @ weights), not only the last sum.",
                         answer="Put the matmul of shard i inside `with tf.device(devices[i]):` too.")
                return
            if any(device is None for device in on):
                fb.wrong(f"for {words}: some partial sums are not tensors (NumPy values have no .device): return the "
                         f"tensors each device computed.")
            elif set(on) == {"CPU:0"}:
                fb.wrong(f"for {words}: every partial sum was computed on CPU:0 (their .device): the matmul and the sum "
                         f"must run inside a `with tf.device(...)` block for their device.",
                         answer="Compute shard i inside `with tf.device(devices[i]):`.")
            elif on == [f"CPU:{i}" for i in range(len(cpus))]:
                fb.wrong(f"for {words}: partial sum i ran on CPU:i, the position in the list, not on devices[i].",
                         answer="Open `with tf.device(devices[i]):`, not f'/CPU:{i}'.")
            else:
                fb.wrong(f"for {words}: the partial sums ran on {', '.join(map(str, on))} (their .device), not on the "
                         f"devices given, in their order.", answer=f"They should run on {', '.join(wanted)}.")
            return
        fb.right("placement: each partial sum ran on its device, in the order given (read from .device)")

    @staticmethod
    def _judge_values(fb, values):
        import numpy as np

        def same(got, want):
            return all(g.shape == w.shape and np.allclose(g, w, rtol=1e-4, atol=1e-4) for g, w in zip(got, want))

        for words, got, right, extra_last, whole, uneven in values:
            if same(got, right):
                continue
            if uneven and same(got, extra_last):
                fb.wrong(f"for {words}: the shards get the rows the other way round: the first shards are the longer "
                         f"ones (as np.array_split cuts), the extra rows are not at the end.")
            elif all(g.shape == whole.shape and np.allclose(g, whole, rtol=1e-4, atol=1e-4) for g in got):
                fb.wrong(f"for {words}: every partial sum is the sum of the whole batch: each device must multiply its "
                         f"own shard of consecutive rows.")
            elif any(g.shape != (SHARD_UNITS,) for g in got):
                fb.wrong(f"for {words}: a partial sum has shape {[list(g.shape) for g in got][0]}: it is the column "
                         f"sums of shard @ weights, one number per column ({SHARD_UNITS}).")
            else:
                fb.wrong(f"for {words}: the partial sums are not the column sums of each shard @ weights, for shards of "
                         f"consecutive rows whose sizes differ by at most one, the first ones longer.")
            return
        fb.right("partial sums: the column sums of each shard of consecutive rows, as equal as possible")

    @staticmethod
    def _judge_total(fb, totals):
        import numpy as np

        for words, cpus, total, on, whole in totals:
            if total.shape != whole.shape or not np.allclose(total, whole, rtol=1e-4, atol=1e-4):
                fb.wrong(f"for {words}: the total is not the column sums of batch @ weights: add up the partial sums.")
                return
            if on != f"CPU:{cpus[0]}":
                fb.wrong(f"for {words}: the total was added on {on or 'no device (it is no tensor)'}, not on the first "
                         f"device of the list, CPU:{cpus[0]}.", answer="Add them inside `with tf.device(devices[0]):`.")
                return
        fb.right("total: the sums of the whole batch, added on the first device of the list")
