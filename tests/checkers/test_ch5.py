"""Chapter 5's checkers: the right answer, typical wrong answers and the hints they get."""
import json
import math

import numpy as np
import pytest

from course_utils.checkers import ch5, exercises
from helpers import assert_correct, assert_hint, grade


def test_ch5_q1_seed(keras2, mesh42):
    from tensorflow.experimental import dtensor

    def build(seed=None):
        if seed is not None:
            keras2.utils.set_random_seed(seed)
        layer = keras2.layers.Dense(4, kernel_layout=dtensor.Layout.replicated(mesh42, 2),
                                    bias_layout=dtensor.Layout.replicated(mesh42, 1))
        layer.build((None, 6))
        return layer.kernel

    assert_correct(grade(5, "q1", build))
    keras2.utils.set_random_seed(0)  # a seed set elsewhere in the notebook must not hide the bug
    assert_hint(grade(5, "q1", lambda seed: build()), "Call tf.keras.utils.set_random_seed(seed) inside")
    assert ch5._keras_seed_generator().generator is not None  # the checker put the notebook's seed back
    assert_hint(grade(5, "q1", lambda seed: build(1)), "seeds 7 and 8 gave the same kernel", points=1)
    assert_hint(grade(5, "q1", lambda seed: np.zeros((6, 4))), "as a DTensor")
    assert_hint(grade(5, "q1", lambda: 1), "raised TypeError")


def test_ch5_q2_model_parallel_dense(keras2, mesh42):
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    keras2.utils.set_random_seed(1)

    def dense(kernel_specs, bias_specs, units=128, build=True):
        layer = keras2.layers.Dense(units, kernel_layout=dtensor.Layout(kernel_specs, mesh42),
                                    bias_layout=dtensor.Layout(bias_specs, mesh42))
        if build:
            layer.build((None, 784))
        return layer

    assert_correct(grade(5, "q2", dense([U, "model"], ["model"])))
    assert_hint(grade(5, "q2", dense(["model", U], [U])), "splits the 784 INPUTS", "bias is replicated")
    assert_hint(grade(5, "q2", dense([U, "model"], [U])), "bias is replicated", points=1)
    assert_hint(grade(5, "q2", dense([U, "batch"], ["batch"])), "splits the DATA")
    assert_hint(grade(5, "q2", dense([U, U], [U])), "data parallelism")
    assert_hint(grade(5, "q2", dense([U, "model"], ["model"], build=False)), "layer.build((None, 784))")
    assert_hint(grade(5, "q2", dense([U, "model"], ["model"], units=64)), "(784, 128)", points=1)
    plain = keras2.layers.Dense(128)
    plain.build((None, 784))
    assert_hint(grade(5, "q2", plain), "not a DTensor")


def test_ch5_q3_layout_map_matches_what_tf_keras_does(keras2, mesh42):
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    LayoutMap = keras2.dtensor.experimental.LayoutMap

    def layout_map(entries):
        result = LayoutMap(mesh=mesh42)
        for key, specs in entries.items():
            result[key] = dtensor.Layout(specs, mesh42)
        return result

    right = layout_map({"hidden.kernel": [U, "model"], "hidden.bias": ["model"], "logits.kernel": ["model", U]})
    assert_correct(grade(5, "q3", right))
    assert_correct(grade(5, "q3", {"hidden.*kernel": dtensor.Layout([U, "model"], mesh42),
                                   "hidden.bias": dtensor.Layout(["model"], mesh42),
                                   "logits.kernel": dtensor.Layout(["model", U], mesh42)}))
    # The checker's lookup is tf_keras' own: build the functional model and compare.
    keras2.utils.set_random_seed(2)
    with right.scope():
        inputs = keras2.Input((784,), batch_size=8)
        hidden = keras2.layers.Dense(128, activation="relu", name="hidden")(inputs)
        outputs = keras2.layers.Dense(10, name="logits")(hidden)
        model = keras2.Model(inputs, outputs)
    for path, specs in ch5.PATHS.items():
        layer, attribute = path.split(".")
        variable = getattr(model.get_layer(layer), attribute)
        assert dtensor.fetch_layout(variable).sharding_specs == specs, path
    assert_hint(grade(5, "q3", layout_map({"hidden/kernel": [U, "model"], "hidden/bias": ["model"],
                                           "logits/kernel": ["model", U]})), "a DOT", points=1)
    assert_hint(grade(5, "q3", layout_map({"kernel": [U, "model"], "bias": ["model"]})), "from the START", points=1)
    assert_hint(grade(5, "q3", layout_map({"hidden": [U, "model"], "logits.kernel": ["model", U]})),
                "also matches this variable", points=3)
    assert_hint(grade(5, "q3", layout_map({".*kernel": [U, "model"], "hidden.bias": ["model"]})),
                "matches the logits layer too", points=3)
    assert_hint(grade(5, "q3", layout_map({"hidden.kernel": [U, "model"], "hidden.bias": ["model"],
                                           "logits.kernel": [U, "model"]})), "Split this kernel's rows", points=3)
    assert_hint(grade(5, "q3", {"(": dtensor.Layout([U], mesh42)}), "not a valid regular expression")
    assert_hint(grade(5, "q3", [("hidden.kernel", None)]), "Give a tf.keras.dtensor.experimental.LayoutMap")


def test_ch5_q4_pack_fn(mesh42):
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    def packer(image_specs, label_specs, mesh=mesh42):
        return lambda images, labels: (pack_batch(images, dtensor.Layout(image_specs, mesh)),
                                       pack_batch(labels, dtensor.Layout(label_specs, mesh)))

    U = dtensor.UNSHARDED
    assert_correct(grade(5, "q4", packer(["batch", U, U, U], ["batch"])))
    assert_hint(grade(5, "q4", packer(["batch", U, U, U], ["batch", U, U, U])), "rank=1")
    assert_hint(grade(5, "q4", packer(["model", U, U, U], ["batch"])), "splits WEIGHTS", points=1)
    assert_hint(grade(5, "q4", packer(["batch", U, U, U], [U])), "replicated", points=1)
    flat = dtensor.create_mesh([("batch", 8)], devices=mesh42.local_devices())
    assert_hint(grade(5, "q4", packer(["batch", U, U, U], ["batch"], flat)), "batch x model mesh")
    assert_hint(grade(5, "q4", lambda images, labels: (images, labels)), "not a DTensor")
    assert_hint(grade(5, "q4", lambda images, labels: images), "return a pair")


MEMORY = {"data parallel": 19_538_040, "FSDP-style": 5_087_352, "tensor parallel": 9_769_080, "2-D": 2_543_736}


def test_ch5_q5_truth_follows_shapes_layouts_and_the_cost_model():
    assert ch5.budget_memory() == MEMORY
    sent = ch5.budget_bytes_sent()
    assert sent["tensor parallel"] < sent["2-D"] < sent["data parallel"] < sent["FSDP-style"]
    assert [name for name, total in MEMORY.items() if total <= ch5.BUDGET_BYTES] == ["FSDP-style", "tensor parallel", "2-D"]


def test_ch5_q5_the_answer_depends_on_the_hardware_so_the_question_names_it():
    """On these CPUs tensor parallelism alone sends least; with a native all-gather and reduce-scatter, 2-D ties it."""
    on_cpu, native = ch5.budget_bytes_sent(), ch5.budget_bytes_sent(on_cpu=False)
    fitting = ["FSDP-style", "tensor parallel", "2-D"]
    assert min(fitting, key=on_cpu.get) == "tensor parallel" and on_cpu["tensor parallel"] < on_cpu["2-D"]
    assert native["tensor parallel"] == native["2-D"] < native["FSDP-style"]  # no single answer without the hardware
    assert "on these CPUs" in grade(5, "q5", MEMORY, "2-D").message
    # The question names the hardware (the exercise cell's markdown, read from the solution notebook).
    import nbformat
    from course_utils.checkout import checkout_root

    nb = nbformat.read(checkout_root() / "solutions" / "05_dtensor_with_keras.ipynb", as_version=4)
    question = next(cell.source for cell in nb.cells if cell.get("id") == "c15a")
    assert "**on these CPUs**" in question and "native" in question


def test_ch5_q5_memory_budget():
    assert_correct(grade(5, "q5", MEMORY, "tensor parallel"))
    assert_correct(grade(5, "q5", {k: float(v) for k, v in MEMORY.items()}, "Tensor_Parallel"))
    weights_only = {k: v // 3 for k, v in MEMORY.items()}
    assert_hint(grade(5, "q5", weights_only, "tensor parallel"), "add Adam's two slots", points=1)
    assert_hint(grade(5, "q5", dict(MEMORY, **{"2-D": MEMORY["2-D"] // 4}), "tensor parallel"), "4 bytes", points=4)
    assert_hint(grade(5, "q5", dict(MEMORY, **{"FSDP-style": 3 * 1_655_784}), "tensor parallel"), "times 3", points=4)
    assert_hint(grade(5, "q5", MEMORY, "2-D"), "holds the least, but", points=4)  # smallest, not cheapest
    assert_hint(grade(5, "q5", MEMORY, "data parallel"), "holds more than the budget", points=4)
    assert_hint(grade(5, "q5", MEMORY, "FSDP-style"), "another placement that fits", points=4)
    assert_hint(grade(5, "q5", MEMORY, "pipeline"), "name one of", points=4)
    assert_hint(grade(5, "q5", dict(MEMORY, **{"2-D": None}), "tensor parallel"), "2-D: not answered yet", points=4)


def test_ch5_q5_graded_feedback_keeps_the_choice_back():
    result = exercises(5, mode="graded").q5.evaluate(MEMORY, "2-D")
    assert result.points == 4 and "'tensor parallel'" not in result.message
