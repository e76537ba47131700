"""``scripts/setup``: once it has set up ``.venv``, running it again installs nothing, so ``scripts/test``
and ``scripts/demo`` work with the network cut."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

OFFLINE = {
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_NO_INDEX": "1",
    "PIP_FIND_LINKS": "",
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_RETRIES": "0",
    "PIP_TIMEOUT": "1",
}


def test_setup_again_needs_no_network() -> None:
    out = subprocess.run(
        [str(ROOT / "scripts" / "setup")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **OFFLINE},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert (ROOT / ".venv" / ".modelplan-setup").is_file()


def test_the_install_step_prints_nothing_with_the_build_backends_own_warnings(tmp_path: Path) -> None:
    """``scripts/setup`` installs the project with ``pip install --quiet --no-deps --no-build-isolation -e .``
    (after the lock's packages): the build backend's
    warnings, which pip prints even then, would land on a first setup's screen. The same install, into a
    folder of its own from a copy of what the build reads, with the network cut, prints nothing."""
    setup = (ROOT / "scripts" / "setup").read_text()
    assert "pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)" in setup
    assert '"${pip[@]}" --no-deps --no-build-isolation -e .' in setup
    copy = tmp_path / "project"
    copy.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    for folder in ("planner", "worker", "producer", "examples/models"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", "."),
            # beside this environment's own install, which stays as it is
            *("--no-deps", "--no-build-isolation", "--ignore-installed", "--prefix", str(tmp_path / "prefix")),
        ],
        capture_output=True,
        text=True,
        cwd=copy,
        env={**os.environ, **OFFLINE},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout + out.stderr == ""
    # the edits stay live: the installed path is the copy itself
    [pth] = (tmp_path / "prefix").glob("lib/python*/site-packages/__editable__.modelplan-*.pth")
    assert pth.read_text().split() == [str(copy.resolve())]
