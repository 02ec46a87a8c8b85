"""The website in a real browser: ``python3 course.py test --env site``.

The site is built as ``python3 course.py site`` builds it, from the chapters the `main` environment has just
executed (``test-artifacts/executed``, written by nbval's run; a chapter missing there is executed by the
build), served on a localhost port, and read by headless Chromium (Playwright) as a learner would, with every
request to another host refused (the site must work offline): every page and deck, every image, every internal
link, the key measured outputs, the search, the Colab and download links, and a phone-sized screen. The decks'
slides are measured one by one in test_decks.py (the same site, built once for both: ``site`` in conftest.py).
"""
import re
import urllib.parse
from pathlib import Path

import pytest

from browsing import visit
from course_utils.tools.checkout import course_config
from course_utils.tools.site.build import ROOT

CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
EXERCISES = sorted(p.stem for p in (ROOT / "exercises").glob("*.ipynb"))
DOCS = sorted(f"docs/{p.stem}" for p in (ROOT / "docs").glob("*.md"))  # the pages of docs/, the instructors' among them
PAGES = ["index", "search", *DOCS, *(f"notebooks/{n}" for n in CHAPTERS),
         *(f"exercises/{n}" for n in EXERCISES), *(f"slides/{n}.slides" for n in CHAPTERS)]
# What a chapter's page must show from its run: a measured output, as the notebook prints it.
KEY_OUTPUTS = {
    "05_dtensor_with_keras": re.compile(r"^\s*2\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+0\.9[7-9]\d*\s*$", re.M),  # epoch 2 (the last)
    # the cost of case 4 read from the profiled run, and the check against the prediction
    "04_meshes_and_layouts": re.compile(r"read from the run: all-gather over \('model',\) in groups of 2, B = 48 bytes"
                                        r"(?:.|\n)*every prediction matched the run"),
    # the epoch time and the bytes all-reduced per step for 1, 2, 4 and 8 replicas
    "02_strategies_one_machine": re.compile(r"replicas\s+epoch 2\s+sent per device per step(?:.|\n)*"
                                            r"^\s*8\s+[\d.]+ s\s+712,390 B", re.M),
}


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(30_000)
    yield page
    page.close()


@pytest.mark.parametrize("name", PAGES)
def test_every_page_loads_with_its_images_and_links(page, site, name):
    problems = visit(page, f"{site}{name}.html")
    images = page.eval_on_selector_all("img", "imgs => imgs.map(i => [i.src, i.naturalWidth, i.alt])")
    assert all(width > 0 for _, width, _ in images), [src for src, width, _ in images if not width]
    described = lambda alt: alt.strip() and not re.search(r"\.(png|svg|jpe?g)$|No description", alt)
    assert all(described(alt) for _, _, alt in images), [(src, alt) for src, _, alt in images if not described(alt)]
    text = page.inner_text("body")
    assert "Traceback (most recent call last)" not in text and not page.query_selector(".output.traceback")
    links = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")
    for link in {urllib.parse.urldefrag(link)[0] for link in links if link.startswith(site)}:
        assert page.request.get(link).ok, f"{name}: broken link {link}"
    assert not problems, problems


@pytest.mark.parametrize("name", DOCS)
def test_every_link_of_a_docs_page_leads_to_a_page_heading_or_repository_file_that_exists(page, site, name):
    """Links between pages reach the page and its heading; links to the repository's files (GitHub, which this
    test cannot reach) name a file or folder of this checkout."""
    visit(page, f"{site}{name}.html")
    config = course_config(ROOT)
    repository = re.compile(rf"https://github\.com/{re.escape(config['repository'])}/(?:blob|tree)/"
                            rf"{re.escape(config['branch'])}/([^#]+)")
    links = page.eval_on_selector_all("main a[href]", "links => links.map(a => a.href)")
    for link in links:
        url, fragment = urllib.parse.urldefrag(link)
        if url.startswith(site):
            response = page.request.get(url)
            assert response.ok, f"{name}: broken link {link}"
            assert not fragment or f'id="{fragment}"' in response.text(), f"{name}: {url} has no #{fragment}"
        elif repository.match(url):
            path = urllib.parse.unquote(repository.match(url).group(1))
            assert (ROOT / path).exists(), f"{name}: {link} names {path}, which is not in the repository"
    assert any(repository.match(link) for link in links) or name != "docs/contributing", "no repository link found"


def test_the_instructors_page_has_the_sections_only_the_site_makes(page, site):
    visit(page, f"{site}docs/instructors.html")
    text = page.inner_text("main")
    assert "The website's build makes this section" not in text and "run time, Colab-like" in text
    slides = page.eval_on_selector_all("main a[href*='slides/']", "links => links.map(a => a.getAttribute('href'))")
    assert slides == [f"../slides/{name}.slides.html" for name in CHAPTERS]
    assert "A 3-hour workshop" in text and "Graded exercises" in text


def test_the_front_page_lists_every_chapter_in_order(page, site):
    visit(page, site + "index.html")
    hrefs = page.eval_on_selector_all("main table td:first-child a", "links => links.map(a => a.getAttribute('href'))")
    assert [Path(h).stem for h in hrefs] == CHAPTERS
    slides = page.eval_on_selector_all("main table td:last-child a", "links => links.map(a => a.getAttribute('href'))")
    assert slides == [f"slides/{name}.slides.html" for name in CHAPTERS]
    assert page.query_selector("nav.bd-links a[href*='exercises/']"), "the exercises are in the sidebar"


@pytest.mark.parametrize("chapter", sorted(KEY_OUTPUTS))
def test_chapter_pages_show_their_measured_outputs(page, site, chapter):
    visit(page, f"{site}notebooks/{chapter}.html")
    assert KEY_OUTPUTS[chapter].search(page.inner_text("main")), f"{chapter}: its key output is missing"


def test_the_layout_explorer_shows_its_first_state_and_says_it_needs_the_notebook(page, site):
    visit(page, f"{site}notebooks/04_meshes_and_layouts.html")
    static = page.locator("main .course-explorer-static")
    assert static.count() >= 2 and "run the notebook" in static.first.inner_text()


def test_search_finds_layoutmap_in_chapter_5(page, site):
    visit(page, f"{site}search.html?q=LayoutMap")
    page.wait_for_selector("#search-results li a", timeout=30_000)
    found = page.eval_on_selector_all("#search-results li a", "links => links.map(a => a.getAttribute('href'))")
    assert any("05_dtensor_with_keras" in href for href in found), found


def test_colab_and_download_links_point_at_the_pages_notebook(page, site):
    config = course_config(ROOT)
    for name in ("notebooks/05_dtensor_with_keras", "exercises/03_beyond_one_process"):
        visit(page, f"{site}{name}.html")
        hrefs = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")
        colab = f"https://colab.research.google.com/github/{config['repository']}/blob/{config['branch']}/{name}.ipynb"
        assert colab in hrefs, [h for h in hrefs if "colab" in h]
        download = next(h for h in hrefs if h.endswith(f"_sources/{name}.ipynb"))
        assert page.request.get(download).body() == (ROOT / f"{name}.ipynb").read_bytes()


def test_a_phone_sized_screen_scrolls_no_text_sideways(browser, site):
    phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, device_scale_factor=2)
    try:
        for name in ("index", *(f"notebooks/{n}" for n in CHAPTERS)):
            visit(phone, f"{site}{name}.html")
            width = phone.evaluate("() => document.documentElement.scrollWidth")
            assert width <= 391, f"{name}: the page is {width} px wide on a 390 px screen"
    finally:
        phone.close()
