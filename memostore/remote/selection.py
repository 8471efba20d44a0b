"""Which refs a ``push REV...`` or ``pull REV...`` means, and whether a ref is plausible.

A REV given to push or pull is an evaluation id, a unique prefix of one (at
least 4 hex digits), or a function name, which selects every evaluation of
that function (its ``evals/``, ``failed/`` and ``runs/`` refs). ``NAME~N``
works for push, where the local index can order evaluations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..errors import RevisionNotFound
from ..odb.objects import KIND_EVALUATION, Doc
from ..odb.refs import ref_part, unescape_ref_part
from ..odb.revisions import MIN_PREFIX, AmbiguousRevision, function_matches

_HEX = frozenset("0123456789abcdef")
_HOW = "name an evaluation by its id, a prefix of at least 4 hex digits, or a function name"


def function_of(ref_name: str) -> str | None:
    """The function symbol a ref belongs to, from its name alone."""
    parts = ref_name.split("/")
    if len(parts) != 3:
        return None
    if parts[0] in ("evals", "failed"):
        return unescape_ref_part(parts[1])
    if parts[0] == "runs":
        return "run:" + unescape_ref_part(parts[1])
    return None


def select_refs(
    refs: Mapping[str, str],
    revs: Sequence[str],
    where: str,
    resolve: Callable[[str], str] | None = None,
) -> dict[str, str]:
    """The refs among *refs* (name -> evaluation id) that *revs* select; all when empty.

    Args:
        refs: the refs available on the sending side.
        revs: revisions given by the user.
        where: the sending side, for messages.
        resolve: a resolver of full local revisions (``NAME~N``), for push.

    Raises:
        RevisionNotFound: a revision selects nothing (AmbiguousRevision: too much).
    """
    if not revs:
        return dict(refs)
    chosen: dict[str, str] = {}
    for rev in revs:
        chosen.update(_select_one(refs, rev.strip(), where, resolve))
    return chosen


def _select_one(
    refs: Mapping[str, str], rev: str, where: str, resolve: Callable[[str], str] | None
) -> dict[str, str]:
    if "~" in rev:
        if resolve is None:
            raise RevisionNotFound(f"{rev!r}: ~N names local history; pull takes ids or names")
        target = resolve(rev)
        return _named_by(refs, target, rev, where)
    lowered = rev.lower()
    if len(lowered) >= MIN_PREFIX and set(lowered) <= _HEX:
        targets = sorted({t for t in refs.values() if t.startswith(lowered)})
        if len(targets) > 1:
            raise AmbiguousRevision(rev, [(t[:12], "") for t in targets])
        if targets:
            return _named_by(refs, targets[0], rev, where)
    functions = {f for f in map(function_of, refs) if f is not None}
    matches = function_matches(functions, rev)
    if len(matches) > 1:
        raise AmbiguousRevision(rev, [(f, "(function)") for f in matches])
    if matches:
        return {n: t for n, t in refs.items() if function_of(n) == matches[0]}
    raise RevisionNotFound(f"no ref on {where} matches {rev!r}; {_HOW}")


def _named_by(refs: Mapping[str, str], target: str, rev: str, where: str) -> dict[str, str]:
    named = {n: t for n, t in refs.items() if t == target}
    if not named:
        raise RevisionNotFound(f"{rev!r} ({target[:12]}) is named by no ref on {where}")
    return named


def target_problem(ref_name: str, doc: Doc) -> str | None:
    """Why *doc* cannot be what *ref_name* names, or None when it fits.

    A ref from a remote is only taken when its evaluation says it is that
    call's evaluation: a stray or forged ref cannot make another function's
    result answer a call.
    """
    parts = ref_name.split("/")
    namespace = parts[0]
    if namespace not in ("evals", "failed", "runs"):
        return None
    if doc.kind != KIND_EVALUATION:
        return f"names a {doc.kind} object, not an evaluation"
    if len(parts) != 3:
        return "is not of the form NAMESPACE/FUNCTION/KEY"
    body = doc.body
    if namespace == "runs":
        return None if parts[2] == doc.id else "names another run's evaluation"
    function, key = body.get("function"), body.get("key")
    if not isinstance(function, str) or ref_part(function) != parts[1] or key != parts[2]:
        return f"names an evaluation of {function!r} with key {str(key)[:12]}, not this call's"
    return None
