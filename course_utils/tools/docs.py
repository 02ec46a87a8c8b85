"""The repository's Markdown pages (``README.md`` and ``docs/*.md``): the facts the build writes into them.

A fact the course can compute (how many exercises a chapter has, the grader's time limit, the pinned versions,
the workshop plans) is not typed into a page: the page marks its place, and ``python3 course.py build`` writes it
(``--verify`` fails while a page is stale)::

    Chapters <!-- generated: exercise-chapters -->1–9<!-- end generated --> have an exercise notebook.

A marker pair holds a fact of :data:`FACTS` inline, or as a block when the opening marker ends its line. A
section only the website's build can make (run times it measured, its slides, a class's hardest exercises) is
marked ``<!-- site: NAME -->`` ... ``<!-- end site -->``: the build writes a line there pointing to the website's
copy of the page, and the site's build replaces it (:mod:`course_utils.tools.site.markdown`).
"""
import json
import re
from pathlib import Path

import nbformat

from course_utils.checkers import chapter_definition, registry
from course_utils.data import MNIST_VERSION
from course_utils.grading.cli import DEFAULT_TIMEOUT
from course_utils.grading.report import COLUMNS
from course_utils.grading.sandbox import FILE_SIZE_LIMIT, MEMORY_LIMIT, PROCESS_LIMIT, TMPFS_SIZE
from course_utils.notebook_setup import KERAS_MODES
from course_utils.tools.checkout import checkout_root, course_config
from course_utils.tools.site.pages import number_span, workshop_plans

__all__ = ["FACTS", "PAGES", "fill_page", "page_paths", "site_address", "slug"]

PAGES = "docs"  # the folder of the pages, beside README.md
GENERATED = re.compile(r"<!-- generated: (?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- end generated -->", re.S)
SITE_ONLY = re.compile(r"<!-- site: (?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- end site -->", re.S)
PIN = re.compile(r"^(?P<name>[\w.-]+)==(?P<version>\S+)", re.M)
PINNED_NAMES = {"tensorflow": "TensorFlow", "tf_keras": "tf_keras", "keras": "Keras", "jax": "jax",
                "ipywidgets": "ipywidgets", "ipython": "IPython"}


def page_paths(root):
    """The Markdown pages of the checkout ``root``: ``README.md``, then ``docs/*.md`` by name."""
    return [Path(root) / "README.md", *sorted((Path(root) / PAGES).glob("*.md"))]


def site_address(root):
    """The website's address, from ``[tool.course] repository`` (GitHub Pages of ``owner/name``).

    Example:
        >>> site_address(checkout_root())
        'https://tf-distributed-course.github.io/course/'
    """
    owner, name = course_config(root)["repository"].split("/")
    return f"https://{owner.lower()}.github.io/{name}/"


def _notebook_chapters(root, folder, dtensor=False):
    found = []
    for path in sorted((Path(root) / folder).glob("*.ipynb")):
        course = nbformat.read(path, as_version=4).metadata.get("course", {})
        if not dtensor or course.get("dtensor"):
            found.append(course["chapter"])
    return found


def _pins(root, requirements, names):
    pins = {m["name"].lower(): m["version"] for m in PIN.finditer((Path(root) / requirements).read_text())}
    return ", ".join(f"{PINNED_NAMES[name]} {pins[name]}" for name in names)


def _exercise_table(root):
    rows = []
    for number, points in registry().items():
        chapter = chapter_definition(number)
        each = "; ".join(f"{name} {cls.title} ({cls.points})" for name, cls in chapter.named.items())
        rows.append(f"| {number} · {chapter.title} | {len(points)} | {sum(points.values())} | {each} |")
    return "| chapter | exercises | points | each exercise (points) |\n|---|---:|---:|---|\n" + "\n".join(rows)


def _span(values):
    return f"{min(values)}–{max(values)}" if min(values) != max(values) else str(min(values))


def _dtensor_notebooks(root):
    chapters = number_span(_notebook_chapters(root, "notebooks", dtensor=True))
    solutions = number_span(_notebook_chapters(root, "solutions", dtensor=True))
    return f"chapters {chapters}; the solutions and exercises of chapters {solutions}"


# Each fact: its text, computed from the checkout at ``root``.
FACTS = {
    "exercise-chapters": lambda root: number_span(registry()),
    "exercises-per-chapter": lambda root: _span([len(points) for points in registry().values()]),
    "points-per-chapter": lambda root: _span([sum(points.values()) for points in registry().values()]),
    "chapters-without-exercises": lambda root: number_span(
        set(_notebook_chapters(root, "notebooks")) - set(registry())).replace(" and ", " or "),
    "exercise-table": _exercise_table,
    "workshop-plans": workshop_plans,
    "dtensor-notebooks": _dtensor_notebooks,
    "grader-timeout": lambda root: f"{DEFAULT_TIMEOUT:g}",
    "grades-columns": lambda root: f"`{','.join(COLUMNS)}`",
    "memory-limit": lambda root: f"{MEMORY_LIMIT / 2 ** 30:g}",
    "process-limit": lambda root: f"{PROCESS_LIMIT:,}",
    "file-size-limit": lambda root: f"{FILE_SIZE_LIMIT / 2 ** 30:g} GiB",
    "tmpfs-size": lambda root: f"{TMPFS_SIZE / 2 ** 30:g} GiB",
    "main-versions": lambda root: _pins(root, "requirements.txt", ["tensorflow", "tf_keras", "keras", "jax"]),
    "colab-versions": lambda root: _pins(root, "requirements-colab.txt",
                                         ["tensorflow", "tf_keras", "keras", "jax", "ipywidgets", "ipython"]),
    "mnist-folder": lambda root: f"`mnist/{MNIST_VERSION}`",
    "keras-modes": lambda root: " | ".join(json.dumps(mode) for mode in sorted(KERAS_MODES)),
    "site-address": lambda root: f"<{site_address(root)}>",
}


def fill_page(text, path, root):
    """The page ``text`` (of the file ``path`` in the checkout ``root``) with every fact between its markers
    written anew, and each site-only section holding the line that points to the website's copy of the page.

    Raises:
        ValueError: a marker names no fact of :data:`FACTS`; the message names the page and lists them.

    Example:
        >>> fill_page("Points: <!-- generated: grader-timeout -->?<!-- end generated --> s", "x.md", checkout_root())
        'Points: <!-- generated: grader-timeout -->300<!-- end generated --> s'
    """
    def fact(match):
        name = match["name"]
        if name not in FACTS:
            raise ValueError(f"{path}: <!-- generated: {name} --> names no fact; the facts are {sorted(FACTS)} "
                             f"(course_utils/tools/docs.py).")
        value = FACTS[name](root)
        block = match["body"].startswith("\n")
        return f"<!-- generated: {name} -->" + (f"\n\n{value}\n\n" if block else value) + "<!-- end generated -->"

    def site_only(match):
        page = Path(path).resolve().relative_to(Path(root).resolve()).with_suffix(".html").as_posix()
        anchor = _anchor(match.string[:match.start()])
        return (f"<!-- site: {match['name']} -->\n\nThe website's build makes this section: see it on "
                f"[the website's copy of this page]({site_address(root)}{page}{anchor}).\n\n<!-- end site -->")

    return SITE_ONLY.sub(site_only, GENERATED.sub(fact, text))


def _anchor(before):
    """The ``#anchor`` of the last heading in ``before`` (GitHub's and MyST's slug), or ``""``."""
    headings = re.findall(r"^#{1,6} (.+)$", before, re.M)
    return f"#{slug(headings[-1])}" if headings else ""


def slug(heading):
    """The anchor GitHub (and MyST, ``myst_heading_anchors``) give a heading.

    Example:
        >>> slug("How Colab is tested without Colab (2026)")
        'how-colab-is-tested-without-colab-2026'
    """
    text = re.sub(r"<[^>]+>|`", "", heading).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))
