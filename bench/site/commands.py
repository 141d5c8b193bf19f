"""``accelbench site build``: the CLI of the static site (no TensorFlow imported)."""

from __future__ import annotations

import argparse


def add_parser(sub, positive_int) -> None:
    """Register ``site build`` on the main parser."""
    site = sub.add_parser("site", help="the static site for stakeholders")
    ss = site.add_subparsers(dest="site_command", required=True, parser_class=type(site))
    b = ss.add_parser("build", help="build the site from a history store (readable without JavaScript, from file://)")
    b.add_argument("--store", required=True, help="history folder")
    b.add_argument("--out", required=True, help="output folder (replaced)")
    b.add_argument("--keep-reports", type=positive_int, default=90, help="per-night reports kept per testbed")
    b.add_argument("--prices", help="prices TOML (device-hour per kind, kWh) for cost per million samples")


def command(a: argparse.Namespace) -> int:
    """Build the site."""
    from bench.site.build import build

    out = build(a.store, a.out, keep_reports=a.keep_reports, prices=a.prices)
    print(f"site: {out / 'index.html'}")
    return 0
