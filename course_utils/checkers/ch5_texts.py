"""Chapter 5 · the templates of the notebook cells that state exercise 5's numbers (by cell id), filled with each
variant's values (:mod:`.variants`); ``python3 course.py build`` writes them, filled with the defaults, into
``solutions/05_dtensor_with_keras.ipynb`` (and so ``exercises/``), so edit the text here, not in the notebooks.
Exercise 6's question and set-up cells are among them: they say whether its wider model is exercise 5's."""

BUDGET_QUESTION = """\
## Exercise 5 · The cheapest placement that fits a memory budget (6 points)

A wider model than the chapter's, Flatten → `Dense({{hidden}})` named `d1` → `Dense(10)` named `d2`,
trained with **SGD with momentum** instead of Adam
(`tf.keras.dtensor.experimental.optimizers.SGD(0.01, momentum=0.9, mesh=...)`), on a
**`batch={{batch}} × model={{model}}`** mesh: {{devices}} devices, {{times}} what this notebook has, so nothing here can build
it and measure it: you predict, by hand. (`matmul_cost` prices a kernel on mesh sizes alone and would print
its bytes per device, so the check counts only while this notebook has not imported it.) Five placements, the chapter's four and one more (the specs of
`d1.kernel`, `d1.bias`, `d2.kernel`, `d2.bias`; `U` is unsharded):

| placement | `d1.kernel` | `d1.bias` | `d2.kernel` | `d2.bias` |
|---|---|---|---|---|
| data parallel | `[U, U]` | `[U]` | `[U, U]` | `[U]` |
| FSDP-style | `['batch', U]` | `[U]` | `[U, U]` | `[U]` |
| tensor parallel | `[U, 'model']` | `['model']` | `['model', U]` | `[U]` |
| 2-D | `['batch', 'model']` | `['model']` | `['model', U]` | `[U]` |
| outputs split | `[U, 'model']` | `['model']` | `[U, 'model']` | `['model']` |

1. `memory`: for each placement, the bytes **one device** holds for the weights and the
   optimizer's slots (leave out its 8-byte step counter), or `None` for a placement this mesh
   cannot hold (a layout splits an axis into equal blocks only).
2. `choice`: a dict with a placement for each of two budgets, the bytes each device may hold:
   `"roomy"`, **{{roomy}} MiB** (`{{roomy}} * 2**20` bytes), and `"tight"`, **{{tight}} MiB** (`{{tight}} * 2**20` bytes).
   Under each, of the placements that fit, which sends the fewest bytes per training step
   **on these CPUs**? The cell below prints what {{printed}} sends per
   device, priced with the chapter's cost model for a global batch of {{examples}} on this mesh: first as
   DTensor runs the collectives here (an all-gather and a reduce-scatter each as an all-reduce, as
   the chapter measured), then by each collective's own ring formula, as hardware with a native
   all-gather and reduce-scatter would run them. The question is about the first column; the
   second shows why the hardware belongs in it."""

BUDGET_SENT = """\
from course_utils.checkers.ch5_budget import budget_bytes_sent

here, native = budget_bytes_sent({{setting}}), budget_bytes_sent({{setting_and}}on_cpu=False)
print(f"{'bytes sent per device per step':32} {'on these CPUs':>14} {'native collectives':>19}")
for placement in here:
    print(f"{placement:32} {here[placement]:>14,} {native[placement]:>19,}")"""

BUDGET_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: memory = {"data parallel": ..., "FSDP-style": ..., "tensor parallel": ..., "2-D": ..., "outputs split": ...}
d1_kernel, d1_bias, d2_kernel, d2_bias = 784 * {{hidden}} * 4, {{hidden}} * 4, {{hidden}} * 10 * 4, 10 * 4  # bytes, whole
batch, model = {{batch}}, {{model}}  # this mesh's axis sizes
memory = {  # the weights and SGD's momentum (one slot per weight, in the weight's layout): 2 x the weights
    "data parallel": 2 * (d1_kernel + d1_bias + d2_kernel + d2_bias),
    "FSDP-style": 2 * (d1_kernel // batch + d1_bias + d2_kernel + d2_bias),
    "tensor parallel": 2 * (d1_kernel // model + d1_bias // model + d2_kernel // model + d2_bias),
    "2-D": 2 * (d1_kernel // (batch * model) + d1_bias // model + d2_kernel // model + d2_bias),
    "outputs split": {{outputs_split}}
}
# END SOLUTION
# BEGIN SOLUTION  # PLACEHOLDER: choice = {"roomy": ..., "tight": ...}
choice = {
    "roomy": {{roomy_line}}
    "tight": {{tight_line}}
}
# END SOLUTION
ex.q5.check(memory, choice)"""

BUILD_QUESTION = """\
## Exercise 6 · Build it on the mesh, step it, measure it (6 points)

Exercise 5 chose a placement on paper. Now build one, with Adam, train it for a step and measure
it. Write `build_on_mesh(mesh, weights, budget)` for the chapter's network, Flatten →
`Dense(H, relu)` → `Dense(10)`, that returns `(model, optimizer, step)`:

- `mesh` is a 2-D mesh with the axes `batch` and `model`. `weights` holds the starting values, a
  dict of NumPy arrays `{"d1.kernel": (784, H), "d1.bias": (H,), "d2.kernel": (H, 10), "d2.bias": (10,)}`
  (so `H = weights["d1.bias"].shape[0]`): the model starts from exactly these values.
- `budget` is the most bytes one device may hold for the model's weights and the optimizer's
  variables, as `bytes_per_device([model, optimizer])` measures them after a step (Adam's two
  slots per weight and its 8-byte step counter count). Choose layouts that fit it, and where several
  of exercise 5's placements fit, the one that sends the fewest bytes per training step on these
  CPUs, as exercise 5 chose: `placement_bytes_sent(spec_lists, sizes, H, batch)` from the module of
  `budget_bytes_sent` prices any placement on any mesh (`sizes` like `{"batch": 4, "model": 2}`).
  `build_on_mesh` does not see the batch: price the placements for a batch of 8 examples per
  `batch` group (on the checker's cases, the batch does not change which placement sends least).
- `optimizer` is the DTensor Adam with `learning_rate=LEARNING_RATE`, its other settings at their
  defaults.
- `step(images, labels)` runs one training step on a batch given as NumPy arrays (images
  `(N, 28, 28, 1)` float32, labels `(N,)` int64), split over the mesh's `batch` axis, and returns
  the step's loss: the mean softmax cross-entropy over all `N` examples, as the chapter's
  `train_step` returns it. `build_on_mesh` itself runs no step.

Then, in the same cell, try it on {{wide_model}}, with Adam on the notebook's
`mesh` (`batch=4 × model=2`): `wide_weights`, a batch of 64 and the 10 MiB `BUDGET` of the next
cell. Run one step, and print the bytes each device holds (`bytes_per_device`), the collectives
of one more step (`collectives_run_by`), and the loss one device computes from the same weights
and batch, which the step's loss must equal.

The checker calls `build_on_mesh` on cases of its own: other meshes (not only 4 × 2, not always of
all 8 CPUs), widths, weights, batches and budgets. A placement that fits one budget may not fit
another, an axis that one mesh divides evenly another may not, and where a budget leaves several
placements the bytes sent decide, not which comes first in the table. For each case it runs the first step and compares its loss with one
device's, compares every weight and Adam slot after the step with one Adam step on
one device, measures the bytes each device holds against the budget (and, where several placements
fit, prices yours against the one that sends least), runs a second step, and in one case records
its collectives."""

BUILD_SETUP = """\
import numpy as np
from course_utils import bytes_per_device, collectives_run_by

LEARNING_RATE = 1e-3
BUDGET = 10 * 2**20  # bytes per device{{as_in_5}}
tf.keras.utils.set_random_seed(0)  # DTensor layers need a global seed (exercise 1), even when their values are replaced
rng = np.random.default_rng(0)
wide_weights = {"d1.kernel": rng.normal(0, 0.05, (784, 2048)), "d1.bias": rng.normal(0, 0.05, 2048),
                "d2.kernel": rng.normal(0, 0.05, (2048, 10)), "d2.bias": rng.normal(0, 0.05, 10)}
wide_weights = {name: value.astype(np.float32) for name, value in wide_weights.items()}
wide_images = rng.random((64, 28, 28, 1), dtype=np.float32)
wide_labels = rng.integers(0, 10, 64)"""
