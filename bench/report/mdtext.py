"""Text from results files made safe for Markdown (GitHub job summaries, PR comments, report.md).

CPU and GPU names, host names, case ids and reasons are untrusted: in GitHub-flavoured Markdown raw
HTML passes through, ``|`` breaks a table and ``[x](javascript:...)`` makes a link. Every character
that could start inline markup there is escaped, < > & become entities; newlines become spaces so a value stays in its table cell.
"""

from __future__ import annotations

import re

# emphasis, code, links/images, table cells, strike-through; "_" inside a word (mixed_float16) is
# not emphasis in GitHub's Markdown, so it stays readable
_SPECIAL = re.compile(r"([\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md(text: object) -> str:
    """Escape a value for use in Markdown text or a table cell."""
    s = "" if text is None else str(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _SPECIAL.sub(r"\\\1", s)
    return re.sub(r"[\r\n\t]+", " ", s)
