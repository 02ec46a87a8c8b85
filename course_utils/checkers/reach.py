"""Which tools an answer could have used: the tools a notebook has imported, and the tools a learner's function calls.

Two rules of the exercises rest on this:

- **Predict first.** A prediction whose answer a chapter tool prints (``visualize_sharding`` prints shard shapes,
  ``matmul_cost`` bytes) counts only when it is checked before that tool is imported. An exercise lists such tools
  in ``Exercise.revealed_by``; its check (``Exercise.export``, in the learner's kernel and in the grader's sandbox
  alike) asks :func:`tools_in_reach` which of them the notebook's namespace holds at that moment. The grader collects
  an exercise's answers right after the exercise's cell, so an import in a later cell is not in reach yet. The
  checker's own imports do not count: only names bound in the notebook's namespace do.
- **By hand.** An exercise that says "by hand" (or "predict, don't measure") asks :func:`tools_used_by` which
  forbidden tools the learner's function calls, by name or through an alias, in its own code or in the notebook's
  functions it calls.

A tool is named ``"module:name"``, by the module that defines it: ``"course_utils.viz:visualize_sharding"``,
``"tensorflow.dtensor.python.api:copy_to_mesh"`` (what ``dtensor.copy_to_mesh`` is). Nothing here imports a module:
a tool whose module is not loaded cannot be in reach.
"""
import sys
import types

__all__ = ["learner_namespace", "tool_name", "tools_in_reach", "tools_used_by"]

def tool_name(spec):
    """The name a learner calls a tool by: ``"course_utils.viz:visualize_sharding"`` -> ``"visualize_sharding"``."""
    return spec.rsplit(":", 1)[-1]


def _tool(spec):
    """The object ``spec`` names, when its module is loaded (else None). Read with ``vars``: no lazy import runs."""
    module_name, _, name = spec.partition(":")
    module = sys.modules.get(module_name)
    return vars(module).get(name) if isinstance(module, types.ModuleType) else None


def learner_namespace():
    """The notebook's global names: the IPython kernel's user namespace, else ``__main__``'s (a script)."""
    shell = None
    if "IPython" in sys.modules:
        shell = sys.modules["IPython"].get_ipython()
    return shell.user_ns if shell is not None else vars(sys.modules["__main__"])


def tools_in_reach(tools, namespace=None):
    """Which of ``tools`` the notebook's names reach: a name bound to the tool itself (``from course_utils import
    visualize_sharding``, or an alias), or to a module that holds it (``import course_utils.viz as viz``; the package
    ``course_utils`` once the notebook has used ``course_utils.visualize_sharding``).

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
    if not wanted:
        return []
    namespace = learner_namespace() if namespace is None else namespace
    found = set()
    for name, value in list(namespace.items()):
        if name.startswith("_") or name in ("In", "Out"):  # IPython's history and output cache
            continue
        for spec, tool in wanted.items():
            if value is tool or (isinstance(value, types.ModuleType) and vars(value).get(tool_name(spec)) is tool):
                found.add(spec)
    return [tool_name(spec) for spec in tools if spec in found]


def _functions_of(value):
    """The plain Python functions behind ``value``: itself, a ``tf.function``'s Python function, a partial's, a
    bound method's; an empty list for anything else."""
    for attribute in ("python_function", "func", "__func__"):  # tf.function, functools.partial, a bound method
        inner = getattr(value, attribute, None) if not isinstance(value, types.FunctionType) else None
        if isinstance(inner, types.FunctionType):
            return [inner]
    return [value] if isinstance(value, types.FunctionType) else []


def _names_in(code):
    """The global and attribute names a code object (and the code nested in it) uses."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names_in(constant)
    return names


def tools_used_by(function, tools, depth=3):
    """Which of ``tools`` a learner's ``function`` calls: by its name in the function's code (``pack_batch(...)``,
    ``dtensor.copy_to_mesh(...)``), or through a global or closure variable bound to the tool (an alias); and the same
    in the notebook's functions it refers to (those that share its global names, or ``__main__``'s), down to
    ``depth`` levels; a library's functions are not looked into. A static look at the code: it runs nothing.

    Returns:
        The names of the tools it uses (see :func:`tool_name`), in the order of ``tools``.

    Example:
        >>> from course_utils import pack_batch
        >>> tools_used_by(lambda x, layout: pack_batch(x, layout), ["course_utils.packing:pack_batch"])
        ['pack_batch']
    """
    names = {spec: tool_name(spec) for spec in tools}
    objects = {spec: _tool(spec) for spec in tools}
    used, seen = set(), set()
    pending = [(fn, depth) for fn in _functions_of(function)]
    notebook = {id(fn.__globals__) for fn, _ in pending}
    while pending:
        fn, left = pending.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        code_names = _names_in(fn.__code__)
        values = [fn.__globals__.get(name) for name in code_names]
        for cell in fn.__closure__ or ():
            try:
                values.append(cell.cell_contents)
            except ValueError:  # a cell not filled yet
                pass
        for spec, name in names.items():
            if name in code_names or any(value is objects[spec] for value in values if objects[spec] is not None):
                used.add(spec)
        if left > 0:
            for value in values:
                for inner in _functions_of(value):
                    if id(inner.__globals__) in notebook or inner.__module__ == "__main__":
                        pending.append((inner, left - 1))
    return [names[spec] for spec in tools if spec in used]
