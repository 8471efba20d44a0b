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
it came from a trusted remote.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import TYPE_CHECKING, Any

from ..errors import DecodeError, EncodeError, MalformedObject, StaleCode
from ..trust import gate

if TYPE_CHECKING:
    from .decoding import Decoder
    from .encoding import Encoder

_LOCALS = "<locals>"

# code digest -> cloudpickle bytes, and code digest -> object restored by value.
# Both are keyed by the digest of the code's closure, which pins its behaviour.
_payload_bytes: dict[str, bytes] = {}
_restored_by_value: dict[str, Any] = {}
_lock = threading.Lock()


def names_of(obj: Any) -> tuple[str, str]:
    """(module, qualname) a function or class is stored under; EncodeError if it has none."""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    module = getattr(obj, "__module__", None)
    if module is None:
        owner = getattr(obj, "__objclass__", None) or getattr(obj, "__self__", None)
        owner_type = owner if isinstance(owner, type) else type(owner)
        module = getattr(owner_type, "__module__", None) or "builtins"
    if not qualname:
        raise EncodeError(f"cannot name {obj!r}; give it a __qualname__")
    return module, qualname


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


def _digest(obj: Any) -> str:
    from ..code.deps import code_info

    return code_info(obj).digest


def _pickle(obj: Any, digest: str) -> bytes:
    data = _payload_bytes.get(digest)
    if data is None:
        import cloudpickle

        try:
            data = cloudpickle.dumps(obj, protocol=4)
        except Exception as exc:
            raise EncodeError(f"cannot store {obj!r} by value: {exc}") from exc
        with _lock:
            _payload_bytes[digest] = data
    return data


def encode_code_ref(obj: Any, enc: Encoder) -> dict[str, Any]:
    module, qualname = names_of(obj)
    try:
        importable = resolve(module, qualname) is obj
    except LookupError:
        importable = False
    user = _is_user(module)
    node: dict[str, Any] = {"$": "code", "module": module, "qualname": qualname}
    if importable and module != "__main__":
        if user:
            node["digest"] = _digest(obj)
        return node
    digest = _digest(obj)
    node["digest"] = digest
    node["byvalue"] = True
    outer = _outer_pin(module, qualname)
    if outer is not None:
        node["outer"] = outer
    if digest not in enc.payloads:
        data = _pickle(obj, digest)
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
    return {"qualname": outer_qualname, "digest": _digest(outer)}


def decode_code_ref(node: dict[str, Any], dec: Decoder, instantiate: bool = False) -> Any:
    """The function or class a code node names, through the trust gate.

    A reference by name is allowed as ``memostore/trust/gate.py`` says (the
    user's code, pinned by digest, or a registered library constructor). Code
    stored by value is today's definition when there is one (its digest must
    match), else the stored cloudpickle payload, loaded only when this machine
    wrote it or it came from a trusted remote.
    """
    module, qualname = node.get("module"), node.get("qualname")
    if type(module) is not str or type(qualname) is not str:
        raise MalformedObject(f"malformed code node {str(node)[:80]}")
    digest = node.get("digest")
    if digest is not None and not isinstance(digest, str):
        raise MalformedObject(f"malformed digest in the code node of {module}:{qualname}")
    if not node.get("byvalue"):
        return gate.allow_code(module, qualname, digest, dec.trust, instantiate=instantiate)

    outer = node.get("outer")
    if isinstance(outer, dict) and isinstance(outer.get("qualname"), str):
        defining = gate.find_current(module, outer["qualname"], dec.trust)
        current_outer = None if defining is None else _digest(defining)
        stored_outer = str(outer.get("digest"))
        if current_outer is not None and current_outer != stored_outer:
            raise StaleCode(f"{module}:{outer['qualname']}", stored_outer, current_outer)
    # Today's definition, when there is one, wins over the stored copy, so that a
    # restored instance of a __main__ class is an instance of the script's class.
    current = gate.find_current(module, qualname, dec.trust)
    if current is not None:
        current_digest = _digest(current)
        if current_digest != digest:
            raise StaleCode(f"{module}:{qualname}", str(digest), current_digest)
        return current
    with _lock:
        cached = _restored_by_value.get(str(digest))
    if cached is not None:
        return cached  # loaded from a payload this process trusted (same code digest)
    blob_id = dec.payloads.get(str(digest))
    if not isinstance(blob_id, str):
        raise DecodeError(f"the stored copy of {module}:{qualname} is missing")
    gate.check_payload(f"{module}:{qualname}", blob_id, dec.trust)
    import cloudpickle

    try:
        obj = cloudpickle.loads(dec.blob_bytes(blob_id))
    except Exception as exc:
        raise DecodeError(f"cannot restore {module}:{qualname}: {exc}") from exc
    with _lock:
        _restored_by_value.setdefault(str(digest), obj)
        return _restored_by_value[str(digest)]
