"""Chapter 8 · the templates of the notebook cells that state exercise 1's array (by cell id), filled with each
variant's values (:mod:`.variants`); ``python3 course.py build`` writes them, filled with the defaults, into
``solutions/08_keras3_on_jax.ipynb`` (and so ``exercises/``), so edit the text here, not in the notebooks."""

SHARDING_QUESTION = """\
## Exercise 1 · Read a JAX sharding (3 points)

`mystery` is a {{shape_text}} array placed on the chapter's 4 × 2 mesh (`batch` × `model`) with a layout the
chapter's Rosetta did not show. Read its `sharding` and its `addressable_shards` (print them), then
answer:

- `keras_axes`: its layout as Keras' `TensorLayout` axes (a tuple, one entry per array axis);
- `dtensor_specs`: the same layout as DTensor's `sharding_specs` (a list of strings);
- `shard_shape`: the shape of the piece each device holds;
- `copies`: how many devices hold each piece."""

SHARDING_ARRAY = """\
mystery = jax.device_put(np.arange({{size}}, dtype=np.float32).reshape({{shape_args}}),
                         jax.sharding.NamedSharding(device_mesh.backend_mesh, P({{spec_args}})))"""

SHARDING_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: keras_axes, dtensor_specs, shard_shape, copies = ..., ..., ..., ...
print(mystery.sharding.spec, [shard.index for shard in mystery.addressable_shards[:2]])
keras_axes = {{keras_axes}}  # one entry per array axis; None: not split along it
dtensor_specs = {{dtensor_specs}}  # DTensor writes None as dtensor.UNSHARDED
shard_shape = {{shard_shape}}  # {{shard_note}}
copies = {{copies}}  # {{copies_note}}
# END SOLUTION
ex.q1.check(keras_axes, dtensor_specs, shard_shape, copies)"""
