"""Chapter 3 · exercises 1 and 2: the TF_CONFIG of one task of a Slurm step, and of a parameter server; their
variants' numbers, answers and typical slips (graded by :func:`~.ch3_config_grader.grade_tf_config`)."""
import json
import textwrap

from . import ch3_texts
from .ch3_config_grader import grade_tf_config
from .core import Exercise
from .variants import NUMBER_WORDS, fill


# Exercise 1: the TF_CONFIG of one task of a Slurm step (the chapter's slurm_tf_config would print it: the prediction
# counts only before it is imported or used). Exercise 2: the TF_CONFIG of the process that listens on a given
# address, in a ParameterServerStrategy job (a job the chapter did not start). Both vary per student (:mod:`.variants`).
# Exercise 1's job: a chief (which the chapter's jobs had not) and workers, one task per node on the nodes
# prefix[first-last], every task on one port; the task asked about runs on prefix<asked>.
SLURM_DEFAULTS = {"prefix": "node", "first": 8, "workers": 3, "asked": 10, "port": 2222}
SLURM_PREFIXES = ("node", "gpu", "cn", "nid", "hpc", "c")  # a variant's node names: a prefix and a number
SLURM_WORKERS = range(2, 6)  # a variant's workers, beside its chief
SLURM_DIGITS = (10, 100)  # a variant's node numbers run across one of these: as text, the longer names come first
SLURM_PORTS = range(2000, 30000)  # a variant's port
# Exercise 2's job: a chief, workers and parameter servers on localhost, on consecutive ports from `port` in that
# order; the process asked about is the parameter server of index `asked` (never the first: index 0 needs no thought).
PS_DEFAULTS = {"port": 20000, "workers": 2, "servers": 2, "asked": 1}
PS_WORKERS, PS_SERVERS = range(1, 5), range(2, 5)
PS_PORTS = range(2000, 60000, 100)
PS_JOB_WIDTH = 100  # the question's paragraph is wrapped at this width, as the notebook's markdown is
ORDINALS = {1: "second", 2: "third", 3: "fourth"}


def slurm_nodes(params):
    """The node names of exercise 1's Slurm step, in Slurm's order: ``['node8', 'node9', 'node10', 'node11']``."""
    return [f"{params['prefix']}{n}" for n in range(params["first"], params["first"] + params["workers"] + 1)]


def slurm_nodelist(params):
    """The step's nodes in Slurm's list syntax: ``'node[8-11]'``."""
    return f"{params['prefix']}[{params['first']}-{params['first'] + params['workers']}]"


def slurm_jobs(params):
    """The jobs of exercise 1's step: ``{'chief': 1, 'worker': 3}``."""
    return {"chief": 1, "worker": params["workers"]}


def listed(words):
    """``['a', 'b', 'c']`` as ``'a, b and c'``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _reference_config_of(cluster, address):
    """The TF_CONFIG (as a dict) of the process of ``cluster`` that listens on ``address``: its role, and its position
    in that role's list."""
    role, index = next((role, i) for role, addresses in cluster.items() for i, a in enumerate(addresses)
                       if a == address)
    return {"cluster": cluster, "task": {"type": role, "index": index}}


def _reference_slurm_cluster(params, nodes=None, job_order=None):
    """The cluster of exercise 1's jobs when its tasks take the ranks on ``nodes`` (default: Slurm's order; one task
    each, in rank order) job after job in ``job_order`` (default: alphabetical)."""
    jobs = slurm_jobs(params)
    addresses, cluster = [f"{node}:{params['port']}" for node in nodes or slurm_nodes(params)], {}
    for job in job_order or sorted(jobs):
        cluster[job], addresses = addresses[:jobs[job]], addresses[jobs[job]:]
    return cluster


def _reference_worker_config(params=SLURM_DEFAULTS):
    """Exercise 1's answer. Slurm numbers the tasks in its node order (block distribution, one task per node) and the
    jobs take the ranks in alphabetical order of their names, as slurm_tf_config assigns them: the chief is rank 0 on
    the first node (node8), the workers the next ranks (node9-node11), so the asked node (node10) runs worker rank - 1.
    MultiWorkerMirroredStrategy trains with the chief (multi_worker_util.worker_count counts 'chief' and 'worker'
    tasks)."""
    return _reference_config_of(_reference_slurm_cluster(params), f"{params['prefix']}{params['asked']}:{params['port']}")


def _reference_slurm_slip(cluster, params):
    """What is wrong with exercise 1's ``cluster`` (already not the right one) when it is one of the typical Slurm
    mistakes, else None: the node names sorted as text, the workers given the first ranks, the ranks' ports."""
    jobs, nodes, port = slurm_jobs(params), slurm_nodes(params), params["port"]
    addresses = [a for role in sorted(cluster) if isinstance(cluster[role], list) for a in cluster[role]]
    if set(cluster) == set(jobs) and [len(cluster[j]) for j in sorted(jobs)] == [jobs[j] for j in sorted(jobs)]:
        if cluster == _reference_slurm_cluster(params, sorted(nodes)):
            text_order = sorted(nodes)
            return (f"the nodes are in text order ({listed(text_order[:text_order.index(nodes[0])])} before "
                    f"{nodes[0]}), the order TensorFlow's SlurmClusterResolver sorts them in; Slurm numbers the tasks "
                    f"in its own node order, the order of {slurm_nodelist(params)}, and every task builds the cluster "
                    f"in that order (the chapter's Slurm section)")
        if cluster == _reference_slurm_cluster(params, job_order=sorted(jobs, reverse=True)):
            return ("the workers took the first ranks: the jobs take the ranks job by job in alphabetical order of "
                    "their names, so the 'chief' job comes first")
        hosts = [a.rsplit(":", 1)[0] if isinstance(a, str) else a for a in addresses]
        if hosts == nodes and addresses != [f"{n}:{port}" for n in nodes]:
            return (f"the ports: there is one task per node, so every task listens on port {port} of its own "
                    f"node (only a second task on the same node would take the next port)")
    return None


def ps_addresses(params):
    """Exercise 2's job as stated: ``{'chief': [...], 'worker': [...], 'ps': [...]}`` of 'localhost:port'."""
    ports = iter(range(params["port"], params["port"] + 1 + params["workers"] + params["servers"]))
    counts = {"chief": 1, "worker": params["workers"], "ps": params["servers"]}
    return {role: [f"localhost:{next(ports)}" for _ in range(count)] for role, count in counts.items()}


def ps_asked(params):
    """The address exercise 2 asks about: ``'localhost:20004'``."""
    return ps_addresses(params)["ps"][params["asked"]]


def _reference_ps_config(params=PS_DEFAULTS):
    """Exercise 2's answer: the TF_CONFIG (as a dict) of the asked parameter server (by default the second) of a
    ParameterServerStrategy job: its index in the 'ps' list."""
    return _reference_config_of(ps_addresses(params), ps_asked(params))


class WorkerConfig(Exercise):
    title = "TF_CONFIG for a Slurm task"
    points = 2
    revealed_by = ("course_utils.cluster.slurm:slurm_tf_config",)
    defaults = SLURM_DEFAULTS
    templates = {"c03": ch3_texts.SLURM_QUESTION, "ch3-q1": ch3_texts.SLURM_SOLUTION,
                 "c05w-md": ch3_texts.SLURM_WATCH_TEXT, "c05w": ch3_texts.SLURM_WATCH}
    hints = (
        "Work in two steps: which rank does Slurm give the task on {{asked}} (in which order does Slurm number the "
        "nodes of {{nodelist}}?), and which job and index does that rank get when the jobs take the ranks in "
        "alphabetical order of their names?",
        "Ranks follow Slurm's node order, {{first_node}} first (not the order of the names as text). Ranks 0, 1, ... "
        "go to 'chief' first, then 'worker'. TF_CONFIG's 'cluster' maps each job to its ordered list of 'host:port' "
        "(the chief has a list of its own); 'task' is this process's job and its index in THAT job's list, from 0.",
    )

    @staticmethod
    def draw(rng):
        """A chief and 2 to 5 workers on nodes whose numbers run across 10 or 100, at least one below it and two from
        it on (so text order moves every node, and its cluster is not the one of the workers taking the first
        ranks), one of the workers' nodes asked about, and a port."""
        workers = rng.choice(SLURM_WORKERS)
        digits = rng.choice(SLURM_DIGITS)
        first = rng.randrange(digits - workers + 1, digits)  # the last node, first + workers, is digits + 1 or more
        return {"prefix": rng.choice(SLURM_PREFIXES), "first": first, "workers": workers,
                "asked": first + rng.randrange(1, workers + 1), "port": rng.randrange(SLURM_PORTS.start,
                                                                                      SLURM_PORTS.stop)}

    def text_values(self):
        nodes, port = slurm_nodes(self.params), self.params["port"]
        asked = f"{self.params['prefix']}{self.params['asked']}"
        return {"workers_word": NUMBER_WORDS[self.params["workers"]], "jobs": json.dumps(slurm_jobs(self.params)),
                "nodelist": slurm_nodelist(self.params), "node_names": ", ".join(f"`{n}`" for n in nodes),
                "port": port, "asked": asked, "first_node": nodes[0], "tasks": len(nodes),
                # slurm_tf_config's own port_base is SLURM_DEFAULTS' port (a test checks it)
                "port_argument": "" if port == SLURM_DEFAULTS["port"] else f", port_base={port}"}

    def reference_values(self):
        nodes, right = slurm_nodes(self.params), _reference_worker_config(self.params)
        cluster = json.dumps(right["cluster"])
        if len(cluster) > 100:  # a line of at most 120 characters: the workers on a line of their own
            cluster = (f'{{"chief": {json.dumps(right["cluster"]["chief"])},\n'
                       f'                "worker": {json.dumps(right["cluster"]["worker"])}}}')
        return {"slurm_order": ", ".join(nodes), "last_rank": len(nodes) - 1, "chief_node": nodes[0],
                "worker_nodes": f"{nodes[1]}-{nodes[-1]}", "rank": right["task"]["index"] + 1,
                "index": right["task"]["index"], "cluster": cluster}

    def grade(self, tf_config):
        asked = f"{self.params['prefix']}{self.params['asked']}"
        return grade_tf_config(tf_config, _reference_worker_config(self.params), f"the task on {asked}",
                               diagnose=lambda cluster: _reference_slurm_slip(cluster, self.params), asked_host=asked)


class ParameterServerConfig(Exercise):
    title = "TF_CONFIG for a parameter server"
    points = 2
    defaults = PS_DEFAULTS
    templates = {"c06": ch3_texts.PS_QUESTION, "ch3-q2": ch3_texts.PS_SOLUTION}
    hints = (
        "Which roles does a ParameterServerStrategy cluster have, and which one is this process?",
        "A ParameterServerStrategy cluster has three roles: 'chief' (runs the ClusterCoordinator), 'worker' and "
        "'ps'. Every process gets the same cluster; only 'task' differs, and its index counts within its role's "
        "list.",
    )

    @staticmethod
    def draw(rng):
        """1 to 4 workers, 2 to 4 parameter servers, any of them but the first asked about, and the first port."""
        servers = rng.choice(PS_SERVERS)
        return {"port": rng.choice(PS_PORTS), "workers": rng.choice(PS_WORKERS), "servers": servers,
                "asked": rng.randrange(1, servers)}

    def text_values(self):
        addresses = ps_addresses(self.params)

        def on(count, one, many, role):
            names = [f"`{a}`" for a in addresses[role]]
            return f"{NUMBER_WORDS[count]} {one if count == 1 else many} on {listed(names)}"

        values = {"chief": addresses["chief"][0], "asked": ps_asked(self.params),
                  "workers_on": on(self.params["workers"], "worker", "workers", "worker"),
                  "servers_on": on(self.params["servers"], "parameter server", "parameter servers", "ps")}
        job = textwrap.fill(fill(ch3_texts.PS_JOB, values), PS_JOB_WIDTH, break_long_words=False,
                            break_on_hyphens=False)
        return {**values, "job": job}

    def reference_values(self):
        right = _reference_ps_config(self.params)
        return {**{f"{role}_list": json.dumps(addresses) for role, addresses in right["cluster"].items()},
                "index": right["task"]["index"], "ordinal": ORDINALS[right["task"]["index"]]}

    def grade(self, tf_config):
        asked = ps_asked(self.params)
        return grade_tf_config(tf_config, _reference_ps_config(self.params), f"the process on {asked}",
                               asked_address=asked)
