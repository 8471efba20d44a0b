"""@memo for plain Python values, through the public surface."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from conftest import run_script, write_script

from memostore import MemostoreError, MemostoreWarning, Store, ignore_global, memo


@dataclasses.dataclass
class Point:
    x: int
    tags: list


class Calls:
    """Counts body runs. Ignored by identity (``ignore_global``) so that the closure
    holding it does not key by it: recording a call must not change the key."""

    def __init__(self) -> None:
        self.args: list = []
        ignore_global(self)

    def append(self, value) -> None:
        self.args.append(value)

    def __eq__(self, other) -> bool:
        return self.args == other


class Plain:
    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return f"Plain({self.value!r})"

    def __eq__(self, other):
        return isinstance(other, Plain) and other.value == self.value


def test_hit_returns_equal_fresh_objects(store_dir: Path) -> None:
    calls = Calls()

    @memo
    def build(n: int):
        calls.append(n)
        return {"list": list(range(n)), "point": Point(n, ["a"]), "arr": np.arange(n)}

    build(3)
    second = build(3)
    third = build(3)
    assert calls == [3]
    assert second["list"] == [0, 1, 2] and second["point"] == Point(3, ["a"])
    np.testing.assert_array_equal(second["arr"], np.arange(3))
    second["list"].append(99)
    second["point"].tags.append("mutated")
    assert third["list"] == [0, 1, 2] and third["point"].tags == ["a"]
    assert second is not third


def test_miss_returns_the_functions_own_object(store_dir: Path) -> None:
    sentinel = {"a": [1]}

    @memo
    def same():
        return sentinel

    assert same() is sentinel


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**70),
        1.5,
        float("inf"),
        "text",
        "ünïcode",
        b"\x00\xff",
        b"x" * 100_000,
        bytearray(b"ba"),
        [1, [2, (3,)]],
        (1, "a"),
        {"b": 1, "a": {2, 3}},
        {1, 2, 3},
        frozenset({"x"}),
        OrderedDict([("z", 1), ("a", 2)]),
        3 + 4j,
        range(3),
        Point(1, [2]),
        Plain([1, 2]),
        np.array([[1.5, 2.5]], dtype=np.float32),
        np.zeros((0, 3)),
        np.float64(2.5),
    ],
    ids=repr,
)
def test_plain_values_round_trip(store_dir: Path, value) -> None:
    @memo
    def give(v):
        return v

    give(value)
    restored = give(value)
    if isinstance(value, np.ndarray):
        assert restored.dtype == value.dtype
        np.testing.assert_array_equal(restored, value)
    else:
        assert type(restored) is type(value)
        assert restored == value


def test_nan_round_trips(store_dir: Path) -> None:
    @memo
    def give():
        return [float("nan"), float("-inf"), -0.0]

    give()
    nan, ninf, nzero = give()
    assert nan != nan and ninf == float("-inf") and str(nzero) == "-0.0"


def test_shared_and_recursive_references_survive(store_dir: Path) -> None:
    @memo
    def shared():
        inner = [1]
        loop: list = []
        loop.append(loop)
        return [inner, inner, {"k": inner}, loop]

    shared()
    a, b, c, loop = shared()
    assert a is b is c["k"]
    assert loop[0] is loop


def test_keys_are_canonical(store_dir: Path) -> None:
    @memo
    def f(x):
        return x

    assert f.key({"a": 1, "b": 2}) == f.key({"b": 2, "a": 1})
    assert f.key({1, 2, 3}) == f.key({3, 2, 1})
    assert OrderedDict([("a", 1), ("b", 2)]) == OrderedDict([("a", 1), ("b", 2)])
    assert f.key(OrderedDict([("a", 1), ("b", 2)])) != f.key(OrderedDict([("b", 2), ("a", 1)]))
    keys = {f.key(v) for v in (1, 1.0, True, "1", [1], (1,), b"1")}
    assert len(keys) == 7


def test_defaults_are_applied_before_keying(store_dir: Path) -> None:
    @memo
    def f(a, b=2, *, c=3):
        return a + b + c

    assert f.key(1) == f.key(1, 2) == f.key(a=1, b=2, c=3)
    assert f.key(1) != f.key(1, 3)


def test_ignore_and_version(store_dir: Path) -> None:
    @memo(ignore=("verbose",))
    def f(x, verbose=False):
        return x

    assert f.key(1, verbose=True) == f.key(1, verbose=False)

    def g(x):
        return x

    assert memo(version="1")(g).key(1) != memo(version="2")(g).key(1)
    with pytest.raises(MemostoreError, match="does not take"):
        memo(ignore=("nope",))(g)


def test_wrapper_keeps_metadata(store_dir: Path) -> None:
    def documented(x):
        """Doc."""
        return x

    wrapped = memo()(documented)
    assert wrapped.__wrapped__ is documented
    assert wrapped.__name__ == "documented"
    assert wrapped.__doc__ == "Doc."


def test_lookup_does_not_run(store_dir: Path) -> None:
    calls = Calls()

    @memo
    def f(x):
        calls.append(x)
        return x * 2

    assert f.lookup(2) is None
    assert calls == []
    f(2)
    evaluation = f.lookup(2)
    assert evaluation is not None and evaluation.status == "ok"
    assert evaluation.load_result() == 4
    assert evaluation.load_args() == {"x": 2}
    assert calls == [2]


def test_exception_propagates_and_is_recorded(store_dir: Path) -> None:
    calls = Calls()

    class Boom(ValueError):
        pass

    @memo
    def fails(x):
        calls.append(x)
        raise Boom("bad input")

    with pytest.raises(Boom, match="bad input"):
        fails(1)
    with pytest.raises(Boom):
        fails(1)
    assert calls == [1, 1]  # nothing was stored as a result
    store = Store.default()
    failed = list(store.refs.iter("failed/"))
    assert len(failed) == 1
    body = store.evaluation(failed[0][1]).body
    assert body["status"] == "error"
    assert body["error"]["message"] == "bad input"
    assert "Boom" in body["error"]["traceback"]
    assert list(store.refs.iter("evals/")) == []


def test_unstorable_result_is_returned_with_one_warning(store_dir: Path) -> None:
    import threading

    lock = threading.Lock()

    @memo
    def f():
        return {"lock": lock}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = f()
    assert result["lock"] is lock
    ours = [w for w in caught if issubclass(w.category, MemostoreWarning)]
    assert len(ours) == 1
    assert "lock" in str(ours[0].message)
    store = Store.default()
    assert list(store.refs.iter("evals/")) == []
    assert list((store_dir / "tmp").iterdir()) == []


def test_unhashable_argument_names_the_fix(store_dir: Path) -> None:
    import threading

    @memo
    def f(lock):
        return 1

    with pytest.raises(MemostoreError, match=r"argument 'lock'.*ignore"):
        f(threading.Lock())


def test_store_default_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMOSTORE_DIR", raising=False)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "src" / "deep").mkdir(parents=True)
    monkeypatch.chdir(project / "src" / "deep")
    store = Store.default()
    assert store.root == project / ".memostore"  # created at the git root
    monkeypatch.chdir(project / "src")
    assert Store.default().root == project / ".memostore"  # found upward
    monkeypatch.setenv("MEMOSTORE_DIR", str(tmp_path / "elsewhere"))
    assert Store.default().root == tmp_path / "elsewhere"


def test_calls_follow_memostore_dir_the_cwd_and_a_deleted_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls()

    @memo
    def double(x):
        calls.append(x)
        return 2 * x

    monkeypatch.setenv("MEMOSTORE_DIR", str(tmp_path / "a"))
    assert double(1) == double(1) == 2 and calls == [1]
    monkeypatch.setenv("MEMOSTORE_DIR", str(tmp_path / "b"))  # another store: computed there
    assert double(1) == double(1) == 2 and calls == [1, 1]
    # A relative $MEMOSTORE_DIR names a store in each working directory.
    monkeypatch.setenv("MEMOSTORE_DIR", "rel")
    for directory in ("c1", "c2"):
        (tmp_path / directory).mkdir()
        monkeypatch.chdir(tmp_path / directory)
        assert double(1) == double(1) == 2
    assert calls == [1] * 4 and (tmp_path / "c2" / "rel" / "FORMAT").is_file()
    # A store deleted under a running program is created again, and stores again.
    shutil.rmtree(tmp_path / "c2" / "rel")
    assert double(1) == double(1) == 2 and calls == [1] * 5
    assert (tmp_path / "c2" / "rel" / "FORMAT").is_file()
    monkeypatch.setenv("MEMOSTORE_DIR", str(tmp_path / "a"))  # the first store still serves
    assert double(1) == 2 and calls == [1] * 5


def test_in_memory_store(tmp_path: Path) -> None:
    store = Store.in_memory()
    calls = Calls()

    @memo(store=store)
    def f(x):
        calls.append(x)
        return [x]

    assert f(1) == [1] and f(1) == [1]
    assert calls == [1]


def test_methods_can_be_memoised(store_dir: Path) -> None:
    calls = Calls()

    class Model:
        def __init__(self, k):
            self.k = k

        @memo
        def predict(self, x):
            calls.append(x)
            return self.k * x

    assert Model(2).predict(3) == 6
    assert Model(2).predict(3) == 6
    assert Model(3).predict(3) == 9
    assert calls == [3, 3]


def test_evaluation_record_fields(store_dir: Path) -> None:
    @memo
    def f(lr: float, name: str, data: list):
        return len(data)

    f(0.1, "run", [1, 2, 3])
    evaluation = f.lookup(0.1, "run", [1, 2, 3])
    body = evaluation.doc.body
    assert body["function"].endswith(":test_evaluation_record_fields.<locals>.f")
    assert body["hparams"] == {"lr": 0.1, "name": "run"}
    assert body["args_summary"]["data"] == "list(len=3)"
    prov = body["provenance"]
    assert prov["python"] and prov["host"] and "packages" in prov
    assert set(prov["git"]) == {"commit", "branch", "dirty", "root"}
    assert body["duration_s"] >= 0 and body["started"] > 0


HIT_SCRIPT = """
import os, sys
from memostore import memo

@memo
def expensive(n, scale=2.0):
    with open(os.environ["COUNTER"], "a") as f:
        f.write("ran\\n")
    return {"values": [i * scale for i in range(n)], "n": n}

print(expensive(int(sys.argv[1]))["n"])
"""


def test_second_process_hits_without_running(tmp_path: Path, store_dir: Path) -> None:
    script = write_script(tmp_path, "job.py", HIT_SCRIPT)
    counter = tmp_path / "counter"
    env = {"COUNTER": str(counter)}
    assert run_script(script, "5", env=env).stdout.strip() == "5"
    assert run_script(script, "5", env=env).stdout.strip() == "5"
    assert counter.read_text().count("ran") == 1
    run_script(script, "6", env=env)
    assert counter.read_text().count("ran") == 2


def test_keys_stable_across_hash_seeds(tmp_path: Path, store_dir: Path) -> None:
    script = write_script(
        tmp_path,
        "keys.py",
        """
        from memostore import memo

        @memo
        def f(x):
            return x

        print(f.key({"b": {3, 1, 2}, "a": frozenset({"x", "y"}), 1: [1.0, True]}))
        """,
    )
    keys = {
        run_script(script, env={"PYTHONHASHSEED": seed}).stdout.strip()
        for seed in ("0", "1", "12345")
    }
    assert len(keys) == 1


def square(x):
    with open(os.environ["COUNTER"], "a") as f:
        f.write(f"{os.getpid()}:{x}\n")
    return {"x": x, "sq": x * x, "pad": b"\x01" * 2048}


def _hammer(store: str, worker: int, counter: str) -> None:
    os.environ["MEMOSTORE_DIR"] = store
    os.environ["COUNTER"] = counter
    memo_square = memo(square)
    for i in range(20):
        key = (i + worker * 3) % 12
        assert memo_square(key)["sq"] == key * key


def test_concurrent_processes_share_one_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    counter = tmp_path / "counter"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(store), w, str(counter))) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    # afterwards every call hits
    before = counter.read_text().count("\n")
    assert before >= 12
    proc = ctx.Process(target=_hammer, args=(str(store), 1, str(counter)))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert counter.read_text().count("\n") == before
    assert not list(store.rglob("*.lock"))
    assert list((store / "tmp").iterdir()) == []


def test_argument_binding_matches_python(store_dir: Path) -> None:
    @memo
    def f(a, b=2):
        return a + b

    assert f.key(1) == f.key(1, 2) == f.key(a=1) == f.key(b=2, a=1)
    assert f.key(1) != f.key(2)
    with pytest.raises(TypeError):
        f.key()
    with pytest.raises(TypeError):
        f.key(1, 2, 3)
    with pytest.raises(TypeError):
        f.key(1, a=1)
    with pytest.raises(TypeError):
        f.key(1, c=3)

    @memo
    def g(*items, **options):
        return items, options

    assert g.key(1, 2, x=1) == g.key(1, 2, x=1) != g.key(1, 2)


def test_registered_immutable_objects_are_hashed_once(store_dir: Path) -> None:
    from memostore import register_immutable
    from memostore.values.hashcache import digest_cache

    @register_immutable
    class Frozen:
        def __init__(self, payload):
            self.payload = payload

        def __eq__(self, other):
            return isinstance(other, Frozen) and other.payload == self.payload

    calls = Calls()

    @memo
    def consume(data):
        calls.append(1)
        return data.payload[:3]

    frozen = Frozen(list(range(1000)))
    assert consume(frozen) == [0, 1, 2]
    assert digest_cache.get(frozen, ("immutable",)) is not None
    assert consume(frozen) == [0, 1, 2]
    assert consume(Frozen(list(range(1000)))) == [0, 1, 2]  # equal content, same key
    assert calls == [1]
    result = consume.lookup(frozen)
    assert result is not None and result.load_args()["data"] == frozen


def test_a_lone_surrogate_is_refused_with_the_fix_and_a_result_holding_one_returned(
    store_dir: Path,
) -> None:
    runs: list[str] = ignore_global([])

    @memo
    def echo(text: str) -> str:
        runs.append(text)
        return text

    with pytest.raises(MemostoreError, match=r"lone surrogate.*pass valid text"):
        echo("a\ud800b")
    assert runs == []  # refused before the body ran

    @memo
    def broken(n: int) -> str:
        return "x\udc80" * n

    with pytest.warns(MemostoreWarning, match="lone surrogate"):
        assert broken(2) == "x\udc80x\udc80"  # not stored, still returned


LINEAGE = """
import sys
import numpy as np
from memostore import memo

@memo
def as_dict(n: int):
    return {"w": np.arange(float(n)), "b": np.zeros(2)}

@memo
def as_list(n: int):
    return [np.arange(float(n)), np.zeros(2)]

@memo
def as_tuple(n: int):
    return np.arange(float(n)), np.zeros(2)

@memo
def nested(n: int):
    return {"model": {"layer": np.arange(float(n))}}

@memo
def use(x, source: str, session: str) -> int:
    return 1

use(as_dict(3)["w"], "dict", sys.argv[1])
use(as_list(3)[0], "list", sys.argv[1])
use(as_tuple(3)[1], "tuple", sys.argv[1])
use(nested(3)["model"]["layer"], "nested", sys.argv[1])
"""


def test_lineage_keeps_the_pieces_of_a_result_restored_by_a_hit(
    tmp_path: Path, store_dir: Path
) -> None:
    from memostore.inspect.inspection import log_records

    script = write_script(tmp_path, "lineage.py", LINEAGE)
    env = {"MEMOSTORE_DIR": str(store_dir)}
    run_script(script, "computed", env=env)
    run_script(script, "restored", env=env)  # the producers are hits now
    records, _ = log_records(Store(store_dir, create=False))
    producers = {
        r["function"].split(":")[1]: r["id"] for r in records if "use" not in r["function"]
    }
    sources = {"dict": "as_dict", "list": "as_list", "tuple": "as_tuple", "nested": "nested"}
    uses = [r for r in records if r["function"].endswith(":use")]
    assert len(uses) == 8 and len(producers) == 4
    for record in uses:
        expected = producers[sources[record["args"]["source"]]]
        assert record["parents"] == [expected], (record["args"], record["parents"])
