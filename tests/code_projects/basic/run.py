"""Print the code digests of the fixture project as JSON."""

import json
import sys

from pkg import mod_a

from memostore.code.deps import code_info

assert mod_a.f(2) == mod_a.f(2)
out = {}
names = ["f", "is_even", "is_odd"]
if sys.argv[1:] == ["reverse"]:  # the order of first calls must not matter
    names.reverse()
for name in names:
    info = code_info(getattr(mod_a, name))
    out[name] = {
        "symbol": info.symbol,
        "digest": info.digest,
        "deps": {s: [d.kind, d.digest, d.source] for s, d in info.deps.items()},
    }
print(json.dumps(out))
