"""Tags: names that pin evaluations, ``refs/tags/<name>`` -> evaluation id.

A tag is a ref like any other, so gc keeps everything the tagged evaluation
reaches; ``memostore rm`` and size-bounded eviction refuse to touch a tagged
evaluation (its other refs stay too), until the tag is deleted. A tag name is
also a revision (``memostore show NAME``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import MemostoreError

if TYPE_CHECKING:
    from .store import Store

TAG_PREFIX = "tags/"
TAG_NAME_MAX = 100
# Letters, digits, ".", "_" and "-", starting with a letter or a digit: one ref-name
# component that needs no escaping, so the name on disk is the name the user gave.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HEX_RE = re.compile(r"[0-9a-fA-F]{4,}")
TAG_NAME_RULE = (
    "a tag name is 1 to 100 letters, digits, '.', '_' or '-', starts with a letter or "
    "a digit, does not end in '.lock' and is not 4 or more hex digits alone (that "
    "reads as an evaluation id)"
)


class InvalidTagName(MemostoreError, ValueError):
    """A tag name that breaks :data:`TAG_NAME_RULE`."""


class TagNotFound(MemostoreError, KeyError):
    """No tag of that name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TagExists(MemostoreError):
    """The tag names another evaluation already (moving it needs force)."""


def check_tag_name(name: str) -> None:
    """Raise :class:`InvalidTagName`, naming the rule, unless *name* is a valid tag name."""
    if (
        not isinstance(name, str)
        or len(name) > TAG_NAME_MAX
        or not _NAME_RE.fullmatch(name)
        or name.endswith(".lock")
        or ".lock." in name
        or _HEX_RE.fullmatch(name)
    ):
        raise InvalidTagName(f"invalid tag name {name!r}: {TAG_NAME_RULE}")


def tag_ref(name: str) -> str:
    """The ref name of tag *name* (checked)."""
    check_tag_name(name)
    return TAG_PREFIX + name


def set_tag(store: Store, name: str, evaluation_id: str, *, force: bool = False) -> str | None:
    """Point tag *name* at an evaluation; return the evaluation it named before, if any.

    Raises:
        InvalidTagName: *name* breaks the rule (the message states it).
        RevisionNotFound: *evaluation_id* is no evaluation of this store.
        TagExists: the tag names another evaluation and *force* is False.
    """
    ref = tag_ref(name)
    store.evaluation(evaluation_id)  # a tag names an evaluation that exists, nothing else
    current = store.refs.read(ref)
    if current == evaluation_id:
        return current
    if current is not None and not force:
        raise TagExists(
            f"tag {name} already names evaluation {current[:12]}; delete it first "
            f"(`memostore tag -d {name}`) or move it with `memostore tag --force`"
        )
    # Compare-and-swap: a tag set by another process meanwhile is not overwritten unseen.
    if not store.refs.set_if_equals(ref, current, evaluation_id):
        raise TagExists(f"tag {name} was changed by another process meanwhile; run it again")
    return current


def delete_tag(store: Store, name: str) -> str:
    """Delete tag *name*; return the evaluation it named.

    Raises:
        InvalidTagName: *name* breaks the rule.
        TagNotFound: there is no such tag (the message says how to list them).
    """
    ref = tag_ref(name)
    current = store.refs.read(ref)
    if current is None or not store.refs.delete_if_equals(ref, current):
        raise TagNotFound(f"no tag {name!r}; list the tags with `memostore tag`")
    return current


def list_tags(store: Store) -> dict[str, str]:
    """Every tag: name -> evaluation id, sorted by name."""
    return {name[len(TAG_PREFIX) :]: target for name, target in sorted(store.refs.iter(TAG_PREFIX))}


def tagged(store: Store) -> set[str]:
    """The evaluations some tag names."""
    return set(list_tags(store).values())


def tags_naming(store: Store, evaluation_id: str) -> list[str]:
    """The names of the tags that name *evaluation_id*, sorted."""
    return [name for name, target in list_tags(store).items() if target == evaluation_id]


def resolve_tag(store: Store, name: str) -> str | None:
    """The evaluation tag *name* names; None when *name* is no tag (or no valid tag name)."""
    try:
        ref = tag_ref(name)
    except InvalidTagName:
        return None
    try:
        return store.refs.read(ref)
    except MemostoreError:
        return None  # a damaged tag ref names nothing (fsck reports it)


__all__ = [
    "TAG_NAME_RULE",
    "InvalidTagName",
    "TagExists",
    "TagNotFound",
    "check_tag_name",
    "delete_tag",
    "list_tags",
    "resolve_tag",
    "set_tag",
    "tag_ref",
    "tagged",
    "tags_naming",
]
