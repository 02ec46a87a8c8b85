"""The grader's side inside a student's kernel: private checkers, a tamper check and signed results.

The grader runs :func:`install` in a fresh kernel before any cell of the notebook. It

1. reads the run's secret key and settings from a file and deletes that file;
2. loads its own copy of ``course_utils`` under a random module name, from source files whose
   SHA-256 the grader gave it, with a private copy of the builtins: patching ``course_utils``,
   ``sys.modules['course_utils...']`` or ``builtins`` later does not reach this copy;
3. notes which functions and classes the checkers rely on (builtins, math, json, re, inspect,
   NumPy, TensorFlow, DTensor), to notice when the notebook replaces one of them;
4. defines ``__course_grader__(seq, exercise, at, token)`` in the notebook's namespace. The grader
   calls it after an exercise's cell: it reads the answers by the names of the exercise's check
   call, grades them with the private checker and appends a signed line (``records.py``) to the
   results file, through a file descriptor opened here.

Code here that runs after :func:`install` returns uses only names bound during :func:`install`,
so a notebook that rebinds a library function cannot change what it does.
"""
import builtins
import hashlib
import importlib.abc
import importlib.util
import json
import os
import secrets
import sys
from pathlib import Path

ENTRY = "__course_grader__"
TENSORFLOW_MODULES = ("numpy", "numpy.testing", "tensorflow", "tensorflow.experimental.dtensor")
WATCHED_MODULES = ("builtins", "math", "json", "re", "inspect") + TENSORFLOW_MODULES


class _PrivateFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``<prefix>.x.y`` from ``package_dir/x/y.py`` after checking its SHA-256."""

    def __init__(self, prefix, package_dir, digests, private_builtins):
        self.prefix, self.dir, self.digests, self.builtins = prefix, Path(package_dir), digests, private_builtins

    def _path(self, fullname):
        parts = fullname.split(".")[1:]
        folder = self.dir.joinpath(*parts)
        if (folder / "__init__.py").is_file():
            return folder / "__init__.py", True
        return self.dir.joinpath(*parts[:-1], parts[-1] + ".py") if parts else None, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.prefix and not fullname.startswith(self.prefix + "."):
            return None
        file, is_package = self._path(fullname)
        if file is None or not file.is_file():
            return None
        spec = importlib.util.spec_from_loader(fullname, self, origin=str(file), is_package=is_package)
        spec.has_location = True
        return spec

    def exec_module(self, module):
        file = Path(module.__spec__.origin)
        source = file.read_bytes()
        relative = file.relative_to(self.dir).as_posix()
        if hashlib.sha256(source).hexdigest() != self.digests.get(relative):
            raise ImportError(f"{relative} of course_utils differs from the grader's copy (changed on disk?)")
        module.__file__ = str(file)
        module.__dict__["__builtins__"] = self.builtins
        exec(compile(source, str(file), "exec"), module.__dict__)


def _watched(names):
    """What the checkers rely on, to compare later: ``modules`` ``{name: module}``, ``attributes``
    ``{(module name, attribute): object}`` for public functions and classes, and ``methods``
    ``{(class, name): function}`` for the methods of TensorFlow's and NumPy's classes."""
    import inspect

    modules, attributes, methods = {}, {}, {}
    for name in names:
        module = sys.modules.get(name)
        if module is None:
            continue
        modules[name] = module
        for attribute, value in list(vars(module).items()):
            if attribute.startswith("_") and attribute not in ("__import__", "__build_class__"):
                continue
            if inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.isclass(value):
                attributes[(name, attribute)] = value
            if inspect.isclass(value) and value.__module__.split(".")[0] in ("tensorflow", "numpy"):
                for cls in value.__mro__[:-1]:
                    for method, function in list(vars(cls).items()):
                        if inspect.isfunction(function):
                            methods[(cls, method)] = function
    return modules, attributes, methods


def install(config_path):
    """Set up the grader in this kernel (see the module docstring). Runs before any student code."""
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    os.remove(config_path)
    key = bytes.fromhex(config["key"])
    prefix = f"_course_grader_{secrets.token_hex(8)}"
    private_builtins = dict(vars(builtins))
    sys.meta_path.insert(0, _PrivateFinder(prefix, config["package_dir"], config["digests"], private_builtins))
    checkers = importlib.import_module(f"{prefix}.checkers")
    records = importlib.import_module(f"{prefix}.grading.records")
    if checkers.chapter_definition(config["chapter"]).uses_tensorflow:
        # Imported before the notebook can replace them, to be watched below.
        for module in TENSORFLOW_MODULES:
            importlib.import_module(module)
        importlib.import_module(f"{prefix}.packing")  # the checkers import it lazily
    by_name = {item.name: item for item in checkers.exercises(config["chapter"], mode=config["mode"])}
    watched_modules, attributes, methods = _watched(WATCHED_MODULES)
    shell = __import__("IPython").get_ipython()
    fd = os.open(config["results"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    state = {"seq": 0}
    write, settrace, setprofile, modules = os.write, sys.settrace, sys.setprofile, sys.modules
    sha256, encode, check_token = hashlib.sha256, records.encode, records.check_token

    def tampered():
        changed = [f"sys.modules[{name!r}]" for name, module in watched_modules.items()
                   if modules.get(name) is not module]
        changed += [f"{name}.{attribute}" for (name, attribute), value in attributes.items()
                    if vars(watched_modules[name]).get(attribute) is not value]
        changed += [f"{cls.__module__}.{cls.__qualname__}.{method}" for (cls, method), function in methods.items()
                    if vars(cls).get(method) is not function]
        return sorted(changed)

    def sign(seq, exercise, at, points, max_points, status, feedback="", extra=""):
        record = dict(seq=seq, exercise=exercise, at=at, points=points, max_points=max_points, status=status,
                      feedback=feedback, extra=extra)
        write(fd, encode(key, record, sha256).encode())

    def grader(seq, exercise, at, token):
        settrace(None)
        setprofile(None)
        if seq != state["seq"] + 1 or token != check_token(key, seq, exercise, at, sha256):
            return  # not a request of the grader's: nothing is recorded
        state["seq"] = seq
        changed = tampered()
        if at == "report":
            own = modules.get("course_utils")
            sign(seq, "", at, 0, 0, "report", extra="\n".join([getattr(own, "__file__", "") or ""] + changed))
            return
        item = by_name[exercise]
        if changed:
            sign(seq, exercise, at, 0, item.max_points, "tampered", extra="\n".join(changed))
            return
        namespace = shell.user_ns
        missing = [name for name in item.arguments if name not in namespace]
        if missing:
            sign(seq, exercise, at, 0, item.max_points, "missing", extra=", ".join(missing))
            return
        try:
            result = item.evaluate(*[namespace[name] for name in item.arguments])
        except Exception as err:  # evaluate never raises because of an answer; this is the checker failing
            sign(seq, exercise, at, 0, item.max_points, "error", extra=str(err)[:300])
            return
        sign(seq, exercise, at, result.points, result.max_points, result.status, result.message)

    shell.user_ns[ENTRY] = grader
    shell.user_ns_hidden[ENTRY] = grader  # not listed by %who


def bootstrap_source(digest, config_path):
    """The first cell the grader runs in a kernel: load this file with private builtins, check its
    SHA-256, and call :func:`install`. Nothing secret is in it (the key is in ``config_path``)."""
    return (
        "def _course_grader_boot():\n"
        "    import builtins, hashlib\n"
        f"    source = open({__file__!r}, 'rb').read()\n"
        f"    if hashlib.sha256(source).hexdigest() != {digest!r}:\n"
        "        raise ImportError('the grader\\'s side in the kernel differs from the grader\\'s copy')\n"
        "    space = {'__name__': '_course_grader_kernel_side', '__builtins__': dict(vars(builtins))}\n"
        f"    exec(compile(source, {__file__!r}, 'exec'), space)\n"
        f"    space['install']({str(config_path)!r})\n"
        "_course_grader_boot()\n"
        "del _course_grader_boot\n"
    )
