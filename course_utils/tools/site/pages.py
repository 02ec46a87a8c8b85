"""The website's own pages, written as Markdown from the repository: the front page and the sections of the instructors'
page (``docs/instructors.md``) that only the site's build can make; the workshop plans the build writes there."""
import csv
import re
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

import nbformat

from ..checkout import course_config
from ...checkers import registry

CHAPTER_ROW = re.compile(r"^\| (\d+) \| `(\w+)` \| (.+) \|$", re.M)  # a row of the README's chapter table


class PageError(ValueError):
    """A notebook or a file the pages are written from is not as the website needs it."""


def notebook_title(path):
    """The first level-1 heading of the notebook at ``path`` (``"# 5 · DTensor with Keras"`` gives
    ``"5 · DTensor with Keras"``).

    Raises:
        PageError: the notebook has no level-1 heading, which Sphinx needs as the page's title.
    """
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            found = re.search(r"^# (.+)$", cell.source, re.M)
            if found:
                return found.group(1).strip()
    raise PageError(f"{path.name} has no '# title' line in a markdown cell; the website needs one per page.")


def notebook_minutes(path):
    """The minutes of the notebook's "**Time:** about N minutes" line (the reading and doing time it states).

    Raises:
        PageError: the notebook states no time in that form.
    """
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    found = re.search(r"\*\*Time:\*\* about (\d+) minutes", text)
    if not found:
        raise PageError(f"{path.parent.name}/{path.name} has no '**Time:** about N minutes' line: the website's "
                        f"chapter table and workshop plans are made from it.")
    return int(found.group(1))


def front_page(root, folders, docs=()):
    """The Markdown of the front page: the README's introduction, the chapter table (each title a link, the
    README's one-line summary), how to run the course, and the table of contents of every page (``docs``: the pages
    of ``docs/``, in order). Its links are the repository's (:func:`.markdown.site_page` makes them the site's).

    Raises:
        PageError: a chapter has no row in the README's chapter table (:data:`CHAPTER_ROW`).
    """
    readme = (root / "README.md").read_text(encoding="utf-8")
    intro = readme.split("\n## ", 1)[0].split("\n", 1)[1].strip()
    summaries = {name: summary for _, name, summary in CHAPTER_ROW.findall(readme)}
    rows = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        title = notebook_title(path)
        summary = summaries.get(path.stem)
        if not summary:
            raise PageError(f"notebooks/{path.name} has no row in README.md's chapter table; add one: "
                            f"| {int(path.stem[:2])} | `{path.stem}` | what the chapter teaches |")
        rows.append(f"| [{title}](notebooks/{path.stem}.ipynb) | {notebook_minutes(path)} minutes | {summary} | "
                    f'<a href="slides/{path.stem}.slides.html">slides</a> |')
    exercises = "exercise notebooks (with the worked solutions)" if "solutions" in folders else "exercise notebooks"
    toctrees = [f"```{{toctree}}\n:hidden:\n:caption: {caption}\n:glob:\n\n{folder}/*\n```"
                for folder, caption in (("notebooks", "Chapters"), ("exercises", "Exercises"),
                                        ("solutions", "Solutions")) if folder in folders]
    if docs:
        toctrees.append("```{toctree}\n:hidden:\n:caption: About the course\n\n" + "\n".join(
            page.removesuffix(".md") for page in docs) + "\n```")
    config = course_config(root)
    return "\n\n".join([
        "# Distributed training with TensorFlow, from tensors to DTensor", intro,
        "## The chapters",
        "| Chapter | Time | What you learn | Workshop |\n|---|---|---|---|\n" + "\n".join(rows),
        f"Chapters {number_span(registry())} each have {exercises} in the sidebar: run them, and the checkers give "
        "instant feedback. Each page shows a chapter with the outputs of a real run on a CPU machine (when and "
        "where: see the [page for instructors](docs/instructors.md#how-long-each-chapter-runs)): the pictures, "
        "tables and measured numbers; yours will differ a little. The interactive explorers need a running "
        "notebook: a page shows their first state, and they react to their controls once you run the notebook.",
        "Teaching it? The page [for instructors](docs/instructors.md) has workshop plans, run times and the slides.",
        "## Run it",
        "**On Colab:** the rocket button at the top of each page opens that notebook on Colab; its first cell "
        "installs what Colab lacks. **On your machine**, with Python 3.11:\n\n"
        f"```bash\ngit clone https://github.com/{config['repository']}.git\ncd {config['repository'].split('/')[1]}"
        "\npython3 course.py lab     # installs the pinned packages into .venv and opens JupyterLab\n```",
        *toctrees])


def chapter_seconds(report):
    """``{notebook name: seconds}`` of the chapters in the JUnit ``report`` of a test run (nbval's cells of a
    chapter summed, or the Colab-like test of a chapter); ``{}`` where the report does not exist."""
    seconds = defaultdict(float)
    if not Path(report).is_file():
        return {}
    for case in ElementTree.parse(report).iter("testcase"):
        found = re.search(r"notebooks[./](\w+)\.ipynb", case.get("classname", "") + " " + case.get("name", ""))
        if found:
            seconds[found.group(1)] += float(case.get("time", 0))
    return dict(seconds)


def hardest_exercises(grades, count=5):
    """The ``count`` exercises of a grader's ``grades.csv`` with the lowest mean share of their points:
    ``[(chapter.exercise, mean share, submissions)]``.

    Raises:
        PageError: the file is not a grades table (``python3 course.py grade`` writes one).
    """
    shares = defaultdict(list)
    with open(grades, newline="", encoding="utf-8") as table:
        for row in csv.DictReader(table):
            try:
                if row["exercise"]:
                    shares[f"{row['chapter']}.{row['exercise']}"].append(float(row["points"]) / float(row["max_points"]))
            except (KeyError, ValueError, ZeroDivisionError):
                raise PageError(f"{grades} is not a grades table of `python3 course.py grade` (row {row}).") from None
    ranked = sorted((sum(values) / len(values), name, len(values)) for name, values in shares.items())
    return [(name, mean, n) for mean, name, n in ranked[:count]]


# Workshop plans: (folder, chapter) for a chapter or its exercises, ("pause", minutes) for a break.
THREE_HOURS = [("notebooks", 0), ("notebooks", 1), ("notebooks", 2), ("pause", 10), ("notebooks", 4),
               ("notebooks", 5)]
FULL_DAY = [("notebooks", 0), ("notebooks", 1), ("exercises", 1), ("notebooks", 2), ("exercises", 2), ("pause", 15),
            ("notebooks", 3), ("exercises", 3), ("pause", 60), ("notebooks", 4), ("exercises", 4), ("pause", 15),
            ("notebooks", 5), ("exercises", 5)]


def number_span(numbers):
    """Whole numbers in words, runs written as ranges.

    Example:
        >>> number_span([1, 2, 3, 4, 6, 8, 9])
        '1–4, 6, 8 and 9'
    """
    runs = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    words = [word for a, b in runs for word in ([f"{a}–{b}"] if b > a + 1 else map(str, range(a, b + 1)))]
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


def numbers(plan):
    """The chapters of a plan in words: "0–2, 4 and 5"."""
    return number_span({what for folder, what in plan if folder == "notebooks"})


def workshop_plan(root, items, start):
    """A plan as a Markdown table, each item given the minutes its notebook states, from ``start`` ("9:00"):
    ``(table, minutes in all)``."""
    hours, minutes = map(int, start.split(":"))
    clock, rows = hours * 60 + minutes, []
    for folder, what in items:
        if folder == "pause":
            length, text = what, "lunch" if what >= 45 else "break"
        else:
            path = next((root / folder).glob(f"{what:02d}_*.ipynb"))
            length = notebook_minutes(path)
            text = (notebook_title(path) if folder == "notebooks"
                    else f"exercises of chapter {what} (`exercises/{path.name}`)")
        rows.append(f"| {clock // 60}:{clock % 60:02d} | {text} | {length} min |")
        clock += length
    rows.append(f"| {clock // 60}:{clock % 60:02d} | end | |")
    total = clock - hours * 60 - minutes
    return "| time | what | minutes |\n|---|---|---|\n" + "\n".join(rows), total


def run_time_rows(root, seconds, colab):
    """The rows of the run-time table: each chapter's stated minutes, and its run time where measured."""
    shown = lambda table, name: f"{table[name]:.0f} s" if name in table else "not measured"
    return [f"| {notebook_title(path)} | {notebook_minutes(path)} min | {shown(seconds, path.stem)} | "
            f"{shown(colab, path.stem)} |" for path in sorted((root / "notebooks").glob("*.ipynb"))]


def workshop_plans(root):
    """The Markdown of the two workshop plans (:data:`THREE_HOURS`, :data:`FULL_DAY`), each item given the minutes
    its notebook states: the build writes it into the instructors' page (``docs/instructors.md``)."""
    short, short_minutes = workshop_plan(root, THREE_HOURS, "9:00")
    day, day_minutes = workshop_plan(root, FULL_DAY, "9:00")
    return "\n\n".join([
        f"### A 3-hour workshop ({short_minutes} minutes)",
        f"Chapters {numbers(THREE_HOURS)} shown from their slides and run live; the exercises are homework, "
        "graded afterwards with `python3 course.py grade`.", short,
        f"### A full day ({day_minutes // 60} h {day_minutes % 60:02d} min)",
        f"Chapters {numbers(FULL_DAY)}, each followed by its exercises (if it has some); the others are for "
        "self-study.", day])


def instructors_sections(root, seconds, how, colab=None, colab_how="", grades=None):
    """The sections of the instructors' page that only the website's build can make (``<!-- site: NAME -->`` in
    ``docs/instructors.md``): ``{"slides": ..., "run-times": ..., "hardest-exercises": ...}``, from each chapter's
    run time (``seconds``: ``{chapter: seconds}``, measured as the sentence ``how`` says; ``colab``: the same from
    the Colab-like test run, ``colab_how``) and a grader's table (``grades``) for the hardest exercises.

    Raises:
        PageError: ``grades`` is not a grades table (:func:`hardest_exercises`).
    """
    if grades:
        hard = hardest_exercises(grades)
        hardest = ("From the grades of your class (`" + Path(grades).name + "`), the exercises with the lowest mean "
                   "share of their points:\n\n| exercise | mean share of the points | submissions |\n|---|---|---|\n"
                   + "\n".join(f"| {name} | {mean:.0%} | {n} |" for name, mean, n in hard))
    else:
        hardest = ("No class's grades went into this build. After a workshop, grade the class's exercise notebooks "
                   "with `python3 course.py grade SUBMISSIONS/` (it writes `grades.csv` and prints a summary per "
                   "exercise), then rebuild with `python3 course.py site --grades SUBMISSIONS/grades.csv`: this "
                   "section then lists the exercises your learners found hardest.")
    slides = ", ".join(f'<a href="../slides/{path.stem}.slides.html">{path.stem[:2]}</a>'
                       for path in sorted((root / "notebooks").glob("*.ipynb")))
    return {
        "slides": f"One deck per chapter (arrows right/left between sections, down/up within one): {slides}.",
        "run-times": "\n\n".join([
            how + (" " + colab_how if colab else "") + " A Colab free runtime has 2 cores.",
            "| chapter | stated time | run time | run time, Colab-like |\n|---|---|---|---|\n"
            + "\n".join(run_time_rows(root, seconds, colab or {}))]),
        "hardest-exercises": hardest}
