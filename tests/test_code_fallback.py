"""The scanner never breaks a call: awkward bytecode is read, and failures fall back coarsely.

A function the scanner fails on is named in one ``MemostoreWarning`` and keyed
by its module's whole text and its raw bytecode, which can only cause extra
recomputes, never a stale hit.
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import run_script, write_script
from memostore_cli.main import cli

from memostore import MemostoreWarning
from memostore.code.deps import code_info

# nanoGPT's GPT.from_pretrained, in the shape that broke the bytecode scan on 3.11:
# an import inside the body next to ``f(**kw)`` (``LOAD_CONST ()`` + ``CALL_FUNCTION_EX``).
NANOGPT = """
import torch
import torch.nn as nn
from dataclasses import dataclass


@dataclass
class GPTConfig:
    n_layer: int = 12
    n_head: int = 12
    dropout: float = 0.0


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    @classmethod
    def from_pretrained(cls, model_type, override_args=None):
        assert model_type in {"gpt2", "gpt2-medium"}
        override_args = override_args or {}
        assert all(k == "dropout" for k in override_args)
        from transformers import GPT2LMHeadModel
        config_args = {
            "gpt2": dict(n_layer=12, n_head=12),
            "gpt2-medium": dict(n_layer=24, n_head=16),
        }[model_type]
        if "dropout" in override_args:
            config_args["dropout"] = override_args["dropout"]
        config = GPTConfig(**config_args)
        model = GPT(config)
        sd = model.state_dict()
        sd_keys = [k for k in sd.keys() if not k.endswith(".attn.bias")]
        model_hf = GPT2LMHeadModel.from_pretrained(model_type)
        sd_hf = model_hf.state_dict()
        transposed = ["attn.c_attn.weight", "mlp.c_proj.weight"]
        for k in sd_keys:
            if any(k.endswith(w) for w in transposed):
                with torch.no_grad():
                    sd[k].copy_(sd_hf[k].t())
        return model
"""

# A code object the scanner cannot read: a dead instruction after the return
# names a global that does not exist (it never runs).
BROKEN = """
import dis

import helpers

K = 3


def f(x):
    print("ran")
    return helpers.h(x) + K


_code = f.__code__
f.__code__ = _code.replace(co_code=_code.co_code + bytes([dis.opmap["STORE_GLOBAL"], 200]))
"""

CALLER = """
import json
import warnings

from memostore import MemostoreWarning, memo

import brokenmod

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    f = memo(brokenmod.f)
    value = f(2)
    key = f.key(2)
messages = [str(w.message) for w in caught if issubclass(w.category, MemostoreWarning)]
print(json.dumps({"value": value, "key": key, "warnings": messages}))
"""


@pytest.fixture
def make_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []
    prefix = f"cftest_{abs(hash(str(tmp_path))) % 10**8}_"

    def make(name: str, source: str):
        full = prefix + name
        (tmp_path / f"{full}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        names.append(full)
        return importlib.import_module(full)

    yield make
    for name in names:
        sys.modules.pop(name, None)


def test_a_set_constant_in_another_order_still_matches_its_source(make_module) -> None:
    # ``x in {"a", "b"}`` compiles to a frozenset constant, and two compiles of one
    # source may iterate it in different orders (it depends on the hash seed). The
    # check that the file still holds the running code must not take that for an
    # edit, or the function loses its source and is keyed by bytecode instead.
    mod = make_module(
        "sets",
        """
        def kind(x):
            return "small" if x in {1, 9} else "other"
    """,
    )
    code = mod.kind.__code__
    (constant,) = [c for c in code.co_consts if isinstance(c, frozenset)]
    reordered = frozenset(sorted(constant, reverse=repr(constant) == "frozenset({1, 9})"))
    assert repr(reordered) != repr(constant) and reordered == constant
    consts = tuple(reordered if c is constant else c for c in code.co_consts)
    mod.kind.__code__ = code.replace(co_consts=consts)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemostoreWarning)
        info = code_info(mod.kind)
    assert info.deps[info.symbol].source.lstrip().startswith("def kind")


def test_nanogpt_from_pretrained_is_scanned(make_module) -> None:
    mod = make_module("nanogpt", NANOGPT)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemostoreWarning)  # scanned precisely, no fallback
        info = code_info(mod.GPT.from_pretrained)
    name = mod.__name__
    assert info.symbol == f"{name}:GPT.from_pretrained"
    assert info.deps[info.symbol].source.lstrip().startswith("@classmethod")
    assert {f"{name}:GPTConfig", f"{name}:GPT", "dist:torch"} <= set(info.deps)
    assert "dist:transformers" in info.deps  # the import inside the body, not run
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemostoreWarning)
        cls = code_info(mod.GPT)  # the class, whose digest covers its methods
    assert "def from_pretrained(cls" in cls.deps[f"{name}:GPT"].source


def test_nanogpt_through_memo_and_diff(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(NANOGPT)
    script = write_script(
        project,
        "train.py",
        """
        import warnings
        warnings.simplefilter("error")
        from memostore import memo
        from model import GPT

        @memo
        def pretrained_layers(model_type):
            return GPT.from_pretrained.__qualname__, model_type

        print(pretrained_layers("gpt2"))
        """,
    )
    env = {"MEMOSTORE_DIR": str(tmp_path / "store")}
    run_script(script, env=env)
    model = project / "model.py"
    model.write_text(model.read_text().replace("n_layer=24", "n_layer=36"))
    run_script(script, env=env)
    result = CliRunner().invoke(
        cli,
        ["--store", str(tmp_path / "store"), "diff", "pretrained_layers~1", "pretrained_layers"],
    )
    assert result.exit_code == 0, result.output
    assert '+            "gpt2-medium": dict(n_layer=36, n_head=16),' in result.output


def test_a_binding_the_scanner_fails_on_is_keyed_as_data(make_module) -> None:
    mod = make_module(
        "badvalue",
        """
        import dataclasses

        @dataclasses.dataclass(frozen=True)
        class Frozen:
            x: int

        broken = Frozen(1)
        object.__delattr__(broken, "x")  # its field now raises on read

        def f():
            return broken
        """,
    )
    with pytest.warns(MemostoreWarning, match=rf"{mod.__name__}:f \(reading global:broken"):
        info = code_info(mod.f)
    assert info.deps[f"{mod.__name__}:broken"].kind == "data"
    assert [g.name for g in info.data_globals] == ["broken"]


def test_unscannable_code_is_keyed_coarsely_and_warned_once(make_module) -> None:
    make_module("helpers_probe", "")
    mod = make_module("unscannable", BROKEN.replace("import helpers", "import json as helpers"))
    with pytest.warns(MemostoreWarning, match=rf"{mod.__name__}:f \(.*IndexError") as caught:
        info = code_info(mod.f)
    assert len([w for w in caught if issubclass(w.category, MemostoreWarning)]) == 1
    source = info.deps[info.symbol].source
    assert source.startswith("# not scanned (")
    assert f"{Path(mod.__file__).name}" in source
    assert f"{mod.__name__}:K" in info.deps  # names in the code are still followed
    mod.K = 4
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemostoreWarning)  # not warned again for the same code
        assert code_info(mod.f).digest != info.digest


def test_unscannable_code_through_memo_runs_and_any_module_edit_recomputes(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("def h(x):\n    return x * 10\n")
    (tmp_path / "brokenmod.py").write_text(BROKEN)
    script = write_script(tmp_path, "main.py", CALLER)
    env = {"MEMOSTORE_DIR": str(tmp_path / "store")}

    def run() -> tuple[dict, bool]:
        proc = run_script(script, env=env)
        lines = proc.stdout.splitlines()
        return json.loads(lines[-1]), "ran" in lines

    first, ran = run()
    assert ran and first["value"] == 23
    assert len(first["warnings"]) == 1 and "brokenmod:f" in first["warnings"][0]
    again, ran = run()
    assert not ran and again["key"] == first["key"]  # a hit: the coarse key is stable
    keys = {first["key"]}
    edits = [
        ("helpers.py", "x * 10", "x * 11"),  # a helper in another module
        ("brokenmod.py", "K = 3", "K = 4"),  # a constant
        ("brokenmod.py", "\ndef f", "\n# a comment\ndef f"),  # over-invalidation, by design
    ]
    for file, old, new in edits:
        path = tmp_path / file
        path.write_text(path.read_text().replace(old, new))
        out, ran = run()
        assert ran and out["key"] not in keys, file
        keys.add(out["key"])
