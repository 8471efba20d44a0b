"""Families: library classes a user lets restoring make from their stored state alone.

A Hugging Face model is an ``nn.Module`` subclass that ``transformers``
defines, its configuration a ``PreTrainedConfig`` subclass: hundreds of
classes, none in the registry (``registry.py``), which lists what restoring
may *call*. A family names such classes by package and base classes, and
allows one use only: the class is made by ``__new__`` and given its stored
state, written into the instance without running any of the class's code
(``memostore/values/decoding.py``). A class of a family is never called with
stored arguments, and one that has restore code of its own (``__new__``,
``__setstate__``, ``__reduce__``, ``__reduce_ex__`` or ``__del__``, on
itself or on a base the registry does not list) is refused all the same
(``state.restorable_from_state``).

A known family applies to values that came from no remote the store does not
trust (what this machine stored from the user's own objects: see
``TrustContext.value_is_ours``). For any other value, families are off until
the user turns them on, by name:
:func:`allow_state_family` or ``MEMOSTORE_STATE_FAMILIES`` (names separated by
commas or white space, read once, when the first value is restored). Only an
enabled family's package is imported to restore a value; the modules of
other libraries a stored value names are never imported for it.
``KNOWN_FAMILIES`` lists the families memostore defines;
:func:`register_state_family` adds others.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

ENV_STATE_FAMILIES = "MEMOSTORE_STATE_FAMILIES"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class StateFamily:
    """Classes of one package that restoring may make from their stored state.

    Attributes:
        name: what the user enables (``"transformers"``).
        package: the top-level package whose modules define the classes.
        bases: ``"module:qualname"`` of base classes; a class of the family
            subclasses one of them (bases that do not exist in the installed
            version are skipped).
        description: one line, for ``get_safe_globals()`` and the docs.
        also: other top-level packages of the same library (one family for
            ``lightning`` and its standalone ``pytorch_lightning``).
    """

    name: str
    package: str
    bases: tuple[str, ...]
    description: str
    also: tuple[str, ...] = ()

    def covers(self, module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in (self.package, *self.also))


KNOWN_FAMILIES: tuple[StateFamily, ...] = (
    StateFamily(
        "transformers",
        "transformers",
        (
            "torch.nn.modules.module:Module",
            "transformers.configuration_utils:PreTrainedConfig",
            "transformers.configuration_utils:PretrainedConfig",
            "transformers.generation.configuration_utils:GenerationConfig",
            "transformers.tokenization_utils_base:PreTrainedTokenizerBase",
        ),
        "Hugging Face models and their layers (nn.Module subclasses transformers defines), "
        "their configurations (PreTrainedConfig), generation configurations and tokenizers",
    ),
    StateFamily(
        "lightning",
        "lightning",
        ("torch.nn.modules.module:Module", "builtins:dict"),
        "Lightning's modules and the dict containers of hyperparameters (AttributeDict)",
        also=("lightning_fabric", "pytorch_lightning"),
    ),
    StateFamily(
        "peft",
        "peft",
        (
            "torch.nn.modules.module:Module",
            "peft.config:PeftConfigMixin",
            "peft.tuners.lora.config:LoraRuntimeConfig",
        ),
        "PEFT models and their adapter layers (LoRA, ...) and adapter configurations",
    ),
)


class Families:
    """The families memostore knows, and those turned on (thread-safe)."""

    def __init__(self, known: Iterable[StateFamily] = KNOWN_FAMILIES) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, StateFamily] = {f.name: f for f in known}
        self._enabled: set[str] = set()
        self._env_read = False
        self._generation = 0

    @property
    def generation(self) -> int:
        """Changes whenever the enabled families may have changed (for caches)."""
        self._read_env()
        return self._generation

    def register(self, family: StateFamily) -> None:
        """Make *family* known (enabling it is a separate step)."""
        _check(family)
        with self._lock:
            self._known[family.name] = family
            self._generation += 1

    def enable(self, names: Iterable[str]) -> None:
        """Turn on the known families *names*; ValueError names the known ones."""
        names = list(names)
        with self._lock:
            unknown = [n for n in names if n not in self._known]
            if unknown:
                known = ", ".join(sorted(self._known)) or "none"
                raise ValueError(
                    f"no state family named {unknown[0]!r} (known: {known}); define one with "
                    "memostore.trust.register_state_family(name, package, bases, description)"
                )
            self._enabled.update(names)
            self._generation += 1

    def enabled_for(self, module: str) -> StateFamily | None:
        """The enabled family whose package holds *module*, if any."""
        self._read_env()
        with self._lock:
            for name in self._enabled:
                family = self._known[name]
                if family.covers(module):
                    return family
        return None

    def known_for(self, module: str) -> StateFamily | None:
        """A known family (enabled or not) whose package holds *module*: for the fix."""
        with self._lock:
            return next((f for f in self._known.values() if f.covers(module)), None)

    def describe(self) -> list[str]:
        """The enabled families, for ``get_safe_globals()``."""
        self._read_env()
        with self._lock:
            families = [self._known[n] for n in sorted(self._enabled)]
        return [f"family {f.name} (restored from state only): {f.description}" for f in families]

    def _read_env(self) -> None:
        if self._env_read:
            return
        text = os.environ.get(ENV_STATE_FAMILIES, "")
        names = [n for n in re.split(r"[,\s]+", text) if n]
        with self._lock:
            if self._env_read:
                return
            self._env_read = True
            # An unknown name enables nothing (a typo must not make restoring fail);
            # the refusal's warning names the right spelling.
            self._enabled.update(n for n in names if n in self._known)
            self._generation += 1


def _check(family: StateFamily) -> None:
    if not _NAME.fullmatch(family.name) or not _NAME.fullmatch(family.package):
        raise ValueError(f"invalid family name or package: {family.name!r}, {family.package!r}")
    if "." in family.package:
        raise ValueError(f"a family's package is a top-level package, not {family.package!r}")
    for base in family.bases:
        module, _, qualname = base.partition(":")
        if not _NAME.fullmatch(module) or not _NAME.fullmatch(qualname):
            raise ValueError(f"invalid base {base!r}; write 'module:qualname'")


families = Families()


def allow_state_family(name: str) -> None:
    """Let restoring make the classes of family *name* from their stored state.

    A Hugging Face model or configuration pulled from a remote this store does
    not trust needs ``allow_state_family("transformers")`` (or
    ``MEMOSTORE_STATE_FAMILIES=transformers``); one this machine stored needs
    nothing (a known family applies to it). Restoring then makes its classes
    by ``__new__`` and writes their stored state into them, running none of
    their code; the program runs their methods when it uses the value, on the
    state the store held, so enable a family only for stores whose writers you
    would let hand you such an object.

    Raises:
        ValueError: no family has that name (the message lists the known ones).

    Example:
        >>> import memostore.trust
        >>> memostore.trust.allow_state_family("transformers")
    """
    families.enable([name])


def register_state_family(
    name: str, package: str, bases: Iterable[str], description: str = ""
) -> None:
    """Define family *name*: classes *package* defines that subclass one of *bases*.

    Enable it with :func:`allow_state_family`. Example:
    ``register_state_family("timm", "timm", ["torch.nn.modules.module:Module"])``.

    Raises:
        ValueError: a malformed name, package or base.
    """
    families.register(StateFamily(name, package, tuple(bases), description or package))
