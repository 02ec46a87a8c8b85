"""Chapter 1 · the templates of the notebook cells of exercise 2 (by cell id), filled with each variant's calls
(:mod:`.variants`); ``python3 course.py build`` writes them, filled with the defaults, into
``solutions/01_tensors_and_devices.ipynb`` (and so ``exercises/``), so edit the text here, not in the notebooks."""

TRACING_QUESTION = """\
## Exercise 2 · Predict which calls trace (2 points)

A `tf.function` runs its Python body only when it **traces**: when it meets an input signature it
has not seen, it runs the Python code once to build a graph, and later calls with the same
signature reuse that graph. Below, `f` takes a tensor `x` and a plain Python flag `training`, and
is called seven times in this order:

| call | arguments |
|---|---|
{{table}}

**Predict** for each call whether it traces: a list of 7 booleans, `True` = this call traces.
Don't run anything first; once your check is correct (or the checker has shown the answer), the
cell after the hints lets you watch it happen."""

TRACING_SOLUTION = """\
@tf.function
def f(x, training):
    return x + 1 if training else x - 1

# BEGIN SOLUTION  # PLACEHOLDER: predictions = [None, None, None, None, None, None, None]
predictions = {{predictions}}
{{comments}}
# END SOLUTION
ex.q2.check(predictions)"""

TRACING_WATCH = """\
traces = []

@tf.function
def g(x, training):
    traces.append((x.dtype.name, tuple(x.shape), training))  # Python code: runs only while tracing
    return x + 1 if training else x - 1

CALL_ARGUMENTS = {{arguments_code}}
if not ex.q2.answer_shown():
    print("Not yet: this cell makes the calls once the checker has accepted your predictions or shown the answer "
          "(check them in the exercise cell first).")
else:
    observed = []
    for argument, training in CALL_ARGUMENTS:
        before = len(traces)
        g(argument, training=training)
        observed.append(len(traces) > before)
    print("traced:   ", observed)
    print("predicted:", predictions)
    print("the signatures traced:", *traces, sep="\\n  ")"""
