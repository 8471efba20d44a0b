"""Code stored by value is used only under the digest it was stored for.

An evaluation maps code digests to payloads, and whoever writes the evaluation
writes that map. A payload this machine wrote (so trusted) put under another
code's digest must be refused, before it is unpickled and before it is cached:
otherwise the user's own later hits would get the other code.
"""

from __future__ import annotations

import textwrap

from memostore import Store

from .labkit import Lab, code, lab, plant, warnings_in

__all__ = ["lab"]  # the fixture, imported

LAMBDAS = """
import sys

from memostore import memo

scale = lambda k: lambda x: k * x  # noqa: E731
shift = lambda k: lambda x: x + k  # noqa: E731


@memo
def pick(name):
    print("COMPUTED", name)
    return {"scale": scale, "shift": shift}.get(name, scale)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print("RESULT", name, pick(name)(2)(5))
"""


def _payload(store: Store, ref: str) -> tuple[str, str]:
    """(code digest, payload blob) of the one by-value function the call of *ref* stored."""
    body = store.evaluation(store.refs.read(ref)).body
    ((digest, blob),) = body["payloads"].items()
    return digest, blob


def test_a_payload_under_another_codes_digest_is_refused_and_never_cached(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(LAMBDAS))
    first = lab.run(lab.victim_store, "scale", "shift", "other")
    assert "RESULT scale 10" in first.stdout and "RESULT shift 7" in first.stdout
    store = Store(lab.victim_store)
    refs = sorted(name for name, _ in store.refs.iter("evals/"))
    scale_digest, _ = _payload(store, _ref_of(store, refs, "scale"))
    _, shift_blob = _payload(store, _ref_of(store, refs, "shift"))
    # The call pick("other") now "returns scale", backed by shift's payload.
    node = code("__main__", "<lambda>", digest=scale_digest, byvalue=True)
    plant(
        lab.victim_store,
        node,
        ref=_ref_of(store, refs, "other"),
        payload_ids={scale_digest: shift_blob},
    )
    proc = lab.run(lab.victim_store, "other", "scale")
    assert "COMPUTED other" in proc.stdout, proc.stdout
    assert "RESULT other 10" in proc.stdout
    # The user's own hit, after the planted one in the same process: its own code.
    assert "COMPUTED scale" not in proc.stdout and "RESULT scale 10" in proc.stdout
    (line,) = warnings_in(proc.stderr)
    assert "<lambda>" in line and "not used" in line


def _ref_of(store: Store, refs: list[str], name: str) -> str:
    """The ref of pick(*name*)."""
    for ref in refs:
        body = store.evaluation(store.refs.read(ref)).body
        if (body.get("hparams") or {}).get("name") == name:
            return ref
    raise AssertionError(f"no stored call pick({name!r}) among {refs}")
