"""Chapter 3 · the templates of the notebook cells that state exercise 1's and 2's numbers (by cell id), filled with
each variant's values (:mod:`.variants`); ``python3 course.py build`` writes them, filled with the defaults, into
``solutions/03_beyond_one_process.ipynb`` (and so ``exercises/``), so edit the text here, not in the notebooks."""

SLURM_QUESTION = """\
## Exercise 1 · `TF_CONFIG` for a Slurm task (2 points)

A `MultiWorkerMirroredStrategy` job with a **chief** and {{workers_word}} workers (`jobs={{jobs}}`)
runs on Slurm: `srun` starts one task per node on the nodes `{{nodelist}}` (Slurm's list syntax for
{{node_names}}), with its default (block) distribution, and each task listens
on port `{{port}}` of its node. (The chapter's jobs had no chief, so worker 0 did the chief's extra work.
A `MultiWorkerMirroredStrategy` job may also name one: it trains like the workers, all-reducing with
them, and writes the checkpoints.) Every task builds its `TF_CONFIG` from Slurm's variables as the
chapter's `slurm_tf_config` does (its Slurm section says where that differs from TensorFlow's own
resolver), handing the tasks' ranks (`SLURM_PROCID`) to the jobs job by job, in alphabetical order
of the job names.

Write the `TF_CONFIG` of the task Slurm starts on **`{{asked}}`**: exactly the string that task puts in
its environment (build a dict and `json.dumps` it). The chapter's `slurm_tf_config` would print it,
so **predict first**: the check counts only while the notebook has not imported or used
`slurm_tf_config` (the cell after the hints imports it, to compare)."""

SLURM_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: tf_config = None
# Slurm's node order is {{slurm_order}} (not text order): ranks 0-{{last_rank}}. The chief takes rank 0 ({{chief_node}}),
# the workers ranks 1-{{last_rank}} ({{worker_nodes}}), so {{asked}} runs rank {{rank}}: worker {{index}}, its index in the 'worker' list.
tf_config = json.dumps({
    "cluster": {{cluster}},
    "task": {"type": "worker", "index": {{index}}},
})
# END SOLUTION
ex.q1.check(tf_config)"""

SLURM_WATCH_TEXT = """\
Now compare (after your check: before it, this cell says so and does nothing) with the chapter's
`slurm_tf_config`, given the variables `srun` sets in the task on `{{asked}}`, and with TensorFlow's own
`SlurmClusterResolver`, which sorts the node names as text."""

SLURM_WATCH = """\
from course_utils.cluster.slurm import slurm_tf_config

if not ex.q1.answer_shown():
    print("Not yet: this cell builds the task's TF_CONFIG once the checker has accepted your prediction or shown "
          "the answer (check it in the exercise cell first).")
else:
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import expand_hostlist

    nodes = expand_hostlist("{{nodelist}}")  # in Slurm's order, the order in which srun numbers the tasks
    step = {"SLURM_STEP_NUM_TASKS": "{{tasks}}", "SLURM_STEP_NODELIST": "{{nodelist}}", "SLURM_STEP_TASKS_PER_NODE": "1(x{{tasks}})",
            "SLURM_PROCID": str(nodes.index("{{asked}}")), "SLURMD_NODENAME": "{{asked}}"}  # what srun sets on {{asked}}
    print("slurm_tf_config:     ", json.dumps(slurm_tf_config({{jobs}}{{port_argument}}, environ=step)))
    print("your prediction:     ", tf_config)
    import tensorflow as tf  # TensorFlow's resolver reads os.environ: set the task's variables for a moment
    saved = {name: os.environ.get(name) for name in step}
    os.environ.update(step)
    try:  # one pretended GPU per task: with none, this version of the resolver fails on CPU nodes
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs={{jobs}}, port_base={{port}}, gpus_per_node=1, gpus_per_task=1, auto_set_gpu=False)
        print("SlurmClusterResolver:", resolver.cluster_spec().as_dict(), resolver.get_task_info())
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value"""

PS_QUESTION = """\
## Exercise 2 · `TF_CONFIG` for a parameter server (2 points)

{{job}}"""

PS_JOB = """\
A `ParameterServerStrategy` job runs its chief on `{{chief}}`, {{workers_on}}, and {{servers_on}}. Write the \
`TF_CONFIG` string for the process that listens on **`{{asked}}`**."""  # wrapped at PS_JOB_WIDTH

PS_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: tf_config = None
tf_config = json.dumps({
    "cluster": {
        "chief": {{chief_list}},
        "worker": {{worker_list}},
        "ps": {{ps_list}},
    },
    "task": {"type": "ps", "index": {{index}}},  # the {{ordinal}} parameter server: its index in the 'ps' list
})
# END SOLUTION
ex.q2.check(tf_config)"""
