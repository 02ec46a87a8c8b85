"""Workshop slides of each chapter: reveal.js decks made by ``jupyter nbconvert``'s slides exporter from the
executed chapters, with the slide metadata the build keeps in the notebooks.

Which cell is a slide is one rule (:func:`mark_slides`, applied by ``python3 course.py build``): a chapter's
title and each ``##`` section open a slide (the idea), a cell that draws a picture gets a sub-slide (the
picture), and the last cell of a section that prints gets one (the measured number); every other cell is
skipped. The slides show outputs, not code: the code is in the notebook. reveal.js, RequireJS and MathJax are
served beside the decks (:mod:`.vendor`).
"""
import re
from pathlib import Path

import nbformat

from .vendor import MATHJAX, REQUIREJS, REVEAL, copy_files, npm_package

PICTURE_CALL = re.compile(r"\b(?:plot_\w+|visualize_\w+|\w+_picture|draw_\w+|\w+_explorer|plt\.show)\(")
HEADING = re.compile(r"^#{1,2} ")
SLIDE_TEMPLATE = Path(__file__).resolve().parent / "slides_template"
NOTEBOOK_LINK = re.compile(r"(\.\./(?:notebooks|exercises|solutions)/\w+)\.ipynb")


def mark_slides(nb):
    """Set ``cell.metadata.slideshow.slide_type`` of every cell of the chapter ``nb`` by the rule above.

    Returns:
        ``nb`` (changed in place).

    Example:
        >>> from course_utils.tools.checkout import checkout_root
        >>> chapter = nbformat.read(checkout_root() / "notebooks" / "04_meshes_and_layouts.ipynb", as_version=4)
        >>> [c.metadata["slideshow"]["slide_type"] for c in mark_slides(chapter).cells][:3]
        ['skip', 'skip', 'slide']
    """
    last_print = {}  # section number: index of its last code cell that prints (and draws no picture)
    section, sections = 0, []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and HEADING.match(cell.source):
            section += 1
        sections.append(section)
        if cell.cell_type == "code" and "print(" in cell.source and not PICTURE_CALL.search(cell.source):
            last_print[section] = index
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and HEADING.match(cell.source):
            kind = "slide"
        elif cell.cell_type == "code" and PICTURE_CALL.search(cell.source):
            kind = "subslide"
        elif sections[index] and last_print.get(sections[index]) == index:
            kind = "subslide"
        else:
            kind = "skip"
        cell.metadata["slideshow"] = {"slide_type": kind}
    return nb


def write_slides(nb, target, reveal, require_js=None, mathjax=None):
    """Write the reveal.js deck of the executed chapter ``nb`` to the file ``target``, loading reveal.js from
    ``reveal`` (a URL prefix, relative to the deck's folder or absolute) through RequireJS from ``require_js``,
    and MathJax 3 from ``mathjax`` (scripts' addresses; None: on a CDN)."""
    from nbconvert import SlidesExporter
    from traitlets.config import Config

    config = Config()
    config.SlidesExporter.reveal_url_prefix = reveal
    if require_js:
        config.SlidesExporter.require_js_url = require_js
    config.SlidesExporter.mathjax_url = mathjax or f"https://cdn.jsdelivr.net/npm/{MATHJAX}/es5/tex-chtml.js"
    config.SlidesExporter.reveal_theme = "white"  # its font is served with reveal.js (the default theme fetches fonts)
    config.SlidesExporter.reveal_scroll = True
    config.SlidesExporter.exclude_input = True
    config.SlidesExporter.exclude_input_prompt = True
    config.SlidesExporter.exclude_output_prompt = True
    exporter = SlidesExporter(config=config, extra_template_basedirs=[str(SLIDE_TEMPLATE.parent)],
                              template_name=SLIDE_TEMPLATE.name)
    body, _ = exporter.from_notebook_node(nb)
    Path(target).write_text(body, encoding="utf-8")


def build_slides(chapters, folder, vendor, mathjax=None, echo=print):
    """Write a deck per executed chapter (``{name: notebook}``) into ``folder`` as ``<name>.slides.html``, with
    reveal.js and RequireJS beside them (from the cache folder ``vendor``; from their CDN where npm cannot fetch
    them) and MathJax from ``mathjax`` (an address; None: its CDN). A deck leaves out what cells wrote to stderr
    (warnings and log lines have no place on a slide), and its links to notebooks go to their pages. Returns the
    paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    package, require = npm_package(REVEAL, vendor, echo), npm_package(REQUIREJS, vendor, echo)
    if package:
        copy_files(package, ["dist", "plugin/notes", "LICENSE"], folder / "reveal.js")
    if require:
        copy_files(require, ["require.js"], folder / "requirejs")
    reveal = "reveal.js" if package else f"https://unpkg.com/{REVEAL}"
    require_js = "requirejs/require.js" if require else None
    written = []
    for name, nb in chapters.items():
        deck = nbformat.from_dict(nb)
        for cell in deck.cells:
            if cell.cell_type == "markdown":  # a link to a notebook goes to its page (the decks sit beside them)
                cell.source = NOTEBOOK_LINK.sub(r"\1.html", cell.source)
            if cell.cell_type == "code":
                cell.outputs = [o for o in cell.outputs if not (o.get("output_type") == "stream"
                                                                and o.get("name") == "stderr")]
        written.append(folder / f"{name}.slides.html")
        write_slides(deck, written[-1], reveal, require_js, mathjax)
    return written
