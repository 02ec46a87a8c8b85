"""Which tools an answer could have used (``checkers/reach.py``), and the "predict first" rule of ``Exercise``."""
import functools
import sys
import types

import pytest

from course_utils.checkers import reach
from course_utils.checkers.core import Exercise, Feedback

SPEC = "course_tools_for_tests:reveal"


@pytest.fixture
def tool_module(monkeypatch):
    """A loaded module ``course_tools_for_tests`` with a tool ``reveal`` (and a harmless ``other``)."""
    module = types.ModuleType("course_tools_for_tests")
    exec("def reveal(x):\n    return x\n\ndef other(x):\n    return x\n", module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_tool_name():
    assert reach.tool_name("course_utils.viz:visualize_sharding") == "visualize_sharding"


def test_a_tool_whose_module_is_not_loaded_is_out_of_reach(tool_module):
    assert reach.tools_in_reach(["no_such_module_here:reveal"], {"reveal": tool_module.reveal}) == []


def test_tools_in_reach_by_name_alias_and_module(tool_module):
    assert reach.tools_in_reach([SPEC], {"reveal": tool_module.reveal}) == ["reveal"]
    assert reach.tools_in_reach([SPEC], {"peek": tool_module.reveal}) == ["reveal"]  # an alias
    assert reach.tools_in_reach([SPEC], {"tools": tool_module}) == ["reveal"]  # import ... as tools
    assert reach.tools_in_reach([SPEC], {"other": tool_module.other, "x": 3}) == []
    # IPython's output cache and history are not the notebook's imports; a private name of the learner's is one
    assert reach.tools_in_reach([SPEC], {"_": tool_module.reveal, "_3": tool_module, "_i2": "import it",
                                         "__": tool_module, "_oh": {1: tool_module}, "Out": {1: tool_module}}) == []
    assert reach.tools_in_reach([SPEC], {"_peek": tool_module.reveal}) == ["reveal"]


def test_a_tool_that_reveals_is_in_reach_once_called_though_its_name_is_gone(tool_module, monkeypatch):
    monkeypatch.setattr(reach, "_CALLED", set())
    tool_module.reveal = reach.reveals(tool_module.reveal)
    assert eval("reveal(3)", {"reveal": tool_module.reveal, "__name__": "course_utils.checkers.ch4"}) == 3
    assert reach.tools_in_reach([SPEC], {}) == []  # a call from course_utils (a checker's reference): not a notebook's
    eval("reveal(4)", {"reveal": tool_module.reveal, "__name__": "__main__"})  # the notebook's call
    assert reach.tools_in_reach([SPEC], {}) == ["reveal"]
    reach.forget_calls()
    assert reach.tools_in_reach([SPEC], {}) == []


def test_tools_in_reach_reads_the_package_without_importing(tool_module):
    """A package that loads its names lazily (course_utils) holds a tool only once the notebook used it."""
    package = types.ModuleType("lazy_package")
    package.__getattr__ = lambda name: (_ for _ in ()).throw(AssertionError("a lazy import ran"))
    assert reach.tools_in_reach([SPEC], {"lazy_package": package}) == []
    package.reveal = tool_module.reveal  # what course_utils.__getattr__ leaves after the first use
    assert reach.tools_in_reach([SPEC], {"lazy_package": package}) == ["reveal"]


def test_learner_namespace_outside_a_kernel_is_main():
    assert reach.learner_namespace() is vars(sys.modules["__main__"])


def test_tools_used_by_name_attribute_alias_and_closure(tool_module):
    namespace = {"reveal": tool_module.reveal, "tools": tool_module, "peek": tool_module.reveal}
    by_name = eval("lambda x: reveal(x)", namespace)
    by_attribute = eval("lambda x: tools.reveal(x)", namespace)
    by_alias = eval("lambda x: peek(x)", namespace)
    assert reach.tools_used_by(by_name, [SPEC]) == ["reveal"]
    assert reach.tools_used_by(by_attribute, [SPEC]) == ["reveal"]
    assert reach.tools_used_by(by_alias, [SPEC]) == ["reveal"]

    def outer():
        hidden = tool_module.reveal
        return lambda x: hidden(x)
    assert reach.tools_used_by(outer(), [SPEC]) == ["reveal"]  # through a closure
    assert reach.tools_used_by(lambda x: x + 1, [SPEC]) == []


def test_tools_used_by_looks_into_the_notebooks_functions_only(tool_module):
    namespace = {"peek": tool_module.reveal}
    exec("def helper(x):\n    return peek(x)\n\ndef answer(x):\n    return helper(x) + 1\n", namespace)
    assert reach.tools_used_by(namespace["answer"], [SPEC]) == ["reveal"]
    assert reach.tools_used_by(namespace["answer"], [SPEC], depth=0) == []
    wrapped = types.SimpleNamespace(python_function=namespace["answer"])  # what a tf.function holds
    assert reach.tools_used_by(wrapped, [SPEC]) == ["reveal"]
    assert reach.tools_used_by(functools.partial(namespace["answer"]), [SPEC]) == ["reveal"]
    # a library's function that uses the tool is the library's business: json.dumps is not looked into
    from json import dumps

    assert "JSONEncoder" in dumps.__code__.co_names
    assert reach.tools_used_by(lambda x: dumps(x), ["json:JSONEncoder"]) == []


class _Prediction(Exercise):
    title = "A prediction a tool prints"
    points = 2
    revealed_by = (SPEC,)

    def grade(self, answer):
        fb = Feedback()
        if answer == 42:
            fb.right("answer", points=2)
        else:
            fb.wrong("answer")
        return fb


def test_a_prediction_counts_only_before_the_tool_is_imported(tool_module, monkeypatch):
    exercise = _Prediction(1, "q1", {"call": "ex.q1.check(answer)", "solution": "answer = 42"})
    namespace = {"answer": 42}
    monkeypatch.setattr(reach, "learner_namespace", lambda: namespace)
    assert exercise.evaluate(42).status == "correct"
    namespace["reveal"] = tool_module.reveal  # the notebook imported the tool
    result = exercise.evaluate(42)
    assert (result.status, result.points) == ("incorrect", 0), str(result)
    assert "`reveal`" in result.message and "before the tool is imported" in result.message
    assert "not counted" in result.message and "would earn" not in result.message  # how it would score: not said
    del namespace["reveal"]
    assert exercise.evaluate(42).status == "correct"


def test_the_tools_cross_with_the_answers(tool_module, monkeypatch):
    """The grader judges in its own process: which tools were in reach is part of the export it reads."""
    from course_utils.checkers.plain import loads

    exercise = _Prediction(1, "q1", {"call": "ex.q1.check(answer)", "solution": ""})
    monkeypatch.setattr(reach, "learner_namespace", lambda: {"r": tool_module.reveal})
    text = exercise.export(42)
    assert loads(text)["tools"] == ["reveal"]
    monkeypatch.setattr(reach, "learner_namespace", lambda: {})
    assert exercise.judge_export(text).points == 0  # judged from the export, not from the judge's own names


def test_in_a_kernel_the_notebooks_names_are_the_shells(tmp_path):
    """In IPython (a notebook's kernel, and the grader's kernels), the namespace is the shell's user namespace: a tool
    imported by a cell is in reach there, and nothing the checker imports is. Run in a child process, so that no
    IPython shell is left in this one."""
    import subprocess

    script = tmp_path / "kernel.py"
    script.write_text(
        "import sys, types\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "module = types.ModuleType('course_tools_for_tests')\n"
        "exec('def reveal(x):\\n    return x\\n', module.__dict__)\n"
        "sys.modules[module.__name__] = module\n"
        "from course_utils.checkers import reach\n"
        "shell = InteractiveShell.instance()\n"
        "print(reach.tools_in_reach(['course_tools_for_tests:reveal']))\n"
        "from course_tools_for_tests import reveal  # the script's own import: not the notebook's\n"
        "print(reach.tools_in_reach(['course_tools_for_tests:reveal']))\n"
        "shell.run_cell('from course_tools_for_tests import reveal as peek')\n"
        "print(reach.tools_in_reach(['course_tools_for_tests:reveal']))\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["[]", "[]", "['reveal']"], out.stdout
