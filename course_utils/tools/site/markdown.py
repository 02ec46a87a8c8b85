"""The repository's Markdown pages on the website: ``docs/*.md``, and the README's introduction on the front page.

They are written for GitHub, where a relative link to any file of the repository works. On the site a link to a
page the site publishes (``docs/*.md``, the notebooks) stays relative, and a link to any other file of the
repository, the README included, points at that file on GitHub; a link to a file or a heading that does not exist
stops the build. The sections only the site's build can make (``<!-- site: NAME -->``,
:mod:`course_utils.tools.docs`) are filled in.
"""
import posixpath
import re
from pathlib import Path

from ..checkout import checkout_root
from ..docs import PAGES, SITE_ONLY, slug
from .pages import PageError

__all__ = ["docs_order", "site_link", "site_page"]

LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")  # a Markdown link (not an image)
FENCE = re.compile(r"(^[ \t]*```.*?^[ \t]*```)", re.M | re.S)  # a fenced code block


def docs_order(root):
    """The pages of ``docs/`` in the order of the README's list of pages (its lines ``- [title](docs/page.md): ...``):
    the site's table of contents.

    Raises:
        PageError: a page of ``docs/`` is not in that list; the message names it.
    """
    readme = (Path(root) / "README.md").read_text(encoding="utf-8")
    order = list(dict.fromkeys(re.findall(rf"^- \[[^\]]*\]\(({PAGES}/[\w-]+\.md)\)", readme, re.M)))
    missing = sorted({p.relative_to(root).as_posix() for p in (Path(root) / PAGES).glob("*.md")} - set(order))
    if missing:
        raise PageError(f"{', '.join(missing)}: not linked from the README's list of pages, which is also the "
                        f"website's table of contents; add a line for it there.")
    return order


def _headings(path):
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"), re.M)}


def site_link(target, page, root, published, config):
    """Where the link ``target`` of the page ``page`` (a path in the repository) points on the site.

    Example:
        >>> site_link("../course_utils/costs.py", "docs/contributing.md", checkout_root(), {"docs/tests.md"},
        ...           {"repository": "a/b", "branch": "main"})
        'https://github.com/a/b/blob/main/course_utils/costs.py'

    Raises:
        PageError: the link points at a file, or a heading of a Markdown page, that does not exist.
    """
    if re.match(r"[a-z][a-z0-9+.-]*:|/", target):
        return target  # an address (https:, mailto:) or an absolute path: as it is
    path, _, fragment = target.partition("#")
    name = posixpath.normpath(posixpath.join(posixpath.dirname(page), path)) if path else page
    file = Path(root) / name
    if name.startswith("..") or not file.exists():
        raise PageError(f"{page} links to {target}, but {name} is not in the repository.")
    if fragment and file.suffix == ".md" and fragment not in _headings(file):
        raise PageError(f"{page} links to {target}, but {name} has no heading with the anchor #{fragment}.")
    if not path or name in published:
        return target
    kind = "tree" if file.is_dir() else "blob"
    return f"https://github.com/{config['repository']}/{kind}/{config['branch']}/{name}" + (
        f"#{fragment}" if fragment else "")


def site_page(text, page, root, published, config, sections=None):
    """The Markdown ``text`` of the repository's page ``page`` as a page of the website: each link made to work on
    the site (:func:`site_link`), each site-only section filled with ``sections[name]``.

    Args:
        published: the repository paths of the site's pages (``docs/*.md``, ``notebooks/*.ipynb``, ...).
        config: ``[tool.course]`` (the repository and branch links to files point at).

    Raises:
        PageError: a broken link, or a site-only section ``sections`` has no text for.
    """
    sections = sections or {}

    def fill(match):
        if match["name"] not in sections:
            raise PageError(f"{page}: the site's build has no section {match['name']!r} "
                            f"(it makes {sorted(sections) or 'none'} for this page).")
        return f"<!-- site: {match['name']} -->\n\n{sections[match['name']]}\n\n<!-- end site -->"

    link = lambda m: f"[{m['text']}]({site_link(m['target'], page, root, published, config)})"
    pieces = FENCE.split(SITE_ONLY.sub(fill, text))  # the code blocks are the odd pieces: their text stays as it is
    return "".join(piece if i % 2 else LINK.sub(link, piece) for i, piece in enumerate(pieces))
