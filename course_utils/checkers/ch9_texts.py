"""Chapter 9 · the templates of the notebook cells that state exercise 3's numbers (by cell id), filled with each
variant's workers and files (:mod:`.variants`); ``python3 course.py build`` writes them, filled with the defaults, into
``solutions/09_watch_and_feed.ipynb`` (and so ``exercises/``), so edit the text here, not in the notebooks."""

READINGS_QUESTION = """\
## Exercise 3 · Who reads what (4 points)

Every worker of a job builds the **same** pipeline, and `experimental_distribute_dataset` makes each
worker's copy read its own part: it first rebatches each global batch into per-replica pieces, then
auto-shards the copy under the dataset's auto-shard policy. None of the pipelines below sets one, so
the policy is the default, **`AUTO`**. The chapter ran other cases; predict these. The job has
**{{workers_word}} workers**, and `files` is a list of TFRecord files (`files[:{{most}}]`: {{most_word}} of them). As in the
chapter, think of the sharding step alone, `input_ops.auto_shard_dataset(dataset, {{workers}}, worker, {{workers}})`, on
the pipelines as written: unbatched, so an element below is one record, or one whole file. That step
would print the answer (the chapter's `what_auto_shard_gives` calls it), so **predict first**: the check
counts only while this notebook has not imported or used `input_ops` (nor `data_distribute`, the module
of the dataset it makes); the cell after the hints imports it, to compare.{{names_note}}

| key | the pipeline |
|---|---|
| `"many_files"` | `{{many_files_code}}`: {{many_files_text}} |
| `"few_files"` | `{{few_files_code}}`: {{few_files_text}} |
| `"interleaved"` | `{{interleaved_code}}`: {{interleaved_text}} |
| `"whole_files"` | `{{whole_files_code}}`: {{whole_files_text}} |

Answer each case with one of these four words:

- `"by file"`: each worker reads only files of its own: worker i the files i, i + {{workers}}, ...;
- `"by element"`: each worker reads all the data and keeps every {{nth}} element: worker 0 the elements
  0, {{workers}}, {{twice}}, ..., worker 1 the elements 1, {{plus_one}}, ...;
- `"everything"`: nothing is split: every worker reads and keeps all the data;
- `"error"`: a worker's pipeline raises an error when it is read.

The checker runs nothing; the cell after the hints runs the four cases once it has said its piece."""

READINGS_SOLUTION = """\
# BEGIN SOLUTION  # PLACEHOLDER: readings = {"many_files": None, "few_files": None, "interleaved": None, "whole_files": None}
{{readings_code}}
# END SOLUTION
ex.q3.check(readings)"""

READINGS_WATCH_TEXT = """\
**Watch it.** Once the checker has accepted your answer or shown the right one, this cell imports
`input_ops`, writes {{most_word}} tiny TFRecord files (each record naming its file) and shards each
pipeline as the {{workers_word}} workers' copies are sharded. It prints what each worker reads
(records, or the files whole elements hold), or its error, and, for `whole_files`, how many files
each worker read to get them."""

READINGS_WATCH = '''\
import re
from pathlib import Path


def what_each_worker_reads(dataset, workers={{workers}}):
    """Shard `dataset` as tf.distribute does on each of `workers` workers: what each one reads, or its error."""
    result = []
    for index in range(workers):
        sharded = input_ops.auto_shard_dataset(dataset, workers, index, workers)
        try:  # a record is b"f<i>r<j>"; a whole file holds its records, so name the files in it
            result.append([sorted({name.decode() for name in re.findall(rb"f\\d", element)}) if len(element) > 8 else element.decode()
                           for element in sharded.as_numpy_iterator()])
        except tf.errors.OpError as err:
            result.append(f"{type(err).__name__}: {err.message.split('}} ')[-1].splitlines()[0][:80]}...")
    return result


if not ex.q3.answer_shown():
    print("Not yet: this cell runs the four cases once the checker has accepted your answer or shown the right "
          "one (check it in the exercise cell first).")
else:
    from tensorflow.python.distribute import input_ops  # the sharding step: imported only now, after the check

    with tempfile.TemporaryDirectory() as folder:
        files = [str(Path(folder) / f"f{i}.tfrecord") for i in range({{most}})]
        for i, path in enumerate(files):
            with tf.io.TFRecordWriter(path) as writer:
                for r in range(2):
                    writer.write(f"f{i}r{r}".encode())  # record r of file f<i>
        files_read = tf.Variable(0, dtype=tf.int64)

        def read_whole(name):
            files_read.assign_add(1)
            return tf.io.read_file(name)

        cases = {
            "many_files": {{many_files_code}},
            "few_files": {{few_files_code}},
            "interleaved": {{interleaved_watch}},
            "whole_files": {{whole_files_watch}},
        }
        for case, dataset in cases.items():
            said = readings.get(case) if isinstance(readings, dict) else None
            print(f"{case} (you said {said!r}):")
            for worker, reads in enumerate(what_each_worker_reads(dataset)):
                print(f"    worker {worker}: {reads}")
        for worker in range({{workers}}):  # whole_files once more, counting the files each worker reads
            files_read.assign(0)
            {{kept}}
            print(f"whole_files: worker {worker} read {int(files_read.numpy())} files and kept {kept}")'''
