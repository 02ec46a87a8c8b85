"""The website's builder (course_utils.tools.site): its pages, execution cache, static widgets, slides and vendoring.
The built site itself is read in a browser by tests/environments/test_site.py."""
import re

import nbformat
import pytest

from course_utils.tools.site import build, pages, slides, vendor

ROOT = build.ROOT


def notebook(*cells):
    """A notebook of ("md" | "code", source) cells."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(s) if kind == "md" else nbformat.v4.new_code_cell(s) for kind, s in cells]
    return nb


def test_the_front_page_links_every_chapter_with_its_readme_summary_and_slides():
    text = pages.front_page(ROOT, ["notebooks", "exercises"])
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"(notebooks/{path.stem}.ipynb)" in text and f"slides/{path.stem}.slides.html" in text
    assert "`LayoutMap`, data and model parallelism on MNIST" in text  # chapter 5's line of the README
    assert ":caption: Exercises" in text and ":caption: Solutions" not in text
    assert "(#" not in text  # no link to a README section the site does not have
    assert ":caption: Solutions" in pages.front_page(ROOT, ["notebooks", "exercises", "solutions"])


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
    text = pages.instructors_page(ROOT, tmp_path / "none.xml", tmp_path / "none.xml", grades)
    assert "## A 3-hour workshop" in text and "## A full day" in text and "| 4.q6 | 8% | 2 |" in text
    assert "not measured in this build" in text
    assert "python3 course.py grade" in pages.instructors_page(ROOT, tmp_path / "x", tmp_path / "x")
    (tmp_path / "bad.csv").write_text("name,score\nx,1\n")
    with pytest.raises(pages.PageError, match="is not a grades table"):
        pages.hardest_exercises(tmp_path / "bad.csv")


def test_chapter_run_times_are_summed_from_a_junit_report(tmp_path):
    report = tmp_path / "main.xml"
    report.write_text('<testsuites><testsuite>'
                      '<testcase classname="notebooks.05_dtensor_with_keras.ipynb" name="Cell 1" time="2.5"/>'
                      '<testcase classname="notebooks.05_dtensor_with_keras.ipynb" name="Cell 2" time="1.0"/>'
                      '<testcase classname="tests.environments.test_colab" name="test[notebooks/01_x.ipynb]" '
                      'time="9"/><testcase classname="tests.test_a" name="t" time="5"/></testsuite></testsuites>')
    assert pages.chapter_seconds(report) == {"05_dtensor_with_keras": 3.5, "01_x": 9.0}
    assert pages.chapter_seconds(tmp_path / "missing.xml") == {}


def test_execution_is_cached_by_code_and_a_raising_cell_is_named(tmp_path):
    path = tmp_path / "demo.ipynb"
    nbformat.write(notebook(("md", "# Demo"), ("code", "print(6 * 7)")), path)
    ran = build.execute(path, tmp_path / "cache")
    assert ran.cells[1].outputs[0]["text"] == "42\n" and ran.cells[1].execution_count == 1
    assert len(list((tmp_path / "cache").glob("demo-*.ipynb"))) == 1
    nbformat.write(notebook(("md", "# Demo, reworded"), ("code", "print(6 * 7)")), path)  # same code: the cache
    again = build.execute(path, tmp_path / "cache")
    assert again.cells[0].source == "# Demo, reworded" and again.cells[1].outputs[0]["text"] == "42\n"
    nbformat.write(notebook(("md", "# Demo"), ("code", "x = 1"), ("code", "1 / 0")), path)
    with pytest.raises(build.SiteBuildError, match=r"demo.ipynb, code cell 1 .*'1 / 0'.* raised ZeroDivisionError"):
        build.execute(path, tmp_path / "cache")


def test_an_executed_copy_counts_only_with_the_chapters_code(tmp_path):
    chapter, ran = tmp_path / "ch.ipynb", tmp_path / "executed" / "notebooks" / "ch.ipynb"
    ran.parent.mkdir(parents=True)
    nbformat.write(notebook(("md", "# New words"), ("code", "print(1)")), chapter)
    executed = notebook(("md", "# Old words"), ("code", "print(1)"))
    executed.cells[1].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    nbformat.write(executed, ran)
    copy = build.executed_copy(chapter, tmp_path / "executed")
    assert copy.cells[0].source == "# New words" and copy.cells[1].outputs[0]["text"] == "1\n"
    nbformat.write(notebook(("code", "print(2)")), ran)
    assert build.executed_copy(chapter, tmp_path / "executed") is None
    assert build.executed_copy(chapter, None) is None


def test_a_page_keeps_an_explorers_picture_and_drops_other_widgets():
    nb = notebook(("code", "explorer"), ("code", "bar"))
    widget = {"model_id": "x", "version_major": 2, "version_minor": 0}
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={
        build.WIDGET_VIEW: widget, "text/html": "<p>first state</p>", "text/plain": "LayoutExplorer(...)"})]
    nb.cells[1].outputs = [nbformat.v4.new_output("display_data", data={build.WIDGET_VIEW: widget,
                                                                        "text/plain": "  0%|   | 0/468"}),
                           nbformat.v4.new_output("stream", text="done\n")]
    nb.metadata["widgets"] = {"state": {}}
    page = build.for_the_page(nb)
    assert page.cells[0].outputs[0]["data"] == {"text/html": "<p>first state</p>"}
    assert [o["output_type"] for o in page.cells[1].outputs] == ["stream"] and "widgets" not in page.metadata


def test_slides_open_at_headings_pictures_and_each_sections_last_printed_number():
    nb = slides.mark_slides(notebook(("md", "[badge]"), ("code", "print('set-up')"), ("md", "# Title"),
                                     ("code", "x = 1"), ("md", "## A section\ntext"), ("code", "print(x)"),
                                     ("code", "cu.plot_history(h)"), ("code", "print('the number', x)"),
                                     ("md", "### a subheading"), ("code", "y = 2")))
    kinds = [cell.metadata["slideshow"]["slide_type"] for cell in nb.cells]
    assert kinds == ["skip", "skip", "slide", "skip", "slide", "skip", "subslide", "subslide", "skip", "skip"]


def test_every_chapter_carries_its_slide_metadata():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        kinds = [cell.metadata.get("slideshow", {}).get("slide_type") for cell in cells]
        assert None not in kinds and kinds.count("slide") >= 2, path.name
    assert all("slideshow" not in c.metadata for c in nbformat.read(ROOT / "exercises" / "04_meshes_and_layouts.ipynb",
                                                                     as_version=4).cells)


def test_a_deck_shows_the_marked_cells_without_code_and_loads_only_what_the_site_serves(tmp_path):
    nb = slides.mark_slides(notebook(("md", "# Title"), ("code", "secret_code = 1\nprint('measured 42')")))
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="measured 42\n")]
    slides.write_slides(nb, tmp_path / "deck.html", "reveal.js", "requirejs/require.js", "mathjax/tex-chtml.js")
    html = (tmp_path / "deck.html").read_text()
    assert "measured 42" in html and "secret_code" not in html
    loaded = set(re.findall(r'(?:src|href)="([^"#][^"]*)"', html)) | set(re.findall(r'"([\w./-]+\.js)"', html))
    assert sorted(loaded) == ["../_static/favicon.svg", "mathjax/tex-chtml.js", "requirejs/require.js",
                              "reveal.js/dist/reveal.css", "reveal.js/dist/reveal.js", "reveal.js/dist/theme/white.css",
                              "reveal.js/plugin/notes/notes.js"]


def test_without_npm_a_package_is_not_fetched_and_the_reason_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on it
    said = []
    assert vendor.npm_package("reveal.js@4.6.1", tmp_path / "cache", echo=said.append) is None
    assert "Could not fetch reveal.js@4.6.1 with npm" in said[0] and "CDN" in said[0]
