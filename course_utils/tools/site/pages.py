"""The website's own pages, written as Markdown from the repository: the front page and the instructors' page."""
import csv
import re
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

import nbformat

from ..checkout import course_config

CHAPTER_ROW = re.compile(r"^\| (\d) \| `(\w+)` \| (.+) \|$", re.M)  # a row of the README's chapter table


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
    """The "**Time:** about N minutes" of a chapter, as text ("45 minutes"), or "" when it has none."""
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    found = re.search(r"\*\*Time:\*\*\s*(?:about\s+)?([^.\n]+)", text)
    return found.group(1).strip() if found else ""


def front_page(root, folders):
    """The Markdown of the front page: the README's introduction, the chapter table (each title a link, the
    README's one-line summary), how to run the course, and the table of contents of every page."""
    readme = (root / "README.md").read_text(encoding="utf-8")
    intro = readme.split("\n## ", 1)[0].split("\n", 1)[1].strip()
    intro = re.sub(r" \(see \[[^]]+\]\(#[^)]+\)\)", "", intro)  # links to README sections the site lacks
    summaries = {name: summary for _, name, summary in CHAPTER_ROW.findall(readme)}
    rows = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        title = notebook_title(path)
        summary = summaries.get(path.stem, "")
        rows.append(f"| [{title}](notebooks/{path.stem}.ipynb) | {notebook_minutes(path)} | {summary} | "
                    f'<a href="slides/{path.stem}.slides.html">slides</a> |')
    exercises = "exercise notebooks (with the worked solutions)" if "solutions" in folders else "exercise notebooks"
    toctrees = [f"```{{toctree}}\n:hidden:\n:caption: {caption}\n:glob:\n\n{folder}/*\n```"
                for folder, caption in (("notebooks", "Chapters"), ("exercises", "Exercises"),
                                        ("solutions", "Solutions")) if folder in folders]
    toctrees.append("```{toctree}\n:hidden:\n:caption: Teaching\n\ninstructors\n```")
    config = course_config(root)
    return "\n\n".join([
        "# Distributed training with TensorFlow, from tensors to DTensor", intro,
        "## The chapters",
        "| Chapter | Time | What you learn | Workshop |\n|---|---|---|---|\n" + "\n".join(rows),
        f"Chapters 1–8 each have {exercises} in the sidebar: run them, and the checkers give instant feedback. "
        "Each page shows a chapter as it ran when this site was built: the pictures, tables and measured numbers "
        "are its real outputs on a 2-core CPU machine. The interactive explorers need a running notebook: a "
        "page shows their first state, and they react to their controls once you run the notebook.",
        "Teaching it? See the page [for instructors](instructors.md): workshop plans, run times, slides.",
        "## Run it",
        "**On Colab:** the rocket button at the top of each page opens that notebook on Colab; its first cell "
        "installs what Colab lacks. **On your machine**, with Python 3.11:\n\n"
        f"```bash\ngit clone https://github.com/{config['repository']}.git\ncd {config['repository'].split('/')[1]}"
        "\npython3 course.py lab     # installs the pinned packages into .venv and opens JupyterLab\n```",
        *toctrees])


def chapter_seconds(report):
    """``{notebook name: seconds}`` of the notebooks in the JUnit ``report`` of a test run (nbval's cells of a
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


def instructors_page(root, main_report, colab_report, grades=None):
    """The instructors' page: two workshop plans, each chapter's measured run time, and the hardest exercises
    (from ``grades``, a grader's table, when given)."""
    chapters = sorted((root / "notebooks").glob("*.ipynb"))
    main, colab = chapter_seconds(main_report), chapter_seconds(colab_report)
    measured = lambda table, name: f"{table[name]:.0f} s" if name in table else "not measured in this build"
    rows = [f"| {notebook_title(path)} | {notebook_minutes(path)} | {measured(main, path.stem)} | "
            f"{measured(colab, path.stem)} |" for path in chapters]
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
    return "\n\n".join([
        "# For instructors",
        "Two plans for teaching the course live, the slides of each chapter, how long each chapter takes to run, "
        "and where learners struggle.",
        "## A 3-hour workshop",
        "| time | what |\n|---|---|\n"
        "| 0:00 | Chapter 0 (set-up check) and chapter 1: devices and the 8 virtual CPUs |\n"
        "| 0:30 | Chapter 2: strategies on one machine; learners do exercise 2 |\n"
        "| 1:15 | break |\n"
        "| 1:25 | Chapter 4: meshes and layouts with the layout explorer; exercise 4 |\n"
        "| 2:10 | Chapter 5: DTensor with Keras, shown from its slides; `LayoutMap` live |\n"
        "| 2:45 | Chapter 7, in brief: where next; questions |",
        "## A full day",
        "| time | what |\n|---|---|\n"
        "| 9:00 | Chapters 0 and 1; exercise 1 |\n"
        "| 10:00 | Chapter 2 and exercise 2 |\n"
        "| 11:15 | Chapter 3: real clusters on localhost, fault tolerance; exercise 3 |\n"
        "| 12:30 | lunch |\n"
        "| 13:30 | Chapter 4 and exercise 4 |\n"
        "| 14:45 | Chapter 5 and exercise 5 |\n"
        "| 16:00 | Chapter 6 (a hand-written Adam on DTensor) or chapter 8 (Keras 3 on JAX), as the room prefers |\n"
        "| 16:45 | Chapter 7: where next; questions |",
        "Learners run the notebooks themselves: on Colab (the rocket button of each page) or with "
        "`python3 course.py lab` on their laptops. Each chapter has a slide deck of its ideas, pictures and "
        "measured numbers (linked from the front page).",
        "## How long each chapter runs",
        "Run times of a whole chapter, measured by this build's test run: on the 2-core machine that built the site "
        "(all cells, nbval, while the other test environment used the same cores, so longer than alone) and in the "
        "Colab-like environment (Colab's package set, also a set-up `pip install`). A Colab free runtime also has "
        "2 cores. The *Time* column is the reading and doing time each chapter states.",
        "| chapter | time to learn | run time, 2 cores | run time, Colab-like |\n|---|---|---|---|\n" + "\n".join(rows),
        "## The hardest exercises", hardest])
