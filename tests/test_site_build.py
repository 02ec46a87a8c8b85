"""The website's builder (course_utils.tools.site): its pages, execution cache, static widgets, slides and vendoring.
The built site itself is read in a browser by tests/environments/test_site.py."""
import re

import nbformat
import pytest

from course_utils.checkers import registry
from course_utils.tools.site import build, execution, pages, slides, vendor

ROOT = build.ROOT


def notebook(*cells):
    """A notebook of ("md" | "code", source) cells."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(s) if kind == "md" else nbformat.v4.new_code_cell(s) for kind, s in cells]
    return nb


def test_the_front_page_links_every_chapter_with_its_readme_summary_and_slides():
    text = pages.front_page(ROOT, ["notebooks", "exercises"], ["docs/instructors.md", "docs/tests.md"])
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"(notebooks/{path.stem}.ipynb)" in text and f"slides/{path.stem}.slides.html" in text
    assert "`LayoutMap`, data and model parallelism on MNIST" in text  # chapter 5's line of the README
    assert ":caption: Exercises" in text and ":caption: Solutions" not in text
    assert ":caption: About the course\n\ndocs/instructors\ndocs/tests\n" in text
    assert "(#" not in text  # no link to a README section the site does not have
    assert ":caption: Solutions" in pages.front_page(ROOT, ["notebooks", "exercises", "solutions"])
    assert f"Chapters {pages.number_span(registry())} each have exercise notebooks" in text


def test_every_chapter_gets_its_readme_summary_on_the_front_page_two_digit_numbers_too(tmp_path):
    text = pages.front_page(ROOT, ["notebooks", "exercises"])
    readme = (ROOT / "README.md").read_text()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        summary = re.search(rf"^\| {int(path.stem[:2])} \| `{path.stem}` \| (.+) \|$", readme, re.M).group(1)
        assert f"minutes | {summary} |" in text, path.stem
    rows = "| 9 | `09_nine` | nine |\n| 10 | `10_ten` | ten |\n| 12 | `12_twelve` | twelve |\n"
    assert pages.CHAPTER_ROW.findall(rows) == [("9", "09_nine", "nine"), ("10", "10_ten", "ten"),
                                               ("12", "12_twelve", "twelve")]
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "solutions").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.course]\nrepository = "a/b"\n')
    (tmp_path / "README.md").write_text("# Course\n\nIntro.\n\n## The chapters\n\n" + rows)
    for name in ("10_ten", "11_eleven"):
        nbformat.write(notebook(("md", f"# {name}\n**Time:** about 20 minutes")), tmp_path / "notebooks" / f"{name}.ipynb")
    with pytest.raises(pages.PageError, match=r"notebooks/11_eleven.ipynb has no row in README.md's chapter table; "
                                              r"add one: \| 11 \| `11_eleven` \|"):
        pages.front_page(tmp_path, ["notebooks"])


def test_a_notebook_without_a_title_is_named(tmp_path):
    path = tmp_path / "untitled.ipynb"
    nbformat.write(notebook(("md", "no heading"), ("code", "1")), path)
    with pytest.raises(pages.PageError, match="untitled.ipynb has no '# title' line"):
        pages.notebook_title(path)


def test_the_instructors_page_ranks_the_hardest_exercises_from_a_grades_table(tmp_path):
    grades = tmp_path / "grades.csv"
    grades.write_text("submission,chapter,exercise,points,max_points,status\n"
                      "a,4,q1,2,2,correct\nb,4,q1,2,2,correct\na,4,q6,1,6,partial\nb,4,q6,0,6,incorrect\n"
                      "a,4,,0,0,\n")
    assert pages.hardest_exercises(grades) == [("4.q6", 1 / 12, 2), ("4.q1", 1.0, 2)]
    sections = pages.instructors_sections(ROOT, {"05_dtensor_with_keras": 91.0}, "Run time: measured so.",
                                          grades=grades)
    assert "| 4.q6 | 8% | 2 |" in sections["hardest-exercises"] and "../slides/04_" in sections["slides"]
    assert "| 91 s | not measured |" in sections["run-times"] and "Run time: measured so." in sections["run-times"]
    assert "python3 course.py grade" in pages.instructors_sections(ROOT, {}, "")["hardest-exercises"]
    plans = pages.workshop_plans(ROOT)
    assert "### A 3-hour workshop" in plans and "### A full day" in plans
    (tmp_path / "bad.csv").write_text("name,score\nx,1\n")
    with pytest.raises(pages.PageError, match="is not a grades table"):
        pages.hardest_exercises(tmp_path / "bad.csv")


def test_workshop_plans_add_up_the_times_the_notebooks_state():
    table, minutes = pages.workshop_plan(ROOT, pages.THREE_HOURS, "9:00")
    stated = [pages.notebook_minutes(next((ROOT / folder).glob(f"{n:02d}_*.ipynb"))) if folder != "pause" else n
              for folder, n in pages.THREE_HOURS]
    assert minutes == sum(stated) <= 180
    assert table.splitlines()[2].startswith("| 9:00 | 0 · Welcome") and f"| {9 + minutes // 60}:" in table
    _, day = pages.workshop_plan(ROOT, pages.FULL_DAY, "9:00")
    assert 6 * 60 <= day <= 9 * 60


def test_every_chapter_and_exercise_states_its_time():
    for folder in ("notebooks", "exercises"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            assert 5 <= pages.notebook_minutes(path) <= 90, path


def test_a_notebook_without_a_stated_time_is_named(tmp_path):
    path = tmp_path / "01_x.ipynb"
    nbformat.write(notebook(("md", "# Title\n**Time:** the notebook starts processes")), path)
    with pytest.raises(pages.PageError, match=r"01_x.ipynb has no '\*\*Time:\*\* about N minutes' line"):
        pages.notebook_minutes(path)


def test_chapter_run_times_are_summed_from_a_junit_report(tmp_path):
    report = tmp_path / "main.xml"
    report.write_text('<testsuites><testsuite>'
                      '<testcase classname="notebooks.05_dtensor_with_keras.ipynb" name="Cell 1" time="2.5"/>'
                      '<testcase classname="notebooks.05_dtensor_with_keras.ipynb" name="Cell 2" time="1.0"/>'
                      '<testcase classname="tests.environments.test_colab" name="test[notebooks/01_x.ipynb]" '
                      'time="9"/><testcase classname="tests.test_a" name="t" time="5"/></testsuite></testsuites>')
    assert pages.chapter_seconds(report) == {"05_dtensor_with_keras": 3.5, "01_x": 9.0}
    assert pages.chapter_seconds(tmp_path / "missing.xml") == {}


def test_execution_is_cached_and_a_raising_cell_or_a_dead_kernel_is_named(tmp_path):
    path = tmp_path / "demo.ipynb"
    nbformat.write(notebook(("md", "# Demo"), ("code", "import time\nprint(time.time_ns())")), path)
    ran = execution.execute(path, tmp_path / "cache", ROOT)
    first = ran.cells[1].outputs[0]["text"]
    assert ran.cells[1].execution_count == 1 and ran.metadata["course_run"]["how"] == "built"
    assert len(list((tmp_path / "cache").glob("demo-*.ipynb"))) == 1
    nbformat.write(notebook(("md", "# Demo, reworded"), ("code", "import time\nprint(time.time_ns())")), path)
    again = execution.execute(path, tmp_path / "cache", ROOT)  # the same code: from the cache, with the new prose
    assert again.cells[0].source == "# Demo, reworded" and again.cells[1].outputs[0]["text"] == first
    nbformat.write(notebook(("md", "# Demo"), ("code", "x = 1"), ("code", "1 / 0")), path)
    with pytest.raises(execution.ExecutionError, match=r"demo.ipynb, code cell 2 .*'1 / 0'.* raised ZeroDivisionError"):
        execution.execute(path, tmp_path / "cache", ROOT)
    nbformat.write(notebook(("code", "import os\nos._exit(1)")), path)
    with pytest.raises(execution.ExecutionError, match=r"code cell 1 .*DeadKernelError"):
        execution.execute(path, tmp_path / "cache", ROOT)


def test_the_cache_key_follows_the_code_and_the_helpers_not_the_prose(tmp_path, monkeypatch):
    nb = notebook(("md", "# A"), ("code", "x = 1"))
    key = execution.code_key(nb, ROOT)
    nb.cells[0].source = "# B"
    assert execution.code_key(nb, ROOT) == key
    nb.cells[1].source = "x = 2"
    assert execution.code_key(nb, ROOT) != key
    helpers = tmp_path / "course_utils"
    helpers.mkdir()
    (helpers / "data.py").write_text("A = 1\n")
    (tmp_path / "requirements.txt").write_text("tensorflow\n")
    monkeypatch.setattr(execution, "PACKAGE", helpers)
    before = execution.code_key(nb, tmp_path)
    (helpers / "data.py").write_text("A = 2\n")
    assert execution.code_key(nb, tmp_path) != before


def test_an_executed_copy_counts_only_with_the_chapters_code(tmp_path):
    chapter, ran = tmp_path / "ch.ipynb", tmp_path / "executed" / "notebooks" / "ch.ipynb"
    ran.parent.mkdir(parents=True)
    nbformat.write(notebook(("md", "# New words"), ("code", "print(1)")), chapter)
    executed = notebook(("md", "# Old words"), ("code", "print(1)"))
    executed.cells[1].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    executed.metadata["course_run"] = {"seconds": 3.0, "cores": 2, "date": "2026-11-28", "how": "tests"}
    nbformat.write(executed, ran)
    copy = execution.executed_copy(chapter, tmp_path / "executed", ROOT)
    assert copy.cells[0].source == "# New words" and copy.cells[1].outputs[0]["text"] == "1\n"
    assert copy.metadata["course_run"]["how"] == "tests"
    nbformat.write(notebook(("code", "print(2)")), ran)
    assert execution.executed_copy(chapter, tmp_path / "executed", ROOT) is None
    assert execution.executed_copy(chapter, None, ROOT) is None


def test_a_page_keeps_an_explorers_picture_and_drops_other_widgets_the_badge_and_tensorflows_log_lines():
    nb = notebook(("md", "[badge]"), ("code", "set-up"), ("md", "## Explorers"), ("code", "explorer"), ("code", "bar"),
                  ("code", "plot"))
    nb.cells[0].id, nb.cells[1].id = "colab-badge", "setup"
    widget = {"model_id": "x", "version_major": 2, "version_minor": 0}
    nb.cells[3].outputs = [nbformat.v4.new_output("display_data", data={
        build.WIDGET_VIEW: widget, "text/html": "<p>first state</p>", "text/plain": "LayoutExplorer(...)"})]
    nb.cells[4].outputs = [nbformat.v4.new_output("display_data", data={build.WIDGET_VIEW: widget,
                                                                        "text/plain": "  0%|   | 0/468"}),
                           nbformat.v4.new_output("stream", name="stderr", text=(
                               "WARNING: All log messages before absl::InitializeLog() is called are written to "
                               "STDERR\nE0000 00:00:1795861138.527709   28533 cuda_platform.cc:52] failed call to "
                               "cuInit: INTERNAL\n")),
                           nbformat.v4.new_output("stream", name="stderr", text="UserWarning: a real warning\n"),
                           nbformat.v4.new_output("stream", text="done\n")]
    nb.cells[5].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=",
                                                                        "text/plain": "<Figure>"})]
    nb.metadata["widgets"] = {"state": {}}
    page = build.for_the_page(nb, chapter=4)
    assert [c.get("id") for c in page.cells][0] == "setup" and "remove-cell" in page.cells[0].metadata["tags"]
    assert page.cells[2].outputs[0]["data"] == {"text/html": "<p>first state</p>"}
    assert [o.get("text") for o in page.cells[3].outputs] == ["UserWarning: a real warning\n", "done\n"]
    assert page.cells[4].metadata["mystnb"]["image"]["alt"] == "Figure of the section 'Explorers' of chapter 4"
    assert "widgets" not in page.metadata


def test_the_pages_folder_is_replaced_only_when_this_build_wrote_it(tmp_path):
    with pytest.raises(build.SiteBuildError, match="is the course's folder or holds it"):
        build.clear_out(ROOT, ROOT)
    with pytest.raises(build.SiteBuildError, match="is the course's folder or holds it"):
        build.clear_out(ROOT.parent, ROOT)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "mine.txt").write_text("keep me")
    with pytest.raises(build.SiteBuildError, match="already holds files"):
        build.clear_out(tmp_path / "docs", ROOT)
    (tmp_path / "site" / "old").mkdir(parents=True)
    (tmp_path / "site" / build.MARKER).write_text("")
    build.clear_out(tmp_path / "site", ROOT)
    assert list((tmp_path / "site").iterdir()) == []


def slide_chapter():
    """A small chapter with slides on a title, a section, a cell that draws, a short code cell and a recap."""
    nb = notebook(("md", "[badge]"), ("code", "set-up"), ("md", "# Title\nintro"), ("md", "## Meshes\nA mesh is ..."),
                  ("md", "More about meshes."), ("md", "Why the picture:"), ("code", "draw(mesh)"), ("code", "x = 1"),
                  ("md", "The code below:"), ("code", "secret_code = 1\nprint('measured 42')"), ("md", "## Recap\n- done"))
    nb.cells[0].id, nb.cells[1].id = "colab-badge", "setup"
    for index, slides_of_cell in {2: [{"title": "You will learn", "bullets": ["what a mesh is"]}],
                                  3: [{"title": "What a mesh is", "bullets": ["devices in a named grid"]}],
                                  6: [{"title": "A mesh, drawn", "show": "picture"}],
                                  9: [{"title": "Measured", "show": "code"}],
                                  10: [{"title": "Recap", "bullets": ["done"]}, {"title": "Questions?"}]}.items():
        nb.cells[index].metadata["slides"] = slides_of_cell
    nb.cells[6].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=",
                                                                        "text/plain": "<Figure>"}),
                           nbformat.v4.new_output("stream", text="drew it\n")]
    nb.cells[9].outputs = [nbformat.v4.new_output("stream", text="measured 42\n"),
                           nbformat.v4.new_output("stream", name="stderr", text="W0000 a log line\n")]
    return nb


def test_a_slides_notes_are_the_prose_of_its_cell_or_of_the_markdown_right_above_its_code_cell():
    found = [(slide["title"], notes) for slide, _, notes in slides.chapter_slides(slide_chapter(), "ch.ipynb")]
    assert found == [("You will learn", ["# Title\nintro"]),
                     ("What a mesh is", ["## Meshes\nA mesh is ..."]),
                     ("A mesh, drawn", ["More about meshes.", "Why the picture:"]),
                     ("Measured", ["The code below:"]),
                     ("Recap", ["## Recap\n- done"]), ("Questions?", ["## Recap\n- done"])]
    trailing = notebook(("md", "## A"), ("md", "more"), ("code", "x = 1"), ("md", "the end"))
    trailing.cells[0].metadata["slides"] = [{"title": "A"}]
    assert [notes for _, _, notes in slides.chapter_slides(trailing, "")] == [["## A", "more", "the end"]]


@pytest.mark.parametrize("cell, message", [
    (nbformat.v4.new_markdown_cell(metadata={"slides": {"title": "x"}}), "must be a list of slides"),
    (nbformat.v4.new_markdown_cell(metadata={"slides": [{"bullets": ["a"]}]}), 'a mapping with a "title"'),
    (nbformat.v4.new_markdown_cell(metadata={"slides": [{"title": "x", "notes": "y"}]}), r"unknown key\(s\) \['notes'\]"),
    (nbformat.v4.new_markdown_cell(metadata={"slides": [{"title": "x", "bullets": "a"}]}), '"bullets" must be a list'),
    (nbformat.v4.new_markdown_cell(metadata={"slides": [{"title": "x", "bullets": ["word " * 60]}]}),
     "61 words in its title and bullets; a slide shows at most 60"),
    (nbformat.v4.new_markdown_cell(metadata={"slides": [{"title": "x", "show": "output"}]}), "on a code cell only"),
    (nbformat.v4.new_code_cell(metadata={"slides": [{"title": "x", "show": "table"}]}), '"show" is \'table\''),
    (nbformat.v4.new_code_cell("\n".join(["x = 1"] * 13), metadata={"slides": [{"title": "x", "show": "code"}]}),
     'shows 13 lines of code; a slide shows at most 12. Pick the lines that matter with "lines"'),
    (nbformat.v4.new_code_cell("x = 1", metadata={"slides": [{"title": "x", "lines": [1, 1]}]}), '"lines" picks'),
    (nbformat.v4.new_code_cell("x = 1", metadata={"slides": [{"title": "x", "show": "code", "lines": [0, 3]}]}),
     r'"lines" is \[0, 3\]; it is \[first, last\], two line numbers of the cell \(1 to 1\)'),
])
def test_a_malformed_slide_is_named_with_what_to_change(cell, message):
    with pytest.raises(slides.SlideError, match=f"^04_x.ipynb, cell c7(, slide 1)?: .*{message}"):
        slides.cell_slides(cell, "04_x.ipynb, cell c7")


def test_a_deck_has_the_title_the_slides_with_notes_and_the_closing_slide_and_loads_only_what_the_site_serves(
        tmp_path):
    deck = slides.deck_notebook(slide_chapter(), "04_meshes_and_layouts", ROOT)
    kinds = [(c.cell_type, c.metadata.get("slideshow", {}).get("slide_type", "-")) for c in deck.cells]
    assert kinds[:4] == [("markdown", "slide"), ("markdown", "slide"), ("markdown", "notes"), ("markdown", "slide")]
    assert deck.cells[0].source == (f"# {pages.notebook_title(ROOT / 'notebooks' / '04_meshes_and_layouts.ipynb')}\n\n"
                                    f"about {pages.notebook_minutes(ROOT / 'notebooks' / '04_meshes_and_layouts.ipynb')} "
                                    "minutes")
    picture = next(c for c in deck.cells if c.cell_type == "code" and "draw" in c.source)
    assert [list(o.get("data", {})) for o in picture.outputs] == [["image/png", "text/plain"]]  # not what it printed
    assert picture.metadata["tags"] == ["remove_input"]
    assert deck.cells[-1].source == slides.closing_text(ROOT, "04_meshes_and_layouts").replace(".ipynb)", ".html)")
    slides.write_deck(deck, tmp_path / "deck.html", "reveal.js", "requirejs/require.js", "../_static/mathjax/tex-chtml.js")
    html = (tmp_path / "deck.html").read_text()
    assert html.count('<section data-kind="') == 2 * len([c for c in deck.cells if c.metadata.get("slideshow", {})
                                                          .get("slide_type") == "slide"])  # reveal's two levels
    assert "secret_code" in html and "measured 42" in html and "W0000 a log line" not in html  # code shown: no log
    assert "draw(mesh)" not in html and "drew it" not in html  # a picture slide: the picture alone
    assert '<aside class="notes">' in html and "Why the picture:" in html and "../exercises/04_meshes_and_layouts.html" in html
    loaded = set(re.findall(r'(?:src|href)="([^"#][^"]*)"', html)) | set(re.findall(r'"([\w./-]+\.js)"', html))
    assert sorted(p for p in loaded if not p.startswith(("../exercises/", "../notebooks/", "data:"))) == [
        "../_static/favicon.svg", "../_static/mathjax/tex-chtml.js", "requirejs/require.js", "reveal.js/dist/reveal.css",
        "reveal.js/dist/reveal.js", "reveal.js/dist/theme/white.css", "reveal.js/plugin/notes/notes.js"]


def test_a_picture_slide_on_a_cell_that_drew_nothing_is_named():
    nb = slide_chapter()
    nb.cells[6].outputs = [nbformat.v4.new_output("stream", text="no picture\n")]
    with pytest.raises(slides.SlideError, match="shows the picture of cell .*, which drew none"):
        slides.deck_notebook(nb, "04_meshes_and_layouts", ROOT)


def test_the_closing_slide_gives_the_exercises_and_the_planned_times_computed_from_the_notebooks():
    minutes = lambda folder, n: pages.notebook_minutes(next((ROOT / folder).glob(f"{n:02d}_*.ipynb")))
    clock = lambda m: f"{m // 60}:{m % 60:02d}"
    start = 9 * 60 + minutes("notebooks", 0) + minutes("notebooks", 1) + minutes("exercises", 1)  # the full day
    end = start + minutes("notebooks", 2)
    text = slides.closing_text(ROOT, "02_strategies_one_machine")
    assert text.startswith("## Your turn\n")
    assert (f"- **Exercises:** [`exercises/02_strategies_one_machine.ipynb`](../exercises/02_strategies_one_machine"
            f".ipynb), about {minutes('exercises', 2)} minutes") in text
    assert (f"- **Full day:** {clock(start)}–{clock(end)} ({minutes('notebooks', 2)} min), then the exercises, "
            f"{clock(end)}–{clock(end + minutes('exercises', 2))}") in text
    assert "; the exercises are homework" in text  # the 3-hour plan leaves them out
    assert "[3 · Beyond one process" in text
    final = max((ROOT / "notebooks").glob("*.ipynb"))
    last = slides.closing_text(ROOT, final.stem)
    assert "Next" not in last and "minutes; in neither workshop plan" in last
    alone = slides.closing_text(ROOT, "10_tune_performance")  # no exercises, in no plan
    assert alone.startswith("## Up next") and "Exercises" not in alone
    assert f"**Self-study:** about {minutes('notebooks', 10)} minutes; in neither workshop plan" in alone
    assert slides.closing_text(ROOT, "00_welcome").startswith("## Up next")


def test_a_deck_too_thin_for_its_time_or_silent_on_a_section_is_named_with_what_to_add(tmp_path):
    path = tmp_path / "notebooks" / "11_x.ipynb"
    path.parent.mkdir()
    nb = notebook(("md", "# 11 · X\n**Time:** about 10 minutes."), ("md", "## A\ntext"), ("code", "x = 1"),
                  ("md", "## B\ntext"), ("md", "## C\nthe same cell holds\n## D"))
    nbformat.write(nb, path)
    problems = slides.deck_problems(nb, path, tmp_path)
    assert problems[0].startswith("notebooks/11_x.ipynb has 0 slide(s) for its 10 minutes; a workshop deck needs at "
                                  "least 2 (one per 5 minutes): give the cells that carry the chapter's ideas a "
                                  "`slides` list in their metadata")
    assert [p.split("'")[1] for p in problems[1:]] == ["## A", "## B", "## C", "## D"]
    nb.cells[2].metadata["slides"] = [{"title": "A, in code", "show": "code"}]
    nb.cells[4].metadata["slides"] = [{"title": "C and D"}, {"title": "More"}]
    assert slides.sections_without_slides(nb) == ["B"]
    assert slides.deck_problems(nb, path, tmp_path) == [
        "notebooks/11_x.ipynb: the section '## B' has no slide; put one on one of its cells (a title and a few bullets "
        "in the chapter's words, or a picture the section draws)."]


def test_every_chapter_has_slides_that_the_deck_accepts():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert slides.chapter_slides(nbformat.read(path, as_version=4), path.name), path.name
    assert all("slides" not in c.metadata for c in nbformat.read(ROOT / "exercises" / "04_meshes_and_layouts.ipynb",
                                                                 as_version=4).cells)


def test_words_are_counted_as_a_slide_shows_them():
    assert slides.count_words("A `tf.Variable` is **mutable**, a tensor is not.") == 8
    assert slides.count_words("x = tf.ones((2, 2)) | - 3") == 4


def test_without_npm_a_package_is_not_fetched_and_the_reason_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on it
    said = []
    assert vendor.npm_package("reveal.js@4.6.1", tmp_path / "cache", echo=said.append) is None
    assert "Could not fetch reveal.js@4.6.1 with npm" in said[0] and "CDN" in said[0]


def test_the_test_run_keeps_each_notebook_nbval_ran_with_its_outputs(tmp_path):
    """The root conftest's hook (it reads nbval's outputs, which nbval keeps on its test items)."""
    import os
    import subprocess
    import sys

    nbformat.write(notebook(("md", "# T"), ("code", "print(6 * 7)")), tmp_path / "good.ipynb")
    nbformat.write(notebook(("md", "# T"), ("code", "1 / 0")), tmp_path / "bad.ipynb")
    out = tmp_path / "executed"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "--nbval-lax", "-p",
                          "no:cacheprovider", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "good.ipynb"),
                          str(tmp_path / "bad.ipynb"), f"--executed-notebooks={out}"],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert "1 failed, 1 passed" in run.stdout, run.stdout[-2000:]
    ran = nbformat.read(out / tmp_path.name / "good.ipynb", as_version=4)
    assert ran.cells[1].outputs[0]["text"] == "42\n" and ran.metadata["course_run"]["how"] == "tests"
    assert not (out / tmp_path.name / "bad.ipynb").exists()  # a notebook with a failed cell is not kept
