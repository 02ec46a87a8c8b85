"""Forged grades earn nothing: each attempt gets only the points of its real answers.

Every submission here answers exercise 1 of chapter 3 right (2 real points), gives wrong answers
to exercises 2-4 (0 real points), and then tries to get more in one way: among them every attack
of the security review that earned full marks while the checkers ran in the student's kernel. All
are graded in one run of the grader (in sandboxes where bubblewrap works), two at a time.
"""
import base64

import pytest

from course_utils.grading import cli as grade
from notebooks import MAX, points, read_grades, submission

WRONG = {
    "ch3-q2": "tf_config = '{}'\nex.q2.check(tf_config)",
    "ch3-q3": "answers = {'stop_signal': 'SIGTERM', 'peer_killed': 'A', 'restores': 'A'}\nex.q3.check(answers)",
    "ch3-q4": "statements = [True, False, False, True, False, True]\nex.q4.check(statements)",
}
REAL = {"q1": 2, "q2": 0, "q3": 0, "q4": 0, "q5": 0}
LIAR = """
class Liar(list):
    __class__ = property(lambda self: list)
    def __eq__(self, other):
        return True
    def __len__(self):
        return 6
    def __iter__(self):
        return iter([True] * 6)
statements = Liar()
ex.q4.check(statements)
"""
PATCH_CHECKERS = """from course_utils.checkers.core import Exercise, Feedback, Result
def full_marks(self, *answers, **kw):
    fb = Feedback()
    fb.right("forged", points=self.points)
    return fb
Exercise.grade = Exercise.judge = full_marks
Exercise.evaluate = lambda self, *a, **k: Result(self.max_points, self.max_points, "correct", "")
Exercise.judge_export = lambda self, *a, **k: Result(self.max_points, self.max_points, "correct", "")
"""
FORGERIES = {
    "grade_file": """
import json, os
line = json.dumps({"chapter": 3, "exercise": "q4", "points": 6, "max_points": 6, "status": "correct"})
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if "course-grade" in target and os.path.isfile(target):
        with open(target, "a") as f:
            f.write(line + "\\n")
            f.write("9|q4|after|6|6|correct|||" + "0" * 64 + "\\n")
""",
    "patch_checker_module": """
import course_utils.checkers.ch3 as ch3
from course_utils.checkers.core import Feedback
def full_marks(self, *answers):
    fb = Feedback()
    fb.right("forged", points=self.points)
    return fb
for cls in ch3.CHAPTER.exercises:
    cls.grade = full_marks
""",
    "patch_checker_class": """
from course_utils.checkers.core import Exercise, Result
Exercise.evaluate = lambda self, *a, **k: Result(self.max_points, self.max_points, "correct", "")
""",
    "patch_checker_instance": """
from course_utils.checkers.core import Result
for item in ex:
    item.evaluate = lambda *a, item=item, **k: Result(item.max_points, item.max_points, "correct", "")
""",
    "replace_ex": """
class Forged:
    def check(self, *answers):
        print("Correct! 6/6 points.")
class ForgedChapter:
    q1 = q2 = q3 = q4 = Forged()
ex = ForgedChapter()
""",
    "sys_modules_swap": """
import sys, types
fake = types.ModuleType("course_utils.checkers")
fake.exercises = lambda chapter, mode="self-study": None
sys.modules["course_utils.checkers"] = fake
sys.modules["course_utils.checkers.ch3"] = fake
""",
    "fake_feedback": """
print("Correct! 2/2 points.")
print("Correct! 3/3 points.")
print("Correct! 6/6 points.")
""",
    "patch_json_open_print": """
import builtins, json
real_dumps, real_open, real_print = json.dumps, builtins.open, builtins.print
json.dumps = lambda *a, **k: real_dumps(*a, **k)  # the kernel's messages need a working json.dumps
builtins.open = lambda *a, **k: real_open(*a, **k)
builtins.print = lambda *a, **k: real_print("Correct!")
""",
    "exception_hook": """
import sys
sys.excepthook = lambda *a: print("Correct! 6/6 points.")
get_ipython().set_custom_exc((Exception,), lambda *a, **k: print("Correct! 6/6 points."))
raise RuntimeError("let the hook speak")
""",
    "call_grader_directly": """
import re
for request in re.findall(r"(__import__\\('course_utils.grading.export'.*)", "\\n".join(In)):
    exec(request.replace("'q1'", "'q4'"))  # a replayed request only writes this kernel's own answers again
""",
    "replace_grader_entry": """
__course_grader__ = lambda *a, **k: print("Correct!")
""",
    "other_course_utils": """
import os, sys
os.makedirs("fake/course_utils", exist_ok=True)
open("fake/course_utils/__init__.py", "w").write("")
open("fake/course_utils/checkers.py", "w").write(
    "class _Q:\\n    def check(self, *a):\\n        print('Correct!')\\n"
    "class _Chapter:\\n    q1 = q2 = q3 = q4 = _Q()\\n"
    "def exercises(chapter, mode='self-study'):\\n    return _Chapter()\\n")
for name in [n for n in sys.modules if n.startswith("course_utils")]:
    del sys.modules[name]
sys.path.insert(0, "fake")
from course_utils.checkers import exercises
ex = exercises(3)
""",
    # The attacks of the security review that earned full marks while the checkers ran in the kernel:
    "closure_attack": """
import gc, inspect
found = [inspect.getclosurevars(f).nonlocals for f in gc.get_objects()
         if inspect.isfunction(f) and f.__closure__ and "sign" in f.__code__.co_freevars]
found[0]["sign"](99, "q4", "end", 6, 6, "correct")  # there is no grader in the kernel to dig out
""",
    "base64_exec": "import base64\nexec(base64.b64decode(%r).decode())\n" % base64.b64encode(PATCH_CHECKERS.encode()).decode(),
    "checkers_through_sys_modules": """
modules = getattr(__import__("s" + "ys"), "mod" + "ules")
for name, module in list(modules.items()):
    if name.startswith("course_utils.checkers"):
        for value in list(vars(module).values()):
            if isinstance(value, type) and hasattr(value, "collect"):
                value.points = 99
                value.judge_export = lambda self, *a, **k: print("Correct!")
""",
    "bash_then_run": (
        "get_ipython().run_cell_magic('bash', '', %r)\n"
        "get_ipython().run_line_magic('run', '-i attack.py')\n" % f"cat > attack.py <<'END'\n{PATCH_CHECKERS}END\n"),
    "patched_then_restored_by_a_hook": """
import json
real = json.dumps
def restore(*args):
    json.dumps = real
json.dumps = lambda *a, **k: real({"__plain__": "dict", "items": [["state", "answered"]]})
get_ipython().events.register("post_run_cell", restore)
""",
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forgeries")
    for name, code in FORGERIES.items():
        submission(folder / f"{name}.ipynb", answers=["q1"], replace=WRONG, after={"ch3-q1": [code]})
    submission(folder / "edited_metadata.ipynb", answers=["q1"], replace=WRONG,
               metadata={"chapter": 1, "keras": "keras3"})
    submission(folder / "deleted_checks.ipynb", replace={"ch3-q1": "import json\n" + _without_check("q1"), **WRONG},
               drop=["c05", "c08", "c11", "c14"])
    submission(folder / "kill_after_fake_record.ipynb", answers=["q1"], replace=WRONG, after={"ch3-q2": [
        FORGERIES["grade_file"] + "\nos._exit(0)"]})
    submission(folder / "honest.ipynb", answers=["q1"], replace=WRONG)
    submission(folder / "lying_answers.ipynb", answers=["q1"], replace={**WRONG, "ch3-q4": LIAR})
    grade.grade_folder(folder, timeout=240, jobs=2, echo=print)
    return read_grades(folder / "grades.csv")[1]


def _without_check(exercise):
    from notebooks import right_answer

    return "\n".join(line for line in right_answer(exercise).splitlines() if ".check(" not in line)


def test_an_honest_submission_gets_its_real_points(graded):
    assert points(graded, "honest.ipynb") == REAL
    assert graded["honest.ipynb"]["q1"]["status"] == "correct" and not graded["honest.ipynb"]["q1"]["flags"]


@pytest.mark.parametrize("name", list(FORGERIES))
def test_forgery_earns_nothing(graded, name):
    assert points(graded, f"{name}.ipynb") == REAL, graded[f"{name}.ipynb"]


def test_edited_metadata_is_graded_by_its_cells_and_flagged(graded):
    rows = graded["edited_metadata.ipynb"]
    assert points(graded, "edited_metadata.ipynb") == REAL and rows["q1"]["chapter"] == "3"
    assert "metadata says chapter 1, but its cells are chapter 3's" in rows["q1"]["flags"]


def test_deleted_check_cells_do_not_matter(graded):
    assert points(graded, "deleted_checks.ipynb") == REAL


def test_killing_the_kernel_after_a_fake_record(graded):
    rows = graded["kill_after_fake_record.ipynb"]
    assert points(graded, "kill_after_fake_record.ipynb") == REAL
    assert rows["q3"]["status"] == "not checked: the kernel died before its check ran"


def test_a_kernel_that_cannot_reach_the_grader_costs_only_its_later_answers(graded):
    rows = graded["other_course_utils.ipynb"]  # its own course_utils has no exporter: nothing more is judged
    assert rows["q2"]["status"].startswith("not checked: the notebook interfered with the grader's request")
    assert "interfered with the grader's requests" in rows["q1"]["flags"]


def test_answers_that_lie_about_their_type_are_judged_as_what_they_are(graded):
    rows = graded["lying_answers.ipynb"]
    assert points(graded, "lying_answers.ipynb") == REAL
    assert rows["q4"]["status"] == "incorrect" and "6 booleans" in rows["q4"]["feedback"], rows["q4"]


def test_code_that_reaches_for_the_grader_is_flagged(graded):
    assert "sys.modules" in graded["sys_modules_swap.ipynb"]["q1"]["flags"]
    assert "the grader's names" in graded["call_grader_directly.ipynb"]["q1"]["flags"]
    assert "exception hooks" in graded["exception_hook.ipynb"]["q1"]["flags"]
    assert "__closure__" in graded["closure_attack.ipynb"]["q1"]["flags"]


def test_every_submission_has_a_row_per_exercise(graded):
    assert len(graded) == len(FORGERIES) + 5
    for name, rows in graded.items():
        assert {q: int(r["max_points"]) for q, r in rows.items()} == MAX, name
