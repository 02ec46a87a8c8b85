"""Which tools an answer could have used: the tools a notebook has imported, and the tools a learner's function calls.

Two rules of the exercises rest on this:

- **Predict first.** A prediction whose answer a chapter tool prints (``visualize_sharding`` prints shard shapes,
  ``matmul_cost`` bytes) counts only when it is checked before that tool is imported or used. An exercise lists such
  tools in ``Exercise.revealed_by``; its check (``Exercise.export``, in the learner's kernel and in the grader's
  sandbox alike) asks :func:`tools_in_reach` which of them the notebook's namespace holds at that moment, or the
  notebook has called (a tool marked with :func:`reveals` records the notebook's calls, so that deleting its name
  does not hide them). The grader collects an exercise's answers right after the exercise's cell, so an import in a
  later cell is not in reach yet. The checker's own imports and calls do not count.
- **By hand.** An exercise that says "by hand" (or "predict, don't measure") asks :func:`tools_used_by` which
  forbidden tools the learner's function refers to (by any name, a default argument, a callable object's
  attribute), in its own code or in the notebook's functions it calls; and runs it under :func:`calls_recorded`,
  which catches a tool looked up while it runs.

A tool is named ``"module:name"``, by the module that defines it: ``"course_utils.viz:visualize_sharding"``,
``"tensorflow.dtensor.python.api:copy_to_mesh"`` (what ``dtensor.copy_to_mesh`` is). Nothing here imports a module:
a tool whose module is not loaded cannot be in reach.
"""
import builtins
import contextlib
import functools
import re
import sys
import types

__all__ = ["calls_recorded", "forget_calls", "learner_namespace", "reveals", "tool_name", "tools_in_reach",
           "tools_used_by"]

# IPython's own names in a kernel's namespace (its history and output cache), which are not the notebook's imports
_IPYTHON_NAMES = re.compile(r"_{1,3}|_i{1,3}|_i?\d+|_oh|_ih|_dh|In|Out")
_CALLED = set()  # the specs of the tools marked with @reveals that the notebook has called

def tool_name(spec):
    """The name a learner calls a tool by: ``"course_utils.viz:visualize_sharding"`` -> ``"visualize_sharding"``."""
    return spec.rsplit(":", 1)[-1]


def _tool(spec):
    """The object ``spec`` names, when its module is loaded (else None). Read with ``vars``: no lazy import runs."""
    module_name, _, name = spec.partition(":")
    module = sys.modules.get(module_name)
    return vars(module).get(name) if isinstance(module, types.ModuleType) else None


def reveals(tool):
    """Decorator for a chapter tool whose output gives an exercise's answer away: each call the notebook makes (not
    one made by course_utils itself, a checker's reference or another tool) is recorded, so that
    :func:`tools_in_reach` counts the tool even once its name is deleted again.

    Example:
        >>> @reveals
        ... def shard_shape(layout): ...
    """
    spec = f"{tool.__module__}:{tool.__qualname__}"

    @functools.wraps(tool)
    def recorded(*args, **kwargs):
        if not str(sys._getframe(1).f_globals.get("__name__", "")).startswith("course_utils"):
            _CALLED.add(spec)
        return tool(*args, **kwargs)
    return recorded


def forget_calls():
    """Forget the calls :func:`reveals` recorded (a fresh kernel; the tests).

    Example:
        >>> forget_calls()
        >>> tools_in_reach(["course_utils.costs:matmul_cost"], {})
        []
    """
    _CALLED.clear()


def learner_namespace():
    """The notebook's global names: the IPython kernel's user namespace, else ``__main__``'s (a script)."""
    shell = None
    if "IPython" in sys.modules:
        shell = sys.modules["IPython"].get_ipython()
    return shell.user_ns if shell is not None else vars(sys.modules["__main__"])


def tools_in_reach(tools, namespace=None):
    """Which of ``tools`` the notebook's names reach: a name bound to the tool itself (``from course_utils import
    visualize_sharding``, or an alias), or to a module that holds it (``import course_utils.viz as viz``; the package
    ``course_utils`` once the notebook has used ``course_utils.visualize_sharding``); and a tool marked with
    :func:`reveals` that the notebook has called, though the name is gone.

    Args:
        tools: tool specs (``"module:attribute"``, see the module docstring).
        namespace: the names to look at (default: :func:`learner_namespace`).

    Returns:
        The names of the tools in reach (see :func:`tool_name`), in the order of ``tools``.

    Example:
        >>> from course_utils import visualize_sharding
        >>> tools_in_reach(["course_utils.viz:visualize_sharding"], {"vs": visualize_sharding})
        ['visualize_sharding']
    """
    objects = {spec: _tool(spec) for spec in tools}
    wanted = {spec: tool for spec, tool in objects.items() if tool is not None}
    found = {spec for spec in wanted if spec in _CALLED}
    if not wanted:
        return []
    namespace = learner_namespace() if namespace is None else namespace
    for name, value in list(namespace.items()):
        if _IPYTHON_NAMES.fullmatch(name):
            continue
        for spec, tool in wanted.items():
            if value is tool or (isinstance(value, types.ModuleType) and vars(value).get(tool_name(spec)) is tool):
                found.add(spec)
    return [tool_name(spec) for spec in tools if spec in found]


def _functions_of(value):
    """The plain Python functions behind ``value``: itself, a ``tf.function``'s Python function, a partial's, a
    bound method's, a callable object's ``__call__``; an empty list for anything else."""
    if isinstance(value, types.FunctionType):
        return [value]
    for attribute in ("python_function", "func", "__func__"):  # tf.function, functools.partial, a bound method
        inner = getattr(value, attribute, None)
        if isinstance(inner, types.FunctionType):
            return [inner]
    call = getattr(type(value), "__call__", None)  # an object of a class the notebook wrote, called like a function
    return [call] if isinstance(call, types.FunctionType) else []


def _names_in(code):
    """The global and attribute names a code object (and the code nested in it) uses."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names_in(constant)
    return names


def _values_of(fn, code_names, owner):
    """The values ``fn`` can reach: its global (or builtin) names, closure variables, default arguments, and the
    attributes of the object it is the ``__call__`` of (``owner``)."""
    builtin = vars(builtins)
    values = [fn.__globals__[name] if name in fn.__globals__ else builtin[name] for name in code_names
              if name in fn.__globals__ or name in builtin]  # a global name, else a builtin (hash, id)
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # a cell not filled yet
            pass
    values += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    values += list(getattr(owner, "__dict__", {}).values())
    return values


def _modules_reached(values, code_names, depth=4):
    """The modules among ``values`` and those reached from them by attributes the code names (``tf.experimental``)."""
    modules, reached = [(v, depth) for v in values if isinstance(v, types.ModuleType)], {}
    while modules:
        module, left = modules.pop()
        if id(module) in reached:
            continue
        reached[id(module)] = module
        if left > 0:
            modules += [(vars(module)[name], left - 1) for name in code_names
                        if isinstance(vars(module).get(name), types.ModuleType)]
    return list(reached.values())


def tools_used_by(function, tools, depth=3):
    """Which of ``tools`` a learner's ``function`` calls: a name in its code that refers to the tool (a global or
    closure variable bound to it, under any name; an attribute of a module it reaches, ``dtensor.copy_to_mesh``), a
    default argument or, for a callable object, an attribute holding it; and the same in the notebook's functions it
    refers to (those that share its global names, or ``__main__``'s), down to ``depth`` levels; a library's functions
    are not looked into. A name that only spells the tool's (the learner's own ``shard_slices``) is not the tool. A
    static look at the code: it runs nothing (:func:`calls_recorded` catches what it cannot see).

    Returns:
        The names of the tools it uses (see :func:`tool_name`), in the order of ``tools``.

    Example:
        >>> from course_utils import pack_batch
        >>> tools_used_by(lambda x, layout: pack_batch(x, layout), ["course_utils.packing:pack_batch"])
        ['pack_batch']
    """
    objects = {spec: _tool(spec) for spec in tools}
    objects = {spec: tool for spec, tool in objects.items() if tool is not None}
    used, seen = set(), set()
    owner = None if isinstance(function, types.FunctionType) or hasattr(function, "python_function") else function
    pending = [(fn, depth, owner) for fn in _functions_of(function)]
    notebook = {id(fn.__globals__) for fn, _, _ in pending}
    while pending:
        fn, left, owner = pending.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        code_names = _names_in(fn.__code__)
        values = _values_of(fn, code_names, owner)
        modules = _modules_reached(values, code_names)
        for spec, tool in objects.items():
            name = tool_name(spec)
            if any(value is tool for value in values) or (
                    name in code_names and any(vars(module).get(name) is tool for module in modules)):
                used.add(spec)
        if left > 0:
            for value in values:
                inner_owner = None if isinstance(value, types.FunctionType) else value
                for inner in _functions_of(value):
                    if id(inner.__globals__) in notebook or inner.__module__ == "__main__":
                        pending.append((inner, left - 1, inner_owner))
    return [tool_name(spec) for spec in tools if spec in used]


@contextlib.contextmanager
def calls_recorded(tools, on_call=None):
    """While in the block, each loaded module's attribute that is one of ``tools`` is a stand-in that records its
    call (and then calls the tool): what a learner's code looks up while it runs (``getattr(dtensor, name)``) is
    caught; so is a call of a tool marked with :func:`reveals` through a name bound before the block. Yields the list
    of the tools' names called so far, filled as they are called.

    Args:
        tools: tool specs (``"module:attribute"``).
        on_call: called as ``on_call(name, args, kwargs)`` before each call of a stand-in (to look at what it got).

    Example:
        >>> import json
        >>> with calls_recorded(["json:dumps"]) as called:
        ...     text = getattr(json, "du" + "mps")([1])  # a name made at run time
        >>> called, text
        (['dumps'], '[1]')
    """
    called, originals = [], {}
    objects = {spec: _tool(spec) for spec in tools}
    earlier = _CALLED & set(tools)  # the notebook's own calls before the block: kept, but not the block's
    _CALLED.difference_update(earlier)
    for spec, tool in objects.items():
        if tool is None:
            continue
        name = tool_name(spec)

        def stand_in(*args, _tool=tool, _name=name, **kwargs):
            if _name not in called:
                called.append(_name)
            if on_call is not None:
                on_call(_name, args, kwargs)
            return _tool(*args, **kwargs)
        stand_in = functools.wraps(tool)(stand_in)
        originals[stand_in] = (name, tool)
        for module in list(sys.modules.values()):
            if isinstance(module, types.ModuleType) and vars(module).get(name) is tool:
                setattr(module, name, stand_in)
    try:
        yield called
    finally:  # every module that holds a stand-in, also one a lazy import cached it in meanwhile (course_utils)
        for module in list(sys.modules.values()):
            for stand_in, (name, tool) in originals.items():
                if isinstance(module, types.ModuleType) and vars(module).get(name) is stand_in:
                    setattr(module, name, tool)
        called += [tool_name(spec) for spec in tools if spec in _CALLED and tool_name(spec) not in called]
        _CALLED.update(earlier)
