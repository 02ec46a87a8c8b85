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
    slides.write_slides(nb, tmp_path / "deck.html", "reveal.js", "requirejs/require.js",
                        "../_static/mathjax/tex-chtml.js")
    html = (tmp_path / "deck.html").read_text()
    assert "measured 42" in html and "secret_code" not in html
    loaded = set(re.findall(r'(?:src|href)="([^"#][^"]*)"', html)) | set(re.findall(r'"([\w./-]+\.js)"', html))
    assert sorted(loaded) == ["../_static/favicon.svg", "../_static/mathjax/tex-chtml.js", "requirejs/require.js",
                              "reveal.js/dist/reveal.css", "reveal.js/dist/reveal.js", "reveal.js/dist/theme/white.css",
                              "reveal.js/plugin/notes/notes.js"]


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
