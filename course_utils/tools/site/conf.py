"""Sphinx settings of the course's website. ``course_utils.tools.site.build`` passes the values that change per build
(the repository and its branch, the static files) in the ``COURSE_SITE_SETTINGS`` variable, as JSON."""
import json
import os

settings = json.loads(os.environ["COURSE_SITE_SETTINGS"])

project = "Distributed training with TensorFlow"
author = "the course's authors"
extensions = ["myst_nb"]
exclude_patterns = ["**/.ipynb_checkpoints"]
html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {
    "repository_url": f"https://github.com/{settings['repository']}",
    "repository_branch": settings["branch"],
    "path_to_docs": "",  # the site's pages sit at the same paths as in the repository
    "use_repository_button": True,
    "use_download_button": True,  # the page's .ipynb, as it is in the repository (without outputs)
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "show_toc_level": 2,
    "home_page_in_toc": True,
}
html_favicon = "static/favicon.svg"  # a 2 x 2 mesh of devices (without one, browsers ask for /favicon.ico)
html_context = {"default_mode": "light"}  # the theme's light/dark switch starts light
html_static_path = ["static", settings["static"]]  # the course's CSS; MathJax, served by the site itself
html_css_files = ["course.css"]
if "mathjax" in settings:
    mathjax_path = settings["mathjax"]
html_show_sourcelink = True
html_copy_source = True

# The notebooks arrive executed (by course_utils.tools.site.build, or by the test run), their widgets made static.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # notebooks' headings may skip a level (# then ###)
