"""Helpers used from another module, by name and through ``import ... as``."""


def h(x):
    return x + 1


def h2(x):
    return x * 2


def unused_b(x):
    return x - 100
