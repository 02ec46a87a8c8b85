"""Keep the course's notebooks consistent: ``python3 course.py build [--verify] [--graded-handouts DIR]``.

A maintainer tool: it works on a clone of the course (see :mod:`course_utils.tools.checkout`).

- Stamps every notebook in ``notebooks/``, ``solutions/`` and ``exercises/`` with the "Open in
  Colab" badge (first cell) and the set-up cell (second cell), both made from the repository
  named once, in ``[tool.course]`` of ``pyproject.toml``; exercise and solution notebooks also get
  the "how this notebook works" cell after their title.
- Generates ``exercises/NN_*.ipynb`` from ``solutions/NN_*.ipynb``: the lines between
  ``# BEGIN SOLUTION`` and ``# END SOLUTION`` are replaced by the placeholder that follows
  ``# PLACEHOLDER:`` on the BEGIN line (or by ``...``), so both come from one source.
- Generates ``course_utils/checkers/notebook_cells.json`` from the solution notebooks (package data
  the checkers load): for each exercise, the cell that checks it, its check call, and its solution
  code (what ``ex.qN.solution()`` prints), and each chapter's stamped set-up cell. The solution
  notebooks are the one source of solution code.
- Writes the facts of ``README.md`` and ``docs/*.md`` between their markers (:mod:`course_utils.tools.docs`): the
  counts, defaults, versions and plans the pages state are computed, not typed.
- Fills the cells that exercises declare as templates (a question that varies per student, see
  :mod:`course_utils.checkers.variants`) with their default parameters: the template is their one source.
- Strips outputs, execution counts and personal metadata; a cell keeps its ``tags`` and its ``slides``
  (the chapter's workshop deck, :mod:`course_utils.tools.site.slides`).

With ``--verify`` nothing is written; the exit status is 1 and the stale files are listed when
anything would change (the tests run this). ``--graded-handouts DIR`` writes graded hand-outs of
the exercise notebooks into ``DIR``: no ``solution()``, and feedback that never states the answer.
"""
import argparse
import copy
import json
import re
import sys
import textwrap
from pathlib import Path

import nbformat

from course_utils.checkers.core import CELLS_FILE, notebook_cells
from course_utils.tools.checkout import checkout_root, course_config
from course_utils.tools.docs import fill_page, page_paths
from course_utils.notebook_setup import KERAS_MODES, setup_source

BADGE_ID, SETUP_ID, HOW_ID = "colab-badge", "setup", "how-it-works"
KEEP_METADATA = ("kernelspec", "language_info", "course")
KEEP_CELL_METADATA = ("tags", "slides")  # slides: a chapter's workshop deck (course_utils.tools.site.slides)
SOLUTION_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)# BEGIN SOLUTION(?:[ \t]*# PLACEHOLDER:[ \t]*(?P<placeholder>.*?))?[ \t]*\n"
    r".*?^[ \t]*# END SOLUTION[ \t]*$\n?",
    re.MULTILINE | re.DOTALL,
)
MARKER_LINE = re.compile(r"^[ \t]*# (BEGIN|END) SOLUTION.*\n?", re.MULTILINE)
CHECK_CALL = re.compile(r"^ex\.(?P<name>q\d+)\.check\(.*\)[ \t]*$", re.MULTILINE)
EXERCISES_CALL = re.compile(r"^ex = exercises\((?P<chapter>\d+)\)$", re.MULTILINE)
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
CELLS_PATH = Path("course_utils") / "checkers" / CELLS_FILE
HOW_IT_WORKS = {
    "self-study": """\
**How this notebook works.** Each exercise says what to do. Write your answer where a line ends in
`# YOUR CODE HERE` (replace that line; add as many lines as you need) and run the cell. Its last
line calls a checker that prints **Correct!** or a hint aimed at your mistake. Stuck? Uncomment
`ex.qN.hint()` in the small cell after the exercise (`ex.qN.hint(2)` says more), or, as a last
resort, `ex.qN.solution()`.

If your instructor grades this notebook, it is run from top to bottom in a fresh kernel. Before you
hand it in, use *Kernel → Restart Kernel and Run All Cells* in JupyterLab (*Runtime → Restart session
and run all* on Colab) and check that your answers still pass.""",
    "graded": """\
**How this notebook works (graded).** Each exercise says what to do. Write your answer where a line
ends in `# YOUR CODE HERE` (replace that line; add as many lines as you need) and run the cell. Its
last line calls a checker that prints **Correct!** or says what is wrong, without giving the answer
away. Stuck? Uncomment `ex.qN.hint()` in the small cell after the exercise (`ex.qN.hint(2)` says
more); your instructor may count the hints you use.

Your instructor grades this notebook by running it from top to bottom in a fresh kernel and
checking every exercise again. Before you hand it in, use *Kernel → Restart Kernel and Run All
Cells* in JupyterLab (*Runtime → Restart session and run all* on Colab) and check that your answers
still pass.""",
}


def badge_source(relative_path, config):
    """The markdown of the "Open in Colab" badge for a notebook at ``relative_path``."""
    url = f"https://colab.research.google.com/github/{config['repository']}/blob/{config['branch']}/{relative_path}"
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({url})"


def make_exercise(solution):
    """A copy of a solution notebook with every solution block replaced by its placeholder."""
    exercise = nbformat.from_dict(solution)
    for cell in exercise.cells:
        if cell.cell_type == "code":
            cell.source = SOLUTION_BLOCK.sub(
                lambda m: f"{m['indent']}{m['placeholder'] or '...'}  # YOUR CODE HERE\n", cell.source)
    return exercise


def make_graded(exercise, student=None, variant=None):
    """A graded hand-out of an exercise notebook: checkers in graded mode, no ``solution()`` lines. With ``student``
    (a roster id), its metadata names them (``course.student``) and its checkers get their ``variant`` (the
    parameters the notebook's questions were filled with: :func:`student_notebook`)."""
    graded = nbformat.from_dict(exercise)
    graded.metadata["course"]["mode"] = "graded"
    call = r'ex = exercises(\g<chapter>, mode="graded")'
    if student is not None:
        graded.metadata["course"]["student"] = student
        call = f'ex = exercises(\\g<chapter>, mode="graded", variant={variant or {}!r})'
    for cell in graded.cells:
        if cell.get("id") == HOW_ID:
            cell.source = HOW_IT_WORKS["graded"]
        elif cell.cell_type == "code":
            cell.source = EXERCISES_CALL.sub(call, cell.source)
            cell.source = "\n".join(line for line in cell.source.split("\n") if ".solution()" not in line)
    return graded


def name_exercise_cells(solution):
    """Give each cell that checks an exercise the id ``ch<chapter>-q<n>``, unique across chapters: the
    grader finds an exercise's cell in a handed-in notebook by it, and its chapter with it."""
    chapter = solution.metadata["course"]["chapter"]
    for cell in solution.cells:
        match = CHECK_CALL.search(cell.source) if cell.cell_type == "code" else None
        if match:
            cell.id = f"ch{chapter}-{match['name']}"
    return solution


def exercise_cells(solution):
    """What the checkers need from a solution notebook: its Keras mode, its stamped set-up cell (the
    grader leaves exactly that one out of its scan) and, per exercise, the cell id, the check call and
    the solution code (the cell without its check call and markers).

    Raises:
        ValueError: an exercise is checked in two cells, or a checking cell has no solution block.
    """
    found = {}
    for cell in solution.cells:
        if cell.cell_type != "code":
            continue
        for match in CHECK_CALL.finditer(cell.source):
            name = match["name"]
            if name in found:
                raise ValueError(f"{name} is checked in cells {found[name]['cell']} and {cell.id}; check it once.")
            if "# BEGIN SOLUTION" not in cell.source:
                raise ValueError(f"Cell {cell.id} checks {name} but has no # BEGIN SOLUTION block.")
            code = MARKER_LINE.sub("", CHECK_CALL.sub("", cell.source)).strip("\n")
            found[name] = {"cell": cell.id, "call": match.group(0).strip(), "solution": textwrap.dedent(code)}
    course = solution.metadata["course"]
    setup = next((cell.source for cell in solution.cells if cell.get("id") == SETUP_ID), "")
    return {"keras": course["keras"], "dtensor": course.get("dtensor", False), "setup": setup,
            "exercises": dict(sorted(found.items()))}


def cells_file_text(chapters):
    """The JSON text of ``notebook_cells.json`` for ``{chapter: exercise_cells(...)}``."""
    about = "What the checkers read from the solution notebooks. Written by `python3 course.py build`: do not edit."
    return json.dumps({"about": about, "chapters": chapters}, indent=1, ensure_ascii=False) + "\n"


def clean(nb):
    """Strip outputs, execution counts and all metadata but the kernel and the course's own."""
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in KEEP_METADATA}
    nb.metadata["kernelspec"] = KERNELSPEC
    for cell in nb.cells:
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in KEEP_CELL_METADATA}
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def stamp(nb, relative_path, config):
    """Put the badge and set-up cells first (and, in exercise notebooks, the how-it-works cell after
    the title), replacing older copies of them."""
    course = nb.metadata.get("course")
    if not course or "chapter" not in course or course.get("keras") not in KERAS_MODES:
        raise ValueError(f"{relative_path}: notebook metadata needs course.chapter and course.keras "
                         f"(one of {sorted(KERAS_MODES)}).")
    nb.cells = [c for c in nb.cells if c.get("id") not in (BADGE_ID, SETUP_ID, HOW_ID)]
    badge = nbformat.v4.new_markdown_cell(badge_source(relative_path, config))
    badge.id = BADGE_ID
    setup = nbformat.v4.new_code_cell(setup_source(course["keras"], config, course.get("dtensor", False)))
    setup.id = SETUP_ID
    extra = []
    if not relative_path.startswith("notebooks/"):
        how = nbformat.v4.new_markdown_cell(HOW_IT_WORKS["self-study"])
        how.id = HOW_ID
        extra = [how]
    nb.cells = [badge, setup] + nb.cells[:1] + extra + nb.cells[1:]
    return nb


def apply_templates(solution, variant=None):
    """Fill the cells of a (stamped) solution notebook that its chapter's exercises declare as templates
    (:mod:`course_utils.checkers.variants`) with ``variant``'s parameters (default: the self-study ones); return it.

    Raises:
        ValueError: a template names a cell id the notebook does not have.
    """
    from course_utils.checkers import CHAPTER_MODULES, chapter_definition

    number = solution.metadata["course"]["chapter"]
    if number not in CHAPTER_MODULES:
        return solution
    texts = chapter_definition(number).rendered_cells(variant)
    cells = {cell.get("id"): cell for cell in solution.cells}
    missing = sorted(set(texts) - set(cells))
    if missing:
        raise ValueError(f"Chapter {number}'s exercises declare templates for the cells {missing}, which its solution "
                         f"notebook does not have: give those cells these ids, or fix the templates' ids.")
    for cell_id, text in texts.items():
        cells[cell_id].source = text
    return solution


def expected_files(root, write_cells=False):
    """Map each generated path to its expected text: the stamped notebooks, ``notebook_cells.json`` and the pages
    (``README.md``, ``docs/*.md``) with their facts written in. The pages' facts come from the checkers, which check
    their exercises' names against ``notebook_cells.json``: with ``write_cells``, a stale one is written (and read
    again) before the pages are filled, so that a build after adding an exercise does not stop on the old file."""
    config = course_config(root)
    notebooks, chapters = {}, {}
    for folder in ("notebooks", "solutions"):
        for path in sorted((root / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            notebooks[path] = stamp(clean(nb), path.relative_to(root).as_posix(), config)
    solution_paths = sorted((root / "solutions").glob("*.ipynb"))
    if write_cells:
        _write_new_exercise_names(root, [notebooks[path] for path in solution_paths])
    for path in solution_paths:
        solution = apply_templates(name_exercise_cells(notebooks[path]))
        chapters[solution.metadata["course"]["chapter"]] = exercise_cells(solution)
        target = root / "exercises" / path.name
        notebooks[target] = stamp(make_exercise(solution), target.relative_to(root).as_posix(), config)
    files = {path: nbformat.writes(nb) + "\n" for path, nb in notebooks.items()}
    files[root / CELLS_PATH] = cells_file_text(chapters)
    cells_path = root / CELLS_PATH
    if write_cells and (not cells_path.exists() or cells_path.read_text() != files[cells_path]):
        cells_path.write_text(files[cells_path])
        notebook_cells.cache_clear()
    for path in page_paths(root):
        files[path] = fill_page(path.read_text(encoding="utf-8"), path, root)
    return files


def _write_new_exercise_names(root, solutions):
    """Before templates are filled: a chapter's checkers check their exercises' names against the cells file when
    imported (``core.chapter``), so where the solutions check other names than the file lists (an exercise added,
    removed or renamed), write the file from the solutions as they are first; the full build then rewrites it."""
    chapters = {nb.metadata["course"]["chapter"]: exercise_cells(name_exercise_cells(copy.deepcopy(nb)))
                for nb in solutions}
    cells_path = root / CELLS_PATH
    try:
        written = {int(number): sorted(cells["exercises"]) for number, cells in
                   json.loads(cells_path.read_text())["chapters"].items()}
    except (FileNotFoundError, ValueError, KeyError):
        written = None
    if written != {number: sorted(cells["exercises"]) for number, cells in chapters.items()}:
        cells_path.write_text(cells_file_text(chapters))
        notebook_cells.cache_clear()


def student_notebook(solution, student, key, solutions=False):
    """One student's graded hand-out of a chapter (from its built solution notebook): the questions that vary filled
    with the student's variant, drawn from the course ``key`` (:mod:`course_utils.checkers.variants`), the id in
    its metadata; with ``solutions``, that variant's worked solution instead of the placeholders (for tests).

    Returns:
        ``(notebook, variant)``.
    """
    from course_utils.checkers import chapter_definition
    from course_utils.checkers.variants import student_variant

    number = solution.metadata["course"]["chapter"]
    variant = student_variant(chapter_definition(number), key, student)
    filled = apply_templates(nbformat.from_dict(solution), variant)
    return make_graded(filled if solutions else make_exercise(filled), student, variant), variant


def write_student_handouts(root, folder, roster, key_path=None):
    """Write each student's graded hand-out of every chapter with exercises into ``folder``, as
    ``<chapter file stem>-<id>.ipynb``; return the paths, the key's path, whether it was created now, and the
    number of distinct variants per chapter.

    Raises:
        RosterError: the roster or the key cannot be used (see :mod:`course_utils.grading.roster`).
    """
    from course_utils.checkers.variants import variant_label
    from course_utils.grading.roster import load_key, read_roster

    students = read_roster(roster)
    key, key_path, created = load_key(key_path, create=True)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written, labels = [], {}
    for path in sorted((root / "solutions").glob("*.ipynb")):
        solution = nbformat.read(path, as_version=4)
        for student in students:
            nb, variant = student_notebook(solution, student["id"], key)
            labels.setdefault(path.stem, set()).add(variant_label(variant))
            target = folder / f"{path.stem}-{student['id']}.ipynb"
            target.write_text(nbformat.writes(nb) + "\n")
            written.append(target)
    return written, key_path, created, {stem: len(found) for stem, found in labels.items()}


def write_graded_handouts(root, folder):
    """Write a graded hand-out of every exercise notebook into ``folder``; return their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted((root / "exercises").glob("*.ipynb")):
        target = folder / path.name
        target.write_text(nbformat.writes(make_graded(nbformat.read(path, as_version=4))) + "\n")
        written.append(target)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 course.py build", description=__doc__.splitlines()[0])
    parser.add_argument("--verify", action="store_true", help="write nothing; exit 1 if anything is stale")
    parser.add_argument("--graded-handouts", metavar="DIR", help="write graded hand-outs of the exercises into DIR")
    parser.add_argument("--roster", metavar="ROSTER.csv",
                        help="with --graded-handouts: one hand-out per student of the roster (a CSV with an `id` "
                             "column), each with the student's own variant of the questions that vary")
    parser.add_argument("--key", metavar="FILE",
                        help="the course key the variants are drawn with, created on first use (default: "
                             "$XDG_CONFIG_HOME/tf-distributed-course/course.key); keep it, private, for grading")
    args = parser.parse_args(argv)
    if (args.roster or args.key) and not args.graded_handouts:
        parser.error("--roster and --key go with --graded-handouts DIR (where the students' hand-outs are written)")
    root = checkout_root()
    cells_path = root / CELLS_PATH
    cells_before = cells_path.read_text() if cells_path.exists() else None
    stale = []
    for path, text in expected_files(root, write_cells=not args.verify).items():
        if path == cells_path and text != cells_before:  # expected_files has written it already
            stale.append(CELLS_PATH.as_posix())
            continue
        if not path.exists() or path.read_text() != text:
            stale.append(path.relative_to(root).as_posix())
            if not args.verify:
                path.parent.mkdir(exist_ok=True)
                path.write_text(text)
    orphans = sorted(p.relative_to(root).as_posix() for p in (root / "exercises").glob("*.ipynb")
                     if not (root / "solutions" / p.name).exists())
    if args.verify:
        if stale or orphans:
            print("Out of date (run `python3 course.py build`):", *stale, *[f"{o} (no solution)" for o in orphans],
                  sep="\n  ")
            return 1
        print("All notebooks, exercises and pages are up to date.")
        return 0
    print(f"Wrote {len(stale)} file(s)." + (f" Exercises without a solution: {orphans}" if orphans else ""))
    if args.graded_handouts and args.roster:
        from course_utils.grading.roster import RosterError

        try:
            written, key_path, created, distinct = write_student_handouts(root, args.graded_handouts, args.roster,
                                                                          args.key)
        except RosterError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"Wrote {len(written)} per-student graded hand-out(s) to {args.graded_handouts}, with the course key "
              f"{key_path}" + (" (created now: keep it, private, outside the hand-outs; the grader needs it)."
                               if created else "."))
        print("Distinct variants per chapter: " + ", ".join(f"{stem.split('_')[0]}: {n}"
                                                              for stem, n in distinct.items()))
    elif args.graded_handouts:
        written = write_graded_handouts(root, args.graded_handouts)
        print(f"Wrote {len(written)} graded hand-out(s) to {args.graded_handouts}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
