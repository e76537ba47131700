"""planner/ stays pure: importing it brings in no Redis, queue, logging, clock or network library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PLANNER = Path(__file__).resolve().parents[2] / "planner"
FORBIDDEN = {
    "redis",
    "rq",
    "structlog",
    "fakeredis",
    "logging",
    "socket",
    "time",
    "datetime",
    "urllib",
    "http",
    "requests",
    "huggingface_hub",
    "random",
    "threading",
    "asyncio",
}


def test_importing_the_planner_loads_no_io_library() -> None:
    code = (
        "import sys, planner, planner.options, planner.repository, planner.pool\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {'redis','rq','structlog','fakeredis'})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_no_planner_module_imports_io() -> None:
    found = []
    for path in sorted(PLANNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert found == []
