"""Copying fails (issue 40), graded for real: a student's solution of their own variant scores full marks; the same
notebook handed in under the neighbour's name scores less on the questions that vary, and is flagged.

One grading run, in the sandbox, of two real solution notebooks per chapter whose exercises vary (alice's own, and
alice's handed in as bob's), plus one that names no roster id. How little a copy earns, over a class of 40, is
measured for every varied chapter in-process, with the same checkers and variants
(tests/checkers/test_variants.py::test_a_neighbours_answers_earn_well_below_half_of_the_varied_points); this test
shows that the grader, the roster, the key and the kernels put the right variant behind each submission."""
import nbformat

from course_utils.checkers import chapter_definition
from course_utils.grading import cli as grade
from course_utils.tools.build import student_notebook
from notebooks import ROOT, read_grades

CHAPTERS = {1: "01_tensors_and_devices", 2: "02_strategies_one_machine", 3: "03_beyond_one_process",
            4: "04_meshes_and_layouts", 5: "05_dtensor_with_keras", 7: "07_where_next", 8: "08_keras3_on_jax",
            9: "09_watch_and_feed", 12: "12_practice_at_scale"}  # the chapters whose exercises vary so far


def test_own_variant_full_marks_a_neighbours_less_and_flagged(tmp_path):
    key = bytes(range(100, 132))
    folder = tmp_path / "submissions"
    (folder / "copied").mkdir(parents=True)
    for stem in CHAPTERS.values():
        solution = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
        own, _ = student_notebook(solution, "alice", key, solutions=True)
        nbformat.write(own, folder / f"{stem}-alice.ipynb")
        nbformat.write(own, folder / "copied" / f"{stem}-bob.ipynb")  # alice's notebook handed in as bob's
    nbformat.write(own, folder / "stranger.ipynb")  # maps to no roster id: not run
    notes = []
    rows = grade.grade_folder(folder, recursive=True, timeout=300, jobs=2, echo=notes.append,
                              roster=["alice", "bob"], key=key)
    print("\n".join(notes))
    _, table = read_grades(folder / "grades.csv")
    assert "names no roster id" in table["stranger.ipynb"][""]["status"]
    for chapter, stem in CHAPTERS.items():
        definition = chapter_definition(chapter)
        varied = [name for name, cls in definition.named.items() if cls.defaults]
        own = table[f"{stem}-alice.ipynb"]
        assert all(r["status"] == "correct" for r in own.values()), own
        assert not next(iter(own.values()))["flags"], own
        copied = table[f"copied/{stem}-bob.ipynb"]
        got = sum(float(copied[name]["points"]) for name in varied)
        most = sum(definition.max_points()[name] for name in varied)
        print(f"chapter {chapter}: alice's solution as bob's: {got:g} of the {most} points of {varied}")
        assert got < most, copied
        flags = next(iter(copied.values()))["flags"]
        assert "its metadata names the student" in flags and "is not bob's variant" in flags, flags
    assert len(rows) == 1 + 2 * sum(len(chapter_definition(chapter).named) for chapter in CHAPTERS)
