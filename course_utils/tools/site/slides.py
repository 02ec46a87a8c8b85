"""Workshop decks, one per chapter: reveal.js slides written for a room, kept in the chapter's notebook, with the
chapter's prose as the presenter's speaker notes.

A chapter's slides live in its cells' metadata, under ``slides``: a list of slides, each a mapping with

- ``title`` (required): the slide's heading (Markdown, like every text here);
- ``bullets``: a few short lines in the chapter's own words;
- ``show``, on a code cell only: ``"picture"``, the pictures the executed cell drew (meshes, layouts, data
  flow, curves: its images and HTML pictures), not what it printed; ``"output"``, all of its output; or
  ``"code"``, its source (at most 12 lines, or the lines ``lines: [first, last]`` of it) above its output.

Title and bullets hold at most 60 words. A deck is, in the chapter's order: a title slide (the chapter's title
and stated time), the slides of its cells, and a closing slide with the exercise notebook and the times the
instructors' workshop plans give the chapter (:mod:`.pages`). The speaker notes of a slide are the markdown cell
it is on or, for a slide on a code cell, the markdown cells right above that cell; every other markdown cell
joins the notes of the slide before it, so the speaker view holds the whole chapter. JupyterLab and nbval ignore
cell metadata: the learner reading the chapter sees none of it. :func:`deck_problems` says what a chapter's deck
lacks (a slide per 5 minutes the chapter states, a slide in each ``##`` section); the browser test checks it.

A deck is nbconvert's reveal.js slideshow (slide types ``slide`` and ``notes``) of a notebook made for it, with
the course's template (``slides_template``: one slide 1280 x 720, or 720 x 1280 on an upright screen, the
speaker view on the S key); reveal.js, RequireJS and MathJax are served beside the decks (:mod:`.vendor`).
"""
import re
from pathlib import Path

import nbformat

from ..build import BADGE_ID, SETUP_ID
from .pages import PLANS, notebook_minutes, notebook_title, plan_slots
from .vendor import MATHJAX, REQUIREJS, REVEAL, copy_files, npm_package

KEYS = ("title", "bullets", "show", "lines")
SHOW = ("picture", "output", "code")
PICTURES = ("image/png", "image/jpeg", "image/svg+xml", "text/html")  # what "picture" shows of an output
MAX_WORDS = 60  # of a slide's title and bullets
MAX_CODE_LINES = 12
SLIDE_TEMPLATE = Path(__file__).resolve().parent / "slides_template"
NOTEBOOK_LINK = re.compile(r"(\.\./(?:notebooks|exercises|solutions)/\w+)\.ipynb")
WORD = re.compile(r"\S*\w\S*")  # a word: a run of characters without spaces, holding a letter or a digit
SECTION = re.compile(r"^## +(.+?)\s*$", re.M)  # a chapter's section, which its deck covers
HOW_TO = ("give the cells that carry the chapter's ideas a `slides` list in their metadata (JupyterLab: the right "
          "sidebar's property inspector, Advanced Tools, Cell Metadata), e.g. {\"slides\": [{\"title\": \"...\", "
          "\"bullets\": [\"...\", \"...\"]}]} on a markdown cell, {\"slides\": [{\"title\": \"...\", \"show\": "
          "\"picture\"}]} on a cell that draws (see course_utils/tools/site/slides.py)")


class SlideError(ValueError):
    """A cell's ``slides`` metadata is not as a deck needs it; the message names the notebook, the cell and what
    to change."""


def count_words(text):
    """The words of ``text`` as a slide shows them: runs of non-space characters holding a letter or a digit
    (``"x = tf.ones((2, 2))"`` has 3).

    Example:
        >>> count_words("A `tf.Variable` is **mutable**, a tensor is not.")
        8
    """
    return len(WORD.findall(text))


def cell_slides(cell, where):
    """The slides of one chapter cell (its ``slides`` metadata), checked.

    Args:
        cell: a notebook cell.
        where: how to name the cell in a message (``"notebooks/04_x.ipynb, cell c12"``).

    Raises:
        SlideError: the metadata is not a list of slides with a title, has unknown keys, too many words, a ``show``
            on a markdown cell or of another value than those above, or more than 12 lines of code.

    Example:
        >>> cell_slides(nbformat.v4.new_markdown_cell(metadata={"slides": [{"title": "Meshes"}]}), "cell c1")
        [{'title': 'Meshes'}]
    """
    slides = cell.metadata.get("slides", [])
    if not isinstance(slides, list):
        raise SlideError(f"{where}: `slides` must be a list of slides, e.g. [{{\"title\": \"...\"}}].")
    for number, slide in enumerate(slides, start=1):
        name = f"{where}, slide {number}"
        if not isinstance(slide, dict) or not isinstance(slide.get("title"), str) or not slide["title"].strip():
            raise SlideError(f"{name}: a slide is a mapping with a \"title\" (got {slide!r}).")
        unknown = sorted(set(slide) - set(KEYS))
        if unknown:
            raise SlideError(f"{name}: unknown key(s) {unknown}; a slide has {', '.join(KEYS)}.")
        bullets = slide.get("bullets", [])
        if not isinstance(bullets, list) or not all(isinstance(b, str) and b.strip() for b in bullets):
            raise SlideError(f"{name}: \"bullets\" must be a list of lines of text.")
        words = count_words(" ".join([slide["title"], *bullets]))
        if words > MAX_WORDS:
            raise SlideError(f"{name}: {words} words in its title and bullets; a slide shows at most {MAX_WORDS}. "
                             "Say less on the slide: the cell's prose is in the speaker notes.")
        show = slide.get("show")
        if show is not None and (show not in SHOW or cell.cell_type != "code"):
            raise SlideError(f"{name}: \"show\" is {show!r}; it is \"picture\", \"output\" or \"code\", on a code "
                             "cell only.")
        code_lines(cell, slide, name)
    return slides


def code_lines(cell, slide, where):
    """The source lines a ``"code"`` slide shows: the cell's, or its ``lines: [first, last]`` (from 1).

    Raises:
        SlideError: ``lines`` without ``show: "code"``, not two line numbers of the cell, or more than 12 lines.
    """
    lines = cell.source.splitlines() if cell.cell_type == "code" else []
    span = slide.get("lines")
    if span is not None:
        if slide.get("show") != "code":
            raise SlideError(f"{where}: \"lines\" picks the code lines a \"show\": \"code\" slide shows; add that, "
                             "or remove \"lines\".")
        if not (isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span)
                and 1 <= span[0] <= span[1] <= len(lines)):
            raise SlideError(f"{where}: \"lines\" is {span!r}; it is [first, last], two line numbers of the cell "
                             f"(1 to {len(lines)}).")
        lines = lines[span[0] - 1:span[1]]
    if slide.get("show") == "code" and len(lines) > MAX_CODE_LINES:
        raise SlideError(f"{where}: shows {len(lines)} lines of code; a slide shows at most {MAX_CODE_LINES}. Pick "
                         f"the lines that matter with \"lines\": [first, last].")
    return lines


def chapter_slides(nb, where):
    """The slides of the chapter ``nb`` in its order, each ``(slide, cell, notes)``: the cell it is on and the
    markdown sources of its speaker notes (the rule in the module's docstring). ``where`` names the notebook in
    messages.

    Raises:
        SlideError: a cell's slides are not as :func:`cell_slides` needs them.

    Example:
        >>> cells = [nbformat.v4.new_markdown_cell("## Meshes", metadata={"slides": [{"title": "What a mesh is"}]}),
        ...          nbformat.v4.new_markdown_cell("A mesh is ..."), nbformat.v4.new_code_cell("mesh = ...")]
        >>> [(slide["title"], notes) for slide, cell, notes in chapter_slides(nbformat.v4.new_notebook(cells=cells), "")]
        [('What a mesh is', ['## Meshes', 'A mesh is ...'])]
    """
    groups, above = [], []  # groups: [cell, its slides, its notes]; above: markdown cells no slide is on, yet
    for cell in nb.cells:
        if cell.get("id") in (BADGE_ID, SETUP_ID):
            continue
        slides = cell_slides(cell, f"{where}, cell {cell.get('id')}")
        if cell.cell_type == "markdown" and not slides:
            above.append(cell.source)
            continue
        if not groups and not slides:
            continue  # a code cell before the first slide: the prose above it waits for the first slide
        if groups and not (slides and cell.cell_type == "code"):
            groups[-1][2].extend(above)  # prose that no slide is on, and no code slide follows, joins the last slide
            above = []
        if slides:
            groups.append([cell, slides, above + ([cell.source] if cell.cell_type == "markdown" else [])])
        above = []
    if groups:
        groups[-1][2].extend(above)
    return [(slide, cell, notes) for cell, slides, notes in groups for slide in slides]


def sections_without_slides(nb):
    """The ``##`` sections of the chapter ``nb`` that no slide is on: none of the cells from the section's heading
    to the next heading carries ``slides`` (a cell that holds two headings counts for both).

    Example:
        >>> sections_without_slides(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("## Meshes")]))
        ['Meshes']
    """
    missing = {}  # heading: covered
    current = []
    for cell in nb.cells:
        headings = SECTION.findall(cell.source) if cell.cell_type == "markdown" else []
        if headings:
            current = headings
            missing.update((heading, False) for heading in headings if heading not in missing)
        if cell.metadata.get("slides"):
            missing.update((heading, True) for heading in current)
    return [heading for heading, covered in missing.items() if not covered]


def deck_problems(nb, path, root):
    """What the deck of the chapter ``nb`` (at ``path``, in the course at ``root``) lacks, as sentences that say
    what to add: at least one slide per 5 minutes the chapter states, and a slide in every ``##`` section, so that
    a new section cannot go unseen by the deck. ``[]`` when it has all it needs.

    Raises:
        SlideError: a cell's slides are not as :func:`cell_slides` needs them.
    """
    name = Path(path).relative_to(root).as_posix()
    count, wanted = len(chapter_slides(nb, name)), notebook_minutes(path) // 5
    problems = []
    if count < wanted:
        problems.append(f"{name} has {count} slide(s) for its {notebook_minutes(path)} minutes; a workshop deck "
                        f"needs at least {wanted} (one per 5 minutes): {HOW_TO}.")
    for heading in sections_without_slides(nb):
        problems.append(f"{name}: the section '## {heading}' has no slide; put one on one of its cells (a title "
                        f"and a few bullets in the chapter's words, or a picture the section draws).")
    return problems


def slide_cells(slide, cell, notes, where):
    """The cells of one slide in the notebook nbconvert turns into the deck: its title and bullets, what it shows
    of its executed code cell, and the speaker notes. ``where`` names the notebook in messages.

    Raises:
        SlideError: the slide shows the picture of a cell that drew none.
    """
    text = "\n".join([f"## {slide['title']}", "", *(f"- {line}" for line in slide.get("bullets", []))])
    kind = slide.get("show") or "text"
    cells = [nbformat.v4.new_markdown_cell(text, metadata={"slideshow": {"slide_type": "slide",
                                                                         "data": {"kind": kind}}})]
    if slide.get("show"):
        shown = nbformat.v4.new_code_cell("\n".join(code_lines(cell, slide, "")), metadata={
            "tags": [] if slide["show"] == "code" else ["remove_input"]})
        if "mystnb" in cell.metadata:  # the pictures' alt text (set by the site's build)
            shown.metadata["mystnb"] = cell.metadata["mystnb"]
        shown.outputs = [o for o in cell.get("outputs", []) if not (o.get("output_type") == "stream"
                                                                   and o.get("name") == "stderr")]
        if slide["show"] == "picture":
            pictures = {}  # one of each: a figure a cell returns is also drawn by the inline backend (two outputs)
            for output in shown.outputs:
                drawn = tuple(str(output.get("data", {}).get(mime, "")) for mime in PICTURES)
                if any(drawn):
                    pictures.setdefault(drawn, output)
            shown.outputs = list(pictures.values())
            if not shown.outputs:
                raise SlideError(f"{where}: shows the picture of cell {cell.get('id')}, which drew none; show "
                                 "\"output\" or \"code\", or put the slide on the cell that draws.")
        cells.append(shown)
    if notes:
        cells.append(nbformat.v4.new_markdown_cell("\n\n".join(notes), metadata={"slideshow": {"slide_type": "notes"}}))
    return cells


def closing_text(root, name):
    """The Markdown of a deck's last slide: the chapter's exercise notebook and its stated time, where the
    instructors' workshop plans put the chapter (or that it is for self-study), and the next chapter."""
    chapter = int(name[:2])
    exercise = next((root / "exercises").glob(f"{chapter:02d}_*.ipynb"), None)
    lines = [f"**Exercises:** [`exercises/{exercise.name}`](../exercises/{exercise.name}), about "
             f"{notebook_minutes(exercise)} minutes"] if exercise else []
    planned = False
    for plan, (items, start) in PLANS.items():
        slots = {(folder, what): (begin, end, length) for begin, end, length, folder, what
                 in plan_slots(root, items, start)}
        if ("notebooks", chapter) in slots:
            planned = True
            begin, end, length = slots["notebooks", chapter]
            lines.append(f"**{plan}:** {begin}–{end} ({length} min)")
            if ("exercises", chapter) in slots:
                lines[-1] += ", then the exercises, {}–{}".format(*slots["exercises", chapter][:2])
            elif exercise:
                lines[-1] += "; the exercises are homework"
    if not planned:
        lines.append(f"**Self-study:** about {notebook_minutes(root / 'notebooks' / f'{name}.ipynb')} minutes; in "
                     "neither workshop plan")
    following = sorted(p for p in (root / "notebooks").glob("*.ipynb") if int(p.stem[:2]) > chapter)
    if following:
        lines.append(f"**Next:** [{notebook_title(following[0])}](../notebooks/{following[0].name})")
    title = "Your turn" if exercise else "Up next" if following else "The end of the course"
    return "\n".join([f"## {title}", "", *(f"- {line}" for line in lines)])


def deck_notebook(nb, name, root):
    """The notebook nbconvert turns into the deck of the executed chapter ``nb`` (``notebooks/<name>.ipynb`` of
    the course at ``root``): the title slide, the chapter's slides with their notes, the closing slide. Links to
    notebooks go to their pages (the decks sit beside them).

    Raises:
        SlideError: a cell's slides are not as :func:`cell_slides` needs them, or a slide shows the picture of a
            cell that drew none.
    """
    path = root / "notebooks" / f"{name}.ipynb"
    title = nbformat.v4.new_markdown_cell(f"# {notebook_title(path)}\n\nabout {notebook_minutes(path)} minutes",
                                          metadata={"slideshow": {"slide_type": "slide", "data": {"kind": "title"}}})
    cells = [title]
    where = f"notebooks/{name}.ipynb"
    for slide, cell, notes in chapter_slides(nb, where):
        cells += slide_cells(slide, cell, notes, where)
    cells.append(nbformat.v4.new_markdown_cell(closing_text(root, name), metadata={
        "slideshow": {"slide_type": "slide", "data": {"kind": "closing"}}}))
    for cell in cells:
        if cell.cell_type == "markdown":
            cell.source = NOTEBOOK_LINK.sub(r"\1.html", cell.source)
    deck = nbformat.v4.new_notebook(cells=cells, metadata={k: v for k, v in nb.metadata.items()
                                                           if k in ("kernelspec", "language_info")})
    deck.metadata["title"] = notebook_title(path)
    return deck


def write_deck(deck, target, reveal, require_js=None, mathjax=None):
    """Write the reveal.js deck of the notebook ``deck`` (:func:`deck_notebook`) to the file ``target``, loading
    reveal.js from ``reveal`` (a URL prefix, relative to the deck's folder or absolute) through RequireJS from
    ``require_js``, and MathJax 3 from ``mathjax`` (scripts' addresses; None: on a CDN)."""
    from nbconvert import SlidesExporter
    from traitlets.config import Config

    config = Config()
    config.SlidesExporter.reveal_url_prefix = reveal
    if require_js:
        config.SlidesExporter.require_js_url = require_js
    config.SlidesExporter.mathjax_url = mathjax or f"https://cdn.jsdelivr.net/npm/{MATHJAX}/es5/tex-chtml.js"
    config.SlidesExporter.reveal_theme = "white"  # its font is served with reveal.js (the default theme fetches fonts)
    config.SlidesExporter.exclude_input_prompt = True
    config.SlidesExporter.exclude_output_prompt = True
    config.TagRemovePreprocessor.remove_input_tags = {"remove_input"}
    exporter = SlidesExporter(config=config, extra_template_basedirs=[str(SLIDE_TEMPLATE.parent)],
                              template_name=SLIDE_TEMPLATE.name)
    body, _ = exporter.from_notebook_node(deck)
    Path(target).write_text(body, encoding="utf-8")


def build_slides(chapters, folder, vendor, root, mathjax=None, echo=print):
    """Write a deck per executed chapter (``{name: notebook}`` of the course at ``root``) into ``folder`` as
    ``<name>.slides.html``, with reveal.js and RequireJS beside them (from the cache folder ``vendor``; from their
    CDN where npm cannot fetch them) and MathJax from ``mathjax`` (an address; None: its CDN). A chapter without
    slides gets a deck of its title and closing slides, and ``echo`` says what to add. Returns the paths written.

    Raises:
        SlideError: a cell's slides are not as :func:`cell_slides` needs them.
    """
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
        deck = deck_notebook(nb, name, Path(root))
        if not any(cell.metadata.get("slides") for cell in nb.cells):
            echo(f"notebooks/{name}.ipynb has no slides, so its deck is only its title and closing slides: {HOW_TO}.")
        written.append(folder / f"{name}.slides.html")
        write_deck(deck, written[-1], reveal, require_js, mathjax)
    return written
