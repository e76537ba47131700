"""The two locks: requirements.lock (what the image installs) and requirements-dev.lock (what scripts/setup
installs for development and CI). Both must satisfy pyproject.toml, agree with each other, and be closed
under what their packages require, so that installing them with --no-deps gives a working environment and
no registry's newest release ever enters a clone."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYTHON = "3.11.7"  # the image's CPython (Dockerfile's FROM) and the one CI sets up with
ENV = {
    "python_version": PYTHON.rsplit(".", 1)[0],
    "python_full_version": PYTHON,
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def pins(name: str) -> dict[str, str]:
    lines = [line.strip() for line in (ROOT / name).read_text().splitlines()]
    entries = [line for line in lines if line and not line.startswith("#")]
    bad = [e for e in entries if not re.fullmatch(r"[a-z0-9-]+==[0-9][0-9a-z.+]*", e)]
    assert not bad, f"{name}: not a normalised name==version pin: {bad}"
    found = dict(e.split("==") for e in entries)
    assert len(found) == len(entries), f"{name}: a package pinned twice"
    return found


def project() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return data


def groups() -> list[str]:
    return list(project()["optional-dependencies"])


def requirements(*names: str) -> list[Requirement]:
    """pyproject.toml's dependencies, and those of the named optional groups."""
    data = project()
    specs = list(data["dependencies"])
    for name in names:
        specs += data["optional-dependencies"][name]
    return [Requirement(s) for s in specs]


def assert_within(lock: dict[str, str], wanted: list[Requirement], lock_name: str) -> None:
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in lock, f"{lock_name} lacks {req.name} (pyproject.toml: {req})"
        assert req.specifier.contains(lock[name], prereleases=True), (
            f"{lock_name} pins {name}=={lock[name]}, outside pyproject.toml's {req}"
        )


def test_the_runtime_lock_holds_every_runtime_dependency_within_its_range() -> None:
    assert_within(pins("requirements.lock"), requirements(), "requirements.lock")


def test_the_dev_lock_holds_every_dependency_test_tool_and_extra_within_its_range() -> None:
    assert_within(pins("requirements-dev.lock"), requirements(*groups()), "requirements-dev.lock")


def test_the_dev_lock_pins_the_runtime_packages_at_the_images_versions() -> None:
    runtime, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    differ = {n: (v, dev.get(n)) for n, v in runtime.items() if dev.get(n) != v}
    assert not differ, f"requirements.lock against requirements-dev.lock: {differ}"


@pytest.mark.parametrize("lock_name", ["requirements.lock", "requirements-dev.lock"])
def test_each_lock_holds_what_its_packages_require(lock_name: str) -> None:
    """What each locked package requires on Linux under the image's Python, and the packages of the extras
    pyproject.toml asks for (redis[hiredis], fakeredis[lua]), is locked too. Read from the installed
    metadata of the packages installed here at their locked versions."""
    lock = pins(lock_name)
    asked_extras: dict[str, set[str]] = {}
    for req in requirements(*groups()):
        asked_extras.setdefault(canonicalize_name(req.name), set()).update(req.extras)
    checked = 0
    for name, version in lock.items():
        try:
            if metadata.version(name) != version:
                continue
        except metadata.PackageNotFoundError:
            continue
        checked += 1
        for spec in metadata.requires(name) or []:
            req = Requirement(spec)
            extras = {""} | asked_extras.get(name, set())
            if req.marker is None or any(req.marker.evaluate({**ENV, "extra": e}) for e in extras):
                assert canonicalize_name(req.name) in lock, f"{lock_name}: {name} needs {req}, not locked"
    if not checked:
        pytest.skip("no locked package is installed here at its locked version")


def test_this_environment_is_the_dev_lock() -> None:
    """scripts/setup installs requirements-dev.lock as it is: every pin is what is installed. An environment
    resolved from pyproject.toml's ranges (today's newest releases) fails here by name."""
    differ = {}
    for name, version in pins("requirements-dev.lock").items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = "missing"
        if have != version:
            differ[name] = f"locked {version}, installed {have}"
    assert not differ, f"run scripts/setup: {differ}"
