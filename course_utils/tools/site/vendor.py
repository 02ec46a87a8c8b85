"""The browser libraries the website serves itself, so that its pages work offline: fetched once from the
npm registry with ``npm pack`` into a cache folder, and copied into the site."""
import shutil
import subprocess
import tarfile
from pathlib import Path

REVEAL = "reveal.js@4.6.1"  # the slides (nbconvert's template is written for reveal.js 4)
REQUIREJS = "requirejs@2.3.7"  # nbconvert's slides load reveal.js through RequireJS
MATHJAX = "mathjax@3.2.2"  # the formulas of the pages (Sphinx's default MathJax major version)


def npm_package(spec, cache, echo=print):
    """The unpacked npm package ``spec`` (``"name@version"``) in the folder ``cache``, fetched with ``npm pack``
    the first time; None where npm cannot fetch it (no npm, or no network), after saying so with ``echo``.

    Example (not run by the doctests: it fetches the package with npm):
        >>> (npm_package("reveal.js@4.6.1", "_site/vendor") / "dist" / "reveal.js").is_file()  # doctest: +SKIP
        True
    """
    target = Path(cache) / spec.replace("/", "_")
    if (target / "package.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        packed = subprocess.run(["npm", "pack", spec, "--silent"], cwd=target.parent, capture_output=True, text=True,
                                timeout=300, check=True).stdout.strip().splitlines()[-1]
        unpacked = target.parent / f"{target.name}.unpacked"
        shutil.rmtree(unpacked, ignore_errors=True)
        with tarfile.open(target.parent / packed) as archive:
            archive.extractall(unpacked, filter="data")
        (target.parent / packed).unlink()
        shutil.rmtree(target, ignore_errors=True)
        (unpacked / "package").rename(target)
        shutil.rmtree(unpacked)
    except (OSError, IndexError, subprocess.SubprocessError, tarfile.TarError) as err:
        echo(f"Could not fetch {spec} with npm ({err}): the pages that need it load it from its CDN instead.")
        return None
    return target


def copy_files(package, files, folder):
    """Copy ``files`` (paths inside the unpacked ``package``, folders whole) into ``folder``, keeping their paths."""
    for name in files:
        source, target = Path(package) / name, Path(folder) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
