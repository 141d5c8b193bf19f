"""HTML through Jinja2 templates with autoescaping: one base layout for the report and the site.

Sections are plain data (tables of cells, paragraphs, charts); the templates escape every value.
Only our own SVG charts are passed as ``Markup`` (matplotlib escapes the text inside them; the
site's SVG escapes labels itself).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2
from markupsafe import Markup

from bench import method
from bench.report.numbers import human


@lru_cache(maxsize=1)
def env() -> jinja2.Environment:
    """The template environment (autoescape on for .html and .xml, undefined names are errors)."""
    e = jinja2.Environment(
        loader=jinja2.PackageLoader("bench", "templates"),
        autoescape=jinja2.select_autoescape(["html", "xml"], default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # the method in short, one text for the report, the site and docs/method.md (escaped there)
    e.globals["method_list"] = Markup(method.html_list())
    return e


def render(template: str, **context: Any) -> str:
    """Render one template."""
    return env().get_template(template).render(**context)


_SVG = re.compile(r"<svg\b.*?</svg>", re.S)
_ID = re.compile(r'\bid="([^"]*)"')
_URL_REF = re.compile(r"url\(#([^)]*)\)")
_HREF_REF = re.compile(r'((?:xlink:)?href)="#([^"]*)"')


def unique_svg_ids(html: str) -> str:
    """Prefix the ids inside each inline ``<svg>`` (and the references to them) with ``svgN-``.

    matplotlib numbers its ids per figure (``figure_1``, ``axes_1``, ``patch_1``, markers), so
    two inlined charts share ids: invalid HTML, and a marker reference may resolve into the
    wrong chart. References to ids outside the chart are left alone.
    """
    n = 0

    def one(m: re.Match) -> str:
        nonlocal n
        svg = m.group(0)
        ids = set(_ID.findall(svg))
        if not ids:
            return svg
        n += 1
        pre = f"svg{n}-"
        svg = _ID.sub(lambda k: f'id="{pre}{k.group(1)}"', svg)
        svg = _URL_REF.sub(lambda k: f"url(#{pre}{k.group(1)})" if k.group(1) in ids else k.group(0), svg)
        return _HREF_REF.sub(lambda k: f'{k.group(1)}="#{pre}{k.group(2)}"' if k.group(2) in ids else k.group(0), svg)

    return _SVG.sub(one, html)


@dataclass
class Cell:
    """One table cell; ``text`` escaped by the template."""

    text: object = ""
    cls: str = ""
    title: object = None
    style: str | None = None
    colspan: int | None = None
    link: str | None = None
    badge: str | None = None
    badge_cls: str = ""
    after: object = None  # small text on the same line
    below: object = None  # small text on the next line


@dataclass
class Table:
    """Headers and rows of cells (plain values become cells)."""

    headers: list[str]
    rows: list[list[Any]]
    cls: str = ""
    wrap: bool = False  # kept for callers; every table now scrolls inside its own box
    kind: str = "table"
    label: str = ""  # what the table is, for its scroll region (default: its first headers)

    def __post_init__(self) -> None:
        self.rows = [[c if isinstance(c, Cell) else Cell(c) for c in r] for r in self.rows]
        if not self.label:
            self.label = "table: " + ", ".join(str(h) for h in self.headers[:3] if str(h))


@dataclass
class Para:
    """A paragraph of text."""

    text: object
    cls: str = ""
    small: bool = False
    kind: str = "para"


@dataclass
class Svg:
    """A chart we made ourselves (trusted markup)."""

    svg: Markup
    kind: str = "svg"

    def __init__(self, svg: str):
        self.svg = Markup(svg)
        self.kind = "svg"


@dataclass
class Csv:
    """The data as a download link and a collapsible listing."""

    name: str
    b64: str
    text: str
    rows: int
    kind: str = "csv"


@dataclass
class Section:
    """A heading and its blocks."""

    title: str
    blocks: list[Any] = field(default_factory=list)
    level: int = 2
    method: bool = False

    def __post_init__(self) -> None:
        # each table scrolls in a region named by its label: named after the section too, so two
        # sections with alike tables (precision and XLA gains, two runs side by side) stay distinct
        # landmarks (axe: landmark-unique)
        for b in self.blocks:
            if isinstance(b, Table) and not b.label.startswith(f"{self.title}: "):
                b.label = f"{self.title}: {b.label}"


NA = "-"


def num(v: object, fmt: str | None = None) -> Cell:
    """A right-aligned number (3 significant digits, thousands separators unless ``fmt``), ``-`` in grey where not measured (never 0)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return Cell(NA, cls="num na")
    try:
        return Cell(human(v) if fmt is None else fmt.format(v), cls="num")
    except (ValueError, TypeError):
        return Cell(str(v), cls="num")


def na(text: str, colspan: int | None = None) -> Cell:
    """A greyed "not measured (...)" cell."""
    return Cell(text, cls="na", colspan=colspan)
