import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard import manager, version

from course_utils.monitoring import read_scalars, read_trace, stop_tensorboard
from lazy import lazy

tf = lazy("tensorflow")
dtensor = lazy("tensorflow.experimental.dtensor")
make_mesh = lazy("course_utils.make_mesh")
pack_batch = lazy("course_utils.pack_batch")


def test_read_scalars_gives_each_tag_its_steps_and_values(tmp_path):
    with tf.summary.create_file_writer(str(tmp_path / "train")).as_default():
        for step, loss in enumerate([2.5, 1.25, 0.75]):
            tf.summary.scalar("epoch_loss", loss, step=step)
        tf.summary.text("note", "not a scalar", step=0)
    assert read_scalars(tmp_path / "train") == {"epoch_loss": [(0, 2.5), (1, 1.25), (2, 0.75)]}


def test_read_scalars_reads_old_style_simple_values(tmp_path):
    summary = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag="loss", simple_value=0.5)])
    event = tf.compat.v1.Event(step=7, summary=summary)
    with tf.io.TFRecordWriter(str(tmp_path / "events.out.tfevents.1.host")) as writer:
        writer.write(event.SerializeToString())
    assert read_scalars(tmp_path) == {"loss": [(7, 0.5)]}


def test_read_scalars_says_which_folder_to_pass(tmp_path):
    (tmp_path / "train").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no events.out.tfevents.\* file .*it holds \['train'\].*one run"):
        read_scalars(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        read_scalars(tmp_path / "missing")


def test_read_trace_of_a_dtensor_op_shows_a_thread_per_device(cpus8, tmp_path):
    mesh = make_mesh([("batch", 8)])
    x = pack_batch(tf.ones([8, 4]), dtensor.Layout.batch_sharded(mesh, "batch", rank=2))
    w = dtensor.copy_to_mesh(tf.ones([4, 2]), dtensor.Layout.replicated(mesh, 2))
    tf.matmul(x, w)  # compiles it: the traced run below only executes
    tf.profiler.experimental.start(str(tmp_path))
    try:
        [block.numpy() for block in dtensor.unpack(tf.matmul(x, w))]
    finally:
        tf.profiler.experimental.stop()
    rows = read_trace(tmp_path)
    assert {row.process for row in rows} == {"/host:CPU"}
    launches = [row for row in rows if row.kind == "parallel_device_execute"]
    assert len(launches) == 8  # one thread per device, each launching the device's program once
    assert all(sum(n.startswith("EagerLocalExecute") for n in row.events.elements()) == 1 for row in launches)
    assert isinstance(rows[0].events, collections.Counter)


def test_read_trace_wants_exactly_one_trace(tmp_path):
    with pytest.raises(FileNotFoundError, match="no \\*.xplane.pb"):
        read_trace(tmp_path)
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "host.xplane.pb").write_bytes(b"")
    with pytest.raises(ValueError, match=r"2 traces .*a/host.xplane.pb.*Pass one"):
        read_trace(tmp_path)
    assert read_trace(tmp_path / "a" / "host.xplane.pb") == []  # an empty XSpace has no rows


@pytest.fixture
def info_dir(tmp_path, monkeypatch):
    folder = tmp_path / "info"
    folder.mkdir()
    monkeypatch.setattr(manager, "_get_info_dir", lambda: str(folder))
    return folder


def register(info_dir, process, logdir):
    """Write the info file TensorBoard writes when it serves ``logdir``, for a stand-in process."""
    info = manager.TensorBoardInfo(version=version.VERSION, start_time=int(time.time()), pid=process.pid, port=1,
                                   path_prefix="", logdir=str(logdir), db="", cache_key="key")
    (info_dir / f"pid-{process.pid}.info").write_text(manager._info_to_string(info))


def sleeper(ignore_sigterm=False):
    code = "import signal, time\n"
    if ignore_sigterm:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('ready', flush=True)\ntime.sleep(60)\n"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    return process


def test_stop_tensorboard_stops_only_the_servers_of_its_log_folder(info_dir, tmp_path):
    ours, other = sleeper(), sleeper()
    try:
        register(info_dir, ours, tmp_path / "logs")
        register(info_dir, other, tmp_path / "other")
        assert stop_tensorboard(tmp_path / "logs" / ".." / "logs") == [ours.pid]
        assert ours.poll() is not None  # exited, and reaped by stop_tensorboard (poll then reports 0)
        assert other.poll() is None
        assert stop_tensorboard(tmp_path / "nothing") == []
    finally:
        for process in (ours, other):
            process.kill()
            process.wait()


def test_stop_tensorboard_leaves_a_server_of_another_process_alone(info_dir, tmp_path):
    # A server for the same folder that this process did not start (here: a grandchild) is not ours to stop.
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "sys.stdin.read()\n"
        "child.kill()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(parent.stdout.readline())
        register(info_dir, type("Process", (), {"pid": grandchild}), tmp_path)
        assert stop_tensorboard(tmp_path) == []
        os.kill(grandchild, 0)  # still running
    finally:
        parent.communicate("", timeout=30)


def test_stop_tensorboard_skips_a_server_that_died_uncleanly(info_dir, tmp_path):
    dead = sleeper()
    dead.kill()
    dead.wait()
    register(info_dir, dead, tmp_path)
    assert stop_tensorboard(tmp_path) == []


def test_stop_tensorboard_says_how_to_kill_a_server_that_does_not_stop(info_dir, tmp_path):
    stubborn = sleeper(ignore_sigterm=True)
    try:
        register(info_dir, stubborn, tmp_path)
        with pytest.raises(TimeoutError, match=f"pid {stubborn.pid}.*kill -9 {stubborn.pid}"):
            stop_tensorboard(tmp_path, timeout=0.5)
    finally:
        stubborn.kill()
        stubborn.wait()


def test_chapter_9_installs_on_colab_the_profile_plugin_the_requirements_pin():
    root = Path(__file__).resolve().parents[1]
    pinned = re.search(r"^tensorboard-plugin-profile==\S+", (root / "requirements.txt").read_text(), re.MULTILINE)
    cells = json.loads((root / "notebooks" / "09_watch_and_feed.ipynb").read_text())["cells"]
    installs = [line for cell in cells for line in cell["source"] if '"tensorboard-plugin-profile==' in line]
    assert pinned and installs and all(f'"{pinned.group(0)}"' in line for line in installs)
