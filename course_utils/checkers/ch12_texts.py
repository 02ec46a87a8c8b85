"""Chapter 12 · the templates of the notebook cells that state exercise 1's numbers (by cell id), filled with each
variant's service workers and trainers (:mod:`.variants`); ``python3 course.py build`` writes them, filled with the
defaults, into ``solutions/12_practice_at_scale.ipynb`` (and so ``exercises/``), so edit the text here, not in the
notebooks."""

DELIVERIES_QUESTION = """\
## Exercise 1 · What {{workers_word}} service workers deliver (3 points)

The chapter's service had **2 workers** and fed **2 trainers**, and counted how many times each
example was delivered in one epoch, over both trainers: 4, 2, 2 and 1 times for the four ways to read.
Now the service has **{{workers}} workers** and {{still}}feeds **{{trainers}} trainers**, with the same kind of dataset (a
splittable source, batched on the service). For each way to read, how many times is each example
delivered in one epoch, over {{all_trainers}} together? Answer with a whole number per key.

All four right earn 3 points, three right 2, two right 1. The cell after the hints runs the four
cases on a service of {{workers}} workers, once the checker has said its piece."""

DELIVERIES_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: deliveries = {"parallel_epochs, a job per trainer": None, "parallel_epochs, one shared job": None, "distributed_epoch, a job per trainer": None, "distributed_epoch, one shared job": None}
deliveries = {"parallel_epochs, a job per trainer": {{per_trainer_copies}}# each trainer's job: every example once per service worker ({{workers}})
              "parallel_epochs, one shared job": {{shared_copies}}# one job makes {{workers}} copies; the {{trainers}} trainers split them
              "distributed_epoch, a job per trainer": {{per_trainer_once}}# each trainer's job: every example once
              "distributed_epoch, one shared job": 1}     # one job, every example once, split between the trainers
# END SOLUTION
ex.q1.check(deliveries)"""

DELIVERIES_WATCH = '''\
import collections


def times_delivered(service, dispatcher, mode, shared, examples=60):
    """How many times each example reached {{trainers_word}} consumers that read side by side, as {{trainers_word}} trainers would."""
    readers = [iter(tf.data.Dataset.range(examples).batch(6).apply(
        service.distribute(mode, dispatcher.target, job_name=f"watch-{mode}" if shared else None))) for _ in range({{trainers}})]
    times, live = collections.Counter(), {{consumers}}
    while live:
        for reader in list(live):
            try:
                times.update(next(readers[reader]).numpy().tolist())
            except StopIteration:
                live.remove(reader)
    return times  # the readers end here, before the servers stop


if not ex.q1.answer_shown():
    print("Not yet: this cell runs the four cases once the checker has accepted your answer or shown the right one.")
else:
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    workers = [service.WorkerServer(service.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1], port=0,
                                                         heartbeat_interval_ms=100)) for _ in range({{workers}})]
    for case in deliveries:
        mode = case.split(", ")[0]
        times = times_delivered(service, dispatcher, mode, shared=case.endswith("shared job"))
        print(f"{case:40s} each of the 60 examples delivered {sorted(set(times.values()))} time(s); you said "
              f"{deliveries.get(case)!r}")
    for server in [*workers, dispatcher]:
        server._stop()  # private, as in TensorFlow's tests: frees the ports now'''
