"""``accelbench site build``: the static site from a history store.

Pages: home (a card per testbed), regressions (+ Atom feed), trends per testbed (small multiples
per workload x mode), nights per testbed (the per-night reports, the last ``keep_reports``),
method and data (``history.csv``). Everything is relative links, inline CSS and SVG: it reads
from ``file://``, air-gapped, without JavaScript. The output folder is rebuilt from scratch
(GitHub Pages replaces the whole site on each deploy anyway).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from markupsafe import Markup

from bench import __version__
from bench.fingerprint import describe_fingerprint
from bench.history.changepoints import change_points
from bench.history.detect import TestbedVerdict
from bench.history.store import Store
from bench.history.summarise import HistoryError, new_segment
from bench.history.verdict import STALE_HOURS, age_hours, commit_range, judge_store, magnitude
from bench.report import cost as costs
from bench.report.html import Cell, Table, na, num, unique_svg_ids
from bench.report.html import render as render_template
from bench.report.numbers import human
from bench.site import data, metrics, svg

TREND_WINDOW = 90
SPARK_NIGHTS = 30


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "x"


def _fmt_ratio(r, pct: bool = False) -> Cell:
    if r is None:
        return na("not measured")
    if pct:
        return Cell(f"{100 * r.value:.0f}%", cls="num", after=f"[{100 * r.ci_low:.0f}-{100 * r.ci_high:.0f}]")
    return Cell(
        f"{'~' if r.spans_one else ''}{human(r.value)}x", cls="num", after=f"[{human(r.ci_low)}-{human(r.ci_high)}]"
    )


class Site:
    """One build."""

    def __init__(self, store: Store, verdicts: list[TestbedVerdict], out: Path, keep: int, prices: costs.Prices | None):
        self.store, self.verdicts, self.out, self.keep, self.prices = store, verdicts, out, keep, prices
        self.now = datetime.now(timezone.utc)
        self.common = {"version": __version__, "built": self.now.isoformat(timespec="minutes")}
        self.published: dict[str, dict[str, str]] = {}  # testbed -> night id -> relative report path
        self.markers: dict[tuple[str, str], list[int]] = {}

    def write(self, rel: str, text: str) -> None:
        """Write a file of the site."""
        p = self.out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def page(self, rel: str, template: str, title: str, **ctx) -> None:
        """Render a page; ``root`` is the relative way back to the top."""
        root = "../" * rel.count("/")
        self.write(rel, render_template(template, page_title=title, root=root, **self.common, **ctx))

    # ----- per-night reports
    def reports(self, v: TestbedVerdict) -> None:
        """Unpack the last ``keep`` nights' reports, each with a link back."""
        pub: dict[str, str] = {}
        for n in v.nights[-self.keep :]:
            html = self.store.report(n["report"]) if n.get("report") else None
            if html is None:
                continue
            rel = f"reports/{v.testbed}/{_slug(n['night_id'])}.html"
            back = '<nav><a href="../../index.html">&larr; accelbench nightly</a></nav>'
            # reports stored by older versions inlined charts with clashing ids: made unique here too
            self.write(rel, unique_svg_ids(html.replace("<body>", "<body>\n" + back, 1)))
            pub[n["night_id"]] = rel
        self.published[v.testbed] = pub

    # ----- home
    def card(self, v: TestbedVerdict) -> dict:
        """The home card of a testbed."""
        last = v.nights[-1]
        conf = [a for a in v.alerts if a.state == "confirmed"]
        sus = [a for a in v.alerts if a.state == "suspect"]
        accepted = [a for a in self.store.annotations() if a.action == "accept" and a.matches(v.testbed)]
        judge = self.judge_line(v)
        gathering = v.gathering()
        busy = v.count("busy")
        if gathering:  # no all-clear before the judge can judge
            verdict = judge["text"]
        else:
            verdict = (
                (
                    f"{len(conf)} confirmed regression{'s' if len(conf) != 1 else ''}"
                    if conf
                    else "No confirmed regressions"
                )
                + f" · {len(sus)} suspect{'s' if len(sus) != 1 else ''} · {len(accepted)} accepted shift{'s' if len(accepted) != 1 else ''}"
            )
        if busy:
            verdict += f" · {busy} case{'s' if busy != 1 else ''} busy last night (not judged)"
        good = v.last_good_night
        age = age_hours(good["date_utc"], self.now) if good else None
        last_age = age_hours(last["date_utc"], self.now)
        pub = self.published.get(v.testbed, {})
        spark_nights = v.nights[-SPARK_NIGHTS:]
        rows = []
        for h in metrics.headline(last, self.prices):
            cheap = h.cheapest
            rows.append(
                [
                    f"{h.workload} {h.mode}",
                    Cell("1x (baseline)", cls="num") if h.is_baseline else _fmt_ratio(h.speedup),
                    Cell(
                        Markup(
                            svg.sparkline(
                                metrics.speedup_series(spark_nights, h.best_case), f"speed-up of {h.best_case}"
                            )
                        )
                    ),
                    Cell(h.best_case),
                    _fmt_ratio(h.scaling, pct=True) if h.scaling else na("no real multi-device case"),
                    _fmt_ratio(h.precision_gain) if h.precision_gain else na("-"),
                    num(h.best_samples_per_joule[1]) if h.best_samples_per_joule else na("not measured"),
                    *(
                        [
                            Cell(
                                human(cheap[1]),
                                cls="num",
                                below=cheap[0] + ("" if cheap[2] else " (device-hours only)"),
                            )
                            if cheap
                            else na("no price")
                        ]
                        if self.prices
                        else []
                    ),
                ]
            )
        headers = ["workload", "speed-up vs CPU fp32", f"last {len(spark_nights)} nights", "best configuration"]
        headers += ["scaling efficiency", "precision gain", "samples/J (best)"]
        if self.prices:
            headers.append(f"cheapest, {self.prices.currency} per million samples")
        health_ = last.get("health") or {}
        noise = metrics.noise(v.nights[-SPARK_NIGHTS:])
        health = Table(
            [
                "night-to-night noise",
                "throttling seen",
                "SM clock (median)",
                "max temperature",
                "failed cases",
                "measured",
                "unsupported",
            ],
            [
                [
                    Cell(
                        f"{noise:.1%}" if noise is not None else "-",
                        cls="num",
                        title="median over cases of robust SD / median, last 30 nights",
                    ),
                    Cell(
                        "yes" if health_.get("throttle_seen") else "no",
                        cls="red" if health_.get("throttle_seen") else "",
                    ),
                    num(health_.get("sm_clock_mhz_median"), "{:.0f} MHz"),
                    num(health_.get("max_temp_c"), "{:.0f} °C"),
                    Cell(health_.get("failed_cases", 0), cls="num red" if health_.get("failed_cases") else "num"),
                    num(health_.get("measured_cases"), "{:d}"),
                    num(health_.get("unsupported_cases"), "{:d}"),
                ]
            ],
        )
        seg = ""
        if len(v.nights) > 1 and new_segment(v.nights[-2], last):
            seg = "new fingerprint tonight: a new baseline starts (not an alert)"
        return {
            "testbed": v.testbed,
            "verdict": verdict,
            "verdict_cls": "red" if conf else "amber" if sus or gathering or busy else "green",
            "judge_note": judge["note"],
            "last_night": last["night_id"],
            "last_link": pub.get(last["night_id"], f"nights/{v.testbed}.html"),
            "last_date": last["date_utc"],
            "last_status": last.get("status"),
            "commit": str(last.get("commit") or "-")[:12],
            "good_night": good["night_id"] if good else None,
            "good_age": f"{age:.0f} h ago" if age is not None else "",
            "age_cls": "red" if age is None or age > STALE_HOURS else "",
            "stale": f"{last_age:.0f} h" if last_age is not None and last_age > STALE_HOURS else "",
            "fingerprint": describe_fingerprint(last.get("fingerprint") or {}),
            "segment_note": seg,
            "headline": Table(headers, rows, wrap=True),
            "spark_n": len(spark_nights),
            "health": health,
            "sharing": metrics.sharing_table(last, v.testbed),
            "trends": f"trends/{v.testbed}.html",
            "nights": f"nights/{v.testbed}.html",
        }

    # ----- trends
    def trends(self, v: TestbedVerdict) -> None:
        """Small multiples per workload x mode, a panel per case, with its data table."""
        pub = self.published.get(v.testbed, {})
        links = {nid: "../" + rel for nid, rel in pub.items()}
        groups: dict[tuple[str, str], list] = {}
        last_cases = {}
        for n in v.nights:
            last_cases.update(n["cases"])
        for cid, j in v.cases.items():
            pts = j.points[-TREND_WINDOW:]
            if not any(p.value is not None for p in pts):
                continue
            vals = [p.value for p in pts if p.value is not None and p.state != "excluded"]
            idx = [i for i, p in enumerate(pts) if p.value is not None and p.state != "excluded"]
            cps = [idx[t] for t in change_points(vals)] if len(vals) >= 6 else []
            self.markers[(v.testbed, cid)] = [len(j.points) - len(pts) + i for i in cps]
            c = last_cases.get(cid, {})
            serve = ["req/s at the SLO", "[last pass, first fail]"]  # a serve case's rate and its search's bracket
            data = Table(
                ["night", *(serve if c.get("metric") == "max_rate_at_slo" else ["samples/s", "95% CI"]), "state"],
                [
                    [
                        p.night_id,
                        num(p.value),
                        f"{human(p.ci_low)}-{human(p.ci_high)}"
                        if p.ci_low is not None and p.ci_high is not None
                        else "-",
                        p.state,
                    ]
                    for p in pts
                    if p.state not in ("missing",)
                ],
            )
            panel = {"svg": Markup(svg.trend(pts, cid, links, cps)), "data": data}
            groups.setdefault((str(c.get("workload")), str(c.get("mode"))), []).append(panel)
        gl = [
            {"title": f"{w} {m}", "anchor": _slug(f"{w}-{m}"), "panels": panels}
            for (w, m), panels in sorted(groups.items())
        ]
        self.page(
            f"trends/{v.testbed}.html",
            "site/trends.html",
            f"Trends {v.testbed}",
            testbed=v.testbed,
            groups=gl,
            window=TREND_WINDOW,
            judge=self.judge_line(v),
        )

    def judge_line(self, v: TestbedVerdict) -> dict:
        """What the judge says of a testbed, for its pages: a line, its class, what it will watch."""
        g = v.gathering()
        if g:
            return {"text": g.line()[0].upper() + g.line()[1:] + ".", "cls": "amber", "note": g.watches()}
        conf = len(v.confirmed)
        sus = sum(1 for a in v.alerts if a.state == "suspect")
        busy = v.count("busy")
        text = f"Judge: {conf} confirmed, {sus} suspect of {len(v.cases)} cases on the latest night"
        if busy:
            text += f"; {busy} busy (other processes used the machine: not judged)"
        return {"text": text + ".", "cls": "red" if conf else "amber" if sus or busy else "green", "note": ""}

    # ----- nights
    def nights(self, v: TestbedVerdict) -> None:
        """The archive of nights, newest first."""
        pub = self.published.get(v.testbed, {})
        rows = []
        for n in reversed(v.nights):
            h = n.get("health") or {}
            rel = pub.get(n["night_id"])
            rows.append(
                [
                    Cell(n["night_id"], link="../" + rel if rel else None),
                    n["date_utc"],
                    str(n.get("commit") or "-")[:12],
                    n.get("status"),
                    ", ".join(n.get("runner_names") or []) or "-",
                    Cell(h.get("measured_cases", "-"), cls="num"),
                    Cell(h.get("failed_cases", 0), cls="num red" if h.get("failed_cases") else "num"),
                    Cell("workflow run", link=n["workflow_run_url"]) if _safe_url(n.get("workflow_run_url")) else "-",
                    "published" if rel else ("pruned (in the history store)" if n.get("report") else "no report"),
                ]
            )
        t = Table(["night", "date (UTC)", "commit", "run", "runners", "measured", "failed", "CI", "report"], rows)
        self.page(
            f"nights/{v.testbed}.html",
            "site/nights.html",
            f"Nights {v.testbed}",
            testbed=v.testbed,
            nights=t,
            keep=self.keep,
            judge=self.judge_line(v),
        )

    # ----- regressions + feed
    def regressions(self) -> None:
        """Open alerts, accepted shifts, change points, and the Atom feed."""
        rows, entries = [], []
        for v in self.verdicts:
            pub = self.published.get(v.testbed, {})
            for a in v.alerts:
                bad, good = a.first_bad, a.last_good or {}
                rows.append(
                    [
                        v.testbed,
                        Cell(a.case_id, link=f"trends/{v.testbed}.html"),
                        Cell(f"{a.state} {a.kind}", cls="red" if a.state == "confirmed" else "amber"),
                        Cell(magnitude(a), cls="num"),
                        Cell(a.nights, cls="num"),
                        Cell(bad.get("night_id"), link=pub.get(bad.get("night_id") or "")),
                        Cell(good.get("night_id") or "-", link=pub.get(good.get("night_id") or "")),
                        commit_range(a),
                    ]
                )
                entries.append(
                    {
                        "title": f"{a.state} {a.kind}: {a.case_id} on {v.testbed} ({magnitude(a)})",
                        "id": f"urn:accelbench:{v.testbed}:{a.case_id}:{bad.get('night_id')}",
                        "updated": _iso(a.latest.get("date_utc")) or self.common["built"],
                        "link": f"trends/{v.testbed}.html",
                        "summary": f"first bad night {bad.get('night_id')}, last good {good.get('night_id')}, bisect {commit_range(a)}",
                    }
                )
        alerts = Table(
            [
                "testbed",
                "case",
                "state",
                "change [95% CI]",
                "nights",
                "first bad night",
                "last good night",
                "commits to bisect",
            ],
            rows,
        )
        ann = Table(
            ["testbed", "cases", "night", "action", "why", "who", "when"],
            [
                [a.testbed, a.cases, a.night, a.action, a.why, a.who or "-", a.date or "-"]
                for a in self.store.annotations()
            ],
        )
        cps = Table(
            ["testbed", "case", "new segment from night"],
            [
                [tb, cid, ", ".join(v.cases[cid].points[i].night_id for i in idx)]
                for v in self.verdicts
                for (tb, cid), idx in self.markers.items()
                if tb == v.testbed and idx
            ],
        )
        self.page(
            "regressions.html", "site/regressions.html", "Regressions", alerts=alerts, annotations=ann, changes=cps
        )
        feed = render_template(
            "feed.xml",
            feed_id="urn:accelbench:regressions",
            updated=self.now.isoformat(timespec="seconds"),
            entries=entries,
        )
        self.write("regressions.xml", feed)

    def method(self) -> None:
        """The judge's rule, the testbeds' fingerprints, the data."""
        rows = []
        for tb in self.store.testbeds():
            p = self.store.root / "testbeds" / f"{tb}.json"
            reg = json.loads(p.read_text()) if p.exists() else {"fingerprints": []}
            for f in reg.get("fingerprints", []):
                rows.append([tb, f.get("hash"), describe_fingerprint(f.get("fingerprint") or {}), f.get("first_night")])
        sim = "0.1 false confirmed alerts per 100 case-nights at 1% and 3% night-to-night noise; a 10% slowdown confirmed on its second night in 100% of series at 1% noise (33% at 3%), a 5% one in 88% (6% at 3%): at 3% noise, fix the measurement (locked clocks, a quiet machine), not the statistics."
        rule = self.store.thresholds().default
        self.page(
            "method.html",
            "site/method.html",
            "Method",
            testbeds=Table(["testbed", "fingerprint", "machine", "first night"], rows),
            rule=rule,
            sim=sim,
        )

    def history_csv(self) -> None:
        """The tidy CSV of every night and case, and a JSON summary."""
        self.write("history.csv", data.history_csv(self.verdicts))
        self.write("index.json", data.summary_json(self.verdicts, self.common["built"]))

    def build(self) -> None:
        """Every page."""
        live = [v for v in self.verdicts if v.nights]
        for v in live:
            self.reports(v)
            self.trends(v)
            self.nights(v)
        self.page("index.html", "site/home.html", "Testbeds", cards=[self.card(v) for v in live])
        self.regressions()
        self.method()
        self.history_csv()


def _iso(date: str | None) -> str | None:
    try:
        return datetime.fromisoformat(str(date)).isoformat() if date else None
    except ValueError:
        return None


def _safe_url(u: object) -> bool:
    return isinstance(u, str) and u.startswith("https://")


def build(store_dir: str | Path, out_dir: str | Path, keep_reports: int = 90, prices: str | None = None) -> Path:
    """Build into a temporary folder next to ``out_dir``, then swap it in (a failed build leaves the old site)."""
    store, verdicts = judge_store(str(store_dir), None)
    price = costs.load(prices) if prices else None
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise HistoryError(f"{out}: exists and is not a folder")
    if out.resolve() == store.root.resolve() or store.root.resolve() in out.resolve().parents:
        raise HistoryError(f"{out}: the site must not be built inside the history store")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        Site(store, verdicts, tmp, keep_reports, price).build()
        tmp.chmod(0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
