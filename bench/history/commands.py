"""``accelbench history add|check|annotate|simulate``.

No TensorFlow is imported: these run on the hosted judge and publish jobs.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench import storage
from bench.errors import UserError


def add_parsers(sub, positive_int) -> None:
    """Register ``history`` and its subcommands on the main parser."""
    h = sub.add_parser("history", help="the nightly history: add nights, judge them, annotate, simulate")
    hs = h.add_subparsers(dest="history_command", required=True, parser_class=type(h))

    a = hs.add_parser("add", help="append tonight's results (shards of one testbed merge into one night)")
    a.add_argument("files", nargs="+", help="results JSON files")
    a.add_argument("--store", required=True, help="history folder (created if missing)")
    a.add_argument("--testbed", help="testbed name (default: the run's ACCELBENCH_TESTBED, else from the machine)")
    a.add_argument("--no-report", action="store_true", help="do not store the night's HTML report")
    a.add_argument("--skip-existing", action="store_true", help="skip runs already stored instead of refusing")

    c = hs.add_parser("check", help="judge the latest nights: exit 0 fine, 1 confirmed regression, 2 bad input")
    c.add_argument("--store", required=True, help="history folder")
    c.add_argument("--testbed", help="only this testbed")
    fmt = c.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="Markdown verdict (for $GITHUB_STEP_SUMMARY)")
    fmt.add_argument("--json", action="store_true", help="machine-readable verdict")
    fmt.add_argument("--quiet", action="store_true", help="print nothing; only the exit status")
    c.add_argument("--exit-zero", action="store_true", help="exit 0 even on a confirmed regression")

    n = hs.add_parser("annotate", help="accept a shift (new baseline from a night on) or exclude a night")
    n.add_argument("--store", required=True, help="history folder")
    n.add_argument("--testbed", required=True)
    n.add_argument("--night", required=True, help="night id (accept: the first night of the new normal)")
    act = n.add_mutually_exclusive_group(required=True)
    act.add_argument("--accept", action="store_true", help="accept the shift starting at --night")
    act.add_argument("--exclude", action="store_true", help="ignore --night (broken fan, driver hiccup)")
    n.add_argument("--cases", default="*", help="glob over case ids (default every case)")
    n.add_argument("--why", required=True, help="the reason, shown on the site")
    n.add_argument("--who", default="", help="who decided")

    s = hs.add_parser("simulate", help="re-run the false-alarm / detection experiment on the judge")
    s.add_argument("--nights", type=positive_int, default=60)
    s.add_argument("--cases", type=positive_int, default=200, help="synthetic series per cell")
    s.add_argument("--cv", type=float, action="append", help="night-to-night noise (repeatable; default 0.01, 0.03)")
    s.add_argument("--step", type=float, action="append", help="planted slowdown (repeatable; default 0, 0.05, 0.10)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--k", type=float, default=None, help="band width in robust SDs (default: the judge's)")
    s.add_argument("--delta", type=float, default=None, help="band floor, relative (default: the judge's)")
    s.add_argument("--confirm", type=positive_int, default=None, help="nights beyond the band to confirm")


def cmd_add(a: argparse.Namespace) -> int:
    """Validate everything first; then write, testbed by testbed."""
    from bench.history.store import Store
    from bench.history.summarise import HistoryError, resolve_testbed, summarise
    from bench.merge import merge

    docs = storage.load_all(a.files)
    store = Store(a.store, create=True)
    by_tb: dict[str, list[tuple[str, dict]]] = {}
    for path, doc in docs:
        by_tb.setdefault(resolve_testbed(doc, a.testbed), []).append((path, doc))
    todo = []
    for tb, group in by_tb.items():
        stored = store.run_ids(tb)
        again = [p for p, d in group if str(d["run"]["id"]) in stored]
        if again and not a.skip_existing:
            raise HistoryError(
                f"{again[0]}: run {dict(group)[again[0]]['run']['id']} is already in {a.store} ({tb}); nothing written"
            )
        group = [(p, d) for p, d in group if str(d["run"]["id"]) not in stored]
        if group:
            todo.append((tb, group, summarise(group, tb)))
    for tb, group, night in todo:
        html = None
        if not a.no_report:
            from bench.report.render import html_report

            doc = merge(group, run_id=night["night_id"]) if len(group) > 1 else group[0][1]
            html = html_report([doc])
        store.add(night, html)
        print(f"{tb}: night {night['night_id']} ({len(night['cases'])} cases) added to {a.store}")
    if not todo:
        print("nothing new to add", file=sys.stderr)
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    """Exit 1 on a confirmed regression (or a case failing on consecutive nights)."""
    from bench.history import verdict

    _, vs = verdict.judge_store(a.store, a.testbed)
    if a.markdown:
        print(verdict.markdown(vs))
    elif a.json:
        print(json.dumps(verdict.as_json(vs), indent=1))
    elif not a.quiet:
        print(verdict.text(vs) if vs else f"{a.store}: no nights yet")
    red = any(v.confirmed for v in vs)
    return 1 if red and not a.exit_zero else 0


def cmd_annotate(a: argparse.Namespace) -> int:
    """Append one annotation."""
    from bench.history.rules import Annotation
    from bench.history.store import Store

    store = Store(a.store)
    store.annotate(
        Annotation(
            testbed=a.testbed,
            night=a.night,
            action="accept" if a.accept else "exclude",
            why=a.why,
            cases=a.cases,
            who=a.who,
        )
    )
    print(f"{'accepted the shift from' if a.accept else 'excluded'} {a.night} ({a.testbed}, cases {a.cases})")
    return 0


def cmd_simulate(a: argparse.Namespace) -> int:
    """Print the experiment's table."""
    from tabulate import tabulate

    from bench.history import simulate

    cvs = a.cv or [0.01, 0.03]
    steps = a.step if a.step is not None else [0.0, 0.05, 0.10]
    if any(not 0 < c < 0.5 for c in cvs) or any(not 0 <= s < 1 for s in steps) or a.nights < 20:
        raise UserError("--cv in (0, 0.5), --step in [0, 1), --nights >= 20")
    from dataclasses import asdict, replace

    from bench.history.rules import Rule, check_rule

    given = {k: v for k, v in (("k", a.k), ("delta", a.delta), ("confirm", a.confirm)) if v is not None}
    check_rule({**asdict(Rule()), **given}, "simulate")
    rule = replace(Rule(), **given)
    cells = [simulate.run(cv, st, a.cases, a.nights, a.seed, rule) for cv in cvs for st in steps]
    print(tabulate(simulate.table(cells), headers=simulate.HEADERS))
    print(f"\n{a.cases} series x {a.nights} nights per row, seed {a.seed}; {rule}")
    return 0


def dispatch(a: argparse.Namespace) -> int:
    """Route ``history add|check|annotate|simulate``."""
    return {"add": cmd_add, "check": cmd_check, "annotate": cmd_annotate, "simulate": cmd_simulate}[a.history_command](
        a
    )
