"""``object`` nodes of dangerous classes and ``module`` nodes, under the victim's real call key."""

from __future__ import annotations

import json

import pytest

from memostore import Store
from memostore.remote import push

from .labkit import Lab, code, lab, plant, reduce, warnings_in

__all__ = ["lab"]  # the fixture, imported


def _object(cls: dict, state: object = None, setstate: dict | None = None) -> dict:
    node: dict = {"$": "object", "cls": cls, "args": []}
    if state is not None:
        node["state"] = state
    if setstate is not None:
        node["setstate"] = setstate
    return node


def _sentinel(lab: Lab) -> str:
    sentinel = lab.outside / "keep-me"
    sentinel.write_text("precious")
    return str(sentinel)


OBJECT_ATTACKS = {
    # __new__ then "__setstate__" = Popen.__init__ with the state as its argument.
    "subprocess.Popen": lambda lab: _object(
        code("subprocess", "Popen"),
        state=["touch", str(lab.marker)],
        setstate=code("subprocess", "Popen.__init__"),
    ),
    "logging.FileHandler": lambda lab: _object(
        code("logging", "FileHandler"),
        state=str(lab.marker),
        setstate=code("logging", "FileHandler.__init__"),
    ),
    # Restored with its state, the closer deletes its file when it is collected.
    "tempfile closer": lambda lab: _object(
        code("tempfile", "_TemporaryFileCloser"),
        state={
            "$": "dict",
            "items": [
                ["file", _object(code("io", "BytesIO"))],
                ["name", _sentinel(lab)],
                ["delete", True],
                ["close_called", False],
            ],
        },
    ),
    # A class the registry allows, with a __setstate__ the registry does not.
    "safe class, hostile setstate": lambda lab: _object(
        code("collections", "OrderedDict"),
        state=f"touch {lab.marker}",
        setstate=code("posix", "system"),
    ),
}


@pytest.mark.parametrize("name", sorted(OBJECT_ATTACKS))
def test_object_nodes_of_dangerous_classes_build_nothing(lab: Lab, name: str) -> None:
    lab.run(lab.victim_store)
    plant(lab.victim_store, [[OBJECT_ATTACKS[name](lab)]])
    proc = lab.victim_meets_attack()
    assert len(warnings_in(proc.stderr)) == 1, proc.stderr


def test_a_module_node_never_imports_antigravity(lab: Lab) -> None:
    """Importing antigravity opens a web browser ($BROWSER here touches the marker)."""
    lab.run(lab.victim_store)
    plant(lab.victim_store, [1, [{"$": "module", "name": "antigravity"}]])
    proc = lab.victim_meets_attack()
    (line,) = warnings_in(proc.stderr)
    assert "antigravity" in line
    assert 'memostore.add_safe_globals(["antigravity"])' in line


PLANTED = "shared_remote.evil_mod"


def _plant_module_beside_the_remote(lab: Lab, node: object) -> None:
    """The attacker writes a module into the remote directory and pushes a value naming it."""
    lab.run(lab.attacker_store)
    plant(lab.attacker_store, [node])
    push(Store(lab.attacker_store), str(lab.remote))
    (lab.remote / "evil_mod.py").write_text(
        f"open({str(lab.marker)!r}, 'w').close()\ndef run():\n    pass\n"
    )


@pytest.mark.parametrize("kind", ["module node", "code node"])
def test_a_module_planted_beside_a_remote_is_never_imported(lab: Lab, kind: str) -> None:
    """The remote lies inside the project, so the planted module is on the victim's path."""
    node = (
        {"$": "module", "name": PLANTED} if kind == "module node" else reduce(code(PLANTED, "run"))
    )
    _plant_module_beside_the_remote(lab, node)
    lab.cli(lab.victim_store, "remote", "add", "team", str(lab.remote))
    lab.cli(lab.victim_store, "pull", "team")
    proc = lab.victim_meets_attack()
    (line,) = warnings_in(proc.stderr)
    assert PLANTED in line and "lies inside" in line
    assert "add_safe_globals" not in line  # no advice to trust a planted module


def test_a_planted_module_from_an_unconfigured_remote_is_never_imported(lab: Lab) -> None:
    """`memostore pull DIR` (no remote configured): its origin record names the directory."""
    _plant_module_beside_the_remote(lab, {"$": "module", "name": PLANTED})
    lab.cli(lab.victim_store, "pull", str(lab.remote))
    lab.victim_meets_attack()


def test_the_users_own_modules_are_still_imported_to_restore(lab: Lab) -> None:
    """A stored result naming a function of a project module not imported yet: a hit."""
    (lab.project / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    script = lab.project / "uses_helpers.py"
    script.write_text(
        "import sys\n"
        "from memostore import memo\n\n"
        "@memo\n"
        "def pick(n):\n"
        "    print('COMPUTED')\n"
        "    import helpers\n"
        "    return [helpers.double, n]\n\n"
        "fn, n = pick(3)\n"
        "print('RESULT', fn(n), 'helpers' in sys.modules)\n"
    )
    lab.script = script
    first = lab.run(lab.victim_store)
    assert "COMPUTED" in first.stdout and "RESULT 6 True" in first.stdout
    again = lab.run(lab.victim_store)
    assert "COMPUTED" not in again.stdout and "RESULT 6 True" in again.stdout
    assert not warnings_in(again.stderr)


def test_show_log_and_diff_never_decode_a_planted_value(lab: Lab) -> None:
    attack = [reduce(code("posix", "system"), f"touch {lab.marker}")]
    lab.run(lab.victim_store, "3")
    first = plant(lab.victim_store, attack)
    lab.run(lab.victim_store, "4")
    (second_ref,) = [n for n, i in Store(lab.victim_store).refs.iter("evals/") if i != first]
    second = plant(lab.victim_store, attack, ref=second_ref)
    before = lab.files()
    log = lab.cli(lab.victim_store, "log", "--json")
    assert {e["id"] for e in json.loads(log.stdout)} == {first, second}
    lab.cli(lab.victim_store, "show", first)
    lab.cli(lab.victim_store, "show", first, "--json")
    lab.cli(lab.victim_store, "diff", first, second)
    lab.cli(lab.victim_store, "diff", first, second, "--json")
    assert not lab.marker.exists()
    assert lab.files() == before
