"""Code digests: which edits change them, which do not, and what the closure holds.

The edit table runs the fixture project in ``tests/code_projects/basic`` in a
fresh interpreter per variant (each with its own ``PYTHONHASHSEED``), since
digests must agree across processes, not only within one.
"""

from __future__ import annotations

import dis
import functools
import importlib
import importlib.metadata
import json
import linecache
import logging
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import CodeType

import blake3
import pytest

from memostore.code import bytecode as code_bytecode
from memostore.code import source as code_source
from memostore.code.deps import CodeInfo, Dependency, code_info, ignore_global, is_user_module

REPO = Path(__file__).resolve().parents[1]
BASIC = Path(__file__).resolve().parent / "code_projects" / "basic"
HEX64 = set("0123456789abcdef")

# (name, file, old text, new text, should the digest of f change)
EDITS = [
    ("f body", "pkg/mod_a.py", 'total + OPS["double"](x)', 'total - OPS["double"](x)', True),
    (
        "f comment",
        "pkg/mod_a.py",
        '    log.debug("f called")\n',
        '    log.debug("f called")  # say so\n    # and a comment line\n',
        False,
    ),
    ("f blank line", "pkg/mod_a.py", "    squares =", "\n    squares =", False),
    ("f docstring", "pkg/mod_a.py", '"""Combine everything."""', '"""Combine all of it."""', False),
    (
        "f reformatted",
        "pkg/mod_a.py",
        "total = g(x) + h(x) + mb.h2(x)",
        "total = (\n        g(x)\n        + h(x)\n        + mb.h2(x)\n    )",
        False,
    ),
    ("helper g", "pkg/mod_a.py", "return x - K\n", "return x - K - 1\n", True),
    ("constant K", "pkg/mod_a.py", "\nK = 3\n", "\nK = 4\n", True),
    ("h, from-import", "pkg/mod_b.py", "return x + 1", "return x + 2", True),
    ("h2, import-as", "pkg/mod_b.py", "return x * 2", "return x * 3", True),
    ("unrelated in mod_a", "pkg/mod_a.py", "return x * 1000", "return x * 2000", False),
    ("unrelated in mod_b", "pkg/mod_b.py", "return x - 100", "return x - 200", False),
    (
        "base class method",
        "pkg/mod_a.py",
        "return x * self.scale",
        "return x * self.scale * 2",
        True,
    ),
    ("base class attribute", "pkg/mod_a.py", "scale = 2", "scale = 3", True),
    ("global in nested function", "pkg/mod_a.py", "NESTED_K = 7", "NESTED_K = 8", True),
    ("global in comprehension", "pkg/mod_a.py", "COMP_K = 11", "COMP_K = 12", True),
    ("constant of a lambda in a table", "pkg/mod_a.py", "TABLE_K = 5", "TABLE_K = 6", True),
    ("lambda in a table", "pkg/mod_a.py", "lambda x: x * x", "lambda x: x ** 2", True),
]


def _env(extra_path: Path, seed: str | int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(extra_path)])
    env["PYTHONHASHSEED"] = str(seed)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run(args: list[str], cwd: Path, seed: str | int, stdin: str | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_env(cwd, seed),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _variant(root: Path, name: str, edits: list[tuple[str, str, str]]) -> Path:
    target = root / name.replace(" ", "_").replace(",", "")
    shutil.copytree(BASIC, target, ignore=shutil.ignore_patterns("__pycache__"))
    for file, old, new in edits:
        path = target / file
        text = path.read_text()
        assert text.count(old) == 1, f"{old!r} must occur once in {file}"
        path.write_text(text.replace(old, new))
    return target


@pytest.fixture(scope="module")
def edit_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Run the baseline (three hash seeds) and every edit, in parallel processes."""
    root = tmp_path_factory.mktemp("code_projects")
    jobs: dict[str, tuple[Path, int]] = {}
    for seed in (0, 4242):
        jobs[f"baseline seed {seed}"] = (_variant(root, f"baseline_{seed}", []), seed)
    jobs["baseline reversed"] = (_variant(root, "baseline_reversed", []), 99)
    for name, file, old, new, _ in EDITS:
        jobs[name] = (_variant(root, name, [(file, old, new)]), random.randrange(1, 2**31))
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = {
            name: pool.submit(_run, ["run.py"], cwd, seed) for name, (cwd, seed) in jobs.items()
        }
        return {name: future.result() for name, future in futures.items()}


def test_baseline_is_stable_across_processes_and_hash_seeds(edit_results: dict[str, dict]) -> None:
    runs = [edit_results[f"baseline seed {seed}"] for seed in (0, 4242)]
    runs.append(edit_results["baseline reversed"])
    for name in ("f", "is_even", "is_odd"):
        assert len({run[name]["digest"] for run in runs}) == 1, name
        assert len({json.dumps(run[name]["deps"], sort_keys=True) for run in runs}) == 1, name


@pytest.mark.parametrize(("name", "changes"), [(e[0], e[4]) for e in EDITS])
def test_edit_changes_digest_exactly_when_behaviour_changes(
    edit_results: dict[str, dict], name: str, changes: bool
) -> None:
    before = edit_results["baseline seed 0"]["f"]["digest"]
    after = edit_results[name]["f"]["digest"]
    assert (before != after) is changes


def test_edit_shows_in_the_changed_dependency(edit_results: dict[str, dict]) -> None:
    base = edit_results["baseline seed 0"]["f"]["deps"]
    changed = edit_results["helper g"]["f"]["deps"]
    differing = {s for s in base if base[s][1] != changed[s][1]}
    assert differing == {"pkg.mod_a:g"}
    changed = edit_results["constant of a lambda in a table"]["f"]["deps"]
    assert {s for s in base if base[s][1] != changed[s][1]} == {"pkg.mod_a:TABLE_K"}


def test_closure_lists_every_dependency_with_source(edit_results: dict[str, dict]) -> None:
    deps = edit_results["baseline seed 0"]["f"]["deps"]
    code = {
        "pkg.mod_a:f": "function",
        "pkg.mod_a:g": "function",
        "pkg.mod_b:h": "function",
        "pkg.mod_b:h2": "function",
        "pkg.mod_a:Sub": "class",
        "pkg.mod_a:Base": "class",
        "pkg.mod_a:OPS['double']": "function",
        "pkg.mod_a:OPS['square']": "function",
    }
    constants = [
        "pkg.mod_a:K",
        "pkg.mod_a:NESTED_K",
        "pkg.mod_a:COMP_K",
        "pkg.mod_a:TABLE_K",
        "pkg.mod_a:OPS",
    ]
    for symbol, kind in code.items():
        assert deps[symbol][0] == kind, symbol
        assert deps[symbol][2], f"{symbol} has no source"
    for symbol in constants:
        assert deps[symbol][0] == "constant", symbol
    assert deps["pkg.mod_a:K"][2] == "K = 3"
    assert "def g(x):" in deps["pkg.mod_a:g"][2]
    assert "class Base:" in deps["pkg.mod_a:Base"][2]
    assert deps["pkg.mod_a:OPS['double']"][2] == "lambda x: x * TABLE_K"
    # The logger is recorded by type, not hashed by value.
    assert deps["pkg.mod_a:log"][0] == "object"
    assert deps["pkg.mod_a:log"][1] == blake3.blake3(b"logging.Logger").hexdigest()
    assert deps["python"][0] == "python"
    assert "pkg.mod_a:unrelated" not in deps
    assert "pkg.mod_b:unused_b" not in deps
    for _kind, digest, _ in deps.values():
        assert len(digest) == 64 and set(digest) <= HEX64


def test_mutual_recursion_terminates_with_distinct_roots(edit_results: dict[str, dict]) -> None:
    run = edit_results["baseline seed 0"]
    assert set(run["is_even"]["deps"]) == set(run["is_odd"]["deps"])
    assert run["is_even"]["digest"] != run["is_odd"]["digest"]
    assert run["is_even"]["symbol"] == "pkg.mod_a:is_even"


def test_main_module_functions_with_and_without_source(tmp_path: Path) -> None:
    script = (BASIC / "main_script.py").read_text()
    variants = {
        "same": script,
        "comment": script.replace("# the answer", "# the answer, reworded"),
        "constant": script.replace("SCALE = 3", "SCALE = 4"),
        "body": script.replace("helper(x) + 1", "helper(x) + 2"),
    }
    jobs = {}
    for name, text in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "main_script.py").write_text(text)
        jobs[f"file {name}"] = (["main_script.py"], folder, None)
        if name != "constant":
            # From stdin there is no source: the bytecode is hashed instead.
            jobs[f"stdin {name}"] = (["-"], folder, text)
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = {
            name: pool.submit(_run, args, cwd, random.randrange(1, 2**31), stdin)
            for name, (args, cwd, stdin) in jobs.items()
        }
        out = {name: future.result() for name, future in futures.items()}
    same = out["file same"]
    assert same["symbol"] == "__main__:main_fn"
    assert set(same["deps"]) == {"__main__:main_fn", "__main__:helper", "__main__:SCALE"}
    assert out["file constant"]["digest"] != same["digest"]
    for how in ("file", "stdin"):
        assert out[f"{how} comment"]["digest"] == out[f"{how} same"]["digest"], how
        assert out[f"{how} body"]["digest"] != out[f"{how} same"]["digest"], how


# -- in-process tests on modules written to a temporary directory -------------------------------


@pytest.fixture
def make_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write and import a module under a name unique to the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []
    prefix = f"cdtest_{abs(hash(str(tmp_path))) % 10**8}_"

    def make(name: str, source: str):
        full = prefix + name
        (tmp_path / f"{full}.py").write_text(textwrap.dedent(source).replace("MOD_", prefix))
        importlib.invalidate_caches()
        names.append(full)
        return importlib.import_module(full)

    yield make
    for name in names:
        sys.modules.pop(name, None)


def test_result_shape(make_module) -> None:
    mod = make_module("shape", "def f(x):\n    return x\n")
    info = code_info(mod.f)
    assert isinstance(info, CodeInfo)
    assert info.symbol == f"{mod.__name__}:f"
    assert set(info.deps) == {info.symbol}
    root = info.deps[info.symbol]
    assert isinstance(root, Dependency) and root.kind == "function"
    assert root.source == "def f(x):\n    return x\n"
    assert len(info.digest) == 64 and set(info.digest) <= HEX64


def test_repeated_calls_are_cached_and_cheap(make_module) -> None:
    mod = make_module(
        "cached",
        """
        import logging
        K = 1
        TABLE = [1, 2]
        log = logging.getLogger("x")
        def g(x):
            return x + K
        def f(x):
            log.info("f")
            return g(x) + len(TABLE) + sum(TABLE)
        """,
    )
    first = code_info(mod.f)
    assert code_info(mod.f) is first
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        code_info(mod.f)
    per_call = (time.perf_counter() - start) / n
    assert per_call < 20e-6, f"{per_call * 1e6:.1f} us per cached call"
    # A mutable logger does not invalidate anything.
    mod.log.setLevel(logging.DEBUG)
    mod.log.info("hello")
    assert code_info(mod.f) is first


def test_rebinding_a_global_at_run_time_is_seen(make_module) -> None:
    mod = make_module(
        "rebind",
        """
        K = 1
        TABLE = [1, 2]
        def g(x):
            return x + K
        def f(x):
            return g(x) + sum(TABLE)
        """,
    )
    first = code_info(mod.f).digest
    mod.K = 2  # as when a notebook cell is run again
    second = code_info(mod.f).digest
    assert second != first
    mod.K = 1
    assert code_info(mod.f).digest == first
    mod.TABLE.append(3)  # a mutable constant changed in place
    assert code_info(mod.f).digest != first
    mod.TABLE.pop()
    assert code_info(mod.f).digest == first
    original_g = mod.g
    exec("def g(x):\n    return x - K\n", mod.__dict__)  # a helper redefined
    assert code_info(mod.f).digest != first
    mod.g = original_g
    assert code_info(mod.f).digest == first


def test_replaced_code_of_the_root_is_seen(make_module) -> None:
    mod = make_module("patched", "def f(x):\n    return x + 1\ndef f2(x):\n    return x + 2\n")
    first = code_info(mod.f).digest
    mod.f.__code__ = mod.f2.__code__  # what %autoreload does
    assert code_info(mod.f).digest != first


def test_ignore_global(make_module) -> None:
    mod = make_module(
        "ignored",
        """
        from memostore.code.deps import ignore_global
        VERBOSE = 1
        CACHE = {}
        @ignore_global
        def debug(x):
            return x
        def f(x):
            debug(x)
            CACHE[x] = x
            return x * VERBOSE
        """,
    )
    info = code_info(mod.f)
    assert f"{mod.__name__}:debug" not in info.deps
    assert f"{mod.__name__}:VERBOSE" in info.deps
    ignore_global(f"{mod.__name__}:VERBOSE")
    ignore_global(mod.CACHE)
    ignored = code_info(mod.f)
    assert set(ignored.deps) == {f"{mod.__name__}:f"}
    mod.VERBOSE = 2
    mod.CACHE[1] = 1
    assert code_info(mod.f).digest == ignored.digest


def test_ignore_global_by_bare_name(make_module) -> None:
    mod = make_module("ignored_name", "NOISE_LEVEL_XYZ = 1\ndef f():\n    return NOISE_LEVEL_XYZ\n")
    first = code_info(mod.f).digest
    ignore_global("NOISE_LEVEL_XYZ")
    mod.NOISE_LEVEL_XYZ = 5
    assert f"{mod.__name__}:NOISE_LEVEL_XYZ" not in code_info(mod.f).deps
    assert code_info(mod.f).digest != first


def test_state_and_objects_are_not_in_the_code_digest(make_module) -> None:
    mod = make_module(
        "state",
        """
        import threading
        CALLS = 0
        LOCK = threading.Lock()
        class Writer:
            def write(self, x):
                return x
        WRITER = Writer()
        def bump():
            global CALLS
            CALLS += 1
        def f(x):
            with LOCK:
                WRITER.write(x)
            return x + CALLS
        """,
    )
    info = code_info(mod.f)
    name = mod.__name__
    assert info.deps[f"{name}:CALLS"].kind == "data"  # rebound with ``global``: read per call
    assert info.deps[f"{name}:LOCK"].kind == "object"  # a service
    assert info.deps[f"{name}:WRITER"].kind == "data"  # an instance of the user's class
    assert info.deps[f"{name}:Writer"].kind == "class"  # the object's class is code
    assert [d.symbol for d in info.data_globals] == [f"{name}:CALLS", f"{name}:WRITER"]
    mod.bump()
    mod.WRITER = mod.Writer()
    mod.LOCK.acquire()
    mod.LOCK.release()
    assert code_info(mod.f) is info


def test_closures_defaults_and_partials(make_module) -> None:
    mod = make_module(
        "closures",
        """
        import functools
        def make(k):
            def add(x, scale=2, *, shift=k):
                return x * scale + k + shift
            return add
        add1 = make(1)
        add2 = make(2)
        def f(x):
            return add1(x) + add2(x)
        def base(x, y):
            return x + y
        part = functools.partial(base, 1)
        """,
    )
    assert code_info(mod.add1).digest != code_info(mod.add2).digest
    info = code_info(mod.f)
    symbols = [s for s in info.deps if "make.<locals>.add" in s]
    assert len(symbols) == 2  # two closures of one code, told apart
    p1 = code_info(mod.part)
    assert p1.symbol == f"functools.partial({mod.__name__}:base)"
    assert code_info(functools.partial(mod.base, 2)).digest != p1.digest
    assert f"{mod.__name__}:base" in p1.deps


def test_methods_classes_and_wrapped_functions(make_module) -> None:
    mod = make_module(
        "classes",
        """
        import dataclasses
        import enum
        import functools
        LIMIT = 10
        class Color(enum.Enum):
            RED = 1
            BLUE = 2
        @dataclasses.dataclass
        class Config:
            lr: float = 0.1
            color: Color = Color.RED
        class Model:
            def forward(self, x):
                return self.helper(x)
            def helper(self, x):
                return min(x, LIMIT)
            @staticmethod
            def make():
                return Model()
            @property
            def size(self):
                return LIMIT
        def timed(fn):
            @functools.wraps(fn)
            def wrapper(*a, **k):
                return fn(*a, **k)
            return wrapper
        @timed
        def decorated(x):
            return x + LIMIT
        def uses(x):
            return decorated(x) + Config().lr
        """,
    )
    name = mod.__name__
    method = code_info(mod.Model.forward)
    assert method.symbol == f"{name}:Model.forward"
    assert f"{name}:Model" in method.deps  # a method depends on its class
    assert f"{name}:LIMIT" in method.deps  # through helper, a sibling method
    assert code_info(mod.Model().forward).digest == method.digest  # bound method
    cls = code_info(mod.Model)
    assert cls.deps[f"{name}:Model"].kind == "class"
    uses = code_info(mod.uses)
    assert f"{name}:decorated" in uses.deps  # the user's function inside the wrapper
    assert f"{name}:timed.<locals>.wrapper" in uses.deps
    assert f"{name}:Config" in uses.deps and f"{name}:Color" in uses.deps
    # Enum and dataclass internals are deterministic: same digest when rebuilt.
    again = code_info(mod.Config)
    assert again.digest == code_info(mod.Config).digest


def test_third_party_and_stdlib_are_pinned(make_module) -> None:
    mod = make_module(
        "pinned",
        """
        import json
        import numpy as np
        from collections import OrderedDict
        def f(x):
            return np.asarray(json.loads(x)), OrderedDict()
        """,
    )
    deps = code_info(mod.f).deps
    version = importlib.metadata.version("numpy")
    assert deps["dist:numpy"].digest == blake3.blake3(f"numpy=={version}".encode()).hexdigest()
    assert deps["dist:numpy"].kind == "distribution" and deps["dist:numpy"].source is None
    assert deps["python"].kind == "python"
    assert set(deps) == {f"{mod.__name__}:f", "dist:numpy", "python"}
    import numpy as np

    assert set(code_info(np.asarray).deps) >= {"dist:numpy"}


def test_imports_inside_the_body(make_module) -> None:
    helper = make_module("inner_helper", "SCALE = 2\ndef h(x):\n    return x * SCALE\n")
    mod = make_module(
        "inner_import",
        """
        def f(x):
            import MOD_inner_helper as ih
            from MOD_inner_helper import SCALE
            return ih.h(x) + SCALE
        """,
    )
    deps = code_info(mod.f).deps
    assert f"{helper.__name__}:h" in deps
    assert f"{helper.__name__}:SCALE" in deps


def test_is_user_module(make_module) -> None:
    import json as stdlib_json

    import numpy

    import memostore

    mod = make_module("user", "X = 1\n")
    assert is_user_module(mod)
    assert is_user_module(sys.modules["__main__"])
    assert is_user_module(sys.modules[__name__])
    assert not is_user_module(stdlib_json)
    assert not is_user_module(sys)
    assert not is_user_module(numpy)
    assert not is_user_module(memostore)
    assert not is_user_module("json")


def test_packages_installed_on_an_added_path_are_libraries(tmp_path: Path) -> None:
    # A layered environment (a .pth file adding another venv's site-packages) or
    # `pip install --target DIR` with PYTHONPATH=DIR: DIR holds distribution metadata.
    target = tmp_path / "target"
    (target / "layeredpkg").mkdir(parents=True)
    (target / "layeredpkg" / "__init__.py").write_text("X = 1\n")
    (target / "layeredpkg-1.0.dist-info").mkdir()
    (target / "layeredpkg-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: layeredpkg\nVersion: 1.0\n"
    )
    project = tmp_path / "project"
    (project / "mine").mkdir(parents=True)
    (project / "mine" / "__init__.py").write_text("Y = 1\n")
    script = (
        "import layeredpkg, mine\n"
        "from memostore.code.modules import is_user_module\n"
        "print(is_user_module(layeredpkg), is_user_module(mine))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(project)])}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "True"]


def test_code_info_rejects_non_code() -> None:
    with pytest.raises(TypeError, match="code_info"):
        code_info(3)


# -- building blocks ---------------------------------------------------------------------------


def _reference_chains(code: CodeType) -> set[tuple[str, ...]]:
    """Global attribute chains read with ``dis``, to check the fast scanner against."""
    chains: set[tuple[str, ...]] = set()
    for c in code_bytecode.code_tree(code):
        chain: list[str] | None = None
        for ins in dis.get_instructions(c):
            if ins.opname in ("CACHE", "EXTENDED_ARG"):
                continue
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                if chain:
                    chains.add(tuple(chain))
                chain = [ins.argval]
            elif chain is not None and ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                chain.append(ins.argval)
            elif chain is not None:
                chains.add(tuple(chain))
                chain = None
        if chain:
            chains.add(tuple(chain))
    return chains


@pytest.mark.parametrize("module_name", ["argparse", "json.decoder", "dataclasses", "logging"])
def test_fast_scanner_agrees_with_dis(module_name: str) -> None:
    module = importlib.import_module(module_name)
    code = compile(Path(module.__file__).read_text(), module.__file__, "exec")
    facts_chains: set[tuple[str, ...]] = set()
    for c in code_bytecode.code_tree(code):
        found: dict[tuple[str, ...], None] = {}
        code_bytecode.scan_fast(c, found, set())
        facts_chains.update(found)
    assert facts_chains == _reference_chains(code)


@pytest.mark.parametrize(
    "module_name", ["inspect", "typing", "importlib._bootstrap", "asyncio.base_events"]
)
def test_instruction_decoder_agrees_with_dis(module_name: str) -> None:
    """``scan_dis`` and ``bytecode_digest`` decode ``co_code`` themselves: names match ``dis``."""
    module = importlib.import_module(module_name)
    code = compile(Path(module.__file__).read_text(), module.__file__, "exec")
    checked = 0
    for c in code_bytecode.code_tree(code):
        ours = code_bytecode._instructions(c)
        theirs = [
            i for i in dis.get_instructions(c) if i.opname not in ("NOP", "CACHE", "EXTENDED_ARG")
        ]
        assert [op for op, _ in ours] == [i.opname for i in theirs]
        for (op, argval), ins in zip(ours, theirs, strict=True):
            if isinstance(ins.argval, str) and ins.opcode in code_bytecode._ARG_KINDS:
                assert argval == ins.argval, (c.co_name, op)
                checked += 1
    assert checked > 1000


def test_local_imports_next_to_star_calls_are_scanned(make_module) -> None:
    """``f(**kw)`` compiles to ``LOAD_CONST ()`` on 3.11: not a name to index."""
    helper = make_module("star_helper", "def build(**kw):\n    return kw\n")
    mod = make_module(
        "star_caller",
        """
        def f(kind, **overrides):
            from MOD_star_helper import build
            import MOD_star_helper as sh
            config = dict(n=1, **overrides)
            return build(**config), sh.build(*(), **config)
        """,
    )
    deps = code_info(mod.f).deps
    assert f"{helper.__name__}:build" in deps


def test_bytecode_digest_ignores_lines_and_docstrings() -> None:
    def compiled(src: str) -> CodeType:
        namespace: dict = {}
        exec(compile(textwrap.dedent(src), "<test>", "exec"), namespace)
        return namespace["f"].__code__

    base = compiled("def f(x):\n    y = x + 1\n    return y\n")
    moved = compiled("\n\n\ndef f(x):\n    '''Doc.'''\n\n    y = x + 1  # c\n    return y\n")
    other = compiled("def f(x):\n    y = x + 2\n    return y\n")
    assert code_bytecode.bytecode_digest(base) == code_bytecode.bytecode_digest(moved)
    assert code_bytecode.bytecode_digest(base) != code_bytecode.bytecode_digest(other)


def test_normalised_dump_drops_docstrings_only() -> None:
    import ast

    a = ast.parse('def f():\n    "doc"\n    return 1\n')
    b = ast.parse("def f():\n    return 1\n")
    c = ast.parse('def f():\n    return "doc"\n')
    dump = code_source.normalised_dump
    assert dump(a) == dump(b) != dump(c)


def test_values_hash_by_content_not_order(make_module) -> None:
    mod = make_module(
        "values",
        """
        SET = {"b", "a", "c"}
        D1 = {"x": 1, "y": 2}
        def f():
            return SET, D1
        """,
    )
    first = code_info(mod.f).digest
    mod.D1 = {"y": 2, "x": 1}
    mod.SET = {"c", "a", "b"}
    assert code_info(mod.f).digest == first
    mod.D1 = {"y": 2, "x": 1.0}
    assert code_info(mod.f).digest != first


def test_notebook_cell_source_from_linecache() -> None:
    """IPython puts each cell's text in ``linecache`` under a pseudo file name."""

    def run_cell(text: str, cell: int) -> dict:
        filename = f"<ipython-input-{cell}-cdtest>"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        namespace: dict = {"__name__": "__main__"}
        exec(compile(text, filename, "exec"), namespace)
        return namespace

    cell = "def cell_fn(x):\n    return x * 2\n"
    first = code_info(run_cell(cell, 1)["cell_fn"])
    assert first.deps[first.symbol].source == cell
    again = code_info(run_cell("\n# re-run with a comment\n" + cell, 2)["cell_fn"])
    changed = code_info(run_cell(cell.replace("2", "3"), 3)["cell_fn"])
    assert again.digest == first.digest != changed.digest


def test_lambdas_sharing_a_line_get_their_own_source(make_module) -> None:
    mod = make_module("lambdas", "PAIR = (lambda x: x + 1, lambda x: x - 1)\n")
    plus, minus = (code_info(f) for f in mod.PAIR)
    assert plus.deps[plus.symbol].source == "lambda x: x + 1"
    assert minus.deps[minus.symbol].source == "lambda x: x - 1"
    assert plus.digest != minus.digest


def test_awkward_constants(make_module) -> None:
    mod = make_module(
        "awkward",
        """
        from collections import OrderedDict
        CYCLE = []
        CYCLE.append(CYCLE)
        BIG = list(range(100_000))
        ORDER = OrderedDict([("a", 1), ("b", 2)])
        def f():
            return CYCLE, BIG, ORDER
        """,
    )
    first = code_info(mod.f)
    assert code_info(mod.f) is first  # the big list is not compared on every call
    mod.ORDER = OrderedDict([("b", 2), ("a", 1)])
    assert code_info(mod.f).digest != first.digest  # an OrderedDict's order counts
    mod.BIG = list(range(100_001))
    assert code_info(mod.f).digest != first.digest


def test_runtime_changes_of_type_and_class_are_seen(make_module) -> None:
    mod = make_module(
        "runtime",
        """
        K = 1
        class Model:
            def forward(self, x):
                return x * K
        def f(x):
            return Model().forward(x)
        """,
    )
    first = code_info(mod.f).digest
    mod.K = 1.0  # equal, but not the same constant
    assert code_info(mod.f).digest != first
    mod.K = 1
    assert code_info(mod.f).digest == first
    original = mod.Model.forward
    mod.Model.forward = lambda self, x: x  # monkeypatched
    assert code_info(mod.f).digest != first
    mod.Model.forward = original
    assert code_info(mod.f).digest == first


def test_memoised_helpers_keep_their_symbol(make_module) -> None:
    mod = make_module(
        "memoised",
        """
        import functools
        from memostore import memo
        @memo
        def g(x):
            return x + 1
        @functools.lru_cache
        def c(x):
            return x * 2
        def f(x):
            return g(x) + c(x)
        """,
    )
    info = code_info(mod.f)
    assert info.deps[f"{mod.__name__}:g"].kind == "function"
    assert info.deps[f"{mod.__name__}:c"].kind == "function"
    assert "dist:memostore" in info.deps
    assert code_info(mod.g).symbol == f"{mod.__name__}:g"  # unwrapped


def test_import_of_a_module_not_imported_yet(make_module, tmp_path: Path) -> None:
    prefix = make_module("probe", "").__name__.removesuffix("probe")
    (tmp_path / f"{prefix}later.py").write_text("def h(x):\n    return x\n")
    mod = make_module("lazy", "def f(x):\n    import MOD_later\n    return MOD_later.h(x)\n")
    first = code_info(mod.f)
    assert first.deps[f"{prefix}later"].kind == "module"
    mod.f(1)  # imports it
    second = code_info(mod.f)
    assert f"{prefix}later:h" in second.deps
    sys.modules.pop(f"{prefix}later", None)


def test_source_edited_after_import_is_not_trusted(make_module) -> None:
    mod = make_module("edited", "def f(x):\n    return x + 1\n")
    path = Path(mod.__file__)
    path.write_text(path.read_text().replace("x + 1", "x + 2"))
    linecache.checkcache(str(path))
    # The running code is ``x + 1`` and the file says ``x + 2``: the bytecode is hashed.
    info = code_info(mod.f)
    assert info.deps[info.symbol].source is None
    cls_mod = make_module("edited_cls", "class C:\n    def m(self):\n        return 1\n")
    path = Path(cls_mod.__file__)
    path.write_text(path.read_text().replace("return 1", "return 2"))
    linecache.checkcache(str(path))
    info = code_info(cls_mod.C)
    assert info.deps[info.symbol].source is None
    assert f"{cls_mod.__name__}:C.m" in info.deps  # its method, by bytecode


def test_this_module_is_user_code() -> None:
    info = code_info(test_this_module_is_user_code)
    assert info.symbol == f"{__name__}:test_this_module_is_user_code"


IMPORT_ORDER = """
import sys
import torch
from memostore import memo

@memo
def shard(x):
    from torch.distributed.fsdp import fully_shard  # a decorated function of torch's
    return x

before = shard.key(1)
import torch.distributed.checkpoint  # imports torch.distributed.fsdp, binding fully_shard

print(before == shard.key(1), "torch.distributed.fsdp" in sys.modules)
"""


def test_an_installed_package_counts_by_its_version_whatever_else_was_imported(
    tmp_path: Path,
) -> None:
    script = tmp_path / "order.py"
    script.write_text(IMPORT_ORDER)
    env = {**os.environ, "MEMOSTORE_DIR": str(tmp_path / "store")}
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.stdout.split() == ["True", "True"], proc.stderr


def test_a_project_holding_a_dist_info_stays_user_code(tmp_path: Path) -> None:
    """A directory on sys.path with ``*.dist-info`` counts as installed packages,
    except the user's own: their code must never be pinned by a version."""
    project = tmp_path / "project"
    (project / "stray-1.0.dist-info").mkdir(parents=True)
    (project / "helpers.py").write_text("def f():\n    return 1\n")
    vendored = tmp_path / "vendor"
    (vendored / "lib-2.0.dist-info").mkdir(parents=True)
    (vendored / "lib.py").write_text("def g():\n    return 2\n")
    (project / "main.py").write_text(
        "import sys\n"
        f"sys.path.append({str(vendored)!r})\n"
        "import helpers, lib\n"
        "from memostore.code.deps import is_user_module\n"
        "print(is_user_module(helpers), is_user_module(lib))\n"
    )
    out = subprocess.run(
        [sys.executable, "main.py"], cwd=project, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]
