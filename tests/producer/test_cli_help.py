"""Every ``modelplan`` subcommand's ``--help`` page describes it and every option it takes, the tables of
docs/CLI.md name every option, and ``modelplan --version`` prints the package's version."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from producer.cli import main, parser

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "CLI.md"


def commands(p: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each subcommand's parser, nested ones (``client add``) included, by its words after ``modelplan``."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*path, name)), sub
                yield from commands(sub, (*path, name))


def options(p: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """A parser's own arguments, ``--help`` and the choice of subcommand left out."""
    for action in p._actions:
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            yield action


def test_every_subcommand_has_a_description() -> None:
    missing = [name for name, sub in commands(parser()) if not sub.description]
    assert not missing, f"no description on the --help page of: {', '.join(missing)}"


def test_every_option_has_help_text() -> None:
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, sub in commands(parser())
        for a in options(sub)
        if not a.help
    ]
    assert not missing, f"options without help text: {', '.join(missing)}"


def test_the_cli_pages_tables_name_every_option() -> None:
    text = "\n".join(line for line in CLI_DOC.read_text(encoding="utf-8").splitlines() if line.startswith("|"))
    missing = sorted(
        {
            f"{name} {flag}"
            for name, sub in commands(parser())
            for a in options(sub)
            for flag in a.option_strings
            if flag.startswith("--") and not re.search(re.escape(flag) + r"(?![\w-])", text)
        }
    )
    assert not missing, f"docs/CLI.md does not name: {', '.join(missing)}"


def test_modelplan_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"modelplan {version('modelplan')}"
