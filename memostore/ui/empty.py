"""The page served while there is nothing to show: where the store is, how to log a first run.

TensorBoard serves an empty log directory with a page that says how to write
one; so does ``memostore ui`` with no store yet, or a store with no
evaluation. The page asks ``/api/live`` every two seconds and opens the
dashboard as soon as a run starts or a record appears. Its elements carry
classes (``empty``, ``empty-example``, ``empty-env``) for the dashboard's
style sheet to style.
"""

from __future__ import annotations

import html
from typing import Any

_POLL = """
<script>
"use strict";
// The dashboard replaces this page once the store holds something to show.
(async function poll(version) {
  try {
    const live = await (await fetch("/api/live", { cache: "no-store" })).json();
    if (live.rows.length || (version !== null && live.version !== version)) {
      location.reload();
      return;
    }
    version = live.version;
  } catch (error) { /* the server restarts: ask again */ }
  setTimeout(() => poll(version), 2000);
})(null);
</script>
"""


def empty_page(empty: dict[str, Any]) -> str:
    """The HTML of the page, from :meth:`.queries.Catalog.empty`'s answer."""
    text = html.escape
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<title>memostore: no runs yet</title>\n<link rel="icon" href="data:,">\n'
        '<link rel="stylesheet" href="/static/style.css">\n</head>\n<body>\n'
        '<header><a href="#/" class="brand">memostore</a></header>\n'
        '<main id="view" class="empty" data-ready="empty">\n'
        f'<h2>No runs yet</h2>\n<p class="empty-message">{text(empty["message"])}</p>\n'
        f'<pre class="empty-example"><code>{text(empty["example"])}</code></pre>\n'
        "<p>Scripts started elsewhere log into this store with "
        f'<code class="empty-env">{text(empty["env"])}</code>.</p>\n'
        f"</main>\n{_POLL}</body>\n</html>\n"
    )
