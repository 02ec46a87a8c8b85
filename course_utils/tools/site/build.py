"""Build the course's website: ``python3 course.py site [--solutions] [--grades CSV] [--out FOLDER]``.

The pages are the notebooks as they are in the repository (copied into a staging folder beside the generated
front page, :mod:`.pages`, and the pages of ``docs/``, :mod:`.markdown`), rendered by Sphinx with MyST-NB, and a
reveal.js slide deck per chapter (:mod:`.slides`). The chapters are executed first (:mod:`.execution`), each once,
into a cache in ``_site/cache``: a rebuild re-runs only the chapters whose code or helpers changed, and a cell that
raises stops the build with the notebook and the cell named. ``--executed FOLDER`` takes the chapters the test run
executed (``test-artifacts/executed``) where their code is the chapter's, and executes only the others. Exercises
and solutions are pages to run, not run here.

Example:
    python3 course.py site                 # _site/html/index.html
    python3 course.py site --solutions     # the self-study edition, with the worked solutions
"""
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from ..build import BADGE_ID, SETUP_ID
from ..checkout import checkout_root, course_config
from ..docs import PAGES
from .execution import ExecutionError, execute, executed_copy
from .markdown import docs_order, site_page
from .pages import PageError, chapter_seconds, front_page, instructors_sections
from .slides import build_slides
from .vendor import MATHJAX, copy_files, npm_package

ROOT = checkout_root()
SITE = ROOT / "_site"  # the staging folder, the caches and (by default) the pages
CONF_DIR = Path(__file__).resolve().parent
REPORTS = ROOT / "test-artifacts"  # the test run's reports and executed chapters
MARKER = ".course-site"  # in a folder of pages this build wrote, which it may replace
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
IMAGES = ("image/png", "image/jpeg", "image/svg+xml")
# TensorFlow's C++ log lines on stderr ("E0000 00:00:1795... cuda_platform.cc:52] ...") and absl's notice
TF_LOG_LINE = re.compile(r"^(?:[IWEF]\d{4} \d\d:\d\d:[\d.]+ +\d+ \S+:\d+\] .*|WARNING: All log messages before "
                         r"absl::InitializeLog\(\) is called are written to STDERR)\n?", re.M)


class SiteBuildError(RuntimeError):
    """The website could not be built; the message names the notebook or the folder, and what to do."""


def for_the_page(nb, chapter=None):
    """``nb`` made into a page: no Colab badge (the theme has a Colab button; the badge's image is on Colab's
    server), the set-up cell hidden, widgets static (a widget with an HTML picture of itself, the course's
    explorers, keeps only the picture; tqdm's bars are dropped: a page has no kernel to run them), TensorFlow's
    C++ log lines taken out of stderr (chapter 0 explains them), and each picture given alt text naming its
    section of ``chapter``."""
    nb.cells = [cell for cell in nb.cells if cell.get("id") != BADGE_ID]
    section = chapter or ""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            heading = re.search(r"^#{1,3} (.+)$", cell.source, re.M)
            section = heading.group(1).strip() if heading else section
            continue
        if cell.get("id") == SETUP_ID:
            cell.metadata.setdefault("tags", []).append("remove-cell")
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                if "text/html" not in data:
                    continue
                output["data"] = {"text/html": data["text/html"]}
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                output["text"] = TF_LOG_LINE.sub("", output["text"])
                if not output["text"].strip():
                    continue
            if any(mime in data for mime in IMAGES):
                alt = f"Figure of the section '{section}'" + (f" of chapter {chapter}" if chapter else "")
                cell.metadata.setdefault("mystnb", {}).setdefault("image", {})["alt"] = alt
            kept.append(output)
        cell.outputs = kept
    nb.metadata.pop("widgets", None)
    return nb


def clear_out(out, root):
    """Empty the folder ``out`` for the pages, refusing one that is, or holds, the course's checkout, or that has
    files this build did not write (no :data:`MARKER`).

    Raises:
        SiteBuildError: the folder may not be replaced; the message says which and why.
    """
    out = Path(out).resolve()
    if out == Path(root).resolve() or Path(root).resolve().is_relative_to(out):
        raise SiteBuildError(f"--out {out} is the course's folder or holds it; name a new folder, e.g. _site/html.")
    if out.exists() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise SiteBuildError(f"--out {out} already holds files that an earlier build of the website did not write; "
                             f"name a new or empty folder (the build replaces the folder's contents).")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)


def run_times(chapters, colab_report):
    """The instructors' page's run times: ``(seconds, how, colab seconds, colab how)``, from each executed
    chapter's ``course_run`` record and the Colab-like test run's report."""
    runs = {name: nb.metadata.get("course_run") for name, nb in chapters.items()}
    seconds = {name: run["seconds"] for name, run in runs.items() if run}
    how = []
    for kind, text in (("built", "executed alone in a fresh kernel by the site's build"),
                       ("tests", "run under nbval by the test suite, while another test environment shared the "
                                 "cores (so longer than alone)")):
        dates = sorted({(run["date"], run["cores"]) for run in runs.values() if run and run["how"] == kind})
        if dates:
            how.append(f"{text} ({'; '.join(f'{date}, {cores} cores' for date, cores in dates)})")
    how_text = ("Run time: the wall time of all of a chapter's cells, " + ", or ".join(how) + "."
                if how else "No run time was recorded in this build.")
    colab = chapter_seconds(colab_report)
    colab_how = ""
    if colab:
        date = datetime.date.fromtimestamp(Path(colab_report).stat().st_mtime).isoformat()
        colab_how = (f"Colab-like: the test of each chapter alone in a fresh kernel with Colab's package set, its "
                     f"set-up `pip install` included (test run of {date}, side by side with the other tests).")
    return seconds, how_text, colab, colab_how


def build_site(out=None, solutions=False, executed=None, grades=None, root=ROOT):
    """Build the website into ``out`` (default ``_site/html``) and return the path of its front page.

    Args:
        out: the folder of the HTML pages (emptied first; see :func:`clear_out`).
        solutions: also publish the worked solutions (the self-study edition).
        executed: a folder holding ``notebooks/*.ipynb`` already executed (by the tests): a chapter found there
            with the same code is not executed again.
        grades: a grader's ``grades.csv``, for the instructors' page's hardest exercises.

    Raises:
        SiteBuildError: a notebook cannot be a page, a cell raised (the notebook and the cell are named), Sphinx
            failed, or ``out`` may not be replaced.

    Example:
        >>> build_site()  # doctest: +SKIP
        PosixPath('.../_site/html/index.html')
    """
    out = Path(out) if out else SITE / "html"
    clear_out(out, root)
    folders = ["notebooks", "exercises", *(["solutions"] if solutions else [])]
    source = SITE / "source"
    shutil.rmtree(source, ignore_errors=True)
    chapters = {}
    try:
        for path in sorted((root / "notebooks").glob("*.ipynb")):
            ran = executed_copy(path, executed, root) or execute(path, SITE / "cache", root)
            chapters[path.stem] = for_the_page(ran, chapter=int(path.stem[:2]))
        for folder in folders:
            (source / folder).mkdir(parents=True)
            for path in sorted((root / folder).glob("*.ipynb")):
                page = chapters[path.stem] if folder == "notebooks" else for_the_page(nbformat.read(path, 4))
                nbformat.write(page, source / folder / path.name)
        docs, config = docs_order(root), course_config(root)
        published = {*docs, *(p.relative_to(root).as_posix() for f in folders for p in (root / f).glob("*.ipynb"))}
        sections = {f"{PAGES}/instructors.md": instructors_sections(
            root, *run_times(chapters, REPORTS / "colab.xml"), grades=grades)}
        (source / PAGES).mkdir()
        for page in docs:
            text = (root / page).read_text(encoding="utf-8")
            (source / page).write_text(site_page(text, page, root, published, config, sections.get(page)),
                                       encoding="utf-8")
        (source / "index.md").write_text(
            site_page(front_page(root, folders, docs), "README.md", root, published, config) + "\n", encoding="utf-8")
    except (ExecutionError, PageError) as err:
        raise SiteBuildError(str(err)) from None
    settings = {"repository": config["repository"], "branch": config["branch"], "static": str(SITE / "static")}
    mathjax = npm_package(MATHJAX, SITE / "vendor")
    if mathjax:  # the formulas render offline; the slides use the same copy
        copy_files(mathjax / "es5", ["tex-chtml.js", "output/chtml/fonts/woff-v2"], SITE / "static" / "mathjax")
        settings["mathjax"] = "mathjax/tex-chtml.js"
    env = {**os.environ, "COURSE_SITE_SETTINGS": json.dumps(settings)}
    build = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going",
                            "-c", str(CONF_DIR), "-d", str(SITE / "doctrees"), str(source), str(out)],
                           env=env, cwd=root, capture_output=True, text=True)
    if build.returncode:
        raise SiteBuildError("Sphinx could not build the website (warnings count as errors: a dropped output or a "
                             "broken reference must not pass unseen):\n" + "\n".join(
                                 (build.stderr + build.stdout).strip().splitlines()[-40:]))
    for folder in folders:  # the download button gives the notebook as it is in the repository, without outputs
        for path in (root / folder).glob("*.ipynb"):
            shutil.copy2(path, out / "_sources" / folder / path.name)
    build_slides(chapters, out / "slides", SITE / "vendor", mathjax="../_static/mathjax/tex-chtml.js"
                 if mathjax else None)
    (out / MARKER).write_text("Written by python3 course.py site; the next build replaces this folder.\n")
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
