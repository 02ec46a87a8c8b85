"""The instructors' grader: ``python3 course.py grade SUBMISSIONS_DIR`` (or ``python -m course_utils.grading``).

- ``cli.py``: the command line, :func:`~course_utils.grading.cli.grade_folder` and
  :func:`~course_utils.grading.cli.grade_notebook`: reads every notebook once, runs each, writes
  ``grades.csv`` (and its SHA-256) as results arrive;
- ``sandbox.py``: one bubblewrap sandbox per submission, around its kernel (``--sandbox``);
- ``submission.py``: what the grader reads from a handed-in notebook before running it (is it a
  notebook, which chapter, hints printed, code that reaches for the grader);
- ``handout.py``: the package copy the sandboxed kernels import, without solutions or judging code;
- ``session.py``: the run of one notebook in a fresh kernel; after each exercise's cell it asks the
  kernel for the answers as plain data and judges them in its own process;
- ``export.py``: the kernel's side of that request (the exercise's ``collect``, written as plain data);
- ``report.py``: the CSV table, its digest and the summary.
"""
