"""Benchmark the course itself: ``python3 course.py bench [--output FILE]`` (a maintainer tool: it
works on a clone of the course, see :mod:`course_utils.tools.checkout`).

Two parts, both run on this machine and written as one markdown report:

1. **Chapter notebooks**: each notebook in ``notebooks/`` is executed in a fresh kernel and its
   wall time recorded, with the total.
2. **Strategies**: the same model (Flatten-Dense(128)-Dense(10)) on the same MNIST data, three
   epochs each, on one device, with ``MirroredStrategy``, and with DTensor (manual packing and
   ``DTensorDataset``) over 8 virtual CPUs, reported as the median epoch, the fastest and slowest
   (on shared cores one epoch can take many times another), and the ratio of medians. The Keras
   ways train with one ``fit`` over the repeated data (one iterator for all epochs, as chapter 2
   teaches), and the seconds ``fit`` spent between its epochs and after the last (where it drops
   its iterator: see chapter 2) are reported apart. This part runs in its own
   process, because virtual devices and tf_keras must be set up before TensorFlow starts.

It is a measurement, not a test: nothing fails on a slow number.
"""
import argparse
import json
import statistics
import os
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from course_utils.tools.checkout import checkout_root
from course_utils.tools.notebook_runner import run_in_child
from course_utils.notebook_setup import setup_environment

__all__ = ["time_notebooks", "time_strategies", "markdown_report"]


def time_notebooks(paths, timeout=600):
    """Run each notebook in a fresh kernel (:func:`~course_utils.tools.notebook_runner.run_in_child`) and time it.

    Args:
        paths: notebook paths.
        timeout: seconds one notebook may take.

    Returns:
        A list of ``(name, seconds, status)``; ``status`` is ``"ok"`` or what went wrong.

    Example (not run by the doctests: it runs chapter 0 in a kernel):
        >>> time_notebooks([Path("notebooks/00_welcome.ipynb")])  # doctest: +SKIP
        [('00_welcome', 4.1, 'ok')]
    """
    results = []
    for path in paths:
        outcome = run_in_child("course_utils.tools.notebook_runner:run_notebook_cells",
                               {"notebook": str(Path(path).resolve())}, timeout)
        status = outcome["report"].get("status") if outcome["kind"] == "completed" else outcome["kind"]
        results.append((Path(path).stem, outcome["seconds"], status or outcome.get("detail", "")))
        print(f"  {results[-1][0]}: {results[-1][1]:.1f} s ({results[-1][2]})", flush=True)
    return results


def time_strategies(examples=60_000, batch_size=128, epochs=3):
    """Time epochs of the same model four ways, in a fresh process; return seconds per way.

    Args:
        examples: how many MNIST training examples make the epoch (the default is all of them).
        batch_size: the global batch size (must divide over 8 devices).
        epochs: how many epochs each way is timed, one after the other.

    Returns:
        A dict ``{"epochs": {way: [s, ...]}, "outside the epochs": {way: s}}``: each epoch's seconds
        (after one warm-up step, so tracing is excluded) for the ways "single device",
        "MirroredStrategy", "DTensor, manual packing" and "DTensorDataset", all reading the same
        examples from memory; and, for the two Keras ways, the seconds their one ``fit`` spent
        outside the epochs (between them, and after the last until ``fit`` returned).

    Raises:
        RuntimeError: the benchmark process failed (its output is included).

    Example (not run by the doctests: it trains for a minute):
        >>> len(time_strategies(examples=2048, epochs=2)["epochs"]["single device"])  # doctest: +SKIP
        2
    """
    env = dict(os.environ, **setup_environment("tf_keras", dtensor=True), TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [sys.executable, "-m", "course_utils.tools.benchmark", "--strategy-worker", str(examples), str(batch_size), str(epochs)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"The strategy benchmark failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def _strategy_worker(examples, batch_size, epochs):
    """Runs in a fresh process with tf_keras and DTensor's combining off (see :func:`time_strategies`)."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils import configure_virtual_cpus, load_mnist, make_mesh, pack_batch

    import itertools

    devices = configure_virtual_cpus(8)
    steps = examples // batch_size
    # All four ways read the same examples from memory, so the epoch measures the strategy,
    # not TFDS decoding.
    images, labels = next(iter(load_mnist(f"train[:{steps * batch_size}]", batch_size=steps * batch_size)))
    examples_in_memory = tf.data.Dataset.from_tensor_slices((images, labels))
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    timings, outside = {}, {}

    def keras_model(**layouts):
        return tf.keras.Sequential([
            tf.keras.layers.Flatten(input_shape=(28, 28, 1)),
            tf.keras.layers.Dense(128, activation="relu", **layouts),
            tf.keras.layers.Dense(10, **layouts),
        ])

    class EpochClock(tf.keras.callbacks.Callback):
        """Each epoch's seconds, and the seconds between epochs and after the last (until ``stop``)."""

        def on_train_begin(self, logs=None):
            self.epochs, self.outside, self.ended = [], 0.0, None

        def on_epoch_begin(self, epoch, logs=None):
            self.stop()
            self.began = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.ended = time.perf_counter()
            self.epochs.append(self.ended - self.began)

        def stop(self):
            if self.ended:
                self.outside += time.perf_counter() - self.ended
                self.ended = None

    def timed_fit(strategy, way):
        with strategy.scope():
            model = keras_model()
            model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss=loss_fn)
        # Repeated, for a given number of steps per epoch: one iterator for all epochs (chapter 2).
        data = examples_in_memory.batch(batch_size, drop_remainder=True).repeat().prefetch(2)
        model.fit(data, steps_per_epoch=1, verbose=0)  # build and trace outside the timed epochs
        clock = EpochClock()
        model.fit(data, steps_per_epoch=steps, epochs=epochs, verbose=0, callbacks=[clock])
        clock.stop()
        timings[way], outside[way] = clock.epochs, clock.outside

    tf.keras.utils.set_random_seed(0)
    timed_fit(tf.distribute.OneDeviceStrategy(devices[0]), "single device")
    timed_fit(tf.distribute.MirroredStrategy(devices), "MirroredStrategy")

    mesh = make_mesh([("batch", 8)])
    replicated = {"kernel_layout": dtensor.Layout.replicated(mesh, 2), "bias_layout": dtensor.Layout.replicated(mesh, 1)}
    image_layout = dtensor.Layout.batch_sharded(mesh, "batch", rank=4)
    label_layout = dtensor.Layout.batch_sharded(mesh, "batch", rank=1)

    def dtensor_epoch(batches):
        tf.keras.utils.set_random_seed(0)
        model = keras_model(**replicated)
        optimizer = tf.keras.dtensor.experimental.optimizers.Adam(1e-3, mesh=mesh)

        @tf.function
        def train_step(images, labels):
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model(images, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        iterator = batches()
        train_step(*next(iterator))  # trace outside the timed epochs
        seconds = []
        for _ in range(epochs):
            start = time.perf_counter()
            for images, labels in itertools.islice(iterator, steps):
                loss = train_step(images, labels)
            float(loss)  # wait for the last step
            seconds.append(time.perf_counter() - start)
        return seconds

    def packed_batches():
        for images, labels in examples_in_memory.repeat().batch(batch_size, drop_remainder=True).prefetch(2):
            yield pack_batch(images, image_layout), pack_batch(labels, label_layout)

    def dtensor_dataset_batches():
        # Repeated, and read a fixed number of steps: exhausting a DTensorDataset cancels its
        # pending device transfers, and the next DTensorDataset in the process then fails.
        return iter(dtensor.DTensorDataset(
            dataset=examples_in_memory.repeat(), mesh=mesh, layouts=(image_layout, label_layout),
            global_batch_size=batch_size, batch_dim="batch", prefetch=2))

    timings["DTensor, manual packing"] = dtensor_epoch(packed_batches)
    timings["DTensorDataset"] = dtensor_epoch(dtensor_dataset_batches)
    print(json.dumps({"epochs": timings, "outside the epochs": outside}))


def markdown_report(notebook_times, strategy_times, examples, batch_size):
    """Format both benchmarks as markdown tables, with the machine they ran on.

    Args:
        notebook_times: ``[(name, seconds, status), ...]`` from :func:`time_notebooks` (may be empty).
        strategy_times: the dict from :func:`time_strategies` (may be empty).
        examples, batch_size: the strategy benchmark's epoch, for the caption.

    Returns:
        The markdown text.

    Example:
        >>> print(markdown_report([("00_welcome", 4.0, "ok")],
        ...                       {"epochs": {"single device": [2.0, 2.2, 1.9]}, "outside the epochs": {}}, 60000, 128))
        Measured ... on ..., ... CPU core(s), Python ..., TensorFlow ....
        <BLANKLINE>
        | chapter notebook | wall time (s) | status |
        |---|---:|---|
        | 00_welcome | 4.0 | ok |
        | **total** | **4.0** | |
        ...
        | single device | 2.0 | 1.9-2.2 | 1.0x | (no fit) |
        <BLANKLINE>
    """
    lines = [f"Measured {date.today().isoformat()} on {platform.machine()}, {os.cpu_count()} CPU core(s), "
             f"Python {platform.python_version()}, {_tensorflow_version()}."]
    if notebook_times:
        lines += ["", "| chapter notebook | wall time (s) | status |", "|---|---:|---|"]
        lines += [f"| {name} | {seconds:.1f} | {status} |" for name, seconds, status in notebook_times]
        lines.append(f"| **total** | **{sum(s for _, s, _ in notebook_times):.1f}** | |")
    if strategy_times:
        epoch_times, outside = strategy_times["epochs"], strategy_times["outside the epochs"]
        medians = {way: statistics.median(seconds) for way, seconds in epoch_times.items()}
        epochs = len(next(iter(epoch_times.values())))
        lines += ["", f"{epochs} epoch(s) each of {examples} MNIST examples in batches of {batch_size}, "
                      f"Flatten-Dense(128)-Dense(10); 8 virtual CPUs share the physical cores. The Keras ways "
                      f"train with one `fit`; its seconds between and after the epochs are counted apart.",
                  "", "| way | median epoch (s) | fastest-slowest (s) | ratio of medians to single device "
                      "| `fit` between and after its epochs (s, total) |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {way} | {medians[way]:.1f} | {min(seconds):.1f}-{max(seconds):.1f} | "
                  f"{medians[way] / medians['single device']:.1f}x | "
                  f"{f'{outside[way]:.1f}' if way in outside else '(no fit)'} |" for way, seconds in epoch_times.items()]
    return "\n".join(lines) + "\n"


def _tensorflow_version():
    from importlib.metadata import version

    return f"TensorFlow {version('tensorflow')}"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--strategy-worker"]:
        _strategy_worker(int(argv[1]), int(argv[2]), int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description="Time every chapter notebook and compare strategies.")
    parser.add_argument("--output", default="benchmark.md", help="where to write the markdown report")
    parser.add_argument("--skip-notebooks", action="store_true")
    parser.add_argument("--skip-strategies", action="store_true")
    parser.add_argument("--examples", type=int, default=60_000, help="MNIST examples in the strategy epoch")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3, help="epochs timed per strategy")
    args = parser.parse_args(argv)
    if args.batch_size % 8:
        parser.error(f"--batch-size {args.batch_size} must divide over the 8 virtual CPUs (a multiple of 8).")
    notebook_times, strategy_times = [], {}
    if not args.skip_notebooks:
        print("Executing the chapter notebooks ...", flush=True)
        notebook_times = time_notebooks(sorted((checkout_root() / "notebooks").glob("*.ipynb")))
    if not args.skip_strategies:
        print(f"Timing {args.epochs} epochs per strategy ...", flush=True)
        strategy_times = time_strategies(args.examples, args.batch_size, args.epochs)
    report = markdown_report(notebook_times, strategy_times, args.examples, args.batch_size)
    Path(args.output).write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
