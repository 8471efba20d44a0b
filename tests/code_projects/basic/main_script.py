"""A script whose function lives in ``__main__``."""

import json

from memostore.code.deps import code_info

SCALE = 3


def helper(x):
    return x * SCALE


def main_fn(x):
    # the answer
    return helper(x) + 1


if __name__ == "__main__":
    info = code_info(main_fn)
    print(json.dumps({"symbol": info.symbol, "digest": info.digest, "deps": sorted(info.deps)}))
