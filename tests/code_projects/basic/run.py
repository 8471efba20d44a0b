"""Print the code digests of the fixture project as JSON."""

import json

from memostore.code_deps import code_info

from pkg import mod_a

assert mod_a.f(2) == mod_a.f(2)
out = {}
for name in ("f", "is_even", "is_odd"):
    info = code_info(getattr(mod_a, name))
    out[name] = {
        "symbol": info.symbol,
        "digest": info.digest,
        "deps": {s: [d.kind, d.digest, d.source] for s, d in info.deps.items()},
    }
print(json.dumps(out))
