"""Chapter 3 · exercise 5: every process of a MultiWorkerMirroredStrategy job saves, and only the chief's file stays.
The learner's ``write_path(path, tf_config)`` decides from TF_CONFIG alone, so the check calls it for every task of a
job with a 'chief' task and of one of workers only (the chapter's), then runs each job's save on the file system."""
from .core import Exercise, Feedback


def _save_names(seed):
    """The folder and file name of exercise 5's path, drawn from ``seed``: e.g. ("run_4821", "model_907.keras")."""
    import random

    rng = random.Random(seed)
    return f"run_{rng.randrange(1000, 10000)}", f"model_{rng.randrange(100, 1000)}.keras"


def _save_as_the_job_does(folder, path, paths):
    """The exercise's job, on the file system: every worker writes a file (its number) at its path, then each one
    whose path is not ``path`` deletes the folder it wrote into when that folder is inside ``path``'s (the script's
    rule). Only paths inside ``folder`` (the check's temporary folder) are written. Returns what is left in
    ``path``'s folder: {"files": [relative paths], "chief": the text of ``path`` (None if missing), "outside": how
    many paths were outside ``folder`` (not written)}."""
    import shutil
    from pathlib import Path

    out_dir = path.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = [None if p is None else Path(p) for p in paths]
    inside = [t is not None and folder in t.parents for t in targets]
    for worker, (target, ok) in enumerate(zip(targets, inside)):
        if ok and not target.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(str(worker))
    for target, ok in zip(targets, inside):
        if ok and target != path and out_dir in target.parent.parents:
            shutil.rmtree(target.parent, ignore_errors=True)
    return {"files": sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file()),
            "chief": path.read_text() if path.is_file() else None,
            "outside": sum(t is not None and not ok for t, ok in zip(targets, inside))}


SAVE_JOBS = {  # exercise 5's jobs, each with a folder of its own: the chapter's (workers only), and one with a chief
    "of workers only": ("workers", {"worker": 3}), "with a 'chief' task": ("chief", {"chief": 1, "worker": 3})}


def _save_tasks(jobs):
    """The tasks of ``jobs`` as (type, index), the chief's job first, and their cluster (localhost addresses)."""
    tasks = [(job, i) for job in ("chief", "worker") for i in range(jobs.get(job, 0))]
    cluster = {job: [f"localhost:{23000 + n}" for n, (kind, _) in enumerate(tasks) if kind == job] for job in jobs}
    return tasks, cluster


def _reference_chief_of(jobs):
    """The task that is the chief: the 'chief' task when the cluster has one, else worker 0 (multi_worker_util.is_chief,
    which the strategy's should_checkpoint follows)."""
    return ("chief", 0) if "chief" in jobs else ("worker", 0)


class SaveEverywhere(Exercise):
    title = "Every worker saves, only the chief's file stays"
    points = 3
    hints = (
        "Under MultiWorkerMirroredStrategy saving runs an all-reduce: which processes must call save? And which "
        "process is the chief, in a cluster with a 'chief' task and in one without (the chapter's)?",
        "Every process must get a path (None means 'skip the save'). The chief (the 'chief' task when the cluster "
        "has one, else worker 0) gets `path` itself; any other worker a path inside a folder that belongs to that "
        "worker alone (one folder per worker, made directly in path's folder, named with its task index), so that "
        "the folder can be deleted whole after the save and nothing is left behind.",
    )

    def collect(self, write_path, seed=0):
        """Calls ``write_path(path, tf_config)`` for every task of each job of SAVE_JOBS, with ``tf_config`` that
        task's TF_CONFIG as a dict (a fresh copy per call) and ``path`` in a fresh temporary folder (one per job),
        with folder and file names drawn from ``seed``; then runs each job's save with those paths there
        (:func:`_save_as_the_job_does`). What crosses: {"callable": False, "type": type name}, or {"callable": True,
        "folder": the temporary folder, "runs": {job: {"paths": each task's answer, None or the path as a string,
        "left": what the save left}}}. An error of ``write_path`` is the check's error."""
        import copy
        from pathlib import Path
        from tempfile import TemporaryDirectory

        if not callable(write_path):
            return {"callable": False, "type": type(write_path).__name__}
        with TemporaryDirectory() as folder:  # a real folder, in case the function creates its own
            runs = {}
            for job, (slug, jobs) in SAVE_JOBS.items():
                path = Path(folder, slug).joinpath(*_save_names(seed))
                tasks, cluster = _save_tasks(jobs)
                paths = []
                for kind, index in tasks:
                    got = write_path(path, {"cluster": copy.deepcopy(cluster), "task": {"type": kind, "index": index}})
                    paths.append(None if got is None else str(Path(got)))
                runs[job] = {"paths": paths, "left": _save_as_the_job_does(Path(folder), path, paths)}
            return {"callable": True, "folder": folder, "runs": runs}

    def judge(self, data, seed=0):
        """Grades the paths of :meth:`collect`, against the paths of ``seed`` in the folder it names."""
        from pathlib import Path

        fb = Feedback()
        if not data["callable"]:
            fb.wrong(f"write_path must be the function write_path(path, tf_config), not {data['type']}.")
            return fb
        runs = data["runs"]
        if type(data["folder"]) is not str or type(runs) is not dict or sorted(runs) != sorted(SAVE_JOBS):
            raise ValueError("the runs are not those of the check")
        jobs = {}
        for job, (slug, counts) in SAVE_JOBS.items():
            tasks, _ = _save_tasks(counts)
            paths = runs[job]["paths"]
            if type(paths) is not list or len(paths) != len(tasks) or \
                    not all(p is None or type(p) is str for p in paths):
                raise ValueError("the paths are not one string or None per task")
            jobs[job] = {"path": Path(data["folder"], slug).joinpath(*_save_names(seed)),
                         "chief": _reference_chief_of(counts),
                         "given": {task: None if p is None else Path(p) for task, p in zip(tasks, paths)}}

        def name(task):
            return f"{task[0]} {task[1]}"

        skipping = sorted(((job, task) for job, run in jobs.items() for task, got in run["given"].items()
                           if got is None),  # a worker that is not the chief first, in the job like the notebook's
                          key=lambda found: (found[1] == jobs[found[0]]["chief"], "chief" not in found[0]))
        if skipping:  # the save as handed out: nothing about it works, so no points
            job, task = skipping[0]
            chief = " (without a 'chief' task, worker 0 is the chief)" if task == jobs[job]["chief"] else ""
            fb.wrong(f"In the job {job}, {name(task)} gets None, so it skips the save{chief}: the processes that save "
                     f"then wait in the save's all-reduce for a peer that never joins: the job hangs, or fails with a "
                     f"collective error.", answer="Give it a path too, e.g. path.parent / f'workertemp_{index}' / "
                                                  "path.name for a worker that is not the chief.")
            return fb
        self._judge_chief(fb, jobs)
        self._judge_folders(fb, jobs)
        if fb.points == self.points:
            for job, run in jobs.items():
                left, path = runs[job]["left"], run["path"]
                if not isinstance(left, dict):
                    continue
                files, chief_save = left.get("files"), left.get("chief")
                first = str(list(run["given"]).index(run["chief"]))  # the chief's save holds its position
                if files != [path.name] or chief_save != first:
                    fb.points -= 1
                    fb.wrong(f"Run as the job {job} runs it (every process saves, then deletes its folder), your "
                             f"paths leave {files!r:.200} in the folder of `path`, and the chief's file holds "
                             f"{'no save' if chief_save is None else 'the save of another process'}: only the "
                             f"chief's file should be left, with the chief's save.")
                    break
            else:
                fb.note(f"Run as each job runs it (every process saves, then deletes its folder): only "
                        f"{jobs[next(iter(jobs))]['path'].name}, the chief's save, is left.")
        return fb

    @staticmethod
    def _judge_chief(fb, jobs):
        """The first point: the chief, and only the chief, writes `path` in each job."""
        with_chief, workers_only = jobs["with a 'chief' task"], jobs["of workers only"]
        if with_chief["given"][("worker", 0)] == with_chief["path"] and \
                with_chief["given"][("worker", 1)] != with_chief["path"]:
            fb.wrong("In the job with a 'chief' task, worker 0 was given the chief's path: there worker 0 is not "
                     "the chief, the 'chief' task is (a task index alone does not tell; look at the cluster too).")
        elif workers_only["given"][("worker", 0)] != workers_only["path"]:
            fb.wrong(f"In the job of workers only (the chapter's), worker 0 is the chief and must write `path` itself "
                     f"(it got {workers_only['given'][('worker', 0)]}): a cluster without a 'chief' task still has a "
                     f"chief.")
        elif with_chief["given"][("chief", 0)] != with_chief["path"]:
            fb.wrong(f"The 'chief' task must write to `path` itself: its file is the one that stays, at the path you "
                     f"asked for (it got {with_chief['given'][('chief', 0)]}).")
        else:
            fb.right("the chief writes the real file, in either cluster")

    @staticmethod
    def _judge_folders(fb, jobs):
        """The second and third points: every other worker saves in a temporary folder of its own, one per worker,
        that can be deleted whole."""
        def beside_chief(folder, path):  # the chief's folder, or a folder around it
            return folder == path.parent or folder in path.parents

        def leaves_behind(folder, path):  # inside the chief's folder, but not directly: deleting it leaves its parents
            return path.parent in folder.parents and folder.parent != path.parent

        own, apart = None, None  # the first problem of each point
        for job, run in jobs.items():
            path = run["path"]
            others = [got for task, got in run["given"].items() if task != run["chief"]]
            temps = [w for w in others if w != path]
            if own is None and len(temps) < len(others) - (job == "with a 'chief' task" and
                                                            run["given"][("worker", 0)] == path):
                own = ("A worker that is not the chief writes the chief's own file: several processes writing one file "
                       "on shared storage can leave it corrupt.", "")
            elif own is None and any(beside_chief(w.parent, path) for w in temps):
                own = ("A worker's file does not sit in a folder of its own: the folder it is in also holds the "
                       "chief's file, so deleting it after the save would delete the chief's file too.",
                       "Use path.parent / f'workertemp_{index}' / path.name.")
            elif own is None and any(leaves_behind(w.parent, path) for w in temps):
                nested = next(w.parent for w in temps if leaves_behind(w.parent, path))
                own = (f"A worker's folder, {nested.relative_to(path.parent)}, is not directly in the folder of "
                       f"`path`: deleting it after the save leaves {nested.parent.relative_to(path.parent)} behind, "
                       f"beside the chief's file.", "Use path.parent / f'workertemp_{index}' / path.name.")
            folders = [w.parent for w in temps if not beside_chief(w.parent, path)]
            if apart is None and len(set(others)) < len(others):
                apart = (f"In the job {job}, the workers that are not the chief must get different paths; use the "
                         f"task's index to keep them apart, or two workers write the same temporary file.")
            elif apart is None and any(a == b or a in b.parents or b in a.parents
                                       for i, a in enumerate(folders) for b in folders[i + 1:]):
                apart = ("Two workers write into the same temporary folder (or one into a folder inside the other's): "
                         "the first to finish deletes it, and with it the other's save. Give every worker a folder of "
                         "its own, named with its task index.")
        if own:
            fb.wrong(own[0], answer=own[1])
        else:
            fb.right("every other worker saves too, in a temporary folder of its own")
        if apart:
            fb.wrong(apart)
        else:
            fb.right("each worker's temporary folder is its own")
