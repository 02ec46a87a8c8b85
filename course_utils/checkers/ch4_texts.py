"""Chapter 4 · the templates of the notebook cells that state exercise 3's and 5's numbers (by cell id), filled with
each variant's values (:mod:`.variants`); ``python3 course.py build`` writes them, filled with the defaults, into
``solutions/04_meshes_and_layouts.ipynb`` (and so ``exercises/``), so edit the text here, not in the notebooks."""

SHARDS_QUESTION = """\
## Exercise 3 · Predict shard shapes and copies (4 points)

A tensor of shape `{{shape}}` lives on a mesh the chapter did not draw, `batch=2 × model=4`, with
each of these layouts:

| | sharding specs |
|---|---|
{{table}}

For each, predict the **shape of the piece one device holds** (`shard_shapes`) and **how many
devices hold an identical copy** of each piece (`copies`). Three of the chapter's tools would print
both: `visualize_sharding`, `explore_layout` and the `layout_explorer` widget. So **predict first**:
the check counts only while the notebook has imported or used none of them (this notebook imports
`visualize_sharding` in the cell after the hints, to draw your answers)."""

SHARDS_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: shard_shapes, copies = {"a": None, "b": None, "c": None, "d": None}, {"a": None, "b": None, "c": None, "d": None}
# A sharded axis is divided by its mesh axis (batch 2, model 4); copies = product of the mesh axes the layout leaves out.
shard_shapes = {{shard_shapes}}
copies = {{copies}}
# END SOLUTION
ex.q3.check(shard_shapes, copies)"""

SHARDS_WATCH = """\
from course_utils import visualize_sharding

if ex.q3.answer_shown():
    shard_mesh = dtensor.create_mesh([("batch", 2), ("model", 4)], devices=cpus)
    U = dtensor.UNSHARDED
    for key, specs in {{specs_code}}.items():
        picture = visualize_sharding(dtensor.Layout(specs, shard_mesh), shape={{shape}})
        print(f"{key} {specs}: each device holds {tuple(picture.shard_shape)}, replicated over {picture.replicated_over}; "
              f"you predicted {shard_shapes.get(key)}, {copies.get(key)} copies")
else:
    print("Not yet: this cell draws exercise 3's layouts once the checker has accepted your prediction or shown "
          "the answer (check it in the exercise cell first).")
if ex.q1.answer_shown() and isinstance(layout, dict):
    for name, shape in (("w", [784, 128]), ("b", [128])):
        if isinstance(layout.get(name), dtensor.Layout) and len(layout[name].sharding_specs) == len(shape):
            display(visualize_sharding(layout[name], shape=shape))"""

COST_QUESTION = """\
## Exercise 5 · What does a layout cost? Bytes held and bytes sent (5 points)

Now at a realistic size, and on a mesh the chapter did not price: `y = x @ w` with `x` of shape
`[N, {{features}}]` (`N` examples) and `w` of shape `[{{features}}, {{features}}]`, both float32, on a **`batch={{batch}} x model={{model}}`**
{{mesh_of}}, with two layouts:

| | layout of `x` | layout of `w` |
|---|---|---|
| **a** (data parallel) | `['batch', U]` | `[U, U]` |
| **b** (`w` split by columns) | `['batch', U]` | `[U, 'model']` |

A training step runs the forward product and the backward pass (`dx = dy · wᵀ` and
`dw = xᵀ · dy`, each gradient left in the layout DTensor gives it); a ring all-reduce over a group
of `n` devices sends `2 (n-1)/n · B` from each device, where `B` is the size in bytes of the tensor
the group adds up: the block of partial sums that each device of the group holds. Give:

- `a_held`, `b_held`: the bytes of `w` that **one device** holds in (a) and in (b);
- `b_sent`: the bytes **one device sends** per training step in (b), for a global batch of
  `N = {{examples}}` examples;
- `even_at`: the global batch size `N` at which (a) and (b) send **the same** number of bytes per
  device per step;
- `below`: `"a"` or `"b"`, the layout that sends less per step for a global batch smaller than
  `even_at`.

Bytes in **bytes** (not MiB); Python expressions such as `{{features}} * {{features}} * 4` are welcome. The
chapter's `matmul_cost` prints all of these, so **predict first**: the check counts only while the
notebook has not imported `matmul_cost` (the cell after the hints imports it, to compare).
`even_at` and `below` ask how the traffic of each layout grows with `N`."""

COST_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: costs = {"a_held": None, "b_held": None, "b_sent": None, "even_at": None, "below": None}
batch, model = {{batch}}, {{model}}                       # this mesh's axis sizes
w_bytes = {{features}} * {{features}} * 4                 # {{w_mib}} of float32
ring = lambda n, block: 2 * (n - 1) / n * block   # bytes one device sends in a ring all-reduce of `block` bytes
a_sent = ring(batch, w_bytes)             # (a): the whole dw all-reduced over 'batch', whatever N is: {{a_sent_mib}}
dw_term = ring(batch, w_bytes // model)   # (b): dw comes out in w's layout, {{w_part}} of w, over 'batch': {{dw_mib}}
dx_per_example = ring(model, {{features}} * 4 / batch)   # (b): dx's partial sums over 'model', x's rows on one device
costs = {
    "a_held": w_bytes,                    # replicated: the whole w everywhere
    "b_held": w_bytes // model,           # columns split over 'model' ({{model}} devices)
    "b_sent": dw_term + {{examples}} * dx_per_example,    # {{dw_mib}} + {{dx_mib}}; the forward product sends nothing
    "even_at": round((a_sent - dw_term) / dx_per_example),   # {{even_at}}
    "below": "b",                         # (b)'s traffic grows with N from {{dw_mib}}; (a)'s is {{a_sent_mib}} at any N
}
# END SOLUTION
ex.q5.check(costs)"""

COST_WATCH = """\
from course_utils import matmul_cost

if not ex.q5.answer_shown():
    print("Not yet: this cell prices the two layouts once the checker has accepted your numbers or shown the answer "
          "(check them in the exercise cell first).")
else:
    U = dtensor.UNSHARDED
    for n in ({{examples}}, {{more_examples}}):
        for case, w_specs in (("a", [U, U]), ("b", [U, "model"])):
            cost = matmul_cost([n, {{features}}], ["batch", U], [{{features}}, {{features}}], w_specs, [("batch", {{batch}}), ("model", {{model}})])
            sent = sum(c.bytes_sent_per_device for product in [cost.forward, *cost.backward] for c in product.collectives)
            print(f"N = {n}, ({case}): holds {cost.bytes_held['w']:,} B of w, sends {sent:,.0f} B per step")
    print("your numbers:", costs)"""

COLLECTIVES_QUESTION = """\
## Exercise 4 · Which collective, over which mesh axis? (5 points)

`y = tf.matmul(x, w)` with `x` of shape `[8, 4]` and `w` of shape `[4, 8]` on the chapter's mesh
`batch=4 × model=2` (`chapter_mesh`), with
these layouts (`U` is `dtensor.UNSHARDED`); none of them is a case the chapter ran:

| | layout of `x` | layout of `w` |
|---|---|---|
{{table}}

For each case, which collective does DTensor run to compute `y`, and over which mesh axis? Answer
`"none"` (or `None`, `[]`), or a pair such as `("all-reduce", "batch")` (the collectives:
`"all-reduce"`, `"all-gather"`, `"reduce-scatter"`; the chapter's `(run.kind, run.axes)` form,
`("all-reduce", ("batch",))`, is fine too).

Case **{{d}}** splits the contracted axis of only one operand, and two plans would give the right `y`:
make `w` whole along that axis first, or cut `x`'s columns to match the rows of `w` each device
holds and combine what the devices compute. Answer with the plan **DTensor runs**.

`collectives_run_by` would show each of them, so **predict first**: the check counts only while the
notebook has not imported `collectives_run_by` (the cell after the hints imports it and runs your
five cases beside your predictions)."""

COLLECTIVES_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: collectives = {"a": ..., "b": ..., "c": ..., "d": ..., "e": ...}
# A collective is needed exactly when some device holds only part of the contracted axis k of what it multiplies.
collectives = {
{{answer_lines}}
}
# END SOLUTION
ex.q4.check(collectives)"""

COLLECTIVES_WATCH = """\
import numpy as np
from course_utils import collectives_run_by, pack_batch

if not ex.q4.answer_shown():
    print("Not yet: this cell runs the five products once the checker has accepted your predictions or shown the "
          "answer (check them in the exercise cell first).")
else:
    U = dtensor.UNSHARDED
    cases = {{cases_code}}
    rng = np.random.default_rng(0)
    x_host, w_host = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)
    matmul = tf.function(tf.matmul)
    for key, (x_specs, w_specs) in cases.items():
        x_on = pack_batch(x_host, dtensor.Layout(x_specs, chapter_mesh))
        w_on = pack_batch(w_host, dtensor.Layout(w_specs, chapter_mesh))
        matmul(x_on, w_on)  # the first call compiles the per-device program
        ran = [(run.kind, run.axes) for run in collectives_run_by(lambda: matmul(x_on, w_on))]
        print(f"{key}: x {x_specs} @ w {w_specs}: ran {ran or 'none'}; you predicted {collectives.get(key) if isinstance(collectives, dict) else collectives}")"""
