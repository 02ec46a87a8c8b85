"""Keep the course's notebooks consistent: ``python -m course_utils.build [--check]``.

- Stamps every notebook in ``notebooks/``, ``solutions/`` and ``exercises/`` with the
  "Open in Colab" badge (first cell) and the set-up cell (second cell), both made from the
  repository named once, in ``[tool.course]`` of ``pyproject.toml``.
- Generates ``exercises/NN_*.ipynb`` from ``solutions/NN_*.ipynb``: the lines between
  ``# BEGIN SOLUTION`` and ``# END SOLUTION`` are replaced by the placeholder that follows
  ``# PLACEHOLDER:`` on the BEGIN line (or by ``...``), so both come from one source.
- Strips outputs, execution counts and personal metadata.

With ``--check`` nothing is written; the exit status is 1 and the stale files are listed
when anything would change (the tests run this).
"""
import argparse
import re
import sys
import tomllib
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("notebooks", "solutions", "exercises")
BADGE_ID, SETUP_ID = "colab-badge", "setup"
KEEP_METADATA = ("kernelspec", "language_info", "course")
SOLUTION_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)# BEGIN SOLUTION(?:[ \t]*# PLACEHOLDER:[ \t]*(?P<placeholder>.*?))?[ \t]*\n"
    r".*?^[ \t]*# END SOLUTION[ \t]*$\n?",
    re.MULTILINE | re.DOTALL,
)
KERAS_MODES = ("tf_keras", "keras3", "keras3-jax")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def course_config(root=ROOT):
    """The ``[tool.course]`` table of ``pyproject.toml``: ``repository`` and ``branch``.

    Example:
        >>> course_config()["branch"]
        'main'
    """
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["course"]
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", config.get("repository", "")):
        raise ValueError("[tool.course] repository in pyproject.toml must look like 'owner/name'.")
    config.setdefault("branch", "main")
    return config


def badge_source(relative_path, config):
    """The markdown of the "Open in Colab" badge for a notebook at ``relative_path``."""
    url = f"https://colab.research.google.com/github/{config['repository']}/blob/{config['branch']}/{relative_path}"
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({url})"


def setup_source(keras, config):
    """The set-up cell's code; ``keras`` is the notebook metadata ``course.keras``: ``"tf_keras"``,
    ``"keras3"`` (on TensorFlow) or ``"keras3-jax"`` (Keras 3 on JAX, with 8 JAX CPU devices)."""
    if keras not in KERAS_MODES:
        raise ValueError(f"metadata course.keras must be one of {', '.join(map(repr, KERAS_MODES))}, not {keras!r}.")
    lines = [
        "# Set-up, the same in every notebook (stamped by `python -m course_utils.build`).",
        "# On Colab it installs the course's helper package; on your machine it installs nothing.",
        "import os, sys",
    ]
    if keras == "tf_keras":
        lines.append('os.environ["TF_USE_LEGACY_KERAS"] = "1"  # this chapter uses tf_keras (Keras 2); set before TensorFlow is imported')
    if keras == "keras3-jax":
        lines.append('os.environ["KERAS_BACKEND"] = "jax"  # this chapter runs Keras 3 on JAX; set before Keras is imported')
        lines.append('os.environ["JAX_NUM_CPU_DEVICES"] = "8"  # JAX splits the CPU into 8 devices; set before JAX starts')
    lines += [
        'os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # hide TensorFlow\'s C++ info lines',
        'if "google.colab" in sys.modules:',
        "    import subprocess",
        "    from importlib.metadata import version",
        '    tf_minor = ".".join(version("tensorflow").split(".")[:2])',
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"tf_keras~={tf_minor}.0",',
        f'                    "course_utils @ git+https://github.com/{config["repository"]}@{config["branch"]}"], check=True)',
    ]
    return "\n".join(lines)


def make_exercise(solution):
    """A copy of a solution notebook with every solution block replaced by its placeholder."""
    exercise = nbformat.from_dict(solution)
    for cell in exercise.cells:
        if cell.cell_type == "code":
            cell.source = SOLUTION_BLOCK.sub(
                lambda m: f"{m['indent']}{m['placeholder'] or '...'}  # YOUR CODE HERE\n", cell.source)
    return exercise


def clean(nb):
    """Strip outputs, execution counts and all metadata but the kernel and the course's own."""
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in KEEP_METADATA}
    nb.metadata["kernelspec"] = KERNELSPEC
    for cell in nb.cells:
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in ("tags",)}
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def stamp(nb, relative_path, config):
    """Put the badge and set-up cells first, replacing older copies of them."""
    course = nb.metadata.get("course")
    if not course or "chapter" not in course or "keras" not in course:
        raise ValueError(f"{relative_path}: notebook metadata needs course.chapter and course.keras.")
    nb.cells = [c for c in nb.cells if c.get("id") not in (BADGE_ID, SETUP_ID)]
    badge = nbformat.v4.new_markdown_cell(badge_source(relative_path, config))
    badge.id = BADGE_ID
    setup = nbformat.v4.new_code_cell(setup_source(course["keras"], config))
    setup.id = SETUP_ID
    nb.cells = [badge, setup] + nb.cells
    return nb


def expected_notebooks(root=ROOT):
    """Map each notebook path to the notebook it should be, after stamping and generation."""
    config = course_config(root)
    result = {}
    for folder in ("notebooks", "solutions"):
        for path in sorted((root / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            result[path] = stamp(clean(nb), path.relative_to(root).as_posix(), config)
    for path in sorted((root / "solutions").glob("*.ipynb")):
        target = root / "exercises" / path.name
        result[target] = stamp(make_exercise(result[path]), target.relative_to(root).as_posix(), config)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, nb in expected_notebooks().items():
        text = nbformat.writes(nb) + "\n"
        if not path.exists() or path.read_text() != text:
            stale.append(path.relative_to(ROOT).as_posix())
            if not args.check:
                path.parent.mkdir(exist_ok=True)
                path.write_text(text)
    orphans = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "exercises").glob("*.ipynb")
                     if not (ROOT / "solutions" / p.name).exists())
    if args.check:
        if stale or orphans:
            print("Out of date (run `python -m course_utils.build`):", *stale, *[f"{o} (no solution)" for o in orphans], sep="\n  ")
            return 1
        print("All notebooks are up to date.")
        return 0
    print(f"Wrote {len(stale)} notebook(s)." + (f" Exercises without a solution: {orphans}" if orphans else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
