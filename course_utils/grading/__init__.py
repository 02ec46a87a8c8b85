"""The grader's machinery; the command line is :mod:`course_utils.grade`.

- ``submission.py``: what the grader reads from a handed-in notebook before running it (is it a
  notebook, which chapter, hints printed, code that reaches for the grader);
- ``session.py``: the run of one notebook in a fresh kernel, with the grader's checks after each
  exercise's cell;
- ``sandbox.py``: the grader's side inside that kernel (private checkers, tamper check, signing);
- ``records.py``: the signed lines that carry results out of the kernel;
- ``report.py``: the CSV table and the summary.
"""
