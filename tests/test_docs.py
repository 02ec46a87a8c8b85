"""The repository's pages (README.md, docs/*.md): the facts the build writes into them, their links on GitHub and
on the website, and the README kept short."""
import re

import pytest

from course_utils.checkers import registry
from course_utils.grading.cli import DEFAULT_TIMEOUT
from course_utils.tools import docs
from course_utils.tools.checkout import checkout_root, course_config
from course_utils.tools.site import markdown, pages

ROOT = checkout_root()
CONFIG = {"repository": "owner/course", "branch": "main"}


def published(root=ROOT):
    """What the website publishes as pages: the docs and the chapter and exercise notebooks."""
    return {*markdown.docs_order(root), *(p.relative_to(root).as_posix() for folder in ("notebooks", "exercises")
                                          for p in (root / folder).glob("*.ipynb"))}


def test_the_readme_stays_a_short_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_every_fact_is_computed_and_used_by_a_page():
    text = "\n".join(path.read_text() for path in docs.page_paths(ROOT))
    for name, fact in docs.FACTS.items():
        assert fact(ROOT).strip(), name
        assert f"<!-- generated: {name} -->" in text, f"{name} is in no page: remove it from FACTS"
    assert docs.FACTS["exercise-chapters"](ROOT) == pages.number_span(registry())
    assert docs.FACTS["grader-timeout"](ROOT) == f"{DEFAULT_TIMEOUT:g}"
    assert docs.FACTS["main-versions"](ROOT).startswith("TensorFlow 2.")


def test_facts_are_written_inline_or_as_blocks_and_an_unknown_one_is_named():
    page = ROOT / "docs" / "instructors.md"
    text = ("Limit: <!-- generated: grader-timeout -->?<!-- end generated --> s\n\n"
            "<!-- generated: exercise-chapters -->\nold\n<!-- end generated -->\n")
    assert docs.fill_page(text, page, ROOT) == (
        f"Limit: <!-- generated: grader-timeout -->{DEFAULT_TIMEOUT:g}<!-- end generated --> s\n\n"
        f"<!-- generated: exercise-chapters -->\n\n{pages.number_span(registry())}\n\n<!-- end generated -->\n")
    with pytest.raises(ValueError, match=r"instructors.md: <!-- generated: chapter-count --> names no fact; the facts "
                                         r"are \['chapters-without-exercises'"):
        docs.fill_page("<!-- generated: chapter-count -->11<!-- end generated -->", page, ROOT)


def test_a_site_only_section_points_to_the_website_s_copy_of_its_heading():
    text = docs.fill_page("# T\n\n## How long each chapter runs\n\n<!-- site: run-times -->\nx\n<!-- end site -->\n",
                          ROOT / "docs" / "instructors.md", ROOT)
    assert (f"[the website's copy of this page]({docs.site_address(ROOT)}docs/instructors.html"
            "#how-long-each-chapter-runs)") in text and "\nx\n" not in text


def test_every_link_of_every_page_points_at_a_file_and_heading_that_exist():
    sections = pages.instructors_sections(ROOT, {}, "Run time: not measured.")
    for path in docs.page_paths(ROOT):
        page = path.relative_to(ROOT).as_posix()
        markdown.site_page(path.read_text(), page, ROOT, published(), course_config(ROOT),
                           sections if page == "docs/instructors.md" else None)  # raises on a broken link
    assert markdown.docs_order(ROOT)[0] == "docs/instructors.md"


def test_links_stay_between_pages_and_point_at_github_for_other_files():
    link = lambda target, page="docs/contributing.md": markdown.site_link(target, page, ROOT, published(), CONFIG)
    assert link("tests.md#ci") == "tests.md#ci"  # a page of the site, and one of its headings
    assert link("../notebooks/05_dtensor_with_keras.ipynb") == "../notebooks/05_dtensor_with_keras.ipynb"
    assert link("../course_utils/costs.py") == "https://github.com/owner/course/blob/main/course_utils/costs.py"
    assert link("../tests/grading/") == "https://github.com/owner/course/tree/main/tests/grading"
    assert link("../README.md#quick-start-two-commands") == (
        "https://github.com/owner/course/blob/main/README.md#quick-start-two-commands")
    assert link("docs/colab.md", page="README.md") == "docs/colab.md"
    assert link("https://example.org/x") == "https://example.org/x" and link("#add-a-page") == "#add-a-page"
    with pytest.raises(pages.PageError, match=r"docs/contributing.md links to ../course_utils/nothing.py, but "
                                              r"course_utils/nothing.py is not in the repository"):
        link("../course_utils/nothing.py")
    with pytest.raises(pages.PageError, match="docs/tests.md has no heading with the anchor #no-such-heading"):
        link("tests.md#no-such-heading")


def test_a_site_page_fills_its_sections_and_leaves_code_blocks_as_they_are():
    text = ("See [costs](../course_utils/costs.py).\n\n```\n[not a link](../nothing.py)\n```\n\n"
            "<!-- site: slides -->\nplaceholder\n<!-- end site -->\n")
    site = markdown.site_page(text, "docs/x.md", ROOT, set(), CONFIG, {"slides": "the decks"})
    assert "(https://github.com/owner/course/blob/main/course_utils/costs.py)" in site
    assert "[not a link](../nothing.py)" in site and "the decks" in site and "placeholder" not in site
    with pytest.raises(pages.PageError, match=r"docs/x.md: the site's build has no section 'slides'"):
        markdown.site_page(text, "docs/x.md", ROOT, set(), CONFIG)


def test_every_page_of_docs_is_in_the_readme_s_list_which_is_the_site_s_table_of_contents(tmp_path):
    order = markdown.docs_order(ROOT)
    readme = (ROOT / "README.md").read_text()
    assert order == sorted(order, key=lambda page: readme.index(f"]({page}):"))  # the list's order
    assert len(order) == len(list((ROOT / "docs").glob("*.md")))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "new.md").write_text("# New\n")
    (tmp_path / "README.md").write_text("# Course\n")
    with pytest.raises(pages.PageError, match="docs/new.md: not linked from the README's list of pages"):
        markdown.docs_order(tmp_path)


def test_the_headings_anchor_as_github_and_myst_make_them():
    assert docs.slug("Quick start (two commands)") == "quick-start-two-commands"
    assert docs.slug("The chapters (`notebooks/`)") == "the-chapters-notebooks"
    headings = re.findall(r"^## (.+)$", (ROOT / "README.md").read_text(), re.M)
    assert "quick-start-two-commands" in {docs.slug(h) for h in headings}
