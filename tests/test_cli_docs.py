"""docs/cli.md and the click commands describe the same surface."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from memostore_cli.main import cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
COMMANDS = ("log", "show", "diff", "gc", "fsck")
_SECTION = re.compile(r"^## `memostore (\w+)`\s*$", re.MULTILINE)
_OPTION = re.compile(r"`(--?[a-z][a-z-]*)")


def sections() -> dict[str, str]:
    text = DOC.read_text()
    found = {}
    matches = list(_SECTION.finditer(text))
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else text.find("\n## ", match.end())
        found[match.group(1)] = text[match.end() : end if end > 0 else len(text)]
    return found


def option_rows(section: str) -> set[str]:
    """Options named in the first column of the section's tables."""
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `-"):
            first = line.split("|")[1]
            names.update(_OPTION.findall(first))
    return names


def click_options(command: click.Command) -> set[str]:
    names: set[str] = set()
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts + param.secondary_opts)
    return names - {"--help", "-h"}


def test_every_command_has_a_section() -> None:
    assert set(COMMANDS) <= set(sections())
    assert set(sections()) <= set(cli.commands)


@pytest.mark.parametrize("name", COMMANDS)
def test_documented_options_exist_and_every_option_is_documented(name: str) -> None:
    documented = option_rows(sections()[name])
    actual = click_options(cli.commands[name])
    assert documented == actual, f"docs/cli.md and `memostore {name}` disagree"


@pytest.mark.parametrize("name", COMMANDS)
def test_synopsis_names_the_real_arguments(name: str) -> None:
    section = sections()[name]
    synopsis = section.split("```")[1]
    for param in cli.commands[name].params:
        if isinstance(param, click.Argument):
            assert param.human_readable_name.upper() in synopsis.upper()
    for option in _OPTION.findall(synopsis.replace("[", "`").replace(" ", " `")):
        assert option in click_options(cli.commands[name]), option


def test_global_options_are_documented() -> None:
    text = DOC.read_text()
    globals_table = text.split("## Global options", 1)[1].split("\n## ", 1)[0]
    documented = set(_OPTION.findall(globals_table))
    assert documented == click_options(cli) | {"-h", "--help"}


def _every_command(command: click.Command, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    found = [path]
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            found += _every_command(sub, (*path, name))
    return found


def test_no_help_text_shows_markup() -> None:
    """Help is plain text in a terminal: no reST or Markdown backticks, in any command."""
    marked = {}
    for path in _every_command(cli, ("memostore",)):
        command: click.Command = cli
        for name in path[1:]:
            assert isinstance(command, click.Group)
            command = command.commands[name]
        with click.Context(command, info_name=" ".join(path)) as ctx:
            lines = [line for line in command.get_help(ctx).splitlines() if "`" in line]
        if lines:
            marked[" ".join(path)] = lines
    assert len(_every_command(cli, ("memostore",))) > 20
    assert not marked, marked
