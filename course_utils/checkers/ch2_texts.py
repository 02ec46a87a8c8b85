"""Chapter 2 · the templates of the notebook cells of exercise 3 (by cell id), filled with each variant's order of
the scenarios (:mod:`.variants`); ``python3 course.py build`` writes them, filled with the defaults, into
``solutions/02_strategies_one_machine.ipynb`` (and so ``exercises/``), so edit the text here, not in the notebooks."""

STRATEGY_QUESTION = """\
## Exercise 3 · Pick the right strategy (6 points)

For each job, choose one of `"MirroredStrategy"`, `"MultiWorkerMirroredStrategy"`,
`"ParameterServerStrategy"`, `"OneDeviceStrategy"`, `"CentralStorageStrategy"` or `"DTensor"`
(DTensor is not a `tf.distribute` strategy, but it is the right tool for one of these jobs).

{{scenarios}}"""

STRATEGY_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: choices = {"a": None, "b": None, "c": None, "d": None, "e": None, "f": None}
choices = {
{{answer_lines}}
}
# END SOLUTION
ex.q3.check(choices)"""
