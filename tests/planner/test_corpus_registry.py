"""The corpus table (``corpus_registry.py``) held to the planner: each repository's status says what the
planner does with it today, and the test fails when that changes, so that a fix flips ``pending`` to
``read`` in the same commit. ``docs/COVERAGE.md`` is the table's generated view."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner import InvalidInput
from tests.planner.corpus_cases import CASES
from tests.planner.corpus_registry import ARCHITECTURES, ENTRIES, HYBRID, NAS
from tests.planner.coverage_table import table
from tests.planner.test_corpus import CORPUS, load, near

ROOT = Path(__file__).resolve().parents[2]


def _named(status: str) -> list[str]:
    return sorted(name for name, entry in ENTRIES.items() if entry.status == status)


def test_every_corpus_repository_has_an_entry() -> None:
    assert sorted(ENTRIES) == sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_entry_names_the_configs_architecture(name: str) -> None:
    case = CASES.get(name)
    path = CORPUS / (case.config_from if case and case.config_from else name) / "config.json"
    entry = ENTRIES[name]
    if not path.exists():
        assert entry.architecture == "" and entry.status == "refused"
        return
    # a config with no architectures key (Janus's multi_modality) names none
    assert (json.loads(path.read_text()).get("architectures") or [""])[0] == entry.architecture
    assert (entry.status == "read") == (entry.line == "")
    assert entry.listed_as == "" or entry.listed_as in ARCHITECTURES


def test_coverage_reaches_its_floor() -> None:
    """What the corpus covers of vLLM's list: it may grow, never shrink unnoticed."""
    architectures = {e.listed_as or e.architecture for e in ENTRIES.values()} & set(ARCHITECTURES)
    assert len(ENTRIES) >= 97
    assert len(architectures) >= 51
    assert sum(1 for e in ENTRIES.values() if e.architecture in HYBRID) >= 9
    assert sum(1 for e in ENTRIES.values() if e.architecture in NAS) >= 2


@pytest.mark.parametrize("name", _named("read"))
def test_read(name: str) -> None:
    entry = ENTRIES[name]
    shape = load(name).shape
    assert near(shape.params, entry.params), (shape.params, entry.params, shape.params / entry.params - 1)
    assert near(shape.kv_bytes_per_token, entry.kv), (shape.kv_bytes_per_token, entry.kv)


@pytest.mark.parametrize("name", _named("refused"))
def test_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(ENTRIES[name].line)):
        load(name)


@pytest.mark.parametrize("name", _named("pending"))
def test_pending(name: str) -> None:
    """Wrong today: once the planner is within 2% on both counts, the entry must say ``read``."""
    entry = ENTRIES[name]
    shape = load(name).shape
    assert not (near(shape.params, entry.params) and near(shape.kv_bytes_per_token, entry.kv)), (
        f"{name} is read right now: mark it read"
    )


def test_coverage_file_is_the_generators_output() -> None:
    assert (ROOT / "docs" / "COVERAGE.md").read_text() == table()
