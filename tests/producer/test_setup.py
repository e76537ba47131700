"""``scripts/setup``: once it has set up ``.venv``, running it again installs nothing, so ``scripts/test``
and ``scripts/demo`` work with the network cut."""

from __future__ import annotations

import os
import subprocess
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
