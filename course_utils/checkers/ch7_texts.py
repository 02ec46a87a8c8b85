"""Chapter 7 · the templates of the notebook cells that state exercise 2's keys and paths and exercise 4's numbers
(by cell id), filled with each variant's values (:mod:`.variants`); ``python3 course.py build`` writes them, filled
with the defaults, into ``solutions/07_where_next.ipynb`` (and so ``exercises/``), so edit the text here, not in the
notebooks."""

BUBBLE_QUESTION = """\
## Exercise 4 · What the pipeline bubble costs (2 points)

A model of {{stages}} equal stages trains with a GPipe-style schedule on {{stages}} devices, one stage on each, with
{{micro_batches}} micro-batches per step. Each stage takes the same time for one micro-batch (forward and backward
together), and sending activations between devices costs nothing.

- `speedup`: how many times faster is one training step on this pipeline than the same step (the
  same {{micro_batches}} micro-batches through all {{stages}} stages) on **one device** that holds the whole model?
- `micro_batches`: with **{{wide_stages}}** stages, the fewest micro-batches per step that keep each device
  idle at most {{idle_percent}} % of the time.

The chapter's `bubble(stages, micro_batches)` gives the idle share; the speed-up is yours to derive."""

BUBBLE_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: speedup, micro_batches = None, None
# Time in slots (one stage, one micro-batch): one device runs {{micro_batches}} x {{stages}} slots; the pipeline {{micro_batches}} + {{stages}} - 1 ({{filling}} to fill).
{{speedup_line}}# {{speedup}}, not {{stages}}: the bubble costs {{bubble}}
micro_batches = next(m for m in range(1, 1000) if ({{wide_stages}} - 1) / (m + {{wide_stages}} - 1) <= {{idle_share}})  # {{fewest}}
# END SOLUTION
ex.q4.check(speedup, micro_batches)"""

LOOKUP_QUESTION = """\
## Exercise 2 · Which key does a `LayoutMap` find? Three rules (6 points)

A `LayoutMap` gets two keys, in this order: `"{{key_1}}"`, then `"{{key_2}}"`. Which key does
it find for the paths `{{kernel_path}}` and `{{bias_path}}`, under each rule of the
chapter? (`tf_keras`: `re.match`, the first key inserted wins; `keras_3_13`: `re.search`, several
matches raise; `keras_3_15`: `re.fullmatch`, several matches raise.) Answer with the key,
`"replicated"` (or `None`) when no key matches, or `"ValueError"`. Predict: `re.match` and
friends (or a `LayoutMap`) would print the answer, so the check counts only while this notebook has
not imported them; the cell after the check tries them once your check has passed (or shown the
answer)."""

LOOKUP_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: found = {"kernel, tf_keras": ..., "kernel, keras_3_13": ..., "kernel, keras_3_15": ..., "bias, tf_keras": ..., "bias, keras_3_13": ..., "bias, keras_3_15": ...}
found = {
{{found_lines}}
}
# END SOLUTION
ex.q2.check(found)"""

LOOKUP_WATCH = """\
# Watch, after the check: each rule's function on each key and path (the notebook imports re only here).
if ex.q2.answer_shown():
    import re

    for path in ("{{kernel_path}}", "{{bias_path}}"):
        for rule in (re.match, re.search, re.fullmatch):
            matched = [key for key in ("{{key_1}}", "{{key_2}}") if rule(key, path)]
            print(f"{path:20} re.{rule.__name__:9} matches {matched}")"""
