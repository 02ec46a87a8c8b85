"""Copying fails (issue 40): each student's solution of their own variant scores full marks; a neighbour's solution
handed in under another student's name scores well below half the points of the questions that vary (below a third
over the three), and is flagged.

Runs real notebooks in the sandbox (slow): one grading run of a roster of 3 for each chapter whose exercises vary."""
import nbformat
import pytest

from course_utils.checkers import chapter_definition
from course_utils.grading import cli as grade
from course_utils.tools.build import student_notebook
from notebooks import ROOT, read_grades

STUDENTS = ("alice", "bob", "carol")
CHAPTERS = {1: "01_tensors_and_devices", 2: "02_strategies_one_machine",
            4: "04_meshes_and_layouts"}  # the chapters whose exercises vary so far


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_own_variant_full_marks_a_neighbours_well_below_half_and_flagged(tmp_path, chapter):
    key_path = tmp_path / "course.key"
    key_path.write_bytes(bytes(range(100, 132)))
    (tmp_path / "roster.csv").write_text("id,name\n" + "".join(f"{s},{s.title()}\n" for s in STUDENTS))
    folder = tmp_path / "submissions"
    (folder / "copied").mkdir(parents=True)
    solution = nbformat.read(ROOT / "solutions" / f"{CHAPTERS[chapter]}.ipynb", as_version=4)
    for number, student in enumerate(STUDENTS):
        own, _ = student_notebook(solution, student, key_path.read_bytes(), solutions=True)
        nbformat.write(own, folder / f"{CHAPTERS[chapter]}-{student}.ipynb")
        neighbour = STUDENTS[(number + 1) % len(STUDENTS)]  # this student's solution handed in as the neighbour's
        nbformat.write(own, folder / "copied" / f"{CHAPTERS[chapter]}-{neighbour}.ipynb")
    nbformat.write(own, folder / "stranger.ipynb")  # maps to no roster id
    notes = []
    rows = grade.grade_folder(folder, recursive=True, timeout=300, jobs=2, echo=notes.append,
                              roster=list(STUDENTS), key=key_path.read_bytes())
    print("\n".join(notes))
    _, table = read_grades(folder / "grades.csv")
    assert "names no roster id" in table["stranger.ipynb"][""]["status"]
    varied = [name for name, cls in chapter_definition(chapter).named.items() if cls.defaults]
    varied_max = sum(chapter_definition(chapter).max_points()[name] for name in varied)
    copied_points = 0
    for student in STUDENTS:
        own = table[f"{CHAPTERS[chapter]}-{student}.ipynb"]
        assert all(r["status"] == "correct" for r in own.values()), own
        assert not next(iter(own.values()))["flags"], own
        copied = table[f"copied/{CHAPTERS[chapter]}-{student}.ipynb"]
        got = sum(float(copied[name]["points"]) for name in varied)
        print(f"chapter {chapter}: a neighbour's solution as {student}'s: {got:g} of the {varied_max} points of "
              f"{varied}")
        assert got < varied_max, copied
        copied_points += got
        flags = next(iter(copied.values()))["flags"]
        assert "its metadata names the student" in flags and "is not " + student + "'s variant" in flags, flags
    assert copied_points < len(STUDENTS) * varied_max / 3  # well below half (test_variants: over a class of 40)
    assert len(rows) == 1 + 2 * len(STUDENTS) * len(chapter_definition(chapter).named)
