"""Chapter 8 · what one training step sends, read from the compiled program (exercise 4), the chapter's way (c35).

:func:`step_collectives` runs where the answer lives (inside ``collect``): it builds the checker's model under the
learner's distribution, compiles Keras' training step for one batch with the real shardings and lists the
collectives in XLA's program as plain data. :func:`bytes_sent` (the judging side, no JAX) prices them with the ring
formula of the chapter's section 4.
"""
import math
import re

COLLECTIVE = re.compile(r"= (?P<shapes>.*?) (?P<op>all-reduce|all-gather|reduce-scatter|all-to-all|"
                        r"collective-permute)(?:-start)?\(.*?replica_groups=(?P<groups>\{\{[\d,{}]*\}\}|"
                        r"\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)")
ITEM_BYTES = {"f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "bf16": 2, "f16": 2, "pred": 1}
# LLVM's machine-code optimizations off: they run after XLA has placed the collectives (the SPMD partitioner and the
# all-reduce combiner are HLO passes), and skipping them halves a compile (tests/checkers/test_ch8.py measures every
# placement this way and finds the same prices).
COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}


def _group_size(text):
    """The size of one replica group, from XLA's text: ``{{0,1},{2,3}}`` or ``[4,2]<=[8]`` (4 groups of 2)."""
    iota = re.fullmatch(r"\[(\d+),(\d+)\]<=.*", text)
    return int(iota[2]) if iota else len(re.search(r"\{([\d,]+)\}", text)[1].split(","))


def step_collectives(make_model, distribution, images_shape, labels_shape):
    """The collectives of one compiled training step of ``make_model()`` built under ``distribution``: a list of
    ``[op, bytes of the tensor XLA prints, group size]`` (an all-gather's or an all-to-all's printed tensor is its
    output, a reduce-scatter's its piece). The model is compiled here with Adam and the exercise's loss, so that
    the price is the placement's, whatever the learner compiled with. Compiled with :data:`COMPILER_OPTIONS`.

    Raises whatever Keras or JAX raise for a distribution they cannot place.
    """
    import jax
    import keras
    import numpy as np

    with distribution.scope():
        model = make_model(noted=False)
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.optimizer.build(model.trainable_variables)
        state = tuple([v.value for v in variables] for variables in (
            model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
            model.metrics_variables))
        batch = tuple(jax.ShapeDtypeStruct(shape, dtype, sharding=distribution.get_data_layout(shape).backend_layout)
                      for shape, dtype in ((tuple(images_shape), np.float32), (tuple(labels_shape), np.int32)))
        program = jax.jit(model.train_step).lower(state, (*batch, None)).compile(COMPILER_OPTIONS).as_text()
    found = []
    for match in COLLECTIVE.finditer(program):
        tensors = re.findall(r"(\w+)\[([\d,]*)\]", match["shapes"])
        nbytes = sum(ITEM_BYTES.get(kind, 4) * math.prod(int(n) for n in dims.split(",") if n)
                     for kind, dims in tensors)
        found.append([match["op"], nbytes, _group_size(match["groups"])])
    return found


def bytes_sent(collectives):
    """What one device sends per step for :func:`step_collectives`' list, by the ring formula (chapter 8, c38): an
    all-reduce of ``B`` bytes over ``n`` devices sends ``2 (n-1)/n B``; an all-gather or an all-to-all ``(n-1)/n``
    of its output; a reduce-scatter ``(n-1)`` times its piece; a collective-permute its tensor.

    Example:
        >>> bytes_sent([["all-reduce", 960, 4], ["all-reduce", 10700, 2]])
        12140
    """
    share = {"all-reduce": lambda b, n: 2 * (n - 1) / n * b, "all-gather": lambda b, n: (n - 1) / n * b,
             "all-to-all": lambda b, n: (n - 1) / n * b, "reduce-scatter": lambda b, n: (n - 1) * b,
             "collective-permute": lambda b, n: b}
    return round(sum(share[op](nbytes, size) for op, nbytes, size in collectives))
