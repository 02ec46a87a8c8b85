"""The scan of a notebook's code: what it reaches is flagged however it is spelled, the course's own
notebooks are not flagged, and no input makes a scan slow (each pathological one under a second of CPU)."""
import json
import time
from pathlib import Path

import pytest

from course_utils.checkers.core import notebook_cells
from course_utils.checkers.plain import PlainDataError, TooLarge, loads
from course_utils.grading.scan import CHANGES_COURSE, DYNAMIC, IPYTHON, MAX_SCANNED, scan_cells
from course_utils.grading.submission import MAX_NOTEBOOK_BYTES, NotANotebook, hint_levels, parse_notebook

ROOT = Path(__file__).resolve().parents[2]
FAKES = "fake = lambda *a, **k: None\n"
# The spellings of "replace a course_utils function" (the exercise-5.6 forgery replaced the measuring functions
# layout_of, bytes_per_device and collectives_run_by), each with the target the flag must name.
SPELLINGS = {
    "module attribute": ("import course_utils.memory\ncourse_utils.memory.bytes_per_device = fake",
                         "memory.bytes_per_device"),
    "alias": ("import course_utils.memory as m\nm.bytes_per_device = fake", "memory.bytes_per_device"),
    "alias by assignment": ("import course_utils\nm = course_utils.profiling\nm.collectives_run_by = fake",
                            "profiling.collectives_run_by"),
    "from import of the module": ("from course_utils.checkers import ch5_cases as c\nc.layout_of = fake",
                                  "checkers.ch5_cases.layout_of"),
    "setattr": ("import course_utils.memory\nsetattr(course_utils.memory, 'bytes_per_device', fake)",
                "memory.bytes_per_device"),
    "setattr through an alias of setattr": ("s = setattr\nfrom course_utils import profiling\n"
                                            "s(profiling, 'collectives_run_by', fake)", "profiling.collectives_run_by"),
    "vars() write": ("from course_utils.checkers import ch5_cases\nvars(ch5_cases)['layout_of'] = fake",
                     "checkers.ch5_cases.layout_of"),
    "__dict__ write": ("from course_utils.checkers import ch5_cases\nch5_cases.__dict__['layout_of'] = fake",
                       "checkers.ch5_cases.layout_of"),
    "vars().update": ("from course_utils import memory\nvars(memory).update(bytes_per_device=fake)", "memory (update)"),
    "from import of the function": ("from course_utils.memory import bytes_per_device\n"
                                    "bytes_per_device.__code__ = fake.__code__", "memory.bytes_per_device.__code__"),
    "star import": ("from course_utils.checkers.ch5_cases import *\nlayout_of.__code__ = fake.__code__",
                    "checkers.ch5_cases.layout_of.__code__"),
    "getattr chain": ("import course_utils\ngetattr(getattr(course_utils, 'checkers'), 'ch5_cases').layout_of = fake",
                      "checkers.ch5_cases.layout_of"),
    "getattr of concatenated names": ("import course_utils\n"
                                      "setattr(getattr(course_utils, 'prof' + 'iling'), 'collectives_' + 'run_by', fake)",
                                      "profiling.collectives_run_by"),
    "class of the checkers": ("from course_utils.checkers import core\ncore.Exercise.hint = lambda *a: None",
                              "checkers.core.Exercise.hint"),
    "checker instances in a loop": ("from course_utils.checkers import exercises\nex = exercises(3)\n"
                                    "for item in ex:\n    item.evaluate = fake", "checkers.exercises()[].evaluate"),
    "sys.modules": ("import sys\nsys.modules['course_utils.memory'].bytes_per_device = fake",
                    "memory.bytes_per_device"),
    "importlib": ("import importlib\nimportlib.import_module('course_utils.memory').bytes_per_device = fake",
                  "memory.bytes_per_device"),
    "__import__ of a concatenated name": ("__import__('course_' + 'utils.memory', fromlist=['x']).bytes_per_device = fake",
                                          "memory.bytes_per_device"),
    "a function's __globals__": ("from course_utils.checkers.ch5_cases import collect_build_case\n"
                                 "collect_build_case.__globals__['layout_of'] = fake",
                                 "checkers.ch5_cases.collect_build_case.layout_of"),
    "unittest.mock.patch": ("from unittest import mock\nmock.patch('course_utils.memory.bytes_per_device', fake).start()",
                            "memory.bytes_per_device (patched)"),
    "a list of modules": ("import course_utils.memory\nmodules = [course_utils.memory]\nmodules[0].bytes_per_device = fake",
                          "memory[][].bytes_per_device"),
    "exec of constant code": ("exec('import course_utils.memory\\ncourse_utils.memory.bytes_per_device = fake')",
                              "memory.bytes_per_device"),
    "a later cell uses an earlier cell's alias": ("import course_utils.memory as m\n\x00NEXT CELL\x00\n"
                                                   "m.bytes_per_device = fake", "memory.bytes_per_device"),
}


def cells_of(code):
    """``[(cell number, source)]`` of code whose cells are separated by a NEXT CELL line."""
    return [(number, part) for number, part in enumerate((FAKES + code).split("\x00NEXT CELL\x00\n"), start=1)]


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_every_spelling_of_replacing_a_course_function_is_flagged(name):
    code, target = SPELLINGS[name]
    flags = scan_cells(cells_of(code))
    changed = [flag for flag in flags if flag.startswith(CHANGES_COURSE)]
    assert changed and target in changed[0], flags


@pytest.mark.parametrize("code, flag", [
    # what the tree cannot show is flagged as such
    ("import course_utils.memory as m\nsetattr(m, name, fake)", DYNAMIC),
    ("exec(base64.b64decode(text).decode())", DYNAMIC),
    ("import course_utils.memory as m\nlist(map(setattr, [m], ['bytes_per_device'], [fake]))", DYNAMIC),
    ("x = getattr(obj, 'mod' + name)", DYNAMIC),
    ("%run -i attack.py", IPYTHON),
    ("%%bash\ncat > attack.py <<'END'\nEND", IPYTHON),
    ("get_ipython().run_line_magic('run', '-i attack.py')", IPYTHON),
    (">>> import gc", "gc."),  # IPython strips the prompt: the scan reads the cell as IPython does
    ("x = !ls\nimport ctypes", "ctypes"),
    ("!echo 1\n" * 21 + "import gc", IPYTHON),
    ("def patch_it(module):\n    module.bytes_per_device = fake\nimport course_utils.memory\n"
     "patch_it(course_utils.memory)", "passes course_utils to a function of the notebook"),
    # the reaches of the first grader's flags, now read from the tree
    ("modules = getattr(__import__('s' + 'ys'), 'mod' + 'ules')", "sys.modules"),
    ("from sys import modules as m", "sys.modules"),
    ("import sys as s\ns.path.insert(0, 'fake')", "sys.path"),
    ("g = __import__('gc')\ng.get_objects()", "gc."),
    ("import inspect\ninspect.getclosurevars(f)", "__closure__"),
    ("f.__closure__[0].cell_contents", "__closure__"),
    ("import sys\nsys._getframe(1).f_locals", "frame inspection"),
    ("import sys\nsys.excepthook = print", "exception hooks"),
    ("import threading\nthreading.settrace(print)", "settrace/setprofile"),
    ("print('\\n'.join(In))", "user_ns"),
    ("open('/proc/self/fd/3')", "/proc/"),
    ("from course_utils.grading import export", "the grader's names"),
    ("import os as o\no.write(3, b'x')", "os.write/os.open"),
    ("import attack_module", "imports a module the grader does not have"),
])
def test_what_the_scan_cannot_follow_or_should_not_see_is_flagged(code, flag):
    flags = scan_cells([(1, code)])
    assert any(f.startswith(flag) for f in flags), flags


def test_the_course_notebooks_are_not_flagged():
    """The solution and exercise notebooks as the build writes them: no flag, every cell parsed."""
    for path in sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "exercises").glob("*.ipynb")):
        nb = parse_notebook(path.read_bytes())
        chapter = nb["metadata"]["course"]["chapter"]
        code = [(n, c["source"]) for n, c in enumerate(nb["cells"], start=1) if c["cell_type"] == "code"]
        assert scan_cells(code, notebook_cells()[chapter]["setup"]) == [], path.name


def test_an_edited_setup_cell_is_read():
    stamp = notebook_cells()[3]["setup"]
    assert scan_cells([(2, stamp)], stamp) == []
    hidden = stamp + "\nimport gc; gc.get_objects()  # git+https://github.com/owner/name@main"
    flags = scan_cells([(2, hidden)], stamp)
    assert "gc. (cell 2)" in flags and "sys.modules (cell 2)" in flags


def cpu_seconds(function, *args):
    """CPU seconds of this process that ``function(*args)`` takes (the machine's other load does not count)."""
    start = time.process_time()
    function(*args)
    return time.process_time() - start


def refused(function, *args):
    try:
        function(*args)
    except (NotANotebook, PlainDataError):
        return


def filling(code):
    """``code`` cut at the last line that fits the scan's budget (the most the scan reads)."""
    code = code[:MAX_SCANNED]
    return code[:code.rfind("\n") + 1]


PATHOLOGICAL_CODE = {
    "24,000 blank lines": "\n" * 24_000,
    "24,000 lines of code (over the budget)": "x = course_utils.memory.bytes_per_device(m)\n" * 24_000,
    "the budget of calls and attributes": filling("import course_utils.memory as m\n"
                                                  + "y = m.bytes_per_device(m.x.y, a[1], b.c())\n" * 3_000),
    "the budget of names": filling("a, b, c, d, e, f, g, h\n" * 3_000),
    "the budget of IPython escapes": filling("%time x\n!ls\nx?\n>>> y = 1\n" * 5_000),
    "200 nested parentheses": "x = " + "(" * 200 + "1" + ")" * 200,
    "5,000 nested brackets": "[" * 5_000 + "]" * 5_000,
    "100 nested blocks": "".join(" " * i + "if x:\n" for i in range(100)) + " " * 100 + "pass\n",
    "a 30,000-step attribute chain": "a" + ".b" * 30_000,
    "a 15,000-call chain": "a" + ".b()" * 15_000,
    "a 2 MB line": "x = '" + "a" * (2 << 20) + "'",
    "a line of 10,000 additions": "x = " + " + ".join(["'a'"] * 10_000),
    "a line of 30,000 '='": "a=" * 30_000 + "%x",
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL_CODE))
def test_each_pathological_cell_is_scanned_in_under_a_second(name):
    code = PATHOLOGICAL_CODE[name]
    seconds = cpu_seconds(scan_cells, [(1, code)])
    print(f"{name}: {seconds:.3f} s")
    assert seconds < 1.0


def test_too_much_code_is_reported_not_scanned():
    flags = scan_cells([(n, "x = 1\n" * 10_000) for n in range(1, 10)])
    assert flags == ["too much code to scan (more than 65,536 characters) (cell 2)"]


def notebook_text(cells):
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})


PATHOLOGICAL_FILES = {
    "a million cells": lambda: notebook_text([{"cell_type": "raw", "source": "", "metadata": {}}] * 1_000_000),
    "16 million empty lists": lambda: '{"nbformat": 4, "cells": [], "metadata": [' + "[]," * 16_000_000 + "[]]}",
    "a million levels of nesting": lambda: "[" * 1_000_000 + "]" * 1_000_000,
    "5,001 cells": lambda: notebook_text([{"cell_type": "raw", "source": "", "metadata": {}}] * 5_001),
    "a 40 MB cell": lambda: notebook_text([{"cell_type": "code", "source": "#" * (40 << 20), "metadata": {},
                                            "outputs": []}]),
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL_FILES))
def test_each_pathological_notebook_is_read_in_under_a_second(name):
    text = PATHOLOGICAL_FILES[name]().encode()
    assert len(text) <= MAX_NOTEBOOK_BYTES
    seconds = cpu_seconds(refused, parse_notebook, text)
    print(f"{name} ({len(text) / 2 ** 20:.0f} MiB): {seconds:.3f} s")
    assert seconds < 1.0


@pytest.mark.parametrize("text", [
    "[" + "[]," * 11_000_000 + "[]]",  # the security review's export: 32 MiB, 11 million empty lists
    "[" * 1_000_000 + "]" * 1_000_000,
    '{"__plain__": "ndarray", "dtype": "<f4", "shape": [1], "data": "' + "A" * (60 << 20) + '"}'])
def test_hostile_answer_data_is_refused_unparsed_in_under_a_second(text):
    with pytest.raises(PlainDataError) as raised:
        seconds = cpu_seconds(loads, text)
    assert raised.type is TooLarge or "not JSON" in str(raised.value)
    seconds = cpu_seconds(refused, loads, text)
    print(f"{len(text) / 2 ** 20:.0f} MiB: {seconds:.3f} s, {raised.value}")
    assert seconds < 1.0


def test_hint_lines_in_50_mb_of_output_are_read_in_under_a_second():
    texts = ["Hint 1" * 4_000_000, "Hint 2/3 (3.q1)" + "9" * (20 << 20)]
    assert cpu_seconds(hint_levels, texts, 3) < 1.0 and hint_levels(texts, 3) == {"q1": 2}


def test_code_only_ipython_runs_is_read_too():
    assert "gc. (cell 1)" in scan_cells([(1, "import asyncio\nawait asyncio.sleep(0)\nimport gc")])  # autoawait
    assert scan_cells([(1, "    import gc\n    gc.collect()")]) == ["gc. (cell 1)"]  # IPython takes the indent off
    assert scan_cells([(1, "\ndef broken(:\n    pass")]) == []  # a syntax error, for IPython too: not flagged
    nested = "import gc"
    for _ in range(3):
        nested = f"exec({nested!r})"
    assert scan_cells([(1, nested)]) == [f"{DYNAMIC} (cell 1)", "gc. (cell 1)"]  # constant code is read
    for _ in range(6):
        nested = f"exec({nested!r})"
    assert len(nested) < 5000 and scan_cells([(1, nested)]) == [f"{DYNAMIC} (cell 1)"]  # eight levels deep at most: the rest is dynamic
