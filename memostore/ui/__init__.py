"""``memostore ui``: a read-only dashboard over a store, served to a local browser.

The server (:mod:`.app`, Starlette on uvicorn) answers JSON queries that
:mod:`.queries` and :mod:`.pages` compute from the store's listing functions,
logs manifests and metrics readers; the page (``static/``) draws the charts
with plotly.js, taken from the plotly package, so nothing is fetched from the
network. These packages are the ``ui`` extra: ``pip install '.[ui]'`` in a clone.
"""

from __future__ import annotations

import importlib.util

from ..errors import install_hint

REQUIREMENTS = ("starlette", "uvicorn", "plotly")
INSTALL_HINT = install_hint("ui")


def missing_requirements() -> list[str]:
    """The packages of the ``ui`` extra that are not installed (found without importing)."""
    missing = []
    for name in REQUIREMENTS:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False  # a broken or blocked install cannot serve either
        if not found:
            missing.append(name)
    return missing
