"""Chapter 3 · Beyond one process: the exercises' graders and hints (exercise 5 in ``ch3_save.py``)."""
import json
import re
import textwrap

from .answers import as_int, grade_items, grade_statements, is_placeholder
from . import ch3_texts
from .core import Exercise, Feedback, chapter
from .ch3_save import SaveEverywhere
from .variants import NUMBER_WORDS, fill

# Optional top-level keys of TF_CONFIG that TensorFlow also reads: TFConfigClusterResolver reads 'rpc_layer' and
# 'session_master' (tfconfig_cluster_resolver.py), the older distribute coordinator 'environment'.
OPTIONAL_KEYS = ("rpc_layer", "session_master", "environment")
ROLE_ALIASES = {"parameter_server": "ps", "parameterserver": "ps", "parameter-server": "ps", "server": "ps",
                "workers": "worker", "chiefs": "chief", "master": "chief"}


def _parse_tf_config(fb, tf_config):
    """The TF_CONFIG answer as a dict and the most points it can earn, or (None, 0)."""
    if isinstance(tf_config, dict):
        fb.wrong("TF_CONFIG is an environment variable, so its value must be a STRING: json.dumps(your_dict). "
                 "(The content is graded below, but a dict earns at most 1 point.)")
        return tf_config, 1
    if isinstance(tf_config, (str, bytes)):
        try:
            config = json.loads(tf_config)
        except ValueError as err:
            fb.wrong(f"Not valid JSON ({err}). Build a dict and json.dumps it instead of writing JSON by hand.")
            return None, 0
        if isinstance(config, dict):
            return config, 2
    fb.wrong("TF_CONFIG must be a JSON string (json.dumps of a dict) with the keys 'cluster' and 'task'.")
    return None, 0


def _cluster_problems(cluster, right):
    """Why a cluster dict differs from ``right``, as a list of short reasons."""
    why = []
    upper = [role for role in cluster if isinstance(role, str) and role != role.strip().lower()
             and role.strip().lower() in right]
    if upper:
        why.append(f"role names are lower case, as TensorFlow spells them: {', '.join(map(repr, upper))} "
                   f"{'is not a role' if len(upper) == 1 else 'are not roles'} it knows")
    for role in cluster:
        if role in ROLE_ALIASES:
            why.append(f"the role is called {ROLE_ALIASES[role]!r}, not {role!r}")
        elif role not in right and role not in upper:
            why.append("this cluster has no chief: worker 0 does the chief's extra work (checkpoints, logs)"
                       if role == "chief" else f"there is no {role!r} role in this cluster")
    for role, addresses in right.items():
        given = cluster.get(role)
        if given is None:
            if any(ROLE_ALIASES.get(r) == role or r in upper and r.strip().lower() == role for r in cluster):
                continue  # said above
            if role == "chief" and "ps" in right:
                why.append("the 'chief' is missing: with ParameterServerStrategy the chief runs the "
                           "ClusterCoordinator and must be in the cluster")
            elif role == "chief":
                why.append("the 'chief' is missing: this job's chief is a task of its own role, with a list of its "
                           "own, not one of the workers")
            else:
                why.append(f"the {role!r} role is missing")
        elif not isinstance(given, list) or not all(isinstance(a, str) for a in given):
            why.append(f"{role!r} must be a list of 'host:port' strings")
        elif given != addresses:
            why.append(f"the {role!r} list is in another order: every process needs the identical, identically "
                       f"ordered list, because a task index means a position in it" if sorted(given) == sorted(addresses)
                       else f"the {role!r} list does not hold the addresses given in the exercise")
    return why


def _task_index(index):
    """A task's index as TensorFlow reads it (``int(task["index"])``: 2, "2", " 2" and 2.0 are all 2), or None when
    TensorFlow would not read it as a whole number (a bool is no index either)."""
    if isinstance(index, bool):
        return None
    if isinstance(index, str):
        index = index.strip()
        return int(index) if re.fullmatch(r"[+-]?\d+", index) else None
    return as_int(index)


def _flat_position(cluster, task):
    """Where the task's address stands in all the cluster's addresses, role after role (a typical wrong index)."""
    addresses = [a for role in cluster.values() for a in role]
    mine = cluster.get(task["type"], [])
    return addresses.index(mine[task["index"]]) if task["index"] < len(mine) else None


def _task_problems(task, right, task_words, cluster=None):
    why = []
    ttype, index = task.get("type"), _task_index(task.get("index"))
    if ttype != right["type"]:
        alias = ROLE_ALIASES.get(ttype) if isinstance(ttype, str) else None
        lower = ttype.strip().lower() if isinstance(ttype, str) else None
        why.append(f"the role is called {alias!r}" if alias == right["type"]
                   else f"role names are lower case, as TensorFlow spells them, not {ttype!r}" if lower == right["type"]
                   else f"{ttype!r} is not the role of {task_words}")
    if index is None:
        why.append(f"'index' must be a whole number (an int, counting from 0), not {task.get('index')!r}")
    elif index != right["index"]:
        flat = _flat_position(cluster, right) if cluster else None
        why.append(f"'index' counts within the {right['type']!r} list only, from 0, not over every address of the "
                   f"cluster" if index == flat and len(cluster) > 1
                   else "indices count from 0" if index == right["index"] + 1
                   else f"'index' {task.get('index')!r} does not point to {task_words}")
    extra = [k for k in task if k not in ("type", "index")]
    if extra:
        why.append(f"unknown key(s) {extra} in 'task'")
    return why


def _localhost(address):
    """An address with 127.0.0.1 written as localhost (the same host to TensorFlow)."""
    if isinstance(address, str) and address.strip().startswith("127.0.0.1:"):
        return "localhost:" + address.strip()[len("127.0.0.1:"):]
    return address


def _address_of(cluster, task):
    """The address of the task ``task`` names in ``cluster`` (None when the cluster has no such task)."""
    addresses = cluster.get(task.get("type"))
    index = task.get("index")
    if isinstance(addresses, list) and isinstance(index, int) and 0 <= index < len(addresses) and \
            isinstance(addresses[index], str):
        return addresses[index]
    return None


def _host_of(cluster, task):
    """The host of the task ``task`` names in ``cluster`` (None when the cluster has no such task)."""
    address = _address_of(cluster, task)
    return address.rsplit(":", 1)[0] if address else None


def grade_tf_config(tf_config, expected, task_words, diagnose=None, asked_host=None, asked_address=None):
    """Grade a TF_CONFIG string against ``expected``: 1 point for the cluster, 1 for the task.

    ``diagnose(cluster)``, when given, names the mistake of a wrong cluster dict aimed at the exercise's case (or
    returns None: the general reasons follow). With ``asked_host``, the task is read in the cluster the answer gives
    when that cluster is wrong: a task equal to the expected one that points there to another host earns nothing (the
    process would take another node's address), and one that points to ``asked_host`` is told to look again once
    the cluster is right. ``asked_address`` does the same with the whole 'host:port' (for a job whose tasks share
    one host)."""
    asked, where = (asked_address, _address_of) if asked_address else (asked_host, _host_of)
    fb = Feedback()
    config, cap = _parse_tf_config(fb, tf_config)
    if config is None:
        return fb
    extra = [k for k in config if k not in ("cluster", "task") + OPTIONAL_KEYS]
    if extra:
        fb.note(f"Unknown top-level key(s) {extra}: TensorFlow ignores them; it reads 'cluster' and 'task' from "
                f"TF_CONFIG, and optionally {', '.join(repr(k) for k in OPTIONAL_KEYS)}. This job needs only 'cluster' "
                f"and 'task'.")
    rpc_layer = config.get("rpc_layer", "grpc")
    if rpc_layer != "grpc":
        fb.wrong(f"'rpc_layer' is {rpc_layer!r}: the servers of this job speak 'grpc' (leave the key out, or set "
                 f"it to 'grpc').")
        cap = min(cap, 1)
    optional = [k for k in OPTIONAL_KEYS if k in config and not (k == "rpc_layer" and rpc_layer == "grpc")]
    if optional:
        fb.note(f"Optional key(s) {optional}: TensorFlow reads them, but this job does not need them.")
    cluster, task = config.get("cluster"), config.get("task")
    if isinstance(cluster, dict):
        local = {role: [_localhost(a) for a in addresses] if isinstance(addresses, list) else addresses
                 for role, addresses in cluster.items()}
        if local != cluster and local == expected["cluster"]:
            fb.note("127.0.0.1 is localhost: TensorFlow connects to the same addresses (every process must list "
                    "them identically, so write them the same way everywhere).")
        cluster = local
    if isinstance(task, dict) and task.get("index") != _task_index(task.get("index")) and \
            _task_index(task.get("index")) is not None:
        fb.note(f"'index' {task['index']!r}: TensorFlow reads it with int(), so this works; an int is the usual "
                f"form.")
        task = dict(task, index=_task_index(task["index"]))
    if not isinstance(cluster, dict):
        fb.wrong("'cluster' is missing or not a dict of role -> list of 'host:port' strings.")
    elif cluster == expected["cluster"]:
        fb.right("cluster")
    else:
        aimed = diagnose(cluster) if diagnose else None
        why = [aimed] if aimed else _cluster_problems(cluster, expected["cluster"])
        fb.wrong("cluster: " + ("; ".join(why) if why else "it differs from the one described") + ".",
                 answer=f"It is {expected['cluster']}.")
    if not isinstance(task, dict):
        fb.wrong("'task' is missing or not a dict like {'type': ..., 'index': ...}.")
    elif task == expected["task"] and asked and isinstance(cluster, dict) and \
            cluster != expected["cluster"] and where(cluster, task) != asked:
        fb.wrong(f"task: in your cluster, {task['type']} {task['index']} is {where(cluster, task)}, so the process "
                 f"would take that address, not {task_words}'s." if where(cluster, task) else
                 f"task: your cluster has no {task['type']} {task['index']}, so the process would find no address of "
                 f"its own in it.")
    elif task == expected["task"]:
        fb.right(f"task: {task_words}")
    elif asked and isinstance(cluster, dict) and cluster != expected["cluster"] and \
            task.get("type") in expected["cluster"] and where(cluster, task) == asked:
        fb.wrong(f"task: it points to {task_words} in your cluster, but that cluster is not the job's (see the line "
                 f"above): once the cluster is right, find the task in it again.")
    else:
        fb.wrong("task: " + "; ".join(_task_problems(task, expected["task"], task_words, expected["cluster"])) + ".",
                 answer=f"It is {expected['task']}.")
    fb.points = min(fb.points, cap)
    return fb


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


def _reference_faults():
    """Exercise 3's answer."""
    return {"stop_signal": "SIGKILL", "restores": "B", "peer_killed": "B"}


def _reference_fault_why():
    """Why the typical wrong answers of exercise 3 are wrong (together they rule the other choices out)."""
    return {
        ("stop_signal", "SIGTERM"): "once a MultiWorkerMirroredStrategy worker has built its strategy, "
                                    "TensorFlow's preemption notifier catches SIGTERM and the process keeps running "
                                    "(chapter 3 showed terminate() failing).",
        ("stop_signal", "SIGINT"): "SIGINT (Ctrl-C) can be caught and handled like SIGTERM.",
        ("restores", "A"): "BackupAndRestore saves a full training checkpoint, not only the weights.",
        ("restores", "C"): "it does not save the position inside the dataset iterator: with save_freq='epoch' the "
                           "interrupted epoch is run again from its start.",
        ("restores", "D"): "fit() restores automatically when it starts and finds a backup in backup_dir (and deletes "
                           "the backup when training finishes).",
        ("peer_killed", "A"): "synchronous training needs every worker in every all-reduce; the survivor cannot go on "
                              "alone.",
        ("peer_killed", "C"): "only at START-UP does a worker wait for a missing peer with no time limit; a collective "
                              "in the middle of training notices a lost peer.",
    }


def _reference_fault_answers():
    """What exercise 3's right answers are, and why."""
    return {
        "stop_signal": "Only SIGKILL cannot be caught or ignored.",
        "restores": "It restores the weights, the optimizer's state and the epoch (or step) counter.",
        "peer_killed": "The survivor's collective fails with an error (UnavailableError when TensorFlow notices the "
                       "lost peer) instead of waiting for it; restart the job.",
    }


SIGNAL_NUMBERS = {9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT"}


def _normalize_signal(value):
    """A signal as its name: signal.SIGKILL, 9, "9", "SIGKILL", "kill", "signal.SIGKILL", "SIGKILL (9)", "kill -9"."""
    name = getattr(value, "name", None)
    if isinstance(name, str) and name.startswith("SIG"):
        return name
    if isinstance(value, int) and not isinstance(value, bool):
        return SIGNAL_NUMBERS.get(value, str(value))
    if isinstance(value, str):
        text = value.strip().upper()
        if re.fullmatch(r"CTRL\s*[-+]?\s*C", text):
            return "SIGINT"
        named = [word for word in re.findall(r"\bSIG[A-Z]+", text) if word != "SIGNAL"] or \
            re.findall(r"^(?:SIGNAL\.)?([A-Z]+)$", text)
        if named:
            return named[0] if named[0].startswith("SIG") else "SIG" + named[0]
        number = re.fullmatch(r"(?:KILL\s+)?-?(\d+)", text)
        if number:
            return _normalize_signal(int(number[1]))
        return text
    return value


def _normalize_letter(value):
    """A choice's letter from "B", " b ", "(B)", "B)", "B.", "Option B" or "B. The weights, ..."; other text as it is
    (stripped, upper case)."""
    if not isinstance(value, str):
        return value
    text = value.strip().upper()
    found = re.fullmatch(r"(?:OPTION|ANSWER|CHOICE)?\s*\(?\s*([A-D])\s*\)?\s*(?:[.:)\-,]\s*.*)?", text, re.DOTALL)
    return found[1] if found else text


class Faults(Exercise):
    title = "Stopping, losing and restoring workers"
    points = 3
    hints = (
        "Chapter 3 stopped a worker for real: which signal did it take, what did the other worker see, and where "
        "did fit() continue after the restart?",
        "terminate() sends SIGTERM; the chapter showed what a MultiWorkerMirroredStrategy worker does with it. "
        "BackupAndRestore is a full training checkpoint.",
    )

    def grade(self, answers):
        if isinstance(answers, dict):
            answers = {k: (v if is_placeholder(v) else
                           (_normalize_signal if k == "stop_signal" else _normalize_letter)(v))
                       for k, v in answers.items()}

        fault_why, fault_answers = _reference_fault_why(), _reference_fault_answers()

        def explain(key, given, raw):
            if (key, given) in fault_why:
                return fault_why[(key, given)], fault_answers[key]
            if key == "stop_signal":
                return f"{raw!r}: answer with one of the signal names 'SIGINT', 'SIGTERM', 'SIGKILL'.", ""
            return f"{raw!r}: answer with one of the letters A, B, C, D.", ""

        return grade_items(Feedback(), answers, _reference_faults(), explain, lambda v: v, "see the questions")


STATEMENTS = [  # exercise 4's statements, as the notebook lists them
    "ParameterServerStrategy is model parallelism: each worker trains a different part of the model.",
    "With MultiWorkerMirroredStrategy all workers hold identical weights after every training step.",
    "With ParameterServerStrategy, when one worker process is killed, training goes on with the others.",
    "MultiWorkerMirroredStrategy needs Kubernetes (or another cluster manager) to find its peers.",
    "In asynchronous training a worker may compute its gradient from weights that other workers have updated since "
    "it read them (a stale gradient).",
    "Each process may list the workers in its own order, as long as its own task index points to itself.",
]


def _reference_statements():
    """Exercise 4's answer: whether each statement of STATEMENTS is true, and why."""
    return [
        (False, "It is data parallelism: every worker runs the whole model on its own batches; only the variables "
                "live on (and may be sharded over) the parameter servers."),
        (True, "Every step all-reduces the gradients, so every worker applies the same update to the same weights."),
        (True, "The ClusterCoordinator reschedules the lost worker's functions on the remaining workers (a killed "
               "parameter server, however, fails the job with UnavailableError)."),
        (False, "Each process reads the cluster and its own role from TF_CONFIG; chapter 3 ran two workers on "
                "localhost with nothing else."),
        (True, "Nobody waits for anybody, so updates from other workers can land between a worker's read and its "
               "write."),
        (False, "Every process must get the identical, identically ordered cluster list: indices are positions in "
                "it."),
    ]

STATEMENT_IDEAS = [  # what to revisit when a statement is judged wrong, in the order of STATEMENTS (no verdict in it)
    "what each worker of a ParameterServerStrategy job runs: the whole model, or a part of it",
    "what the all-reduce of every synchronous step does to the workers' copies of the weights",
    "what chapter 3 showed when a process of a ParameterServerStrategy job was killed",
    "what a MultiWorkerMirroredStrategy worker reads to find its peers (chapter 3's two workers on localhost)",
    "what 'asynchronous' allows to happen between a worker's read of the weights and its update",
    "what a task index points into, in the TF_CONFIG of each process",
]


class SyncAsync(Exercise):
    title = "Synchronous versus asynchronous"
    points = 6
    hints = (
        "Synchronous = everybody all-reduces every step (MultiWorkerMirroredStrategy); asynchronous = workers push "
        "updates to parameter servers without waiting (ParameterServerStrategy).",
        "Both are data parallelism. Re-read what chapter 3 showed when a worker or a parameter server was killed.",
    )

    def grade(self, statements):
        """One point per statement judged right (what the feedback says: :func:`grade_statements`)."""
        fb = Feedback()
        grade_statements(fb, statements, _reference_statements(), STATEMENT_IDEAS)
        return fb


CHAPTER = chapter(3, "Beyond one process", {
    "q1": WorkerConfig, "q2": ParameterServerConfig, "q3": Faults, "q4": SyncAsync, "q5": SaveEverywhere},
    uses_tensorflow=False)
