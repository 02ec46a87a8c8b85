"""One training step, every variable, against a reference.

A distributed training step can be silently wrong: the loss falls, the accuracy looks fine, and one
variable is updated with the wrong gradient (chapter 5 meets such a bug in DTensor). The check that
catches it compares, variable by variable, the change one step makes with the change a reference
makes from the same starting values: the same step run eagerly (one operation at a time), or a
function you write (NumPy, one device, another framework).

It reads every variable whole on the host, so check a scaled-down copy of a model that is sharded
because it does not fit, with the same layouts; and check a later step too, not only the first
(a bug that depends on the step count is right at step 1).
"""
import dataclasses

import numpy as np
import tensorflow as tf
from tensorflow.experimental import dtensor

from course_utils.packing import pack_batch, shard_slices

__all__ = ["StepCheck", "VariableCheck", "check_step", "value_of"]

RTOL, ATOL = 1e-3, 1e-7  # per element: |applied - expected| <= ATOL + RTOL |expected|

WHY_WRONG = ("A WRONG line is a bug in the step, or a difference between the two runs that is not one: the step "
             "created variables of its own (build the optimizer first, so that its slots exist and are checked), "
             "it draws random numbers (dropout), it has Python side effects, or a variable it changes is missing "
             "from the list.")


def _blocks(tensor):
    """The global value of a DTensor and how far its devices' copies of the same block disagree."""
    layout = dtensor.fetch_layout(tensor)
    mesh = layout.mesh
    if len(mesh.local_device_ids()) != mesh.size:
        raise ValueError(f"This process holds {len(mesh.local_device_ids())} of the mesh's {mesh.size} devices: "
                         f"the other blocks live in other clients. Check a step on a mesh of one process "
                         f"(a scaled-down copy with the same layouts).")
    blocks = [b.numpy() for b in dtensor.unpack(tensor)]
    value = np.zeros(tensor.shape, dtype=blocks[0].dtype)
    seen, disagree = {}, 0.0
    for where, block in zip(shard_slices(tensor.shape, layout), blocks):
        key = tuple((s.start, s.stop) for s in where)
        if key in seen:
            gap = np.abs(block.astype(np.float64) - seen[key].astype(np.float64))
            disagree = max(disagree, float(gap.max(initial=0.0)))
        else:
            seen[key] = block
            value[where] = block
    return value, disagree


def value_of(x):
    """The whole value of a variable or a tensor as a NumPy array; for a DTensor or a ``DVariable``,
    put together from the blocks its devices really hold (``dtensor.unpack``), without a collective.

    Args:
        x: a ``tf.Variable`` (a DTensor ``DVariable`` is one) or a tensor (a DTensor or not).

    Raises:
        TypeError: ``x`` is neither (a NumPy array, a list, ...).
        ValueError: ``x`` is a DTensor on a mesh whose devices are not all in this process.

    Example:
        >>> value_of(tf.Variable([1.0, 2.0]))
        array([1., 2.], dtype=float32)
    """
    if isinstance(x, tf.Variable):
        x = x.read_value()
    if not tf.is_tensor(x):
        raise TypeError(f"value_of() takes a tf.Variable or a tensor, not a {type(x).__name__}.")
    return _blocks(x)[0] if dtensor.is_dtensor(x) else x.numpy()


@dataclasses.dataclass(frozen=True)
class VariableCheck:
    """How one variable's change in the step compares with the reference's.

    ``largest_error`` is the largest |applied change − expected change| over the variable's
    elements; ``largest_change`` the largest |expected change| (the scale to read it against);
    ``replicas_disagree_by`` the largest difference between two devices' copies of the same block
    after the step (0 for a plain variable: replicated copies must stay identical); ``ok`` whether
    every element is within the tolerance and the copies agree.
    """
    name: str
    shape: tuple
    largest_error: float
    largest_change: float
    replicas_disagree_by: float
    ok: bool


def _judge(name, applied, expected, disagree, rtol, atol):
    error = np.abs(applied - expected)
    within = bool(np.all(error <= atol + rtol * np.abs(expected)) and disagree <= np.max(atol))
    return VariableCheck(name, tuple(applied.shape), float(error.max(initial=0.0)),
                         float(np.abs(expected).max(initial=0.0)), disagree, within)


@dataclasses.dataclass(frozen=True)
class StepCheck:
    """The result of :func:`check_step`: one :class:`VariableCheck` per variable.

    Print it for a table; ``ok``, ``wrong``, ``[name]``, ``assert_ok()``; ``judged(rtol=, atol=)``
    judges the same two runs again with other tolerances.
    """
    variables: tuple
    rtol: float
    atol: object
    reference: str
    changes: dict = dataclasses.field(repr=False, compare=False, default_factory=dict)

    @property
    def ok(self):
        """Whether every variable changed as the reference did (within the tolerance)."""
        return all(v.ok for v in self.variables)

    @property
    def wrong(self):
        """The names of the variables that did not change as the reference did."""
        return [v.name for v in self.variables if not v.ok]

    def __getitem__(self, name):
        for variable in self.variables:
            if variable.name == name:
                return variable
        raise KeyError(f"No variable {name!r} was checked; the names are {[v.name for v in self.variables]}.")

    def judged(self, rtol=None, atol=None):
        """The same comparison with other tolerances (``atol`` a number, or ``{name: number or array}``).

        Raises:
            ValueError: an ``atol`` array does not have its variable's shape.
        """
        if isinstance(atol, dict) and not isinstance(self.atol, dict):
            atol = {**dict.fromkeys(self.changes, self.atol), **atol}  # the others keep this check's atol
        return _step_check(self.changes, self.reference, self.rtol if rtol is None else rtol,
                           self.atol if atol is None else atol)

    def __str__(self):
        width = max(8, *(len(v.name) for v in self.variables))
        tolerance = f"|error| <= {self.atol if isinstance(self.atol, (int, float)) else 'atol per variable'}" + (
            f" + {self.rtol:g} |expected|" if self.rtol else "")
        lines = [f"One step against {self.reference} ({tolerance}):",
                 f"  {'variable':{width}}  {'largest error':>13}  {'expected change':>15}  {'replicas differ':>15}  "
                 f"verdict"]
        for v in self.variables:
            lines.append(f"  {v.name:{width}}  {v.largest_error:13.2e}  {v.largest_change:15.2e}  "
                         f"{v.replicas_disagree_by:15.2e}  {'ok' if v.ok else 'WRONG'}")
        lines.append("Every variable changed as the reference did." if self.ok else
                     f"Wrong: {', '.join(self.wrong)}. {WHY_WRONG}")
        return "\n".join(lines)

    def assert_ok(self):
        """Raise ``AssertionError`` naming every variable that did not change as the reference did."""
        if not self.ok:
            raise AssertionError(str(self))


def _step_check(changes, reference, rtol, atol):
    per_variable = {**dict.fromkeys(changes, ATOL), **atol} if isinstance(atol, dict) else dict.fromkeys(changes, atol)
    unknown = sorted(set(per_variable) - set(changes))
    if unknown:
        raise ValueError(f"atol names {unknown}, which were not checked; the names are {sorted(changes)}.")
    checks = []
    for name, (applied, expected, disagree) in changes.items():
        tolerance = np.asarray(per_variable[name], dtype=np.float64)
        if tolerance.ndim and tolerance.shape != applied.shape:
            raise ValueError(f"The atol of {name!r} has shape {tolerance.shape}, the variable {applied.shape}.")
        checks.append(_judge(name, applied, expected, disagree, rtol, tolerance))
    return StepCheck(tuple(checks), rtol, atol, reference, changes)


def _named(variables):
    if isinstance(variables, dict):
        named = dict(variables)
    else:
        named = {}
        for variable in variables:
            name = getattr(variable, "name", repr(variable))
            if name in named:
                raise ValueError(f"Two of the variables are named {name!r}. Pass a dict {{name: variable}} "
                                 f"with a name of your choice for each.")
            named[name] = variable
    if not named:
        raise ValueError("No variables to check. Pass the variables the step updates, e.g. "
                         "model.trainable_variables + optimizer.variables().")
    for name, variable in named.items():
        if not isinstance(variable, tf.Variable):
            raise TypeError(f"{name!r} is a {type(variable).__name__}, not a tf.Variable. Pass the variables "
                            f"themselves (model.trainable_variables), not their values.")
    return named


def _restore(named, values):
    for name, variable in named.items():
        if isinstance(variable, dtensor.DVariable):
            variable.assign(pack_batch(values[name], dtensor.fetch_layout(variable)))
        else:
            variable.assign(values[name])


def _short(err):
    first = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {first[:300]}{'…' if len(first) > 300 else ''}"


def _eager_change(step, named, before, batch):
    was_eager = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)  # every tf.function inside runs op by op too
    try:
        step(*batch)
    finally:
        tf.config.run_functions_eagerly(was_eager)
    return {name: value_of(v) - before[name] for name, v in named.items()}


def _given_change(reference, before, batch):
    change = reference({name: value.copy() for name, value in before.items()}, *batch)
    if not isinstance(change, dict):
        raise TypeError(f"The reference returned a {type(change).__name__}; it must return a dict "
                        f"{{variable name: expected change}}.")
    missing, unknown = sorted(set(before) - set(change)), sorted(set(change) - set(before))
    if missing or unknown:
        raise ValueError(f"The reference's names do not match the variables': no change given for {missing}, "
                         f"and a change given for unknown names {unknown}. The variables are {sorted(before)}.")
    expected = {}
    for name, value in change.items():
        value = np.asarray(value)
        if value.shape != before[name].shape:
            raise ValueError(f"The reference's change of {name!r} has shape {value.shape}, but the variable "
                             f"has shape {before[name].shape}.")
        expected[name] = value
    return expected


def check_step(step, variables, *batch, reference="eager", rtol=RTOL, atol=ATOL):
    """Run one training ``step`` and compare each variable's change with a reference's.

    Both runs start from the same values: every variable is read; ``step`` runs once; the variables
    are put back and the reference runs; then the variables get the values ``step`` made (you took
    one step). The step under test runs first, so that nothing the reference runs can leave state
    behind that the step then reads. An element is right when |applied − expected| <= atol +
    rtol·|expected|: a variable that should move and does not is WRONG however small its change.

    Args:
        step: a function (usually a ``tf.function``) called as ``step(*batch)`` that updates the variables.
        variables: the variables the step updates, a list (named by ``.name``) or a dict
            ``{name: variable}``. Give every variable the step changes, the optimizer's too
            (``optimizer.variables()``, created before the check), so that both runs start alike.
        *batch: the arguments of ``step``.
        reference: ``"eager"``: the same step run one operation at a time (every ``tf.function``
            run eagerly); or a function ``reference(values, *batch)`` that gets each variable's
            starting value as NumPy (``{name: array}``) and returns the expected change of each.
        rtol, atol: the tolerance per element; ``atol`` may also be ``{name: number or array of the
            variable's shape}``, e.g. a bound worked out for each element (names left out get 1e-7).

    Returns:
        A :class:`StepCheck`: print it for a table, ``.ok``, ``.wrong``, ``[name]``, ``.assert_ok()``.

    Raises:
        TypeError: an item of ``variables`` is not a variable, or ``reference`` is neither
            ``"eager"`` nor a function, or the reference does not return a dict.
        ValueError: no variables, two with the same name, the reference's names or shapes do not
            match the variables', or a DVariable's mesh spans other processes.
        RuntimeError: DTensor cannot run the step (as a plain function) or the eager reference one
            operation at a time: decorate the step with ``tf.function``, or give a reference function.

    Example:
        >>> w = tf.Variable([1.0, 2.0])
        >>> step = tf.function(lambda x: w.assign_sub(0.1 * x))
        >>> check_step(step, {"w": w}, tf.constant([1.0, 1.0])).ok
        True
    """
    named = _named(variables)
    if not (reference == "eager" or callable(reference)):
        raise TypeError(f"reference must be 'eager' or a function reference(values, *batch) returning "
                        f"{{name: expected change}}, not {reference!r}.")
    before = {name: value_of(v) for name, v in named.items()}
    try:
        step(*batch)  # the step under test runs first: nothing the reference runs can leave state behind for it
    except tf.errors.UnimplementedError as err:
        raise RuntimeError(f"The step failed: {_short(err)} DTensor cannot run every gradient one operation at "
                           f"a time: decorate the step with @tf.function.") from err
    after, disagree = {}, {}
    for name, variable in named.items():
        value = variable.read_value()
        after[name], disagree[name] = _blocks(value) if dtensor.is_dtensor(value) else (value.numpy(), 0.0)
    _restore(named, before)
    try:
        if reference == "eager":
            expected, described = _eager_change(step, named, before, batch), "the same step run eagerly"
        else:
            expected = _given_change(reference, before, batch)
            described = f"the reference {getattr(reference, '__name__', 'function')}"
    except tf.errors.OpError as err:
        if reference != "eager":
            raise
        raise RuntimeError(f"The step ran as a tf.function but failed when run eagerly: {_short(err)} DTensor "
                           f"cannot run every gradient one operation at a time; give a reference function "
                           f"instead (reference=...).") from err
    finally:
        _restore(named, after)  # you took one step: the variables keep what the step under test made
    changes = {name: (after[name].astype(np.float64) - before[name].astype(np.float64),
                      expected[name].astype(np.float64), disagree[name]) for name in named}
    return _step_check(changes, described, rtol, atol)
