"""Colab's Python for the Colab-like environment: apt sources derived from the machine's, the reasons it cannot be
had, and (once `python3 course.py test --env colab` has built it) the interpreter itself."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.tools import colab_python
from course_utils.tools.colab_python import Unavailable, debian_sources

ROOT = Path(__file__).resolve().parents[1]
BUILT = ROOT / ".python-colab"  # where course.py builds it (course.COLAB_PYTHON)
DEB822 = """\
Types: deb
# a comment
URIs: http://archive.example/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://archive.example/debian-security
Suites: bookworm-security
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: https://other.example/node
Suites: nodistro
Components: main

Types: deb-src
URIs: http://archive.example/debian
Suites: bookworm
Components: main

Enabled: no
Types: deb
URIs: http://disabled.example/debian
Suites: bookworm
Components: main
"""


def test_the_machine_s_debian_sources_move_to_trixie_with_their_uris_components_and_keys():
    stanzas = debian_sources([("debian.sources", DEB822)], "bookworm").split("\n\n")
    assert stanzas[0] == ("Types: deb\nURIs: http://archive.example/debian\nSuites: trixie trixie-updates\n"
                          "Components: main contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg")
    assert stanzas[1].startswith("Types: deb\nURIs: http://archive.example/debian-security\nSuites: trixie-security\n")
    assert "Signed-By: \n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n -----END" in stanzas[1]  # an inline key, kept
    assert len(stanzas) == 2  # not the other release's source, nor source packages, nor a disabled entry


def test_one_line_sources_keep_their_options():
    listed = ("# deb http://old.example/debian bullseye main\n"
              "deb [arch=amd64 signed-by=/k.gpg] http://archive.example/debian bookworm-updates main non-free\n"
              "deb http://archive.example/debian bookworm-backports main\n")
    assert debian_sources([("sources.list", listed)], "bookworm") == (
        "Types: deb\nURIs: http://archive.example/debian\nSuites: trixie-updates\nComponents: main non-free\n"
        "Architectures: amd64\nSigned-By: /k.gpg\n\n"
        "Types: deb\nURIs: http://archive.example/debian\nSuites: trixie-backports\nComponents: main\n")


def test_no_source_of_the_machine_s_release_says_which_files_were_read():
    with pytest.raises(Unavailable, match=r"apt's sources \(nodesource.sources\) name no Debian archive of this "
                                          r"machine's release, bookworm"):
        debian_sources([("nodesource.sources", "Types: deb\nURIs: https://x\nSuites: nodistro\n")], "bookworm")


def test_another_system_than_debian_is_named(tmp_path):
    release = tmp_path / "os-release"
    release.write_text('PRETTY_NAME="Ubuntu 24.04 LTS"\nID=ubuntu\nVERSION_CODENAME=noble\n')
    with pytest.raises(Unavailable, match="this system is Ubuntu 24.04 LTS, whose apt does not reach Debian's archive: "
                                          "install Python 3.13 and put python3.13 on PATH"):
        colab_python._debian_codename(release)
    release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_CODENAME=bookworm\n')
    assert colab_python._debian_codename(release) == "bookworm"


@pytest.fixture
def refused_download(tmp_path, monkeypatch):
    """A machine with no python3.13 whose apt-get fails as a refused download does."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "apt-get").write_text("#!/bin/sh\necho 'E: Failed to fetch http://archive.example/debian/dists/trixie/"
                                   "InRelease  403  Forbidden' >&2\nexit 100\n")
    (tools / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    real_which = colab_python.shutil.which
    monkeypatch.setattr(colab_python.shutil, "which", lambda name: None if name == "python3.13" else real_which(name))
    monkeypatch.setattr(colab_python, "_debian_codename", lambda: "bookworm")
    monkeypatch.setattr(colab_python, "_machine_sources", lambda: [("debian.sources", DEB822)])
    return tmp_path / "python-colab"


def test_a_refused_download_says_what_failed_and_apt_s_error(refused_download):
    said = []
    with pytest.raises(Unavailable) as raised:
        colab_python.colab_python(refused_download, sys.executable, say=said.append)
    assert str(raised.value).startswith("apt-get update of Debian trixie's package lists failed (exit status 100):\n")
    assert "403  Forbidden" in str(raised.value)
    assert said[0].startswith("Fetching Python 3.13 for the Colab-like environment, once: Debian trixie's python3.13")
    assert not refused_download.exists()  # nothing half-built stays behind


def test_a_python_3_13_on_path_is_used_as_it_is(tmp_path, monkeypatch):
    python = tmp_path / "python3.13"
    python.write_text('#!/bin/sh\necho "3 13"\n')  # answers the version question as a Python 3.13 does
    python.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert colab_python.colab_python(tmp_path / "python-colab", sys.executable, say=pytest.fail) == python


@pytest.mark.skipif(not (BUILT / colab_python.READY).exists(),
                    reason="no Python 3.13 built yet: `python3 course.py test --env colab` builds it in .python-colab")
def test_the_built_interpreter_is_debian_s_3_13_on_its_own_glibc_and_makes_venvs_with_pip(tmp_path):
    record = json.loads((BUILT / colab_python.READY).read_text())
    assert record == colab_python._build_record(BUILT)  # built here, from today's package list
    python = BUILT / "root" / "usr" / "bin" / "python3.13"
    run = lambda *command: subprocess.run(command, check=True, capture_output=True, text=True).stdout
    version, _, glibc = run(python, "-c", colab_python.CHECK).split()  # every standard-library extension imports
    assert version.startswith("3.13.") and tuple(map(int, glibc.split("."))) >= (2, 38)
    colab_python.make_venv(python, tmp_path / "venv")
    assert run(tmp_path / "venv" / "bin" / "python", "-m", "pip", "--version").startswith("pip ")
