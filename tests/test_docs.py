"""The docs a new user meets: runnable examples run, links resolve, the README's commands.

Marking an example runnable
---------------------------
Put the HTML comment ``<!-- runnable -->`` alone on the line right before the
opening fence of a ``python`` or ``bash``/``sh``/``shell`` block in README.md
or docs/*.md (the comment renders as nothing on GitHub and in mkdocs)::

    <!-- runnable -->
    ```python
    from memostore import memo
    ...
    ```

This test then runs the page's runnable blocks in order, each in a fresh
interpreter (a Python block) or ``bash -eu -o pipefail`` (a shell block, with
the ``memostore`` console script on ``PATH``), all in one new temporary working
directory with ``MEMOSTORE_DIR`` pointing at a store inside it. Blocks of one
page therefore share the store but no Python names: each Python block must
import what it uses, and a shell block can inspect what the blocks before it
stored. Keep runnable examples fast (tiny tensors, no downloads): a block gets
:data:`BLOCK_TIMEOUT` seconds.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
MARKER = "<!-- runnable -->"
PYTHON_LANGS = {"python", "py"}
SHELL_LANGS = {"bash", "sh", "shell"}
BLOCK_TIMEOUT = 120
# Pages whose core examples must stay runnable (a dropped marker fails the test).
MUST_RUN = ("docs/getting-started.md", "docs/concepts.md")

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown page."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    runnable: bool

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """Every fenced code block of *page*, in order."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence = opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not _closes(lines[j], fence):
            body.append(lines[j])
            j += 1
        runnable = i > 0 and lines[i - 1].strip() == MARKER
        lang = opening["info"].split()[0].lower() if opening["info"].split() else ""
        found.append(Block(page, i + 1, lang, "\n".join(body) + "\n", runnable))
        i = j + 1
    return found


def _closes(line: str, fence: str) -> bool:
    """True when *line* closes a block opened by *fence* (as long or longer, nothing else)."""
    stripped = line.strip()
    return stripped.startswith(fence) and not stripped.strip(fence[0])


def runnable_pages() -> list[Path]:
    return [page for page in pages() if any(b.runnable for b in blocks(page))]


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(REPO)) for p in paths]


# -- runnable examples -----------------------------------------------------------------------
def test_every_marker_precedes_a_python_or_shell_block() -> None:
    for page in pages():
        lines = page.read_text().splitlines()
        starts = {b.line: b for b in blocks(page)}
        for number, line in enumerate(lines, start=1):
            if line.strip() != MARKER:
                continue
            block = starts.get(number + 1)
            assert block is not None, f"{page.name}:{number}: {MARKER} must sit right on a fence"
            assert block.lang in PYTHON_LANGS | SHELL_LANGS, (
                f"{block.where()}: only python and shell blocks can be runnable, not {block.lang!r}"
            )


def test_core_pages_have_runnable_examples() -> None:
    marked = {str(p.relative_to(REPO)) for p in runnable_pages()}
    assert set(MUST_RUN) <= marked, f"no runnable example left in {set(MUST_RUN) - marked}"


def _run(block: Block, index: int, cwd: Path, env: dict[str, str]) -> None:
    if block.lang in PYTHON_LANGS:
        script = cwd / f"block{index}.py"
        script.write_text(block.code)
        argv = [sys.executable, script.name]
    else:
        script = cwd / f"block{index}.sh"
        script.write_text(block.code)
        argv = ["bash", "-eu", "-o", "pipefail", script.name]
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT
    )
    assert proc.returncode == 0, (
        f"{block.where()} exited {proc.returncode}\n--- block:\n{block.code}"
        f"--- stdout:\n{proc.stdout}\n--- stderr:\n{proc.stderr}"
    )


@pytest.mark.slow  # a page's examples train a model and run the CLI: about 10 s
@pytest.mark.parametrize("page", runnable_pages(), ids=_ids(runnable_pages()))
def test_runnable_examples_run(page: Path, tmp_path: Path) -> None:
    """A page's runnable blocks, in order, in one temporary directory and store."""
    bin_dir = str(Path(sys.executable).parent)  # where the `memostore` console script is
    env = {
        **os.environ,
        "MEMOSTORE_DIR": str(tmp_path / "store"),
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": str(tmp_path),
    }
    env.pop("AWS_ENDPOINT_URL", None)  # no example may reach a remote by accident
    for index, block in enumerate(b for b in blocks(page) if b.runnable):
        _run(block, index, tmp_path, env)


# -- links -------------------------------------------------------------------------------------
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(?P<target>\S+)", re.MULTILINE)
_INLINE_CODE = re.compile(r"`+[^`]*`+")


def _prose(page: Path, inline_code: bool = False) -> str:
    """The page without its code blocks and (unless asked) its inline code: links
    there are not links, but a heading's inline code is part of its anchor."""
    lines = page.read_text().splitlines()
    inside = {n for b in blocks(page) for n in range(b.line, b.line + b.code.count("\n") + 2)}
    kept = "\n".join(line for n, line in enumerate(lines, start=1) if n not in inside)
    return kept if inline_code else _INLINE_CODE.sub("", kept)


def slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in _prose(page, inline_code=True).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            found.add(slug(match[1]))
    return found


def links(page: Path) -> list[str]:
    prose = _prose(page)
    return [m["target"] for m in _LINK.finditer(prose)] + [
        m["target"] for m in _REF_LINK.finditer(prose)
    ]


@pytest.mark.parametrize("page", pages(), ids=_ids(pages()))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no file {resolved.relative_to(REPO)})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved.name})")
    assert not broken, f"{page.relative_to(REPO)}: broken links: {broken}"


@pytest.mark.parametrize("page", pages(), ids=_ids(pages()))
def test_every_table_has_rows(page: Path) -> None:
    """A table header with no rows swallows the paragraph after it into a table."""
    lines = page.read_text().splitlines()
    empty = [
        number + 1
        for number, (line, rule) in enumerate(itertools.pairwise(lines))
        if line.startswith("|")
        and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", rule.strip())
        and not (number + 2 < len(lines) and lines[number + 2].startswith("|"))
    ]
    assert not empty, f"{page.relative_to(REPO)}: table headers without rows at lines {empty}"


def test_install_commands_say_what_works_from_a_clone() -> None:
    """memostore installs from a clone: no page or message sends users to an index."""
    from memostore.errors import install_hint

    places = [REPO / "README.md", *DOCS.rglob("*.md")]
    for package in ("memostore", "cli", "torch_codecs"):
        places += (REPO / package).rglob("*.py")
    wrong = [
        str(path.relative_to(REPO))
        for path in places
        if path.name != "changelog.md" and "memostore[" in path.read_text()
    ]
    assert not wrong, wrong
    assert install_hint("ui") == "run pip install '.[ui]' in your memostore clone"


def test_slug_matches_mkdocs() -> None:
    assert slug("`memostore log`") == "memostore-log"
    assert slug("Opting out: `ignore_global`") == "opting-out-ignore_global"
    assert slug("How big does the store get? How do I clean it?") == (
        "how-big-does-the-store-get-how-do-i-clean-it"
    )


# -- the README's set-up -----------------------------------------------------------------------
def test_readme_has_exactly_the_two_setup_commands() -> None:
    commands = []
    for block in blocks(REPO / "README.md"):
        if block.lang in SHELL_LANGS:
            for line in block.code.splitlines():
                command = line.split("#", 1)[0].strip()
                if command:
                    commands.append(command)
    assert commands == ["./scripts/demo", "./scripts/test"]
    for command in commands:
        script = REPO / command
        assert script.is_file() and os.access(script, os.X_OK), f"{command} is not executable"
