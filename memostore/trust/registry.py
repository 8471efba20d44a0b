"""The registry of library code that restoring a stored value may call.

A stored value names the functions and classes that rebuild it (pickle's
reduce protocol: ``copyreg._reconstructor``, ``collections.OrderedDict``,
``numpy.dtype``, ...). Restoring calls them with arguments taken from the
store, so only code that does nothing but build a value may be named: this
registry lists it, as ``torch.load(weights_only=True)`` lists what its
unpickler may call. The user's own code is allowed by the gate
(``gate.py``) through its digest pin, not through this registry.

Three kinds of entries:

- exact names, ``"module:qualname"``, the only kind the defaults use for
  libraries other than torch (torch registers its own, see
  ``torch_codecs/safe_globals.py``);
- package prefixes, ``"torchvision.transforms.*"``: every function and class
  *defined* in a module under that package (and those modules as values);
- rules, registered by codec packages: a package and a predicate on the
  resolved object (``torch``: classes torch defines that subclass
  ``nn.Module``, ``Optimizer``, ...). A rule never makes its package's
  submodules importable: it judges only objects of modules already imported.

Users extend the registry with :func:`add_safe_globals` or the
``MEMOSTORE_SAFE_GLOBALS`` environment variable (the same entries, separated
by commas or white space; read once, when the first value is restored).
"""

from __future__ import annotations

import os
import re
import threading
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

ENV_SAFE_GLOBALS = "MEMOSTORE_SAFE_GLOBALS"

# Builtins that only build a value. Not here, on purpose: getattr, setattr, eval,
# exec, compile, open, __import__, input, breakpoint, type, super, vars, globals.
_BUILTINS = (
    "object",
    "int",
    "float",
    "complex",
    "bool",
    "str",
    "bytes",
    "bytearray",
    "tuple",
    "list",
    "dict",
    "set",
    "frozenset",
    "slice",
    "range",
    "Ellipsis",
    "NotImplemented",
)
# Exception classes only store their arguments: a stored error restores inert.
_BUILTIN_EXCEPTIONS = (
    "BaseException",
    "Exception",
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "EOFError",
    "FloatingPointError",
    "ImportError",
    "IndexError",
    "KeyError",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "RecursionError",
    "RuntimeError",
    "StopIteration",
    "TimeoutError",
    "TypeError",
    "ValueError",
    "ZeroDivisionError",
    "UnicodeError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "Warning",
    "UserWarning",
    "DeprecationWarning",
    "RuntimeWarning",
    "FileNotFoundError",
    "PermissionError",
)

DEFAULT_SAFE_GLOBALS: tuple[str, ...] = (
    *(f"builtins:{name}" for name in (*_BUILTINS, *_BUILTIN_EXCEPTIONS)),
    # pickle's own reconstructors: they call cls.__new__ / base.__init__ of classes
    # that are themselves checked when they are decoded.
    "copyreg:_reconstructor",
    "copyreg:__newobj__",
    "copyreg:__newobj_ex__",
    "collections:OrderedDict",
    "collections:defaultdict",
    "collections:Counter",
    "collections:deque",
    "argparse:Namespace",
    "pathlib:PurePath",
    "pathlib:PurePosixPath",
    "pathlib:PureWindowsPath",
    "pathlib:Path",
    "pathlib:PosixPath",
    "pathlib:WindowsPath",
    "datetime:date",
    "datetime:time",
    "datetime:datetime",
    "datetime:timedelta",
    "datetime:timezone",
    "decimal:Decimal",
    "fractions:Fraction",
    "uuid:UUID",
    "uuid:SafeUUID",
    # functools.partial stores its function as a value of its own: the gate checks it.
    "functools:partial",
    # numpy: arrays, dtypes, scalars and random generators.
    "numpy:ndarray",
    "numpy:dtype",
    "numpy._core.multiarray:_reconstruct",
    "numpy._core.multiarray:scalar",
    "numpy.core.multiarray:_reconstruct",
    "numpy.core.multiarray:scalar",
    "numpy.random._pickle:__generator_ctor",
    "numpy.random._pickle:__bit_generator_ctor",
    "numpy.random._pickle:__randomstate_ctor",
    "numpy.random.bit_generator:SeedSequence",
    "numpy.random.bit_generator:__pyx_unpickle_SeedSequence",
    "numpy.random._generator:Generator",
    "numpy.random.mtrand:RandomState",
    "numpy.random._mt19937:MT19937",
    "numpy.random._pcg64:PCG64",
    "numpy.random._pcg64:PCG64DXSM",
    "numpy.random._philox:Philox",
    "numpy.random._sfc64:SFC64",
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class SafeRule:
    """Objects of *package*'s modules that *predicate* accepts are safe to call.

    Attributes:
        package: the top-level package (``torch``); its modules only.
        predicate: called with the resolved object; True means safe.
        description: one line, for ``get_safe_globals()``.
    """

    package: str
    predicate: Callable[[Any], bool]
    description: str

    def covers(self, module: str) -> bool:
        return module == self.package or module.startswith(self.package + ".")


class SafeGlobals:
    """Exact names, package prefixes and rules of what restoring may call."""

    def __init__(self, names: Iterable[str] = DEFAULT_SAFE_GLOBALS) -> None:
        self._lock = threading.Lock()
        self._names: set[str] = set(names)
        self._prefixes: set[str] = set()
        self._rules: list[SafeRule] = []
        self._env_text: str | None = None
        self._env_names: set[str] = set()
        self._env_prefixes: set[str] = set()
        self._generation = 0

    @property
    def generation(self) -> int:
        """Changes whenever what the registry allows may have changed (for caches)."""
        self._env()
        return self._generation

    # -- adding --------------------------------------------------------------------------
    def add(self, entries: Iterable[Any]) -> None:
        """Add objects, ``"module:qualname"`` names or ``"package.*"`` prefixes."""
        names, prefixes = parse_entries(entries)
        with self._lock:
            self._names |= names
            self._prefixes |= prefixes
            self._generation += 1

    def add_rule(self, rule: SafeRule) -> None:
        with self._lock:
            if rule not in self._rules:  # a codec package may register into several registries
                self._rules.append(rule)
                self._generation += 1

    # -- asking ----------------------------------------------------------------------------
    def names_exactly(self, module: str, qualname: str) -> bool:
        """Whether ``module:qualname`` is listed by name (importing *module* is then fine).

        ``qualname=""`` asks about the module itself, as a value.
        """
        names, _ = self._env()
        key = f"{module}:{qualname}"
        return key in self._names or key in names

    def prefix_covers(self, module: str) -> bool:
        """Whether *module* lies under a package the user trusted with ``package.*``."""
        _, env_prefixes = self._env()
        return any(
            module == p or module.startswith(p + ".") for p in (*self._prefixes, *env_prefixes)
        )

    def rules_for(self, module: str) -> list[SafeRule]:
        return [rule for rule in self._rules if rule.covers(module)]

    def describe(self) -> list[str]:
        """Every entry, for display: names, ``package.*`` prefixes, then rules."""
        names, prefixes = self._env()
        out = sorted(f"{n[:-1]} (module)" if n.endswith(":") else n for n in self._names | names)
        out += sorted(f"{p}.*" for p in self._prefixes | prefixes)
        out += [f"{rule.package}: {rule.description}" for rule in self._rules]
        return out

    def _env(self) -> tuple[set[str], set[str]]:
        """The entries of ``$MEMOSTORE_SAFE_GLOBALS``, read at the first restore."""
        if self._env_text is None:
            text = os.environ.get(ENV_SAFE_GLOBALS, "")
            entries = [e for e in re.split(r"[,\s]+", text) if e]
            try:
                names, prefixes = parse_entries(entries)
            except ValueError:
                # A typo in the variable must not make every restore fail; the entry
                # simply allows nothing (the refusal's warning names the right form).
                names, prefixes = set(), set()
            with self._lock:
                self._env_text, self._env_names, self._env_prefixes = text, names, prefixes
                self._generation += 1
        return self._env_names, self._env_prefixes


def parse_entries(entries: Iterable[Any]) -> tuple[set[str], set[str]]:
    """(exact names, package prefixes) of *entries*; ValueError for a malformed one.

    A module (an object, or a name without ``:``) is kept as the exact name
    ``"module:"``: the module itself, as a value (a stored dict holding ``math``).
    """
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
        raise TypeError("add_safe_globals takes a list of entries, e.g. ['pkg.mod:Class']")
    names: set[str] = set()
    prefixes: set[str] = set()
    for entry in entries:
        if isinstance(entry, types.ModuleType):
            names.add(module_entry(entry.__name__))
        elif not isinstance(entry, str):
            names.add(qualified_name(entry))
        elif entry.endswith(".*"):
            if not _NAME.fullmatch(entry[:-2]):
                raise ValueError(f"invalid package prefix {entry!r}; write e.g. 'pkg.sub.*'")
            prefixes.add(entry[:-2])
        elif ":" not in entry and _NAME.fullmatch(entry):
            names.add(module_entry(entry))
        else:
            module, _, qualname = entry.partition(":")
            if not _NAME.fullmatch(module) or not _NAME.fullmatch(qualname):
                raise ValueError(
                    f"invalid safe global {entry!r}; write 'module:qualname' "
                    "(e.g. 'torchvision.transforms.transforms:Compose'), 'package.*', "
                    "or a module's name"
                )
            names.add(entry)
    return names, prefixes


def qualified_name(obj: Any) -> str:
    """``"module:qualname"`` of a function or class (TypeError for anything else)."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        raise TypeError(
            f"{obj!r} has no importable name; pass a module-level function or class, "
            "or its 'module:qualname'"
        )
    return f"{module}:{qualname}"


def module_entry(name: str) -> str:
    """The registry name that allows module *name* itself as a value."""
    return f"{name}:"


safe_globals = SafeGlobals()


def get_safe_globals() -> list[str]:
    """What restoring may use besides the user's code: names, prefixes, rules, families."""
    from .families import families

    return safe_globals.describe() + families.describe()


def add_safe_globals(entries: Iterable[Any]) -> None:
    """Let restoring call these library functions and classes (or use these modules).

    memostore restores a stored value by calling only what it trusts: the
    user's own code (pinned by digest), a registry of constructors that only
    build values (``docs/reliability.md`` lists it), and what is added here.
    A stored result that needs anything else is not used (the call computes,
    after one warning naming what to add).

    Args:
        entries: functions, classes or modules; ``"module:qualname"`` strings
            (``"torchvision.transforms.transforms:Compose"``); a module's name
            (``"math"``: the module itself as a value); or ``"package.*"`` to
            trust every function and class a package's modules define (broad:
            only for packages whose every callable is harmless to call with
            any arguments).

    Raises:
        TypeError, ValueError: an entry that names nothing importable.

    Example:
        >>> import memostore
        >>> memostore.add_safe_globals(["torchvision.transforms.*"])
    """
    safe_globals.add(entries)


def register_safe_rule(package: str, predicate: Callable[[Any], bool], description: str) -> None:
    """For codec packages: objects of *package* that *predicate* accepts are safe."""
    safe_globals.add_rule(SafeRule(package, predicate, description))
