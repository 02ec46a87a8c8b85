"""Build the course's website: ``python3 course.py site [--solutions] [--grades CSV] [--out FOLDER]``.

The pages are the notebooks as they are in the repository (copied into a staging folder beside the generated
front page and instructors' page, :mod:`.pages`), rendered by Sphinx with MyST-NB, and a reveal.js slide deck
per chapter (:mod:`.slides`). The chapters are executed first, each in a fresh kernel, into a
cache in ``_site/cache`` keyed by the notebook's code, so a rebuild re-runs only the chapters whose code
changed; a cell that raises stops the build with the notebook and the cell named. ``--executed FOLDER`` takes
the chapters already executed there (the test run leaves them in ``test-artifacts/executed``) where their code
is the chapter's, and executes only the others.
Exercises and solutions are pages to run, not run here.

Example:
    python3 course.py site                 # _site/html/index.html
    python3 course.py site --solutions     # the self-study edition, with the worked solutions
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from ..build import BADGE_ID
from ..checkout import checkout_root, course_config
from .pages import PageError, front_page, instructors_page
from .slides import build_slides
from .vendor import MATHJAX, copy_files, npm_package

ROOT = checkout_root()
SITE = ROOT / "_site"  # the staging folder, the caches and (by default) the pages
CONF_DIR = Path(__file__).resolve().parent
REPORTS = ROOT / "test-artifacts"  # the test run's JUnit reports, for the chapters' measured run times
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class SiteBuildError(RuntimeError):
    """The website could not be built; the message names the notebook and what to do."""


def stage(root, source, folders, grades=None):
    """Copy the notebooks of ``folders`` into ``source`` (emptied first; without their Colab badge) and write the
    front page and the instructors' page there."""
    if source.exists():
        shutil.rmtree(source)
    for folder in folders:
        (source / folder).mkdir(parents=True)
        for path in sorted((root / folder).glob("*.ipynb")):
            nbformat.write(without_badge(nbformat.read(path, as_version=4)), source / folder / path.name)
    (source / "index.md").write_text(front_page(root, folders) + "\n", encoding="utf-8")
    (source / "instructors.md").write_text(instructors_page(root, REPORTS / "main.xml", REPORTS / "colab.xml",
                                                            grades) + "\n", encoding="utf-8")


def without_badge(nb):
    """``nb`` without its "Open in Colab" badge cell: a page has the theme's Colab button (and the badge's image
    is on Colab's server)."""
    nb.cells = [cell for cell in nb.cells if cell.get("id") != BADGE_ID]
    return nb


def code_key(nb):
    """The cache key of a notebook: a hash of its code cells' sources, in order."""
    code = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    return hashlib.sha256(json.dumps(code).encode()).hexdigest()[:20]


def with_outputs(nb, ran):
    """``nb`` with the outputs and execution counts of the executed notebook ``ran`` (the same code cells, in
    order); its text and metadata stay ``nb``'s own, so an edit of the prose needs no new run."""
    for cell, done in zip([c for c in nb.cells if c.cell_type == "code"],
                          [c for c in ran.cells if c.cell_type == "code"], strict=True):
        cell.outputs, cell.execution_count = done.outputs, done.execution_count
    return nb


def execute(path, cache):
    """The notebook at ``path`` with every code cell's outputs: from ``cache`` (a folder) when its code has not
    changed, else run cell by cell in a fresh kernel started in its folder (and cached).

    Raises:
        SiteBuildError: a cell raised; the message names the notebook, the cell and the error.
    """
    from ..notebook_runner import KernelSession, cell_error

    nb = nbformat.read(path, as_version=4)
    cached = Path(cache) / f"{path.stem}-{code_key(nb)}.ipynb"
    if cached.is_file():
        return with_outputs(nb, nbformat.read(cached, as_version=4))
    print(f"executing {path.parent.name}/{path.name} ...", flush=True)
    with KernelSession(path.parent, dict(os.environ), cell_timeout=600) as session:
        for number, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
            ran = session.execute(cell.source)
            cell.outputs, cell.execution_count = ran.outputs, number + 1
            error = cell_error(ran)
            if error:
                first_line = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
                raise SiteBuildError(
                    f"{path.parent.name}/{path.name}, code cell {number} (id {cell.get('id')}, "
                    f"starting {first_line!r}) raised {error[0]}: {error[1][:500]}\nRun the notebook in "
                    f"JupyterLab to see it fail, fix it, then build again: only the chapters whose code "
                    f"changed run again.")
    Path(cache).mkdir(parents=True, exist_ok=True)
    for old in Path(cache).glob(f"{path.stem}-*.ipynb"):
        old.unlink()
    nbformat.write(nb, cached)
    return nb


def for_the_page(nb):
    """``nb`` with its widget outputs made static: a widget with an HTML picture of itself (the course's
    explorers) keeps only the picture, other widgets (tqdm's progress bars) are dropped, as is the widget
    state. A page has no kernel to run a widget."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                if "text/html" not in data:
                    continue
                output["data"] = {"text/html": data["text/html"]}
            kept.append(output)
        cell.outputs = kept
    nb.metadata.pop("widgets", None)
    return nb


def executed_copy(path, executed):
    """The chapter ``path`` with the outputs of its copy in the folder ``executed`` (``notebooks/<name>.ipynb``,
    executed), or None where there is none or it was executed from other code than the chapter's."""
    ran = Path(executed) / "notebooks" / path.name if executed else None
    if not ran or not ran.is_file():
        return None
    ran, nb = nbformat.read(ran, as_version=4), nbformat.read(path, as_version=4)
    return with_outputs(nb, ran) if code_key(ran) == code_key(nb) else None


def build_site(out=None, solutions=False, executed=None, grades=None, root=ROOT):
    """Build the website into ``out`` (default ``_site/html``) and return the path of its front page.

    Args:
        out: the folder of the HTML pages (replaced).
        solutions: also publish the worked solutions (the self-study edition).
        executed: a folder holding ``notebooks/*.ipynb`` already executed (by the tests): a chapter found there
            with the same code is not executed again.
        grades: a grader's ``grades.csv``, for the instructors' page's hardest exercises.

    Raises:
        SiteBuildError: a notebook cannot be a page, or a cell raised (the notebook and the cell are named).

    Example:
        >>> build_site()  # doctest: +SKIP
        PosixPath('.../_site/html/index.html')
    """
    out = Path(out) if out else SITE / "html"
    folders = ["notebooks", "exercises", *(["solutions"] if solutions else [])]
    source = SITE / "source"
    try:
        stage(root, source, folders, grades)
    except PageError as err:
        raise SiteBuildError(str(err)) from None
    chapters = {}
    for staged in sorted((source / "notebooks").glob("*.ipynb")):
        chapter = root / "notebooks" / staged.name
        chapters[staged.stem] = for_the_page(executed_copy(chapter, executed) or execute(chapter, SITE / "cache"))
        nbformat.write(without_badge(chapters[staged.stem]), staged)
    config = course_config(root)
    settings = {"repository": config["repository"], "branch": config["branch"], "static": str(SITE / "static")}
    mathjax = npm_package(MATHJAX, SITE / "vendor")
    if mathjax:  # the formulas render offline
        copy_files(mathjax / "es5", ["tex-chtml.js", "output/chtml/fonts/woff-v2"], SITE / "static" / "mathjax")
        settings["mathjax"] = "mathjax/tex-chtml.js"
    env = {**os.environ, "COURSE_SITE_SETTINGS": json.dumps(settings)}
    if out.exists():
        shutil.rmtree(out)
    build = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(CONF_DIR),
                            "-d", str(SITE / "doctrees"), str(source), str(out)], env=env, cwd=root,
                           capture_output=True, text=True)
    if build.returncode:
        raise SiteBuildError("Sphinx could not build the website:\n" + "\n".join(
            (build.stderr + build.stdout).strip().splitlines()[-40:]))
    for folder in folders:  # the download button gives the notebook as it is in the repository, without outputs
        for path in (root / folder).glob("*.ipynb"):
            shutil.copy2(path, out / "_sources" / folder / path.name)
    build_slides(chapters, out / "slides", SITE / "vendor")
    return out / "index.html"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="course.py site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="the folder of the HTML pages (default _site/html)")
    parser.add_argument("--solutions", action="store_true", help="include the worked solutions (self-study edition)")
    parser.add_argument("--executed", help="a folder with notebooks/*.ipynb already executed (test-artifacts/executed)")
    parser.add_argument("--grades", help="a grader's grades.csv: the instructors' page lists the hardest exercises")
    options = parser.parse_args(argv)
    try:
        index = build_site(options.out, options.solutions, options.executed, options.grades)
    except SiteBuildError as err:
        print(err, file=sys.stderr)
        return 1
    print(f"The website is in {index.parent}; open {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
