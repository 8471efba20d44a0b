"""Digest-pinned references to functions and classes inside stored values.

A function or class inside a value is stored as its module and qualified name
plus, for the user's own code, the digest of its dependency closure. Restoring
checks that digest against today's code: a mismatch raises :class:`StaleCode`,
which turns a memo hit into a recompute, never a stale answer.

Code with no importable name (a class made inside a function, a lambda, a
class in ``__main__``) is also stored *by value* with cloudpickle, as a payload
blob kept beside the value (in the evaluation), not inside it: pickles of
dynamic classes carry random ids, and digests must not depend on them.

Restoring is an allowlist (``memostore/trust/``): a reference by name is
followed only to the user's own code or to a registered library
constructor, and a payload is unpickled only when this machine wrote it or
it came from a trusted remote, and used only if what it loads hashes to the
digest the value names (the evaluation's map from digests to payloads is
whoever wrote the evaluation's claim).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import types
import weakref
from typing import TYPE_CHECKING, Any

from ..code.modules import names_of as module_and_qualname
from ..errors import DecodeError, EncodeError, MalformedObject, StaleCode
from ..odb.objects import canonical_json
from ..trust import gate
from ..trust.errors import refuse
from ..trust.state import vouch_loaded

if TYPE_CHECKING:
    from .codec_api import DecodeContext, EncodeContext

_LOCALS = "<locals>"

# (module, qualname, code digest) -> cloudpickle bytes, and -> the object restored by
# value. The digest of the code's closure pins its behaviour, the names its identity.
_payload_bytes: dict[tuple[str, str, str], bytes] = {}
_restored_by_value: dict[tuple[str, str, str], Any] = {}
# Code restored from a payload -> the digest it was stored under. Its source is
# gone (cloudpickle rebuilds the code object), so hashing it again would give
# another digest, and a hit would leave the caller unable to hit the next call
# (a scheduler's lambda, an optimizer's closure). It is the stored code exactly.
_pinned: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def names_of(obj: Any) -> tuple[str, str]:
    """(module, qualname) a function or class is stored under; EncodeError if it has none."""
    try:
        return module_and_qualname(obj)
    except ValueError:
        raise EncodeError(f"cannot name {obj!r}; give it a __qualname__") from None


def resolve(module: str, qualname: str) -> Any:
    """Import *module* and follow *qualname*; raise LookupError when absent.

    For live objects (encoding, ``memostore diff``); restoring a stored
    reference goes through :func:`decode_code_ref` and the trust gate instead.
    """
    if _LOCALS in qualname.split("."):
        raise LookupError(f"{module}:{qualname} is local to a function")
    mod = sys.modules.get(module)
    if mod is None:
        try:
            mod = importlib.import_module(module)
        except Exception as exc:
            raise LookupError(f"cannot import {module}: {exc}") from exc
    obj: Any = mod
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(f"{module} has no {qualname}") from None
    return obj


def _is_user(module: str) -> bool:
    from ..code.deps import is_user_module

    if module == "__main__":
        return True
    mod = sys.modules.get(module)
    return mod is not None and is_user_module(mod)


def code_digest(obj: Any) -> str:
    """The digest of *obj*'s dependency closure today (what a code node pins)."""
    from ..code.deps import code_info

    try:
        pinned = _pinned.get(obj)
    except TypeError:  # neither weakly referable nor hashable: never pinned
        pinned = None
    return pinned if pinned is not None else code_info(obj).digest


# A payload starts with what it is the code of, so that restoring checks it against
# the code node that names it before unpickling anything (docs/format.md).
PAYLOAD_MAGIC = b"memostore-code:1\n"


def _payload_head(module: str, qualname: str, digest: str, outer: Any) -> bytes:
    head = {"digest": digest, "module": module, "qualname": qualname, "outer": outer}
    return PAYLOAD_MAGIC + canonical_json(head) + b"\n"


def _pickle(obj: Any, module: str, qualname: str, digest: str, outer: Any) -> bytes:
    key = (module, qualname, digest)
    data = _payload_bytes.get(key)
    if data is None:
        import cloudpickle

        try:
            body = cloudpickle.dumps(obj, protocol=4)
        except Exception as exc:
            raise EncodeError(f"cannot store {obj!r} by value: {exc}") from exc
        data = _payload_head(module, qualname, digest, outer) + body
        with _lock:
            _payload_bytes[key] = data
    return data


def encode_code_ref(obj: Any, enc: EncodeContext) -> dict[str, Any]:
    module, qualname = names_of(obj)
    try:
        importable = resolve(module, qualname) is obj
    except LookupError:
        importable = False
    user = _is_user(module)
    node: dict[str, Any] = {"$": "code", "module": module, "qualname": qualname}
    if importable and module != "__main__":
        if user:
            node["digest"] = code_digest(obj)
        return node
    digest = code_digest(obj)
    node["digest"] = digest
    node["byvalue"] = True
    outer = _outer_pin(module, qualname)
    if outer is not None:
        node["outer"] = outer
    if digest not in enc.payloads:
        data = _pickle(obj, module, qualname, digest, outer)
        enc.payloads[digest] = enc.sink.put_blob(lambda: (data,), len(data))
    return node


def _outer_pin(module: str, qualname: str) -> dict[str, str] | None:
    """For a local class or function, pin the module-level code that defines it."""
    parts = qualname.split(".")
    if _LOCALS not in parts:
        return None
    outer_qualname = ".".join(parts[: parts.index(_LOCALS)])
    if not _is_user(module):
        return None
    try:
        outer = resolve(module, outer_qualname)
    except LookupError:
        return None
    return {"qualname": outer_qualname, "digest": code_digest(outer)}


def decode_code_ref(node: dict[str, Any], dec: DecodeContext, use: str = gate.VALUE) -> Any:
    """The function or class a code node names, through the trust gate.

    *use* (``gate.VALUE``, ``CALL`` or ``STATE``) is what the stored value does
    with it; ``gate.allow_code`` says what each allows. A reference by name is
    allowed as ``memostore/trust/gate.py`` says. Code stored by value is today's
    definition when there is one (its digest must match), else the stored
    cloudpickle payload, loaded only when this machine wrote it or it came from
    a trusted remote, and used only if what it loads hashes to the digest and
    names the node states (else a miss, warned once).
    """
    module, qualname = node.get("module"), node.get("qualname")
    if type(module) is not str or type(qualname) is not str:
        raise MalformedObject(f"malformed code node {str(node)[:80]}")
    digest = node.get("digest")
    if digest is not None and not isinstance(digest, str):
        raise MalformedObject(f"malformed digest in the code node of {module}:{qualname}")
    if not node.get("byvalue"):
        return gate.allow_code(module, qualname, digest, dec.trust, use)
    symbol = f"{module}:{qualname}"
    if not isinstance(digest, str):
        raise MalformedObject(f"the code node of {symbol} stored by value has no digest")
    outer = node.get("outer")
    if outer is not None:
        _check_outer(module, qualname, outer, dec)
    # Today's definition, when there is one, wins over the stored copy, so that a
    # restored instance of a __main__ class is an instance of the script's class.
    current = gate.find_current(module, qualname, dec.trust)
    if current is not None:
        current_digest = code_digest(current)
        if current_digest != digest:
            raise StaleCode(symbol, digest, current_digest)
        return gate.checked_use(symbol, current, use)
    key = (module, qualname, digest)
    with _lock:
        cached = _restored_by_value.get(key)
    if cached is not None:
        # Loaded from a payload this process trusted and checked against this digest.
        return gate.checked_use(symbol, cached, use)
    blob_id = dec.payloads.get(digest)
    if not isinstance(blob_id, str):
        raise DecodeError(f"the stored copy of {symbol} is missing")
    gate.check_payload(symbol, blob_id, dec.trust)
    obj = _load_payload(symbol, dec.blob_bytes(blob_id), node)
    with _lock:
        obj = _restored_by_value.setdefault(key, obj)
        with contextlib.suppress(TypeError):  # not pinned: hashed again, at worst a miss
            _pinned[obj] = digest
    vouch_loaded(obj)
    return gate.checked_use(symbol, obj, use)


def _check_outer(module: str, qualname: str, outer: Any, dec: DecodeContext) -> None:
    """The outer pin of a local class or function: its defining code is today's."""
    symbol = f"{module}:{qualname}"
    if not isinstance(outer, dict) or not isinstance(outer.get("qualname"), str):
        raise MalformedObject(f"malformed outer pin in the code node of {symbol}")
    # It pins the code that defines this one: its qualified name must be that of
    # the function whose locals hold it, or the pin would vouch for something else.
    parts = qualname.split(".")
    if _LOCALS not in parts or ".".join(parts[: parts.index(_LOCALS)]) != outer["qualname"]:
        raise MalformedObject(f"the outer pin of {symbol} names {outer['qualname'][:80]!r}")
    defining = gate.find_current(module, outer["qualname"], dec.trust)
    current_outer = None if defining is None else code_digest(defining)
    stored_outer = str(outer.get("digest"))
    if current_outer is not None and current_outer != stored_outer:
        raise StaleCode(f"{module}:{outer['qualname']}", stored_outer, current_outer)


def _load_payload(symbol: str, data: bytes, node: dict[str, Any]) -> Any:
    """Unpickle a trusted payload, if it is the code *node* names (else refuse it).

    The evaluation maps code digests to payloads, and whoever wrote the
    evaluation chose that map: a payload of this very store may stand under
    another code's digest. A payload says what it is the code of (module,
    qualified name, digest, outer pin); that must be the node's, checked before
    anything is unpickled.
    """
    module, qualname, digest = node["module"], node["qualname"], node["digest"]
    expected = _payload_head(module, qualname, digest, node.get("outer"))
    if not data.startswith(expected):
        if data.startswith(PAYLOAD_MAGIC):
            end = data.find(b"\n", len(PAYLOAD_MAGIC))
            said = data[len(PAYLOAD_MAGIC) : end if end > 0 else 200][:200]
            why = f"its stored copy is the code of {said.decode('utf-8', 'replace')}"
        else:
            why = "its stored copy does not say which code it is (an older memostore wrote it)"
        refuse(symbol, f"{why}, not of {symbol} with digest {digest[:12]}", "")
    import cloudpickle

    try:
        obj = cloudpickle.loads(memoryview(data)[len(expected) :])
    except Exception as exc:
        raise DecodeError(f"cannot restore {symbol}: {exc}") from exc
    if isinstance(obj, (type, types.FunctionType)):
        # cloudpickle rebuilds a dynamic class under its bare __name__; the payload was
        # checked to be the code of module:qualname, so the restored code is named so.
        with contextlib.suppress(AttributeError, TypeError):
            obj.__qualname__ = qualname
            obj.__module__ = module
    return obj
