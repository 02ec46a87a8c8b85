"""Chapter 3 · grading a TF_CONFIG answer (exercises 1 and 2, in ``ch3_config.py``): :func:`grade_tf_config` and the
reasons it gives for a wrong cluster or task."""
import json
import re

from .answers import as_int
from .core import Feedback

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
