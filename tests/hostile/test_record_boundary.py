"""Nothing a pulled record names is read, printed raw or joined into a path.

The attacker computes a genuine evaluation, rewrites its record (the strings a
listing prints, the names an export joins into paths, the files a diff would
read) and pushes it; the victim pulls and runs only ``log``, ``show``,
``diff`` and ``export``. Each command shows the strings escaped, writes
nothing outside the directory it was given, reads no file the record names,
and leaves the victim's store as the pull left it.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memostore import Store
from memostore.errors import printable
from memostore.odb.inside import OutsideRoot, join_beneath
from memostore.odb.objects import Links
from memostore.records.evaluation import eval_ref_name, evaluation_doc
from memostore.remote import push

from .fskit import tree_state
from .labkit import MEMOSTORE, Lab, lab
from .remotekit import cli_with_peak, remote_url, sparse

__all__ = ["lab", "remote_url"]  # the fixtures, imported

# OSC 0 sets the terminal's title, OSC 52 writes the clipboard; U+009B is a one-byte CSI.
TITLE = "\x1b]0;pwned\x07"
CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
HOST = f"box{TITLE}{CLIPBOARD}\u009b31m"
MARKUP = "[bold red]x[/bold red][link=http://evil.example]y[/link]"
HUGE = 600 << 20

LOGGER = """
from memostore import log, memo


@memo
def train(n):
    log({"loss": 1.0 / n}, step=0)
    return n


if __name__ == "__main__":
    print("RESULT", train(3))
"""


def _forge(store_path: Path, edit: Callable[[dict[str, Any]], None]) -> str:
    """Rewrite the record of the store's one evaluation with *edit*; its new id."""
    store = Store(store_path)
    ((ref, evaluation_id),) = list(store.refs.iter("evals/"))
    body = dict(store.evaluation(evaluation_id).body)
    body["provenance"] = dict(body.get("provenance") or {})
    edit(body)
    old = store.objects.get_doc(evaluation_id)
    doc = evaluation_doc(body, Links(docs=set(old.links.docs), blobs=set(old.links.blobs)))
    store.objects.add_doc(doc)
    # Filed under the function it now names, as a genuine record of it would be.
    assert store.refs.delete_if_equals(ref, evaluation_id)
    store.refs.set(eval_ref_name(body["function"], body["key"]), doc.id)
    return doc.id


def _published(lab: Lab, url: str, edit: Callable[[dict[str, Any]], None]) -> str:
    """The attacker's evaluation with a forged record, pushed and pulled by the victim."""
    lab.run(lab.attacker_store)
    forged = _forge(lab.attacker_store, edit)
    push(Store(lab.attacker_store), url)
    lab.cli(lab.victim_store, "remote", "add", "team", url)
    lab.cli(lab.victim_store, "pull", "team")
    return forged


def _no_terminal_controls(text: str) -> None:
    for raw in ("\x1b]", "\x07", "\u009b"):
        assert raw not in text, f"{raw!r} reached the terminal: {text!r}"


def _hostile_strings(body: dict[str, Any]) -> None:
    body["provenance"]["host"] = HOST
    body["args_summary"] = {"n": f"{MARKUP}{TITLE}"}


def test_log_and_show_print_a_pulled_records_strings_escaped(lab: Lab, remote_url: str) -> None:
    forged = _published(lab, remote_url, _hostile_strings)
    before = tree_state(lab.victim_store)
    shown = lab.cli(lab.victim_store, "show", forged[:12])
    listed = lab.cli(lab.victim_store, "log")
    for proc in (shown, listed):
        _no_terminal_controls(proc.stdout + proc.stderr)
        assert "\x1b" not in proc.stdout  # piped: no escape sequence at all
    assert "box\\x1b]0;pwned\\x07\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\u009b31m" in shown.stdout
    assert MARKUP in listed.stdout
    assert tree_state(lab.victim_store) == before


def test_on_a_terminal_rich_reads_no_markup_from_a_record(lab: Lab) -> None:
    forged = _published(lab, str(lab.remote), _hostile_strings)
    for args in (["log"], ["show", forged[:12]]):
        _no_terminal_controls(_on_a_terminal(lab, *args))  # rich's own colours are fine
    assert "[bold red]x[/bold red]" in _on_a_terminal(lab, "log")


def _on_a_terminal(lab: Lab, *args: str) -> str:
    """What ``memostore ARGS`` writes to a terminal (a pseudo-terminal: rich draws)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "400", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [str(MEMOSTORE), "--store", str(lab.victim_store), *args],
        stdout=follower,
        stderr=follower,
        cwd=str(lab.project),
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_export_writes_only_below_its_logdir(lab: Lab, remote_url: str) -> None:
    pytest.importorskip("tensorboard")
    lab.script.write_text(textwrap.dedent(LOGGER))

    def climb(body: dict[str, Any]) -> None:
        # The name passes the sanitiser, which then stripped "_" and left "..".
        body["function"] = "__main__:_.._"

    forged = _published(lab, remote_url, climb)
    logdir = lab.project / "logs"
    before = lab.files()
    export = ["export", "tensorboard", forged[:12], "--logdir", str(logdir)]
    proc = subprocess.run(
        [str(MEMOSTORE), "--store", str(lab.victim_store), *export],
        capture_output=True,
        text=True,
        cwd=str(lab.project),
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    written = set(lab.files()) - set(before)
    assert written, proc.stderr
    assert all(name.startswith(f"{logdir.relative_to(lab.root)}/") for name in written), written


def test_the_join_checks_the_final_path(tmp_path: Path) -> None:
    root = tmp_path / "logdir"
    root.mkdir()
    (root / "elsewhere").symlink_to(tmp_path)
    assert join_beneath(root, "run/sub") == root / "run/sub"
    for name in ("..", "a/../..", "/etc", "", ".", "a/..", "elsewhere/x", "00005/.."):
        with pytest.raises(OutsideRoot) as refused:
            join_beneath(root, name)
        assert "not below it" in str(refused.value)


def _named_files(script: Path) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        body["provenance"]["argv"] = [str(script)]
        body["provenance"]["cwd"] = str(script.parent)

    return edit


def test_diff_reads_no_file_a_pulled_record_names(lab: Lab, remote_url: str) -> None:
    huge = lab.outside / "huge.py"
    sparse(huge, HUGE)
    forged = _published(lab, remote_url, _named_files(huge))
    proc, peak_mb = cli_with_peak(lab, lab.victim_store, "diff", forged[:12])
    assert proc.returncode == 0, proc.stderr
    assert "pulled" in proc.stdout and "--source" in proc.stdout, proc.stdout
    assert peak_mb < 350, f"diff held {peak_mb} MB"


def test_a_local_records_files_are_read_with_a_bound(lab: Lab) -> None:
    huge = lab.outside / "huge.py"
    sparse(huge, HUGE)
    lab.run(lab.victim_store)
    forged = _forge(lab.victim_store, _named_files(huge))
    proc, peak_mb = cli_with_peak(lab, lab.victim_store, "diff", forged[:12])
    assert proc.returncode == 0, proc.stderr
    assert "not read" in proc.stdout, proc.stdout
    assert peak_mb < 350, f"diff held {peak_mb} MB"

    fifo = lab.outside / "fifo.py"
    os.mkfifo(fifo)
    forged = _forge(lab.victim_store, _named_files(fifo))
    proc = subprocess.run(
        [str(MEMOSTORE), "--store", str(lab.victim_store), "diff", forged[:12]],
        capture_output=True,
        text=True,
        cwd=str(lab.project),
        timeout=120,  # a reader that blocked on the FIFO would hang here
    )
    assert proc.returncode == 0 and "fifo.py" in proc.stdout, proc.stdout


def test_no_cli_module_writes_around_the_output_layer() -> None:
    """Every write of the CLI goes through cli/output.py, where strings are escaped."""
    cli = Path(__file__).resolve().parents[2] / "cli"
    offenders = []
    for path in sorted(cli.glob("*.py")):
        if path.name == "output.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if "click.echo(" in code:
                offenders.append(f"{path.name}:{number}: {line.strip()}")
            if "print(" in code.replace("console.print(", ""):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert not offenders, offenders


if sys.platform != "linux":  # pseudo-terminals and FIFOs as Linux has them
    pytestmark = pytest.mark.skip("Linux only")


def test_library_messages_reach_a_terminal_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """Errors, warnings and verbose lines quote records too: their text is escaped."""
    import warnings

    from memostore.call import verbose
    from memostore.errors import DecodeError, MemostoreWarning

    error = DecodeError(f"stored name {HOST}\nsecond line")
    assert str(error) == f"stored name {printable(HOST)}\nsecond line"
    shown = warnings.formatwarning(MemostoreWarning(HOST), MemostoreWarning, "x.py", 1)
    _no_terminal_controls(shown)
    assert printable(HOST) in shown
    verbose.set_verbose(True)
    try:
        verbose.report_miss(f"__main__:f{TITLE}", "ab" * 32, f"reason {CLIPBOARD}")
    finally:
        verbose.set_verbose(None)
    line = capsys.readouterr().err
    _no_terminal_controls(line)
    assert "\\x1b]52;c;" in line and line.count("\n") == 1
