"""Chapter 5 · exercises 1 and 2: tf_keras layers on a DTensor mesh (the seed every client draws from, the layout
of an Embedding's table).

``collect`` calls the learner's ``init_kernel`` or ``make_embedding`` and sends the kernels, shapes, layouts and
error messages as plain data; ``judge`` never imports tf_keras (exercise 1's reference kernels are drawn with
TensorFlow).
"""
import contextlib
import io
import math
import re
import sys

from .answers import UNSHARDED, checker_mesh, global_numpy, layout_of, mesh_dims, short_error, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback

NOTEBOOK_MESH = [("batch", 4), ("model", 2)]  # the notebook's `mesh` (checker_mesh() on its 8 logical CPUs)
SEED_KERNEL = (6, 4)  # the colleague's Dense(4) on 6 inputs (exercise 1)
SEED_CLIENTS = (0, 1)  # the clients the checker plays: the chief and one other
PROBE_SHAPE = (6, 1)  # the kernel of the chief's probe, Dense(1) on 6 inputs: built only where it takes a seed draw
SEED_DRAWS = 4  # the first draws of the seed generator the feedback recognises (only the first is right)
FIRST_DRAW = "draw 1"  # the kernel a client that builds only the colleague's layer gets: logging changes nothing
EMBEDDING_TABLE = (1000, 64)  # exercise 2's Embedding(1000, 64): 1000 token vectors of 64 features
EMBEDDING_MESHES = ((4, 2), (2, 4))  # (batch, model): the notebook's mesh, then one of another shape
EMBEDDING_IDS = (8, 5)  # the token ids the checker looks up: 8 sequences of 5 tokens


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


def _reference_kernels(seed, shape=SEED_KERNEL):
    """{how it was seeded: kernel} for a Dense kernel of ``shape`` built on a mesh after
    ``tf.keras.utils.set_random_seed(seed)``: Glorot uniform, stateless, seeded by the n-th draw of tf_keras' seed
    generator (``random.Random(seed)``) when it is the n-th initializer to draw, or by ``seed`` itself when the
    layer's initializer was given ``seed=seed``. TensorFlow only."""
    import random

    import tensorflow as tf

    limit = math.sqrt(3.0 / max(1.0, (shape[0] + shape[1]) / 2.0))
    generator = random.Random(seed)
    seeds = {f"draw {n}": generator.randint(1, int(1e9)) for n in range(1, SEED_DRAWS + 1)}
    seeds["seed=seed"] = seed
    return {how: tf.random.stateless_uniform(shape, seed=[value, 0], minval=-limit, maxval=limit).numpy()
            for how, value in seeds.items()}


class Seeds(Exercise):
    title = "Seeds that keep every client in step"
    points = 2
    hints = (
        "Every client sets the same seed. What does only the chief do between setting it and building the layer, "
        "and which of those steps uses tf_keras' global seed?",
        "tf.keras.utils.set_random_seed(seed) also sets tf_keras' own seed generator. Each Keras initializer "
        "without a seed of its own draws its seed from that generator when its weight is created, one draw after "
        "the other; np.random and tf.random ops do not draw from it.",
        "On the chief the probe's kernel takes the first draw, so the layer's kernel gets the next one. Make the "
        "layer's kernel take the FIRST draw on every client, as on a client that builds nothing else, and keep the "
        "chief's logging (and the layer) as they are.",
    )

    def collect(self, init_kernel, seed=0):
        """Call ``init_kernel(seed, client)`` as fresh processes would (tf_keras' seed generator unset before each
        call), as the chief and as another client, with two seeds drawn from ``seed``; what they print is kept.

        Crosses: ``{"callable": False, "type": name}``, or ``{"callable": True, "error": message}`` when a call
        raised, or ``{"callable": True, "calls": [{"seed", "client", "kernel", "created"}, ...]}`` (a DVariable
        crosses with its layout and per-device blocks; anything else as itself or as an opaque type name).
        """
        if not callable(init_kernel):
            return {"callable": False, "type": type(init_kernel).__name__}
        import tensorflow as tf

        holder = _keras_seed_generator()
        saved = getattr(holder, "generator", None) if holder is not None else None
        calls = []
        try:
            for value in _seed_pair(seed):
                for client in SEED_CLIENTS:
                    if holder is not None:
                        holder.generator = None  # a fresh process: only a seed set inside init_kernel counts
                    created = []  # the shapes of the variables the call creates: the chief's probe is (6, 1)

                    def record(next_creator, **kwargs):
                        variable = next_creator(**kwargs)
                        created.append(tuple(variable.shape.as_list()))
                        return variable

                    with contextlib.redirect_stdout(io.StringIO()), tf.variable_creator_scope(record):
                        kernel = init_kernel(value, client)
                    calls.append({"seed": value, "client": client, "kernel": kernel, "created": created})
        except Exception as err:
            return {"callable": True, "error": short_error(err)}
        finally:
            if holder is not None and getattr(holder, "generator", None) is None:
                holder.generator = saved
        return {"callable": True, "calls": calls}

    def judge(self, data, seed=0):
        """Feedback on the kernels: DTensors, the same on every client for one seed (1 point), and for each seed the
        kernel the colleague's layer draws on a client that builds nothing else (tf_keras' first draw), with the
        chief still logging its probe (1 point)."""
        import numpy as np

        fb = Feedback()
        if not data["callable"]:
            fb.wrong(f"init_kernel should be a function (seed, client) -> kernel, got {str(data['type'])[:60]}.")
            return fb
        if "error" in data:
            self._judge_error(fb, str(data["error"])[:400])
            return fb
        calls = list(data["calls"])
        if len(calls) != 2 * len(SEED_CLIENTS):
            raise ValueError("four calls expected")
        first, second = _seed_pair(seed)
        seeds = [value for value in (first, second) for _ in SEED_CLIENTS]  # the seeds of this check, in call order
        if any(_variable_layout(call["kernel"]) is None for call in calls):
            try:
                values = [np.asarray(global_numpy(call["kernel"]), dtype="float64") for call in calls]
                right = all(self._judge_drawn(v, s) == FIRST_DRAW for v, s in zip(values, seeds))
            except (TypeError, ValueError):
                right = False
            fb.wrong("init_kernel should return the layer's kernel as it is, layer.kernel: a DVariable on the mesh, "
                     "as the colleague's function returns it"
                     + (". Your numbers are the right kernel's, but as values copied off the mesh: a 'replicated' "
                        "kernel that no layer holds any more." if right else
                        ": keep the colleague's Dense layer with its layouts on the mesh."))
            return fb
        values = [np.asarray(global_numpy(call["kernel"])) for call in calls]
        how = [self._judge_drawn(value, value_seed) for value, value_seed in zip(values, seeds)]
        chief, other = (0, 2), (1, 3)  # the calls' indices, per seed
        if not all(np.array_equal(values[c], values[o]) for c, o in zip(chief, other)):
            if all(how[c] == "draw 2" and how[o] == "draw 1" for c, o in zip(chief, other)):
                fb.wrong("For the same seed the chief (client 0) builds another kernel than client 1, so the "
                         "'replicated' kernel differs from client to client. Which of the chief's extra steps "
                         "changes what the layer's initializer draws?",
                         answer="The probe's initializer draws its seed from tf_keras' global seed generator first, "
                                "so on the chief the layer's kernel gets the second draw. Re-seed with "
                                "tf.keras.utils.set_random_seed(seed) right before building the layer, or build the "
                                "layer before the probe.")
            elif any(how[o] is None and self._judge_drawn(values[o], seeds[o] + 1) for o in other):
                fb.wrong("Client 1's kernel is the one tf_keras draws for seed + 1: each client seeds with a "
                         "number of its own, so 'replicated' weights differ. Every client must use the same seed.")
            else:
                fb.wrong("For the same seed, client 0 (the chief) and client 1 build different kernels: every "
                         "client must build the same 'replicated' kernel.")
            return fb
        fb.right("every client builds the same kernel for the same seed")
        if not all(PROBE_SHAPE in [tuple(shape) for shape in calls[c]["created"]] for c in chief):
            fb.wrong("The chief no longer builds its probe: the colleague still wants the chief's log (its sample and "
                     "its probe's kernel norm). Fix the layer's kernel, not the chief's logging.")
        elif np.array_equal(values[0], values[2]):
            fb.wrong(f"seeds {first} and {second} gave the same kernel: use the seed argument.")
        elif all(kind == "seed=seed" for kind in how):
            fb.wrong("every client builds the same kernel, but the layer is no longer the colleague's: its initializer "
                     "now has a seed of its own (seed=seed), so its kernel is not the one the colleague's layer draws "
                     "from the global seed. Fix the draw, not the layer.",
                     answer="Keep the layer's default initializer and re-seed with "
                            "tf.keras.utils.set_random_seed(seed) right before building it.")
        elif all(kind is not None and kind.startswith("draw") for kind in how) and FIRST_DRAW not in how:
            which = "the second draw" if set(how) == {"draw 2"} else "a later draw"
            fb.wrong(f"every client builds the same kernel, but it is {which} of tf_keras' seed generator after "
                     f"set_random_seed(seed), not the first, which a client that builds only the colleague's layer "
                     f"gets: something still draws before the layer on every client (the probe?). Logging must not "
                     f"change the model, and without the log this kernel would change.",
                     answer="Only the chief builds the probe; re-seed with tf.keras.utils.set_random_seed(seed) after "
                            "it, right before building the layer (or build the layer first).")
        elif any(kind != FIRST_DRAW for kind in how):
            fb.wrong(f"the kernels for seeds {first} and {second} are not the ones tf_keras draws for the colleague's "
                     f"layer (Dense(4) on 6 inputs) from that seed on a client that builds nothing else first.",
                     answer="Keep the colleague's layer as it is (its default Glorot initializer, its layouts), "
                            "seeded with tf.keras.utils.set_random_seed(seed) right before it is built.")
        else:
            fb.right("another seed gives another kernel, the one the colleague's layer draws from it, and the chief "
                     "still logs: the chief's probe no longer shifts the draw the layer's kernel gets")
        return fb

    @staticmethod
    def _judge_error(fb, message):
        message = message.rstrip(". ")
        if "global seed" in message:
            fb.wrong(f"init_kernel raised {message}. In a fresh process (as on every client of a DTensor job) no "
                     f"seed is set, and tf_keras checks its own global seed: tf.random.set_seed, np.random.seed or "
                     f"Keras 3's keras.utils.set_random_seed does not set it.",
                     answer="Keep the colleague's tf.keras.utils.set_random_seed(seed).")
        elif re.search(r"positional argument|takes \d+ .*argument", message):
            fb.wrong(f"init_kernel raised {message}. Every client calls it as init_kernel(seed, client), with the "
                     f"client's index (0 on the chief).")
        else:
            fb.wrong(f"init_kernel raised {message}")

    @staticmethod
    def _judge_drawn(value, seed):
        """How tf_keras seeded ``value`` (a key of :func:`_reference_kernels`), or None."""
        import numpy as np

        value = np.asarray(value)
        if value.shape != SEED_KERNEL:
            return None
        return next((how for how, kernel in _reference_kernels(seed).items()
                     if np.allclose(value, kernel, rtol=0, atol=1e-6)), None)


def _embedding_mesh(shape):
    """A batch x model mesh of ``shape`` on this process's logical CPUs (the notebook's own for (4, 2))."""
    from .ch5_cases import _build_mesh

    return checker_mesh() if tuple(shape) == (4, 2) else _build_mesh(tuple(shape))


def _embedding_case(make_embedding, shape, seed):
    """Call ``make_embedding`` on a mesh of ``shape``, then look up token ids drawn from ``seed`` (split over
    'batch') with what it returned. Plain data: the mesh's axes, and ``error``, or ``kind`` (the returned object's
    type), ``table`` (None, or its shape and layout), ``lookup`` (``{"error"}`` or its ``shape`` and ``specs``)."""
    import numpy as np
    from tensorflow.experimental import dtensor

    from ..packing import pack_batch

    mesh = _embedding_mesh(shape)
    found = {"mesh": mesh_dims(mesh)}
    try:
        layer = make_embedding(mesh)
    except Exception as err:
        found["error"] = short_error(err, limit=600)
        return found
    inner = [sub for sub in getattr(layer, "layers", None) or [] if getattr(sub, "embeddings", None) is not None]
    if getattr(layer, "embeddings", None) is None and len(inner) == 1:
        layer = inner[0]  # a model around the one Embedding: its layer
    found["kind"] = type(layer).__name__
    table = getattr(layer, "embeddings", None)
    found["has_kernel"] = hasattr(layer, "kernel")
    if table is None:
        found["table"] = None
        return found
    found["table"] = {"shape": tuple(getattr(table, "shape", ())), "layout": _variable_layout(table)}
    if found["table"]["layout"] is None or not callable(layer):
        return found
    ids = np.random.default_rng([seed, 2, *shape]).integers(0, EMBEDDING_TABLE[0], EMBEDDING_IDS).astype("int32")
    try:
        looked_up = layer(pack_batch(ids, dtensor.Layout.batch_sharded(mesh, "batch", rank=2)))
        found["lookup"] = {"shape": tuple(looked_up.shape), "specs": specs(dtensor.fetch_layout(looked_up))}
    except Exception as err:
        found["lookup"] = {"error": short_error(err, limit=600)}
    return found


class EmbeddingTable(Exercise):
    title = "A layout for an Embedding's table"
    points = 2
    hints = (
        "An Embedding layer has no kernel. What is its one weight called, and which argument gives its initializer? "
        "tf_keras names a weight's layout after that argument.",
        "Its weight is `embeddings`, of shape (vocabulary, features) = (1000, 64): one row per token. It takes "
        "embeddings_layout=..., a rank-2 layout; DTensor's lookup refuses a table whose rows are split.",
        "Split the axis of the 64 features over 'model' and leave the rows whole; build the layout on the mesh "
        "make_embedding is given.",
    )

    def collect(self, make_embedding, seed=0):
        """Call ``make_embedding`` on the notebook's batch=4 x model=2 mesh and on a batch=2 x model=4 one, and look
        up a batch of token ids with each layer (:func:`_embedding_case`).

        Crosses: ``{"callable": False, "type": name}`` or ``{"callable": True, "cases": [one dict per mesh]}``.
        """
        if not callable(make_embedding) or isinstance(make_embedding, type) or hasattr(make_embedding, "weights"):
            return {"callable": False, "type": type(make_embedding).__name__}
        holder = _keras_seed_generator()
        unseeded = holder is not None and getattr(holder, "generator", None) is None
        if unseeded:  # this exercise is about layouts: give the initializer the seed tf_keras asks for (exercise 1)
            import random

            holder.generator = random.Random(0)
        try:
            return {"callable": True, "cases": [_embedding_case(make_embedding, shape, seed)
                                                for shape in EMBEDDING_MESHES]}
        finally:
            if unseeded:
                holder.generator = None

    def judge(self, data, seed=0):
        """Feedback on the table of each case: an Embedding's (1000, 64) table on the mesh passed, split over 'model'
        and replicated over 'batch' (1 point), along its features, so that a lookup runs (1 point)."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong(f"make_embedding should be a function mesh -> a built tf.keras.layers.Embedding, got a "
                     f"{str(data['type'])[:60]}: define a function that creates the layer on the mesh it is given, "
                     f"builds it and returns it.")
            return fb
        cases = list(data["cases"])
        for case in cases:
            if "error" in case:
                self._judge_error(fb, str(case["error"])[:400], mesh_text(case["mesh"]))
                return fb
            table = case["table"]
            if table is None:
                kind = "an Embedding layer" if case["kind"] == "Embedding" else f"a {case['kind'][:40]}"
                fb.wrong(f"make_embedding returned {kind} "
                         + ("with a kernel: the exercise asks for tf.keras.layers.Embedding(1000, 64), whose weight is "
                            "a table of token vectors." if case["has_kernel"] else
                            "without a table yet: build the layer (layer.build((None,)), or call it once) before "
                            "returning it." if case["kind"] == "Embedding" else
                            "with no `embeddings` table: return the tf.keras.layers.Embedding(1000, 64) itself."))
                return fb
            if tuple(table["shape"]) != EMBEDDING_TABLE:
                fb.wrong(f"the table's shape is {tuple(table['shape'])}; Embedding(1000, 64) holds 1000 token vectors "
                         f"of 64 features: {EMBEDDING_TABLE}.")
                return fb
            if table["layout"] is None:
                fb.wrong("the table is not on the mesh (an ordinary variable): give the layer a layout for it, as the "
                         "chapter gave Dense its kernel_layout.")
                return fb
            on = mesh_dims(table["layout"].mesh)
            if on != case["mesh"]:
                fb.wrong(f"the table lives on a mesh {mesh_text(on)}, not on the mesh passed in "
                         f"({mesh_text(case['mesh'])}): build its layout on make_embedding's `mesh` argument.")
                return fb
        given = specs(cases[-1]["table"]["layout"])
        right = [UNSHARDED, "model"]
        if given in (right, ["model", UNSHARDED]):
            fb.right(f"table {given}: each device holds 1/(size of 'model') of the table, replicated over 'batch'")
        elif "batch" in given:
            fb.wrong(f"table {given} uses 'batch', the axis that splits the DATA: a weight is split over 'model' and "
                     f"replicated over 'batch', so that every 'batch' group holds all of it.")
        elif given == [UNSHARDED, UNSHARDED]:
            fb.wrong(f"table {given} is replicated: every device holds the whole table. Split it over 'model'.")
        else:
            fb.wrong(f"table {given} does not split the table over 'model'.")
        if given == right and all("specs" in case.get("lookup", {}) for case in cases):
            fb.right(f"a lookup of token ids split over 'batch' runs, each device computing its share of every "
                     f"vector's features (layout {cases[-1]['lookup']['specs']})")
        elif given == ["model", UNSHARDED]:
            fb.wrong("a lookup of token ids with this table fails: DTensor's gather refuses a table whose rows "
                     "(axis 0, one per token) are split, as the question says. Which other axis can give each "
                     "device its share of the table?",
                     answer="The 64 features, axis 1: embeddings_layout=dtensor.Layout([dtensor.UNSHARDED, 'model'], "
                            "mesh).")
        elif given == right:
            error = next((case["lookup"].get("error", "") for case in cases if "specs" not in case.get("lookup", {})),
                         "")
            fb.wrong(f"the table is right, but looking token ids up with the layer failed: {error[:300]}")
        return fb

    @staticmethod
    def _judge_error(fb, message, mesh):
        keyword = re.search(r"not understood:?'?,? '?(\w+)", message)
        rank = re.search(r"got (\d+) as suggested rank from layout but (\d+) from shape", message)
        if keyword:
            fb.wrong(f"make_embedding raised {message[:160]}. Embedding takes no `{keyword.group(1)}`. tf_keras takes "
                     f"a layout for each weight that has an `<name>_initializer` argument, as `<name>_layout`: which "
                     f"initializer argument does Embedding take?",
                     answer="embeddings_initializer, so embeddings_layout=dtensor.Layout(...).")
        elif rank:
            fb.wrong(f"make_embedding raised an error on the {mesh} mesh: the layout has rank {rank.group(1)} and the "
                     f"table rank {rank.group(2)} (tokens x features). A layout gives one spec per axis of the "
                     f"weight.")
        elif "global seed" in message:
            fb.wrong(f"make_embedding raised {message[:200].rstrip('. ')}. Set tf_keras' global seed first (exercise "
                     f"1).")
        else:
            fb.wrong(f"make_embedding raised, on the {mesh} mesh: {message}")
