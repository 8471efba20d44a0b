"""Time ``code_info`` on a generated project of 50 modules and about 5,000 lines.

Run: ``python benchmarks/bench_code_deps.py [--modules 50] [--runs 5]``.

Each run is a fresh interpreter (the caches are per process), which imports
the project and then times the first ``code_info`` of a function whose
closure reaches every module, and the median of many repeated calls. The
script prints the median over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import result  # noqa: E402

MODULE = '''\
"""Generated module {i}."""

import math

{imports}

SCALE_{i} = {i}
OFFSET_{i} = {i}.5
NAMES_{i} = ("a{i}", "b{i}", "c{i}")
TABLE_{i} = {{"add": lambda x: x + SCALE_{i}, "mul": lambda x: x * SCALE_{i}}}


class Base{i}:
    """A base class."""

    factor = {i}

    def base_method(self, x):
        total = 0
        for k in range(3):
            total += k * self.factor
        return total + x


class Model{i}(Base{i}):
    """A subclass with a few methods."""

    def __init__(self, width=4):
        self.width = width

    def forward(self, x):
        y = self.base_method(x)
        return self.post(y)

    def post(self, y):
        return [v * SCALE_{i} for v in range(self.width)] + [y]

    @property
    def size(self):
        return self.width * OFFSET_{i}


{helpers}

def entry_{i}(x):
    """The module's entry point."""
    model = Model{i}()
    out = model.forward(x)
    values = [helper_{last}(v) for v in range(3)]
    return {call_next} + sum(values) + len(out) + TABLE_{i}["add"](x) + {call_far}
'''

HELPER = '''\
def helper_{k}(x):
    """Helper {k}."""
    if x > {k}:
        x = x - SCALE_{i}
    else:
        x = x + OFFSET_{i}
    result = math.floor(x) + len(NAMES_{i})
    for name in NAMES_{i}:
        result += len(name)
    return {prev}result

'''


def generate(root: Path, modules: int, helpers: int = 5) -> int:
    package = root / "benchpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    lines = 0
    for i in range(modules):
        parts = []
        for k in range(helpers):
            prev = f"helper_{k - 1}(result) + " if k else ""
            parts.append(HELPER.format(i=i, k=k, prev=prev))
        # Every module imports the next one with ``import ... as`` and a helper
        # of a later one with ``from ... import``, so the closure of m0 holds all.
        imports, call_next, call_far = [], "0", "0"
        if i + 1 < modules:
            imports.append(f"import benchpkg.m{i + 1} as nxt")
            call_next = f"nxt.entry_{i + 1}(x)"
        if i + 7 < modules:
            imports.append(f"from .m{i + 7} import helper_0 as far_helper")
            call_far = "far_helper(x)"
        text = MODULE.format(
            i=i,
            imports="\n".join(imports),
            last=helpers - 1,
            helpers="".join(parts),
            call_next=call_next,
            call_far=call_far,
        )
        (package / f"m{i}.py").write_text(text)
        lines += text.count("\n")
    return lines


CHILD = """
import json, statistics, time
import benchpkg.m0
{imports}
from memostore.code.deps import code_info
start, cpu = time.perf_counter(), time.process_time()
info = code_info(benchpkg.m0.entry_0)
first, first_cpu = time.perf_counter() - start, time.process_time() - cpu
repeats = []
for _ in range(200):
    start = time.perf_counter()
    for _ in range(50):
        code_info(benchpkg.m0.entry_0)
    repeats.append((time.perf_counter() - start) / 50)
print(json.dumps({{"first": first, "first_cpu": first_cpu, "repeat": statistics.median(repeats),
                  "deps": len(info.deps)}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lines = generate(root, args.modules)
        imports = "\n".join(f"import benchpkg.m{i}" for i in range(args.modules))
        script = textwrap.dedent(CHILD.format(imports=imports))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(root)]))
        results = []
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
            )
            results.append(json.loads(out.stdout))
    first = statistics.median(r["first"] for r in results)
    first_cpu = statistics.median(r["first_cpu"] for r in results)
    repeat = statistics.median(r["repeat"] for r in results)
    print(f"project: {args.modules} modules, {lines} lines; closure: {results[0]['deps']} deps")
    print(
        f"first code_info:    {first * 1e3:8.1f} ms wall, {first_cpu * 1e3:.1f} ms CPU"
        f"  (median of {args.runs} processes)"
    )
    print(f"repeated code_info: {repeat * 1e6:8.2f} us")
    project = f"{args.modules} modules, {lines} lines"
    result(
        "keys.code_digest_first",
        f"Code digest, first use in a process ({project})",
        ours=first * 1e3,
        unit="ms",
        kind="below",
        limit=300,
        note=f"median of {args.runs} processes; CPU {first_cpu * 1e3:.0f} ms",
    )
    result(
        "keys.code_digest_repeat",
        f"Code digest, repeated in the same process ({project})",
        ours=repeat * 1e3,
        unit="ms",
        kind="below",
        limit=1,
        note="'near zero' read as under 1 ms",
    )


if __name__ == "__main__":
    main()
