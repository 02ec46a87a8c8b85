"""The instructors' grader: ``python3 course.py grade SUBMISSIONS_DIR`` (or ``python -m course_utils.grading``).

- ``cli.py``: the command line and :func:`~course_utils.grading.cli.grade_folder`: reads every
  notebook once, runs them side by side, writes ``grades.csv`` (and its SHA-256) as results arrive;
- ``notebook.py``: :func:`~course_utils.grading.notebook.grade_notebook`, one notebook from its bytes
  to its rows, with the run's :class:`~course_utils.grading.notebook.Settings`;
- ``submission.py``: what the grader reads from a handed-in notebook before running it (is it a
  notebook, which chapter, hints printed), under caps;
- ``sandbox.py``: one bubblewrap sandbox per submission, around its kernel, with a file system of a
  fixed size for all it writes (``--sandbox``, ``--memory-limit``, ``--disk-limit``);
- ``handout.py``: the package copy the sandboxed kernels import, without solutions, judging code or hint texts;
- ``session.py``: the driver of one notebook's run, in a fresh kernel: it scans the code
  (``scan.py``), asks the kernel for each exercise's answers as plain data and judges them in its
  own process, within a memory budget, and serves the hints it records;
- ``scan.py``: what the code reaches for, read from its syntax tree (the flags);
- ``export.py``: the kernel's side of that request (the exercise's ``collect``, written as plain data);
- ``report.py``: the CSV table, its digest, the summary, and the escaping of what a notebook wrote.
"""
