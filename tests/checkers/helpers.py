"""Shared helpers of the checker tests: grade an answer, assert it is right or gives a hint, and load the stripped
copy of a checker module (or one of its exercises) that a graded sandbox imports."""
from course_utils.checkers import exercises


def grade(chapter, name, *args, **kwargs):
    return getattr(exercises(chapter), name).evaluate(*args, **kwargs)


def assert_correct(result):
    assert result.status == "correct", str(result)
    assert result.points == result.max_points


def assert_hint(result, *fragments, points=0):
    assert result.points == points, str(result)
    for fragment in fragments:
        assert fragment in result.message, f"{fragment!r} not in:\n{result}"


JUDGING_NAMES = ("grade", "judge")
JUDGING_PREFIXES = ("_grade", "_judge", "reference", "_reference")


def _judging_names_left(source):
    """The judging or reference names (``grade``/``judge``, ``_grade*``/``_judge*``, ``reference*``/``_reference*``)
    that ``source`` still binds: as a function or class (at any depth), an import, or an assignment in the module's
    or a class's body (a function's local variables do not count)."""
    import ast

    tree = ast.parse(source)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    for body in [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]:
        for statement in body:
            if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                names |= {node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)}
    return {name for name in names if name in JUDGING_NAMES or name.startswith(JUDGING_PREFIXES)}


def sandbox_copy(name):
    """``course_utils.checkers.<name>`` as a graded sandbox imports it (judging methods and reference functions
    stripped by ``grading/handout.py``), run as that module (its relative imports resolve against the real
    package); and the global names its code reads but it no longer defines (a hint or a ``collect`` that used a
    stripped name would break in the sandbox).

    Asserts, by reading the stripped source with ``ast``, that it binds no judging or reference name any more.

    Returns:
        ``(module, undefined_names)``: a fresh ``types.ModuleType`` named ``course_utils.checkers.<name>`` (with
        ``__package__`` ``"course_utils.checkers"`` and the real file as ``__file__``), and a set of names.
    """
    import builtins
    import symtable
    import types
    from pathlib import Path

    import course_utils.checkers as package
    from course_utils.grading.handout import strip_checker_source

    path = Path(package.__file__).with_name(f"{name}.py")
    source = strip_checker_source(path.read_text(encoding="utf-8"))
    judging = _judging_names_left(source)
    assert not judging, judging
    module = types.ModuleType(f"course_utils.checkers.{name}")
    module.__package__, module.__file__ = "course_utils.checkers", str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)
    undefined, tables = set(), [symtable.symtable(source, str(path), "exec")]
    while tables:
        table = tables.pop()
        tables += table.get_children()
        undefined |= {symbol.get_name() for symbol in table.get_symbols()
                      if symbol.is_referenced() and (symbol.is_global() or table.get_type() == "module")
                      and symbol.get_name() not in vars(module) and not hasattr(builtins, symbol.get_name())}
    return module, undefined


def holding(module, answer):
    """The names of ``module`` whose value equals ``answer``."""
    found = []
    for name, value in vars(module).items():
        try:
            if value == answer:
                found.append(name)
        except Exception:  # a value that cannot be compared with the answer is not the answer
            pass
    return found


def stripped_exercise(module_name, class_name, chapter, exercise, *, shared=()):
    """Exercise ``exercise`` (``"q1"``, ...) of ``chapter`` built, the way ``ChapterExercises`` builds it, from the
    class ``class_name`` of :func:`sandbox_copy` ``(module_name)``: what a graded sandbox collects with.

    Args:
        shared: names of module globals the copy takes from the real ``course_utils.checkers.<module_name>``
            (where the real module has them): state that must exist once per process, as it does in a sandbox,
            which holds only the stripped copy.
    """
    import importlib

    from course_utils.checkers.core import notebook_cells

    module, _ = sandbox_copy(module_name)
    real = importlib.import_module(module.__name__) if shared else None
    for name in shared:
        if hasattr(real, name):
            setattr(module, name, getattr(real, name))
    cls = getattr(module, class_name)
    return cls(chapter, exercise, notebook_cells()[chapter]["exercises"][exercise])
