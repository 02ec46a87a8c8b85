"""The course as a website: ``python3 course.py site`` (see :mod:`course_utils.tools.site.build`).

Sphinx with MyST-NB and the Sphinx Book Theme, the tools of the JAX documentation. The build executes the
chapters into a cache (a rebuild re-runs only the notebooks whose code changed), MyST-NB renders them, the theme gives
previous/next links, a table of contents per page, "Open in Colab" and ".ipynb" download buttons, and
Sphinx's own search runs in the browser, offline.
"""
