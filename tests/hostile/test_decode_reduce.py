"""``reduce`` nodes that call dangerous functions, planted under the victim's real call key."""

from __future__ import annotations

import pytest

from .labkit import Lab, code, lab, plant, reduce, warnings_in


def _shell(lab: Lab) -> str:
    return f"touch {lab.marker}"


ATTACKS = {
    "os.system": lambda lab: reduce(code("posix", "system"), _shell(lab)),
    "os.system by its alias": lambda lab: reduce(code("os", "system"), _shell(lab)),
    "builtins.exec": lambda lab: reduce(
        code("builtins", "exec"), f"open({str(lab.marker)!r}, 'w').close()"
    ),
    "builtins.eval": lambda lab: reduce(
        code("builtins", "eval"), f"open({str(lab.marker)!r}, 'w')"
    ),
    "subprocess.run": lambda lab: reduce(code("subprocess", "run"), ["touch", str(lab.marker)]),
    "subprocess.Popen": lambda lab: reduce(code("subprocess", "Popen"), ["touch", str(lab.marker)]),
    "logging.FileHandler": lambda lab: reduce(code("logging", "FileHandler"), str(lab.marker)),
    # getattr(os, "system")("...") through a module node.
    "builtins.getattr on a module": lambda lab: reduce(
        reduce(code("builtins", "getattr"), {"$": "module", "name": "os"}, "system"),
        _shell(lab),
    ),
    # PosixPath is a safe value type; its methods must still be unreachable.
    "builtins.getattr on a safe value": lambda lab: reduce(
        reduce(
            code("builtins", "getattr"),
            reduce(code("pathlib", "PosixPath"), str(lab.marker)),
            "touch",
        )
    ),
    # A user module's name for a library function it imported.
    "a user module's import": lambda lab: reduce(code("victim_helpers", "system"), _shell(lab)),
    "shutil.rmtree": lambda lab: reduce(code("shutil", "rmtree"), str(lab.outside)),
    "importlib.import_module": lambda lab: reduce(
        code("importlib", "import_module"), "antigravity"
    ),
}

__all__ = ["lab"]  # the fixture, imported


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_reduce_node_nested_in_a_list_runs_nothing(lab: Lab, name: str) -> None:
    (lab.project / "victim_helpers.py").write_text("from os import system\n")
    lab.run(lab.victim_store)  # the victim's genuine evaluation: its real key
    attack = ATTACKS[name](lab)
    plant(lab.victim_store, [1, {"$": "dict", "items": [["x", [2, attack]]]}, 3])
    proc = lab.victim_meets_attack()
    warned = warnings_in(proc.stderr)
    assert len(warned) == 1, proc.stderr
    assert "not used" in warned[0]
    # The rebuilt result replaced the planted one: the next call is a plain hit.
    again = lab.run(lab.victim_store)
    assert "COMPUTED" not in again.stdout and not warnings_in(again.stderr)


def test_a_refusal_warns_once_per_callable_and_names_the_fix(lab: Lab) -> None:
    lab.run(lab.victim_store, "3")
    plant(lab.victim_store, [reduce(code("posix", "system"), f"touch {lab.marker}")])
    proc = lab.victim_meets_attack()
    (line,) = warnings_in(proc.stderr)
    assert "posix:system" in line
    assert 'memostore.add_safe_globals(["posix:system"])' in line
    assert "MEMOSTORE_SAFE_GLOBALS=posix:system" in line
