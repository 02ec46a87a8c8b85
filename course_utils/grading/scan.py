"""What a handed-in notebook's code reaches for, read from its syntax tree (never run): the grader's flags.

:func:`scan_cells` parses each code cell with :mod:`ast` and visits each node of the tree once, so
its time grows with the length of the code, whatever the code is (code beyond :data:`MAX_SCANNED`
characters is reported instead of read). It follows names through the
notebook's cells in order: ``import ... as``, ``from ... import`` (also ``*``), ``x = module.attr``,
``getattr`` with a constant name, ``vars(x)``, ``sys.modules[...]``, ``importlib.import_module``,
``__import__``, ``for x in ...`` and constant strings put together with ``+``; ``exec`` of a constant
string is read too, and a cell with IPython's magics or shell escapes is read as IPython rewrites it.
So a flag depends on what the code reaches, not on how it spells it; what the tree cannot show
(``exec`` of a computed string, ``getattr`` with a computed name, ``setattr`` passed around as a
value) is flagged as dynamic code, and a course object handed to the notebook's own function is
flagged too (the scan does not follow it there).

A flag proves nothing: it says where an instructor should look. The stamped set-up cell (byte for
byte the build's, :func:`course_utils.notebook_setup.setup_source`) is not scanned.
"""
import ast
import functools
import gc
import importlib.util
import re
import sys
import textwrap
from pathlib import Path

__all__ = ["CHANGES_COURSE", "DYNAMIC", "IPYTHON", "MAX_SCANNED", "scan_cells"]

MAX_SCANNED = 64 << 10  # characters of code scanned per notebook (a solution notebook has 4,000-12,000)
MAX_LOOKUPS = 50  # modules of a notebook looked up (is it installed?); any more are taken as not installed
MAX_NESTING = 8   # exec("exec('...')"): constant code read this many levels deep (and flagged dynamic anyway)
COURSE = "course_utils"
PACKAGE = Path(__file__).resolve().parents[1]  # the course_utils whose modules a star import names
CHANGES_COURSE = "changes course_utils"
DYNAMIC = "dynamic code (exec/eval, computed names)"
IPYTHON = "IPython's machinery (get_ipython(), magics, shell escapes)"
# A path the code reaches that is one of these or inside one -> the flag. "@name" is a built-in name.
PATHS = {
    "gc": "gc.", "ctypes": "ctypes", "builtins": "builtins", "@__builtins__": "builtins", "importlib": "importlib",
    "sys.modules": "sys.modules", "sys.meta_path": "sys.meta_path", "sys.path_hooks": "sys.meta_path",
    "sys.path_importer_cache": "sys.meta_path", "sys.path": "sys.path", "sys._getframe": "frame inspection",
    "inspect.currentframe": "frame inspection", "inspect.stack": "frame inspection",
    "inspect.getouterframes": "frame inspection", "inspect.getinnerframes": "frame inspection",
    "inspect.trace": "frame inspection", "inspect.getclosurevars": "__closure__",
    "os.write": "os.write/os.open", "os.open": "os.write/os.open", "os.dup": "os.write/os.open",
    "os.dup2": "os.write/os.open", "course_utils.grading": "the grader's names",
    "@exec": DYNAMIC, "@eval": DYNAMIC, "@compile": DYNAMIC, "@breakpoint": DYNAMIC, "runpy": DYNAMIC,
    "@get_ipython": IPYTHON, "@globals": "user_ns", "@locals": "user_ns", "@In": "user_ns",
    "@Out": "user_ns", "@_ih": "user_ns", "@_oh": "user_ns",
}
BUILTINS = ("getattr", "setattr", "delattr", "hasattr", "vars", "type", "object", "__import__", "exec", "eval",
            "compile", "breakpoint", "globals", "locals", "__builtins__", "get_ipython", "In", "Out", "_ih", "_oh")
INDIRECT = {"@getattr", "@setattr", "@delattr", "@__import__"}  # passed around as values, they hide what they reach
# An attribute of anything, by its name -> the flag.
ATTRIBUTES = {
    "__closure__": "__closure__", "cell_contents": "__closure__", "__globals__": "__globals__",
    "__builtins__": "builtins", "_getframe": "frame inspection", "f_locals": "frame inspection",
    "f_globals": "frame inspection", "f_back": "frame inspection", "tb_frame": "frame inspection",
    "gi_frame": "frame inspection", "cr_frame": "frame inspection", "settrace": "settrace/setprofile",
    "setprofile": "settrace/setprofile", "excepthook": "exception hooks", "unraisablehook": "exception hooks",
    "set_custom_exc": "exception hooks", "user_ns": "user_ns", "user_global_ns": "user_ns",
}
GRADER_TEXT = re.compile(r"_course_grader|course_grader__|COURSE_GRAD|export_answers|grading\.export|course-hint")
# Methods that change what they are called on (a module's __dict__, a list of the course's data ...).
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__", "__setattr__",
            "__delattr__", "append", "extend", "insert", "remove", "sort", "reverse", "add", "discard"}
PATCHERS = {"patch", "object", "setattr", "setitem", "multiple"}  # unittest.mock.patch(...), monkeypatch.setattr(...)
# IPython's escapes: a line that starts with one (%magic, !shell, ?help, /autocall ...), "x = !cmd",
# "x = %magic", "obj?"; and the prompts IPython strips (">>> ", "... ", "In [3]: ")
ESCAPED_LINE = re.compile(r"^([ \t]*)(?:(?:[%!/,;?]|[A-Za-z_][\w, ]{0,200}=[ \t]*[%!]).*|.*\?[ \t]*)$", re.MULTILINE)
PROMPT = re.compile(r"^[ \t]*(?:>>>|\.\.\.|In \[\d{1,9}\]:|\.{3,}:)(?: |$)", re.MULTILINE)
STAR_MODULES = ("sys", "os", "gc", "inspect", "builtins", "ctypes", "importlib")  # star imports followed
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
CONTAINERS = (ast.List, ast.Tuple, ast.Set)
OWN_FUNCTION = "passes course_utils to a function of the notebook"


def _constant(node):
    """The text of a constant string expression (``"a" + "b"``, an f-string without fields), or None."""
    parts, stack = [], [node]
    while stack:  # without recursion: "a" + "b" + ... may be long
        node = stack.pop()
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts.append(node.value)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            stack += [node.right, node.left]
        elif isinstance(node, ast.JoinedStr) and all(isinstance(part, ast.Constant) for part in node.values):
            parts.append("".join(str(part.value) for part in node.values))
        else:
            return None
    return "".join(parts)


def _is_course(path):
    return path is not None and (path == COURSE or path.startswith((COURSE + ".", COURSE + "[")))


@functools.lru_cache(maxsize=256)
def _star_names(module):
    """The public names ``from module import *`` binds, for the course's modules (read from their source, not
    imported) and :data:`STAR_MODULES`; none for other modules."""
    if module in STAR_MODULES:
        loaded = importlib.import_module(module)
        names = getattr(loaded, "__all__", None) or [name for name in vars(loaded) if not name.startswith("_")]
        return tuple(names)
    if not _is_course(module):
        return ()
    base = PACKAGE.joinpath(*module.split(".")[1:])
    source = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    tree = _parse(source.read_text(encoding="utf-8")) if source else None
    if tree is None:
        return ()
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return tuple(str(name) for name in ast.literal_eval(node.value))
            except ValueError:
                pass
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.Import, ast.ImportFrom)):
            names += [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            names += [(a.asname or a.name).split(".")[0] for a in getattr(node, "names", [])]
    return tuple(name for name in names if not name.startswith("_"))


def _installed(top, lookups):
    """Whether the top-level module ``top`` is in the standard library or installed for the grader (at most
    :data:`MAX_LOOKUPS` look-ups per notebook, kept in ``lookups``; past them, not)."""
    if top in sys.stdlib_module_names or top == COURSE:
        return True
    if top not in lookups:
        if len(lookups) >= MAX_LOOKUPS:
            return False
        try:
            lookups[top] = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            lookups[top] = False
    return lookups[top]


class _Scan:
    """One notebook's scan: the names bound so far (``aliases``: name -> dotted path) and what was found."""

    def __init__(self):
        self.aliases = {name: f"@{name}" for name in BUILTINS}
        self.found, self.changed, self.functions, self.lookups = {}, {}, set(), {}
        self.cell, self.paths, self.plain_uses, self.checked, self.nesting = 0, {}, set(), set(), 0

    def flag(self, name):
        self.found.setdefault(name, set()).add(self.cell)

    # -- what an expression refers to -------------------------------------------------------------
    def path(self, node):
        """The dotted path ``node`` refers to (``"course_utils.memory.bytes_per_device"``, ``"sys.modules"``), or
        None. A chain of attributes, subscripts and calls is followed from its base outwards, each node once (the
        result is kept per node), and each path on the way is checked against :data:`PATHS`."""
        chain = []
        while id(node) not in self.paths and isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            chain.append(node)
            node = node.func if isinstance(node, ast.Call) else node.value
        if id(node) in self.paths:
            path = self.paths[id(node)]
        else:
            path = self._base(node)
            self.paths[id(node)] = path
            if path is not None:
                self.reached(path)
        for outer in reversed(chain):
            path = self._step(outer, path)
            self.paths[id(outer)] = path
            if path is not None:
                self.reached(path)
        return path

    def _base(self, node):
        """The path of a name, or of a list, tuple or set that holds something of course_utils (its items)."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, CONTAINERS):
            inside = [self.path(item) for item in node.elts]
            return next((path + "[]" for path in inside if _is_course(path)), None)
        return None

    def _step(self, node, inner):
        """The path of ``node`` (an attribute, subscript or call) given the path of its inside."""
        if isinstance(node, ast.Attribute):
            return None if inner is None else f"{inner}.{node.attr}"
        if isinstance(node, ast.Subscript):
            key = _constant(node.slice)
            if inner == "sys.modules" and key is not None:
                return key  # sys.modules["course_utils.memory"] is that module
            return None if inner is None else f"{inner}[{key if key is not None else ''}]"
        first = _constant(node.args[0]) if node.args else None
        if inner in ("@__import__", "importlib.import_module") or (inner == "sys.modules.get" and first):
            return first
        if inner == "@getattr" and len(node.args) >= 2:
            base, attribute = self.path(node.args[0]), _constant(node.args[1])
            return None if base is None or attribute is None else f"{base}.{attribute}"
        if inner in ("@vars", "@type") and len(node.args) == 1:
            base = self.path(node.args[0])
            return None if base is None else base + (".__dict__" if inner == "@vars" else ".__class__")
        if inner is not None and inner.startswith(COURSE + ".checkers"):
            return inner + "()"  # what the checkers' functions return is the checkers (ex = exercises(3))
        return None

    def reached(self, path):
        """Flag ``path`` when it is, or is inside, one of :data:`PATHS` (whose keys have one or two parts)."""
        if path in self.checked:
            return
        self.checked.add(path)
        first, _, rest = path.partition(".")
        first = first.partition("[")[0]
        for key in (first, first + "." + rest.partition(".")[0].partition("[")[0] if rest else ""):
            if key in PATHS:
                self.flag(PATHS[key])

    # -- bindings ---------------------------------------------------------------------------------
    def bind(self, target, path):
        """Bind the names in ``target`` (of an assignment, a loop, ``as``) to ``path`` (None: nothing known)."""
        if isinstance(target, ast.Name):
            if path is None:
                self.aliases.pop(target.id, None)
            else:
                self.aliases[target.id] = path
        elif isinstance(target, (ast.Tuple, ast.List)):
            for item in target.elts:
                self.bind(item, None if path is None else path + "[]")
        elif isinstance(target, ast.Starred):
            self.bind(target.value, path)

    def assign(self, targets, value):
        values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
        for target in targets:
            self.written(target)
            if values is not None and isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == len(values):
                for item, part in zip(target.elts, values):  # a, b = x, y
                    self.bind(item, self.path(part))
            else:
                self.bind(target, self.path(value))

    def imported(self, node):
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.module_used(alias.name)
                top = alias.name.split(".")[0]
                self.aliases[alias.asname or top] = alias.name if alias.asname else top
        elif not node.level and node.module:
            self.module_used(node.module)
            for alias in node.names:
                if alias.name == "*":
                    self.aliases.update({name: f"{node.module}.{name}" for name in _star_names(node.module)})
                else:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    self.reached(f"{node.module}.{alias.name}")

    def module_used(self, module):
        self.reached(module)
        if not _installed(module.split(".")[0], self.lookups):
            self.flag("imports a module the grader does not have")

    # -- writes -----------------------------------------------------------------------------------
    def written(self, target):
        """``target`` (of an assignment or ``del``) is changed: noted when it is part of course_utils."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for item in target.elts:
                self.written(item)
        elif isinstance(target, ast.Starred):
            self.written(target.value)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            base = self.path(target.value)
            if _is_course(base):
                key = target.attr if isinstance(target, ast.Attribute) else _constant(target.slice) or "[...]"
                self.change(f"{base}.{key}")

    def change(self, path):
        shown = path[len(COURSE) + 1:] if path.startswith(COURSE + ".") else path
        self.changed.setdefault(shown.replace(".__dict__", "").replace(".__globals__", ""), set()).add(self.cell)
        self.flag(CHANGES_COURSE)

    def call(self, node):
        func, args = node.func, node.args
        self.plain_uses.add(id(func))
        callee = self.path(func)
        first = self.path(args[0]) if args else None
        if callee in ("@getattr", "@setattr", "@delattr", "@hasattr") and len(args) >= 2:
            attribute = _constant(args[1])
            if attribute is None and callee != "@hasattr":
                self.flag(DYNAMIC)
            elif attribute in ATTRIBUTES:
                self.flag(ATTRIBUTES[attribute])
            if callee in ("@setattr", "@delattr") and _is_course(first):
                self.change(f"{first}.{attribute or '...'}")
        if callee in ("@__import__", "importlib.import_module") and args:
            module = _constant(args[0])
            self.flag(DYNAMIC) if module is None else self.module_used(module)
        if callee in ("@exec", "@eval", "@compile") and args:
            code = _constant(args[0])
            if code is not None and self.nesting < MAX_NESTING:  # constant code is code the scan can read too
                saved, self.paths = self.paths, {}
                self.nesting += 1
                self.scan_source(code, nested=True)
                self.nesting -= 1
                self.paths = saved
        own = isinstance(func, ast.Lambda) or (isinstance(func, ast.Name) and func.id in self.functions)
        if own and any(_is_course(self.path(arg)) for arg in [*args, *(k.value for k in node.keywords)]):
            self.flag(OWN_FUNCTION)  # the scan does not follow the course's objects into the notebook's functions
        if isinstance(func, ast.Attribute):
            owner = self.path(func.value)
            if func.attr in MUTATORS and _is_course(owner):
                self.change(f"{owner} ({func.attr})")
            if func.attr in ("__setattr__", "__delattr__") and _is_course(first):
                self.change(f"{first}.{_constant(args[1]) if len(args) > 1 else '...'}")
            named = _constant(args[0]) if args else None
            if func.attr in PATCHERS and (_is_course(first) or _is_course(named)):
                self.change(f"{first or named} (patched)")

    # -- one cell ---------------------------------------------------------------------------------
    def scan_source(self, source, nested=False):
        """Scan the code ``source`` as IPython runs it: a cell with IPython's escapes (magics, shell, help,
        prompts) is flagged and read with those lines left out, and a cell's common indentation is taken off.
        What is still not Python is a syntax error, for IPython too: the kernel raises on it; it is not read."""
        tree = _parse(source)
        if tree is None and not nested:
            blanked = ESCAPED_LINE.sub(lambda m: m.group(1) + "pass", PROMPT.sub("", source))
            if blanked != source:
                self.flag(IPYTHON)
            tree = _parse(textwrap.dedent(blanked))
        if tree is not None:
            self.walk(tree)

    def walk(self, tree):
        """Visit every node once, depth first in the order of the source (without recursion), so that each
        statement binds its names before the code after it is read."""
        handlers = {kind: getattr(self, name) for kind, name in HANDLERS.items()}
        stack = [tree]
        while stack:
            node = stack.pop()
            handler = handlers.get(type(node))
            if handler is not None:
                handler(node)
            children = []
            for field in node._fields:
                value = getattr(node, field, None)
                if isinstance(value, list):
                    children += [item for item in value if isinstance(item, ast.AST) and type(item) not in SKIPPED]
                elif isinstance(value, ast.AST) and type(value) not in SKIPPED:
                    children.append(value)
            stack += reversed(children)

    def on_import(self, node):
        self.imported(node)

    def on_assign(self, node):
        self.plain_uses.add(id(node.value))  # s = setattr: an alias, followed
        if isinstance(node.value, ast.Lambda):
            self.functions.update(t.id for t in node.targets if isinstance(t, ast.Name))
        self.assign(node.targets, node.value)

    def on_augmented(self, node):
        self.written(node.target)
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            self.bind(node.target, self.path(node.value))

    def on_walrus(self, node):
        self.bind(node.target, self.path(node.value))

    def on_delete(self, node):
        for target in node.targets:
            self.written(target)

    def on_loop(self, node):
        self.bind(node.target, _item(self.path(node.iter)))

    def on_comprehension(self, node):  # its loops bind before its element is read
        for generator in node.generators:
            self.bind(generator.target, _item(self.path(generator.iter)))

    def on_with(self, node):
        if node.optional_vars is not None:
            self.bind(node.optional_vars, self.path(node.context_expr))

    def on_definition(self, node):
        self.aliases.pop(node.name, None)
        self.functions.add(node.name)

    def on_name(self, node):
        path = self.aliases.get(node.id)
        if path is not None and type(node.ctx) is ast.Load:
            self.reached(path)
            if path in INDIRECT and id(node) not in self.plain_uses:
                self.flag(DYNAMIC)  # map(setattr, ...), partial(getattr, ...): what it reaches is out of sight
        if _grader_text(node.id):
            self.flag("the grader's names")

    def on_attribute(self, node):
        if node.attr in ATTRIBUTES:
            self.flag(ATTRIBUTES[node.attr])
        if _grader_text(node.attr):
            self.flag("the grader's names")
        self.path(node)

    def on_subscript(self, node):
        self.path(node)

    def on_constant(self, node):
        if isinstance(node.value, (str, bytes)):
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if "/proc/" in text:
                self.flag("/proc/")
            if _grader_text(text):
                self.flag("the grader's names")


HANDLERS = {
    ast.Import: "on_import", ast.ImportFrom: "on_import", ast.Assign: "on_assign", ast.AugAssign: "on_augmented",
    ast.AnnAssign: "on_augmented", ast.NamedExpr: "on_walrus", ast.Delete: "on_delete", ast.For: "on_loop",
    ast.AsyncFor: "on_loop", **{kind: "on_comprehension" for kind in COMPREHENSIONS}, ast.withitem: "on_with",
    ast.FunctionDef: "on_definition", ast.AsyncFunctionDef: "on_definition", ast.ClassDef: "on_definition",
    ast.Call: "call", ast.Name: "on_name", ast.Attribute: "on_attribute", ast.Subscript: "on_subscript",
    ast.Constant: "on_constant",
}
# Nodes with nothing to read in them (contexts and operators): not visited.
SKIPPED = {ast.Load, ast.Store, ast.Del, *ast.operator.__subclasses__(), *ast.unaryop.__subclasses__(),
           *ast.cmpop.__subclasses__(), *ast.boolop.__subclasses__()}


def _grader_text(text):
    return ("rad" in text or "RAD" in text or "xport_" in text or "-hint" in text) and GRADER_TEXT.search(text)


def _item(path):
    return None if path is None else path + "[]"


def _parse(source):
    """The syntax tree of ``source`` (top-level ``await`` allowed, as in IPython), or None."""
    try:
        return compile(source, "<cell>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def scan_cells(sources, stamp=None):
    """The flags of a notebook's code cells, each with its cell numbers.

    Args:
        sources: ``[(cell number, code)]`` of the code cells, in order.
        stamp: the set-up cell as the build stamps it: a cell that is exactly this is not scanned.

    Returns:
        Texts such as ``"gc. (cell 3)"`` and ``"changes course_utils: memory.bytes_per_device (cells 4, 5)"``.

    Example:
        >>> scan_cells([(1, "import gc; gc.get_objects()"), (2, "import course_utils.memory as m\\nm.bytes_per_device = f")])
        ['gc. (cell 1)', 'changes course_utils: memory.bytes_per_device (cell 2)']
    """
    scan, budget, collecting = _Scan(), MAX_SCANNED, gc.isenabled()
    gc.disable()  # syntax trees hold no cycles: the collector would only walk every other object again and again
    try:
        for number, source in sources:
            if stamp is not None and source == stamp:
                continue
            scan.cell = number
            budget -= len(source)
            if budget < 0:
                scan.flag(f"too much code to scan (more than {MAX_SCANNED:,} characters)")
                break
            scan.paths, scan.checked = {}, set()  # per cell: the nodes of one tree, the paths flagged in it
            scan.scan_source(source)
    finally:
        if collecting:
            gc.enable()
    flags = []
    for name, cells in scan.found.items():
        if name == CHANGES_COURSE:
            targets = sorted(scan.changed)
            name += ": " + ", ".join(targets[:4]) + (f" and {len(targets) - 4} more" if len(targets) > 4 else "")
        flags.append(f"{name} ({_cells(cells)})")
    return flags


def _cells(numbers):
    numbers = sorted(numbers)
    return f"cell{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}"
