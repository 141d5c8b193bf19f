"""The judge run over a store, and its verdict as Markdown (job summary, capped under 1 MiB), console text and JSON."""

from __future__ import annotations

from datetime import datetime, timezone

from bench.fingerprint import describe_fingerprint
from bench.history.detect import Alert, TestbedVerdict, judge_testbed
from bench.history.store import Store
from bench.history.summarise import HistoryError, new_segment
from bench.report.mdtext import md

MAX_MARKDOWN = 900_000  # GitHub refuses a step summary over 1 MiB
STALE_HOURS = 36


def judge_store(store_dir: str, testbed: str | None = None) -> tuple[Store, list[TestbedVerdict]]:
    """Open a store and judge every testbed in it (or one), with its thresholds and annotations."""
    store = Store(store_dir)
    tbs = store.testbeds()
    if testbed:
        if testbed not in tbs:
            raise HistoryError(f"no testbed {testbed!r} in {store_dir} (have: {', '.join(tbs) or 'none'})")
        tbs = [testbed]
    th, ann = store.thresholds(), store.annotations()
    return store, [judge_testbed(tb, store.nights(tb), th, ann) for tb in tbs]


def age_hours(date_utc: str, now: datetime | None = None) -> float | None:
    """Hours since a night's date (None if the date is not ISO)."""
    try:
        dt = datetime.fromisoformat(date_utc)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return ((now or datetime.now(timezone.utc)) - dt).total_seconds() / 3600


def magnitude(a: Alert) -> str:
    """``-10.2% [-11.0%, -9.1%]`` or the failure."""
    if a.kind == "failing":
        return "fails: " + (a.reason[:120] or "no reason recorded")
    if a.magnitude is None:
        return "-"
    ci = f" [{a.magnitude_ci[0]:+.1%}, {a.magnitude_ci[1]:+.1%}]" if a.magnitude_ci else ""
    return f"{a.magnitude:+.1%}{ci}"


def commit_range(a: Alert) -> str:
    """``good..bad`` commits to bisect."""
    good = (a.last_good or {}).get("commit") or "?"
    bad = a.first_bad.get("commit") or "?"
    return f"{str(good)[:12]}..{str(bad)[:12]}"


def summary_line(v: TestbedVerdict, now: datetime | None = None) -> str:
    """``3 confirmed, 1 suspect, 0 failing; 200 cases; last night ...``."""
    if not v.nights:
        return "no nights"
    last = v.nights[-1]
    conf = sum(1 for a in v.alerts if a.state == "confirmed")
    sus = sum(1 for a in v.alerts if a.state == "suspect")
    age = age_hours(last["date_utc"], now)
    stale = f", STALE: no night for {age:.0f} h" if age is not None and age > STALE_HOURS else ""
    insufficient = v.count("insufficient")
    ins = f", {insufficient} with insufficient history" if insufficient else ""
    busy = v.count("busy")
    bz = f", {busy} busy (not judged: other processes used the machine)" if busy else ""
    tail = f"last night {last['night_id']} ({last['date_utc']}, {last.get('status')}){stale}"
    g = v.gathering()
    if g:
        return f"{g.line()} ({g.cases} cases){bz}; {tail}"
    return f"{conf} confirmed, {sus} suspect of {len(v.cases)} cases{ins}{bz}; {tail}"


def markdown(verdicts: list[TestbedVerdict], now: datetime | None = None) -> str:
    """The job summary: one section per testbed, open alerts first."""
    red = any(v.confirmed for v in verdicts)
    if red:
        title = "confirmed regression"
    elif verdicts and all(v.gathering() for v in verdicts):
        title = "the judge is still gathering nights"
    else:
        title = "no confirmed regression"
    out = [f"# accelbench nightly: {title}", ""]
    for v in verdicts:
        out += [f"## {md(v.testbed)}", "", md(summary_line(v, now)), ""]
        if len(v.nights) > 1 and new_segment(v.nights[-2], v.nights[-1]):
            fp = describe_fingerprint(v.nights[-1].get("fingerprint") or {})
            out += [f"New testbed fingerprint tonight (a new segment, not an alert): {md(fp)}", ""]
        if v.alerts:
            out += [
                "| case | state | nights | change [95% CI] | first bad night | commits to bisect |",
                "|---|---|---|---|---|---|",
            ]
            for a in v.alerts:
                line = (
                    f"| {md(a.case_id)} | {a.state} {md(a.kind)} | {a.nights} | {md(magnitude(a))} | "
                    f"{md(a.first_bad.get('night_id'))} | {md(commit_range(a))} |"
                )
                if sum(len(x) + 1 for x in out) + len(line) > MAX_MARKDOWN:
                    out.append(
                        f"| ... | {len(v.alerts)} alerts in all; see `accelbench history check --json` | | | | |"
                    )
                    break
                out.append(line)
            out.append("")
        out.append(
            f"Expected false confirmed alerts per night at 1% night-to-night noise: {v.expected_false_alerts():.2f} "
            "(0.1 per 100 case-nights, `accelbench history simulate`)."
        )
        out.append("")
    return "\n".join(out)


def text(verdicts: list[TestbedVerdict], now: datetime | None = None) -> str:
    """Console verdict."""
    lines = []
    for v in verdicts:
        lines.append(f"{v.testbed}: {summary_line(v, now)}")
        for a in v.alerts:
            lines.append(
                f"  {a.state:9s} {a.kind:10s} {a.case_id}: {magnitude(a)} since {a.first_bad.get('night_id')} "
                f"(bisect {commit_range(a)})"
            )
    return "\n".join(lines)


def as_json(verdicts: list[TestbedVerdict]) -> dict:
    """Machine-readable verdict."""
    from dataclasses import asdict

    return {
        "confirmed": sum(len(v.confirmed) for v in verdicts),
        "testbeds": [
            {
                "testbed": v.testbed,
                "nights": len(v.nights),
                "last_night": v.nights[-1]["night_id"] if v.nights else None,
                "alerts": [asdict(a) for a in v.alerts],
                "states": {s: v.count(s) for s in ("ok", "improved", "suspect", "confirmed", "insufficient", "busy")},
                "gathering": {"have": g.have, "need": g.need} if (g := v.gathering()) else None,
            }
            for v in verdicts
        ],
    }
