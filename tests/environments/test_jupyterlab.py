"""JupyterLab in a real browser: chapter 4's two explorers react (layouts; predict-then-reveal costs),
its exercise link opens the exercise notebook, and a check there gives feedback; chapter 9's inline
TensorBoard shows the run's scalars, and XProf's trace viewer the DTensor step's rows.

``python3 course.py test --env browser`` runs this with the main environment's JupyterLab (and its
ipywidgets 8). JupyterLab starts on a free localhost port in a temporary folder holding a copy of
the notebooks; headless Chromium (Debian's ``chromium``, driven by Playwright) opens them, runs
all cells from the Run menu, and uses the widgets as a learner does. Screenshots are saved in
``test-artifacts/`` (git-ignored) for a person to look at.
"""
import gzip
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote
from urllib.request import urlopen

import nbformat
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError, expect, sync_playwright


ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHAPTER = "notebooks/04_meshes_and_layouts.ipynb"
EXERCISE = "exercises/04_meshes_and_layouts.ipynb"
WATCHING = "notebooks/09_watch_and_feed.ipynb"
RUN_SECONDS = 300  # for "Run All Cells" of one notebook
# JupyterLab settings for a test: keep every cell in the page, ask nothing about news or updates.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
}
# The notebook on screen (other open notebooks are hidden, with an empty bounding box).
SHOWN_PANEL = "[...document.querySelectorAll('.jp-NotebookPanel')].find(p => p.getBoundingClientRect().width > 0)"
# Its kernel is ready when its toolbar names the kernel and shows it idle.
KERNEL_READY = f"""() => {{
  const panel = {SHOWN_PANEL};
  return panel?.querySelector('.jp-Toolbar-kernelName')?.textContent.includes('ipykernel')
    && panel.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status === 'idle';
}}"""
# It has finished "Run All Cells" when every code cell shows its number, e.g. [3]:
ALL_CELLS_RAN = f"""() => {{
  const prompts = [...({SHOWN_PANEL})?.querySelectorAll('.jp-CodeCell .jp-InputPrompt') ?? []];
  return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
}}"""


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lab():
    """A JupyterLab server on localhost over a copy of the notebooks; yields (base URL, token)."""
    with tempfile.TemporaryDirectory(prefix="jupyterlab-test-") as folder:
        folder = Path(folder)
        for name in ("notebooks", "exercises"):
            shutil.copytree(ROOT / name, folder / "work" / name)
        for name, values in LAB_SETTINGS.items():
            (folder / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / "settings" / name).write_text(json.dumps(values))
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(folder / "runtime"), JUPYTER_CONFIG_DIR=str(folder / "config"))
        log = open(folder / "lab.log", "w")
        # If the port is taken by the time the server binds it, JupyterLab tries the next ones;
        # the port it got is read back from the file it writes in its runtime folder.
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
             "--LabApp.extension_manager=readonly",  # never asks the package registry for extensions
             f"--ServerApp.port={free_port()}", f"--ServerApp.root_dir={folder / 'work'}",
             f"--LabApp.user_settings_dir={folder / 'settings'}", f"--LabApp.workspaces_dir={folder / 'workspaces'}"],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not list((folder / "runtime").glob("jpserver-*.json")):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(folder / 'lab.log').read_text()}", pytrace=False)
                time.sleep(0.2)
            info = json.loads(next((folder / "runtime").glob("jpserver-*.json")).read_text())
            yield info["url"], info["token"]
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            log.close()


@pytest.fixture
def page(request, lab, chromium):
    """A Chromium page logged in to JupyterLab; its last state is saved as ``<test name>-end.png``."""
    url, token = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(f"{url}lab?token={token}")
        yield page
        page.screenshot(path=ARTIFACTS / f"{request.node.name}-end.png")
        browser.close()


def wait_for_kernel(page, seconds=120):
    """Wait until the notebook on screen has an idle kernel. On a loaded machine JupyterLab may give up
    loading its theme's stylesheet and show "Error Loading Theme" instead of the notebook: then reload."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            page.wait_for_function(KERNEL_READY, timeout=5_000)
            return
        except PlaywrightTimeoutError:
            assert time.monotonic() < deadline, f"no idle kernel after {seconds} s"
            if page.get_by_text("Error Loading Theme").count():
                page.reload()


def run_menu(page, item):
    """Choose ``item`` of JupyterLab's Run menu, e.g. "Run All Cells"."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def wait_until_all_cells_ran(page, notebook):
    try:
        page.wait_for_function(ALL_CELLS_RAN, timeout=RUN_SECONDS * 1000)
    except Exception:
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        pytest.fail(f"{notebook}: not every cell ran in JupyterLab. Outputs on stderr:\n"
                    + "\n".join(errors.all_inner_texts())[-3000:], pytrace=False)


def open_and_run_all(page, lab, notebook):
    """Open ``notebook`` in JupyterLab (None: the one already on screen), choose Run > Run All Cells, and
    wait until every cell ran."""
    if notebook:
        page.goto(f"{lab[0]}lab/tree/{notebook}?reset&token={lab[1]}")  # reset: this notebook alone
    wait_for_kernel(page)
    run_menu(page, "Run All Cells")
    wait_until_all_cells_ran(page, notebook)


def wait_for_change(locator, before, what):
    deadline = time.monotonic() + 30
    while locator.inner_html() == before:
        assert time.monotonic() < deadline, f"{what} did not change the explorer's picture"
        time.sleep(0.2)


def test_layout_explorers_react_to_their_widgets(page, lab):
    open_and_run_all(page, lab, CHAPTER)
    explorer = page.locator(".widget-vbox").filter(has_text="mesh axis names").last
    explorer.scroll_into_view_if_needed()
    result = explorer.locator(".widget-output")
    axis0 = explorer.locator(".widget-dropdown", has_text="axis 0").locator("select")
    shape = explorer.locator(".widget-text", has_text="tensor shape").locator("input")
    expect(result).to_contain_text("8")  # the starting picture: 8 x 6 over a 4 x 2 mesh
    page.screenshot(path=ARTIFACTS / "jupyterlab-explorer-start.png")

    before = result.inner_html()
    axis0.select_option("model")
    wait_for_change(result, before, "Choosing 'model' for tensor axis 0")
    before = result.inner_html()
    shape.fill("6, 6")
    shape.press("Enter")
    wait_for_change(result, before, "Typing the tensor shape 6, 6")
    page.screenshot(path=ARTIFACTS / "jupyterlab-explorer-changed.png")

    axis0.select_option("batch")  # 'batch' has 4 devices, which do not divide 6
    expect(result).to_contain_text("This layout does not work")
    expect(result).to_contain_text("does not divide evenly")
    page.screenshot(path=ARTIFACTS / "jupyterlab-explorer-explains.png")

    operation = page.locator(".widget-vbox").filter(has_text="Reveal what DTensor runs").last
    operation.scroll_into_view_if_needed()
    revealed = operation.locator(".widget-output")
    menu = lambda label: operation.locator(".widget-dropdown", has_text=label).locator("select")
    expect(revealed).to_contain_text("Predict first")
    menu("x axis 1").select_option("model")  # case 3: the contracted axis split over model
    menu("w axis 0").select_option("model")
    menu("y's layout").select_option("['batch', 'unsharded']")
    operation.locator(".widget-checkbox", has_text="all-reduce over model").locator("input").check()
    operation.locator("button", has_text="Reveal").click()
    expect(revealed).to_contain_text("predicted = measured")
    expect(revealed).to_contain_text("y's layout: ✓ right")
    expect(revealed).to_contain_text("forward collectives: ✓ right")
    page.screenshot(path=ARTIFACTS / "jupyterlab-operation-revealed.png")
    menu("w axis 0").select_option("batch")  # contracted over model in x, over batch in w
    expect(revealed).to_contain_text("Predict first")
    operation.locator("button", has_text="Reveal").click()
    expect(revealed).to_contain_text("DTensor cannot multiply these layouts")
    page.screenshot(path=ARTIFACTS / "jupyterlab-operation-explains.png")
    expect(page.locator("body")).not_to_contain_text("Error displaying widget")


def test_the_chapters_exercise_link_opens_the_exercise_and_its_check_gives_feedback(page, lab):
    page.goto(f"{lab[0]}lab/tree/{CHAPTER}?reset&token={lab[1]}")
    page.locator(f".jp-RenderedMarkdown a[href*='{EXERCISE}']").first.click()  # the chapter's "Practise in" link
    expect(page.locator(".lm-TabBar-tab.lm-mod-current", has_text=Path(EXERCISE).name)).to_be_visible()
    open_and_run_all(page, lab, None)
    cell = page.locator(".jp-CodeCell").filter(has_text="ex.q1.check(mesh, layout)")
    expect(cell.locator(".jp-OutputArea")).to_contain_text("Not answered yet")

    solution = nbformat.read(ROOT / "solutions" / Path(EXERCISE).name, as_version=4)
    answer = next(c.source for c in solution.cells if c.get("id") == "ch4-q1")
    answer = "\n".join(line for line in answer.splitlines() if "SOLUTION" not in line)
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(answer)
    page.keyboard.press("Shift+Enter")
    expect(cell.locator(".jp-OutputArea")).to_contain_text("Correct!", timeout=60_000)
    page.screenshot(path=ARTIFACTS / "jupyterlab-exercise-correct.png")


def server_json(base, path):
    with urlopen(f"{base}{path}", timeout=60) as response:
        body = response.read()
        return json.loads(gzip.decompress(body) if response.headers.get("Content-Encoding") == "gzip" else body)


def test_the_inline_tensorboard_shows_the_scalars_and_the_trace_viewer_the_device_threads(page, lab):
    page.goto(f"{lab[0]}lab/tree/{WATCHING}?reset&token={lab[1]}")
    wait_for_kernel(page)
    # Run the chapter up to the cell that stops TensorBoard, so that its server is there to look at.
    stop_note = page.locator(".jp-MarkdownCell").filter(has_text="leaves its server running")
    stop_note.click()
    run_menu(page, "Run All Above Selected Cell")
    # Outputs are looked for by what they show: CodeMirror may not render the source of a cell out of view.
    inline = page.locator(".jp-OutputArea-output iframe").first  # the chapter's one frame: %tensorboard's
    expect(inline).to_have_attribute("src", re.compile(r"^http://[^/]+:\d+/"), timeout=RUN_SECONDS * 1000)
    base = re.match(r"^http://[^/]+:\d+", inline.get_attribute("src")).group(0)
    tensorboard = page.frame_locator(".jp-OutputArea-output iframe").first
    expect(tensorboard.locator(".group-title[title=epoch_loss]")).to_be_visible(timeout=60_000)
    expect(tensorboard.locator(".group-title[title=epoch_accuracy]")).to_be_visible()
    inline.scroll_into_view_if_needed()
    page.screenshot(path=ARTIFACTS / "jupyterlab-tensorboard-scalars.png")
    expect(page.locator(".jp-OutputArea-output", has_text="scalar tags:").first).to_be_attached(
        timeout=RUN_SECONDS * 1000)  # the cell that asks the server for what its pages draw has run

    run, = [run for run in server_json(base, "/data/plugin/profile/runs") if run.startswith("dtensor/")]
    host, = [h["hostname"] for h in server_json(base, f"/data/plugin/profile/hosts?run={quote(run, safe='')}&tag=trace_viewer")]
    data = f"/data/plugin/profile/data?run={quote(run, safe='')}&tag=trace_viewer%40&host={quote(host, safe='')}"
    viewer = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
    viewer.goto(f"{base}/data/plugin/profile/trace_viewer_index.html?is_streaming=true&is_oss=true"
                f"&trace_data_url={quote(data, safe='')}")
    expect(viewer.get_by_text("/host:CPU").filter(visible=True).first).to_be_visible(timeout=60_000)
    viewer.get_by_text("Expand All").click()  # the process row's threads: one launcher and one executor per device
    expect(viewer.get_by_text("parallel_device_execute")).to_have_count(8, timeout=60_000)
    expect(viewer.get_by_text("eager_async_executor")).to_have_count(8)
    assert viewer.get_by_text("collective_ops").count() >= 1
    viewer.screenshot(path=ARTIFACTS / "jupyterlab-trace-viewer.png")
    viewer.close()

    stop_note.click()  # the rest of the chapter: TensorBoard stopped, then the input pipelines
    run_menu(page, "Run Selected Cell and All Below")
    wait_until_all_cells_ran(page, WATCHING)
    with pytest.raises(OSError):
        urlopen(base, timeout=5)  # the chapter stopped its TensorBoard
