"""The function under test, and everything it uses."""

import logging

import pkg.mod_b as mb

from .mod_b import h

K = 3
NESTED_K = 7
COMP_K = 11
TABLE_K = 5
OPS = {"double": lambda x: x * TABLE_K, "square": lambda x: x * x}
log = logging.getLogger(__name__)


class Base:
    """A base class whose method the subclass inherits."""

    scale = 2

    def grow(self, x):
        return x * self.scale


class Sub(Base):
    def run(self, x):
        return self.grow(x) + 1


def g(x):
    return x - K


def unrelated(x):
    return x * 1000


def f(x):
    """Combine everything."""
    log.debug("f called")

    def inner(y):
        return y + NESTED_K

    squares = [i * COMP_K for i in range(3)]
    total = g(x) + h(x) + mb.h2(x) + Sub().run(x) + inner(x) + sum(squares)
    return total + OPS["double"](x)


def is_even(n):
    return n == 0 or is_odd(n - 1)


def is_odd(n):
    return n != 0 and is_even(n - 1)
