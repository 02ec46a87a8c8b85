"""The instructors' grader: ``python3 course.py grade SUBMISSIONS_DIR`` (or ``python -m course_utils.grading``).

- ``cli.py``: the command line, :func:`~course_utils.grading.cli.grade_folder` and
  :func:`~course_utils.grading.cli.grade_notebook`: reads every notebook once, runs each, writes
  ``grades.csv`` (and its SHA-256) as results arrive;
- ``sandbox.py``: one bubblewrap sandbox per submission, around its kernel (``--sandbox``);
- ``submission.py``: what the grader reads from a handed-in notebook before running it (is it a
  notebook, which chapter, hints printed, code that reaches for the grader);
- ``session.py``: the run of one notebook in a fresh kernel, with the grader's checks after each
  exercise's cell;
- ``kernel_side.py``: the grader's side inside that kernel (private checkers, tamper check, signing);
- ``records.py``: the signed lines that carry results out of the kernel;
- ``report.py``: the CSV table, its digest and the summary.
"""
