"""The workshop decks in a real browser: ``python3 course.py test --env site`` (beside test_site.py).

Each chapter's deck is made from its cells' ``slides`` metadata (course_utils/tools/site/slides.py); a chapter
whose deck is missing, too thin for its stated time, or silent on one of its ``##`` sections fails first, with
what to add. The decks of the website built as ``python3 course.py site`` builds it (``site`` in conftest.py) are
opened in headless Chromium, offline, at 1280 x 720 and on a 390 px phone screen, and every slide is shown in turn
and measured: what it holds against the slide's own size (nothing scrolls, is cut off or runs off the screen) and
the words it shows (60 on a slide of text; 80 on a slide that shows a chapter's code, output or picture, and
those for at most a quarter of a deck). The measures of every slide, and a screenshot of each slide that fails, go
to test-artifacts/decks/.
The speaker view is opened once: it must follow the deck and show the chapter's own prose for the slide on screen.
"""
import json
import re

import nbformat
import pytest

from browsing import visit
from course_utils.tools.site.build import REPORTS, ROOT
from course_utils.tools.site.pages import notebook_minutes
from course_utils.tools.site.slides import MAX_WORDS, chapter_slides, deck_problems

CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
SHOWN_WORDS = 80  # on a slide that shows a chapter's code, output or picture
SCREENS = {"1280x720": {"viewport": {"width": 1280, "height": 720}},
           "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "device_scale_factor": 2}}
SHOTS = REPORTS / "decks"
SPEAKER_CHAPTER = "04_meshes_and_layouts"

# reveal.js started, MathJax has typeset, every picture is decoded; slides change at once (no transition)
READY = """async () => {
  while (!(window.Reveal && Reveal.isReady() && window.MathJax && MathJax.startup && MathJax.startup.promise)) {
    await new Promise(resolve => setTimeout(resolve, 50));
  }
  await MathJax.startup.promise;
  await Promise.all([...document.images].map(image => image.decode().catch(() => null)));
  Reveal.configure({transition: "none"});
  return Reveal.getTotalSlides();
}"""
# Show slide `index` and measure it in the slide's own pixels (reveal.js scales the whole slide to the screen)
MEASURE = """async index => {
  Reveal.slide(index);
  await new Promise(resolve => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  const slide = Reveal.getCurrentSlide(), {width, height} = Reveal.getConfig(), root = document.documentElement;
  const cut = [...slide.querySelectorAll("*")].filter(element => !element.closest("mjx-assistive-mml")  // for readers
    && /auto|scroll|hidden|clip/.test(getComputedStyle(element).overflowX + getComputedStyle(element).overflowY)
    && (element.scrollWidth > element.clientWidth + 1 || element.scrollHeight > element.clientHeight + 1));
  return {kind: slide.dataset.kind, title: (slide.querySelector("h1, h2") || slide).innerText.split("\\n")[0],
          height: slide.scrollHeight, width: slide.scrollWidth, slide_height: height, slide_width: width,
          words: (slide.innerText.match(/\\S*[\\p{L}\\p{N}_]\\S*/gu) || []).length,
          cut: cut.map(element => element.tagName.toLowerCase() + "." + element.className),
          page: [root.scrollWidth, root.scrollHeight, innerWidth, innerHeight],
          links: [...slide.querySelectorAll("a[href]")].map(a => a.getAttribute("href"))};
}"""


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_has_a_deck_for_its_time_and_each_of_its_sections(chapter):
    path = ROOT / "notebooks" / f"{chapter}.ipynb"
    problems = deck_problems(nbformat.read(path, as_version=4), path, ROOT)
    assert not problems, "\n".join(problems)


def slide_problems(slide, where):
    """What is wrong with one measured slide (:data:`MEASURE`), as sentences that say what to change."""
    limit = MAX_WORDS if slide["kind"] in ("title", "text", "closing") else SHOWN_WORDS
    wrong = []
    if slide["height"] > slide["slide_height"] or slide["width"] > slide["slide_width"]:
        wrong.append(f"{where}: holds {slide['width']} x {slide['height']} px, the slide is "
                     f"{slide['slide_width']} x {slide['slide_height']}: say less, or show less of the cell")
    if slide["cut"]:
        wrong.append(f"{where}: these scroll or are cut off: {slide['cut']}")
    if slide["page"][0] > slide["page"][2] or slide["page"][1] > slide["page"][3]:
        wrong.append(f"{where}: the page scrolls ({slide['page'][:2]} px on a {slide['page'][2:]} screen)")
    if slide["words"] > limit:
        wrong.append(f"{where}: shows {slide['words']} words; at most {limit}")
    return wrong


@pytest.mark.parametrize("screen", sorted(SCREENS))
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_slide_fits_its_screen_and_shows_few_words(browser, site, chapter, screen):
    page = browser.new_page(**SCREENS[screen])
    page.set_default_timeout(60_000)
    wrong = []
    try:
        problems = visit(page, f"{site}slides/{chapter}.slides.html")
        total = page.evaluate(READY)
        slides = [page.evaluate(MEASURE, index) for index in range(total)]
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / f"{chapter}-{screen}.json").write_text(json.dumps(slides, indent=1))
        for old in SHOTS.glob(f"{chapter}-*-{screen}.png"):  # an earlier run's, of slides that may fit now
            old.unlink()
        for index, slide in enumerate(slides):
            found = slide_problems(slide, f"{chapter} slide {index + 1}/{total} ({slide['title']!r}, {screen})")
            if found:  # a picture of what is wrong, to look at
                page.evaluate("index => Reveal.slide(index)", index)
                page.screenshot(path=SHOTS / f"{chapter}-{index:02d}-{screen}.png")
            wrong += found
    finally:
        page.close()
    busy = [slide["title"] for slide in slides if slide["words"] > MAX_WORDS]
    if len(busy) > total // 4:
        wrong.append(f"{chapter} ({screen}): {len(busy)} of {total} slides show more than {MAX_WORDS} words: {busy}")
    assert not wrong, "\n".join(wrong)
    assert not problems, problems
    assert [slides[0]["kind"], slides[-1]["kind"]] == ["title", "closing"]
    exercise = next((ROOT / "exercises").glob(f"{chapter[:2]}_*.ipynb"), None)
    if exercise:
        assert f"../exercises/{exercise.stem}.html" in slides[-1]["links"], slides[-1]


def test_the_arrow_keys_step_through_every_slide_in_order(browser, site):
    page = browser.new_page(**SCREENS["1280x720"])
    try:
        visit(page, f"{site}slides/{SPEAKER_CHAPTER}.slides.html")
        total = page.evaluate(READY)
        seen = [page.evaluate("() => Reveal.getIndices().h")]
        for _ in range(total - 1):
            page.keyboard.press("ArrowRight")
            seen.append(page.evaluate("() => Reveal.getIndices().h"))
        assert seen == list(range(total)) and page.evaluate("() => Reveal.isLastSlide()")
    finally:
        page.close()


def plain_words(markdown, count=12):
    """The first ``count`` words of the first paragraph of ``markdown`` that is not a heading, as a page shows
    them (no Markdown marks, links as their text)."""
    paragraph = next(p for p in markdown.split("\n\n") if p.strip() and not p.lstrip().startswith("#"))
    text = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", re.sub(r"^\s*(?:[-*]|\d+\.)\s+", "", paragraph, flags=re.M))
    return " ".join(re.sub(r"[`*_]", "", text).split()[:count])


def test_the_speaker_view_follows_the_deck_with_the_chapters_prose(browser, site):
    nb = nbformat.read(ROOT / "notebooks" / f"{SPEAKER_CHAPTER}.ipynb", as_version=4)
    notes = [notes for _, _, notes in chapter_slides(nb, SPEAKER_CHAPTER)]
    first = next(index for index, text in enumerate(notes) if text and "$" not in text[0])  # no formula in the way
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = context.new_page()
        problems = visit(page, f"{site}slides/{SPEAKER_CHAPTER}.slides.html")
        page.evaluate(READY)
        page.evaluate("index => Reveal.slide(index)", first + 1)  # the deck's slide 0 is its title slide
        with context.expect_page() as opened:
            page.keyboard.press("s")  # reveal.js's notes plugin opens its speaker view
        speaker = opened.value
        shown = lambda: " ".join(speaker.inner_text(".speaker-controls-notes .value").split())
        speaker.wait_for_function("() => document.querySelector('.speaker-controls-notes .value')?.innerText.trim()")
        assert plain_words(notes[first][0]) in shown(), (plain_words(notes[first][0]), shown()[:300])
        following = next(index for index in range(first + 1, len(notes)) if notes[index] != notes[first])
        for _ in range(following - first):
            page.keyboard.press("ArrowRight")
        expected = plain_words(notes[following][0])
        speaker.wait_for_function("text => document.querySelector('.speaker-controls-notes .value').innerText"
                                  ".split(/\\s+/).join(' ').includes(text)", arg=expected)
        SHOTS.mkdir(parents=True, exist_ok=True)
        speaker.screenshot(path=SHOTS / f"{SPEAKER_CHAPTER}-speaker-view.png")
        assert speaker.query_selector("#current-slide iframe") and speaker.query_selector("#upcoming-slide iframe")
        assert not problems, problems
    finally:
        context.close()


def test_a_deck_gives_the_exercise_and_the_planned_minutes(browser, site):
    """The closing slide's times are the instructors' page's (both computed from the notebooks' stated times)."""
    page = browser.new_page(**SCREENS["1280x720"])
    try:
        visit(page, f"{site}slides/02_strategies_one_machine.slides.html")
        page.evaluate(READY)
        page.evaluate("() => Reveal.slide(Reveal.getTotalSlides() - 1)")
        closing = " ".join(page.inner_text(".reveal .slides section.present").split())
        visit(page, f"{site}docs/instructors.html")  # docs/instructors.md, as a page
        plan = page.inner_text("main")
    finally:
        page.close()
    minutes = notebook_minutes(ROOT / "exercises" / "02_strategies_one_machine.ipynb")
    assert f"exercises/02_strategies_one_machine.ipynb, about {minutes} minutes" in closing, closing
    begin, end = re.search(r"Full day: (\d+:\d\d)–(\d+:\d\d)", closing).groups()
    assert re.search(rf"{begin}\s+2 · Strategies on one machine", plan) and end in plan, (begin, end)
