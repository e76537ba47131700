"""The packages' imports run one way: no circle inside ``planner/``, ``worker/`` or ``producer/``;
``worker/`` never imports ``producer/``; ``planner/`` imports neither. Every import counts, at module level,
inside a function or under ``TYPE_CHECKING``: a circle broken only at run time is still one to follow."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("planner", "worker", "producer")
FORBIDDEN = {"worker": {"producer"}, "planner": {"worker", "producer"}}
"""What each package may not import: the packages above it."""


def modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            out[name] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``name`` (at ``path``) imports, anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            subs = {f"{base}.{a.name}" for a in node.names}
            if not subs & known:  # ``from pkg import module`` imports the module, not the package
                found.add(base)
            found.update(subs)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The circles of ``edges``: each strongly connected set of more than one module (Tarjan's), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A module's imports at module level, inside a function, under ``TYPE_CHECKING`` and relative."""
    known = {"worker", "worker.a", "worker.b", "worker.c", "worker.d", "worker.e"}
    text = (
        "from typing import TYPE_CHECKING\n"
        "import worker.a\n"
        "from worker import b\n"
        "if TYPE_CHECKING:\n"
        "    from worker.c import Thing\n"
        "def f():\n"
        "    from . import d\n"
        "    from .e import g\n"
    )
    path = tmp_path / "x.py"
    path.write_text(text, encoding="utf-8")
    assert imports_of("worker.x", path, known) == {"worker.a", "worker.b", "worker.c", "worker.d", "worker.e"}


def test_circles_are_found() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(edges) == [["a", "b", "c"]]


def test_no_circle_inside_a_package() -> None:
    edges = graph()
    found = []
    for pkg in PACKAGES:
        inside = {m: {d for d in deps if d.split(".")[0] == pkg} for m, deps in edges.items() if m.split(".")[0] == pkg}
        found += circles(inside)
    assert not found, "circles of imports: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_import_runs_back_up() -> None:
    back = sorted(
        f"{m} -> {d}"
        for m, deps in graph().items()
        for d in deps
        if d.split(".")[0] in FORBIDDEN.get(m.split(".")[0], set())
    )
    assert not back, "imports that run back up (planner < worker < producer): " + ", ".join(back)
