"""The instructor's side of per-student variants: the course key, the roster, which student a submission is, the flags
of another student's notebook, and the errors that say what to change (issue 40)."""
import nbformat
import pytest

from course_utils.checkers import chapter_definition
from course_utils.grading import cli as grade
from course_utils.grading.roster import RosterError, default_key_path, load_key, read_roster, student_of, \
    variant_flags
from course_utils.tools import build
from course_utils.tools.build import student_notebook
from notebooks import ROOT

KEY = bytes(range(32))


def roster(tmp_path, text):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    return path


def test_the_key_is_created_once_private_and_read_back(tmp_path):
    path = tmp_path / "keys" / "course.key"
    key, where, created = load_key(path, create=True)
    assert created and where == path and len(key) == 32 and path.stat().st_mode & 0o077 == 0
    assert load_key(path, create=True) == (key, path, False)
    assert default_key_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "tf-distributed-course" / "course.key"


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "There is no course key"),
    (lambda p: p.mkdir(), "Cannot read the course key"),
    (lambda p: p.write_bytes(b"short"), "holds 5 bytes, not a course key"),
])
def test_a_key_that_cannot_be_used_says_what_to_do(tmp_path, make, message):
    path = tmp_path / "course.key"
    make(path)
    with pytest.raises(RosterError, match=message):
        load_key(path)


@pytest.mark.parametrize("text, message", [
    ("name,email\nAlice,a@x\n", "has no `id` column"),
    ("id,name\nalice,A\nbob,B\nAlice,C\n", "'Alice' is on lines 2 and 4"),
    ("id\nalice\n../bob\n", "line 3: the id '../bob' is not usable"),
    ("id\n\n", "has a header but no students"),
    ("id\n,x\n", "line 2: the id '' is not usable"),
])
def test_a_roster_that_cannot_be_used_says_what_to_change(tmp_path, text, message):
    with pytest.raises(RosterError, match=message):
        read_roster(roster(tmp_path, text))


def test_the_roster_columns_may_be_spelled_loosely(tmp_path):
    assert read_roster(roster(tmp_path, "\ufeffName, ID \nAlice A.,s001\n,s002\n")) == [
        {"id": "s001", "name": "Alice A."}, {"id": "s002", "name": ""}]


@pytest.mark.parametrize("name, student", [
    ("04_meshes_and_layouts-alice.ipynb", "alice"), ("alice_04.ipynb", "alice"), ("Alice.ipynb", "alice"),
    ("bob/anything.ipynb", "bob"), ("late/04_meshes_and_layouts-bob-Copy1.ipynb", "bob"),
    ("al-x_04.ipynb", "al-x"),
])
def test_a_submission_is_its_students_by_file_or_folder_name(name, student):
    assert student_of(name, ["alice", "bob", "al", "al-x"]) == student


def test_a_submission_that_names_no_student_or_two_says_how_to_name_it():
    with pytest.raises(RosterError, match="names no roster id: name the file after its student"):
        student_of("malice_04.ipynb", ["alice"])
    with pytest.raises(RosterError, match=r"names the roster ids \['alice', 'bob'\]"):
        student_of("alice-and-bob.ipynb", ["alice", "bob"])


def test_a_hand_out_is_its_students_and_another_students_is_flagged():
    solution = nbformat.read(ROOT / "solutions" / "04_meshes_and_layouts.ipynb", as_version=4)
    definition = chapter_definition(4)
    nb, variant = student_notebook(solution, "alice", KEY)
    assert nb.metadata["course"]["student"] == "alice" and nb.metadata["course"]["mode"] == "graded"
    assert f"variant={variant!r}" in next(c.source for c in nb.cells if c.get("id") == "c01")
    assert not any("# BEGIN SOLUTION" in c.source or ".solution()" in c.source for c in nb.cells)
    mine = {"metadata": nb.metadata, "cells": [dict(c) for c in nb.cells]}
    assert variant_flags(mine, definition, variant, "alice") == []
    bobs = student_notebook(solution, "bob", KEY)[1]
    flags = variant_flags(mine, definition, bobs, "bob")
    assert flags[0] == "its metadata names the student 'alice', but it was collected as bob's"
    assert flags[1].startswith("the question text of q3, q4, q5 is not bob's variant")
    public = nbformat.read(ROOT / "exercises" / "04_meshes_and_layouts.ipynb", as_version=4)
    assert variant_flags({"metadata": public.metadata, "cells": [dict(c) for c in public.cells]}, definition, bobs,
                         "bob") == [flags[1]]


def test_student_handouts_one_per_student_and_chapter(tmp_path):
    path = roster(tmp_path, "id,name\nalice,A\nbob,B\n")
    written, key_path, created, distinct = build.write_student_handouts(ROOT, tmp_path / "out", path,
                                                                        tmp_path / "course.key")
    assert created and key_path == tmp_path / "course.key"
    chapters = len(list((ROOT / "solutions").glob("*.ipynb")))
    assert len(written) == 2 * chapters and (tmp_path / "out" / "04_meshes_and_layouts-bob.ipynb") in written
    assert distinct["04_meshes_and_layouts"] == 2 and distinct["06_core_api_mlp_adam"] == 1
    again = build.write_student_handouts(ROOT, tmp_path / "again", path, key_path)
    assert not again[2] and (tmp_path / "again" / written[0].name).read_text() == written[0].read_text()


def test_the_grader_refuses_a_roster_or_key_it_cannot_use(tmp_path, capsys):
    (tmp_path / "subs").mkdir()
    bad = roster(tmp_path, "name\nAlice\n")
    assert grade.main([str(tmp_path / "subs"), "--roster", str(bad), "--key", str(tmp_path / "k")]) == 2
    assert "has no `id` column" in capsys.readouterr().err
    good = roster(tmp_path, "id\nalice\n")
    assert grade.main([str(tmp_path / "subs"), "--roster", str(good), "--key", str(tmp_path / "missing.key")]) == 2
    assert "There is no course key" in capsys.readouterr().err
    assert grade.main([str(tmp_path / "subs"), "--key", str(tmp_path / "k")]) == 2
    assert "--key is used with --roster" in capsys.readouterr().err
