"""``scripts/mutate``: its table loads and lists (the full run, minutes long, is not part of the suite), and a
mutation whose snippet is not in its file exactly once is refused by name rather than passed over."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.mutations import Mutation, NotApplied, apply

ROOT = Path(__file__).resolve().parents[1]


def test_the_list_names_each_mutation_once_with_its_rule_file_and_tests() -> None:
    done = subprocess.run([str(ROOT / "scripts" / "mutate"), "--list"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert len(rows) >= 12 and all(len(row) == 4 for row in rows)
    names = [row[0] for row in rows]
    assert len(set(names)) == len(names)
    for name, path, rule, tests in rows:
        assert (ROOT / path).is_file(), name
        assert rule, name
        for node in tests.split():
            assert (ROOT / node.split("::")[0]).is_file(), (name, node)


@pytest.mark.parametrize(("text", "count"), [("a = 1\n", 0), ("x = 1\nx = 1\n", 2)])
def test_a_snippet_not_found_exactly_once_is_refused_by_name(tmp_path: Path, text: str, count: int) -> None:
    (tmp_path / "m.py").write_text(text)
    m = Mutation(name="moved", rule="r", path="m.py", snippet="x = 1", replacement="x = 2", tests=("t.py",))
    with pytest.raises(NotApplied, match=f"^moved: its snippet occurs {count} times in m.py"):
        apply(m, tmp_path)
    assert (tmp_path / "m.py").read_text() == text


def test_a_snippet_found_once_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\ny = 1\n")
    apply(Mutation(name="m", rule="r", path="m.py", snippet="x = 1", replacement="x = 2", tests=("t",)), tmp_path)
    assert (tmp_path / "m.py").read_text() == "x = 2\ny = 1\n"


def test_the_interpreter_is_the_checkouts_own(tmp_path: Path) -> None:
    from tests.mutations import default_python

    assert default_python(ROOT) == ROOT / ".venv" / "bin" / "python"
    # a checkout without one gets no other machine's: it is named, for main() to say it is missing
    assert default_python(tmp_path) == tmp_path / ".venv" / "bin" / "python"


def test_the_script_without_a_venv_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "mutate"
    shutil.copy2(ROOT / "scripts" / "mutate", script)
    done = subprocess.run([str(script), "--list"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr == f"mutate: no {tmp_path / '.venv/bin/python'}; run scripts/setup, or give --python\n"
