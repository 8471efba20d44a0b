"""Code digests: the dependency closure of a function or class, and what keys it.

:mod:`memostore.code.deps` is the entry point (``CodeInfo``, ``ignore_global``);
the modules here are its parts: ``source`` and ``bytecode`` digest one
function's own code, ``bindings`` finds what it reads, ``global_kinds`` tells
data globals from services, ``values`` turns constants into hashable trees,
``modules`` decides what is user code and pins the rest, ``graph`` walks and
hashes the closure, and ``fallback`` keys what the scanner failed on.
"""
