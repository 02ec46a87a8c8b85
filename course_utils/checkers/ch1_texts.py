"""Chapter 1 · the templates of the notebook cells of exercises 1 and 2 (by cell id), filled with each variant's
script and calls (:mod:`.variants`); ``python3 course.py build`` writes them, filled with the defaults, into
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


PLACEMENT_QUESTION = """\
## Exercise 1 · Predict where each operation runs (2 points)

The script below runs as its own Python program, in a **fresh process**, not in this notebook.
It splits the CPU into **{{cpus}}** logical CPUs, `CPU:0` to `CPU:{{last}}`, before anything starts
TensorFlow's runtime; soft placement is on, as by default. Read it **without running it**:

```python
{{script}}```

**Predict** for each of `b`, `c`, `d`, `e` and `f` the index of the CPU its matmul runs on in
that process, or `"error"` if its block raises before the matmul runs. Give a dict such as
`{"b": 2, ...}`. Careful: this notebook's runtime already runs with 8 CPUs, so these lines
would behave differently here. Once your check is correct (or the checker has shown the answer),
the cell after the hints runs the script in a child process, so that you can compare."""

PLACEMENT_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: placements = {"b": None, "c": None, "d": None, "e": None, "f": None}
placements = {{placements}}
# b: no block is open, so the default device; a is copied there (input tensors don't choose).
# c: the innermost block wins.  d: the CPU:{{c_inner}} block has ended; the CPU:{{c_outer}} block is still open.
# e: CPU:{{missing}} replaces CPU:{{e_outer}}, and the script's {{cpus}} CPUs have no CPU:{{missing}}: soft placement takes TensorFlow's first choice.
# f: the runtime runs with {{cpus}} CPUs; applying that same configuration again is accepted, so the CPU:{{f}} block decides.
# END SOLUTION
ex.q1.check(placements)"""

PLACEMENT_WATCH = '''\
import ast
import os
import subprocess
import sys

PLACEMENT_SCRIPT = """
{{script}}"""
REPORT = """
print({name: t.device.split("device:")[-1] for name, t in dict(b=b, c=c, d=d, e=e, f=f).items()})
"""
if not ex.q1.answer_shown():
    print("Not yet: this cell runs the script once the checker has accepted your prediction or shown the answer "
          "(check it in the exercise cell first).")
else:
    child = subprocess.run([sys.executable, "-c", PLACEMENT_SCRIPT + REPORT], capture_output=True, text=True,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=300)
    if child.returncode != 0:
        print("The script stopped with an error:", child.stderr.strip().splitlines()[-1])
    else:
        ran_on = ast.literal_eval(child.stdout.strip().splitlines()[-1])  # the dict the script printed
        print("predicted:", placements)
        print("ran on:   ", ran_on)'''

PLACEMENT_SCRIPT = """\
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
{{cpus_word}}_cpus = [tf.config.LogicalDeviceConfiguration()] * {{cpus}}
tf.config.set_logical_device_configuration(cpu, {{cpus_word}}_cpus)
with tf.device("/CPU:{{a}}"):
    a = tf.ones((2, 2))                # a lives on CPU:{{a}}
b = tf.matmul(a, a)
with tf.device("/CPU:{{c_outer}}"):
    with tf.device("/CPU:{{c_inner}}"):
        c = tf.matmul(a, a)
    d = tf.matmul(c, c)
with tf.device("/CPU:{{e_outer}}"):
    with tf.device("/CPU:{{missing}}"):
        e = tf.matmul(a, a)
with tf.device("/CPU:{{f}}"):
    tf.config.set_logical_device_configuration(cpu, {{cpus_word}}_cpus)
    f = tf.matmul(a, a)
"""  # the script of exercise 1, shown in its question and run by its watch cell
