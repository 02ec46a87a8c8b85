"""``python -m course_utils.grading FOLDER``: the grader's command line (see :mod:`course_utils.grading.cli`)."""
import sys

from course_utils.grading.cli import main

sys.exit(main())
