"""The nightly judge: each case's nightly values against a robust, noise-scaled band.

Rule (research: nightly.md section 3.3, re-measured by ``accelbench history simulate``):
baseline = the last ``window`` nights of the same testbed segment (a fingerprint change or an
accepted shift starts a new one); limit = median +- max(k x 1.4826 x MAD, delta x median); a night
beyond the limit on the bad side is *suspect*, ``confirm`` consecutive suspect nights are a
*confirmed* regression. Suspect nights stay out of the baseline, so a real slowdown stays open
until it is fixed or accepted. Before ``min_history`` nights: *insufficient history*. A case that
measured before and fails (error, timeout, oom, numerics) on ``confirm`` nights in a row is a
confirmed *failing* alert. A night whose case ran on a busy machine (other processes used the
CPU or the case's GPUs: ``busy`` in its line) is judged ``busy``, whatever its value: it never
makes a case suspect or confirmed, never breaks or extends a run of bad nights, and never enters
the baseline. Pure functions over night summaries; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from bench.history.rules import Annotation, Rule, Thresholds
from bench.history.summarise import FAILED, new_segment

MAD_SIGMA = 1.4826
OPEN = ("suspect", "confirmed", "failing", "failing-confirmed")


@dataclass(frozen=True)
class Point:
    """One case on one night, as the judge saw it."""

    night_id: str
    date_utc: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    state: str  # ok, improved, suspect, confirmed, insufficient, failing, failing-confirmed, excluded, missing, unsupported, busy
    center: float | None = None
    half: float | None = None
    segment_start: str | None = None  # why a new baseline starts here: "fingerprint" or "accepted"
    baseline_n: int = 0  # nights in the baseline this night was judged against (or gathered into)


@dataclass(frozen=True)
class Alert:
    """An open alert: the run of bad nights that ends on the latest night."""

    testbed: str
    case_id: str
    kind: str  # regression | failing
    state: str  # suspect | confirmed
    nights: int
    first_bad: dict
    last_good: dict | None
    latest: dict
    magnitude: float | None  # latest value / baseline median - 1
    magnitude_ci: tuple[float, float] | None
    reason: str = ""


@dataclass
class CaseJudgement:
    """The points of one case and its open alert, if any."""

    case_id: str
    rule: Rule
    points: list[Point] = field(default_factory=list)
    alert: Alert | None = None

    @property
    def state(self) -> str:
        """The latest night's state ("missing" if the case is not in the latest night)."""
        return self.points[-1].state if self.points else "missing"


def band(baseline: list[float], rule: Rule) -> tuple[float, float]:
    """(median, half width) of the acceptance band."""
    b = np.asarray(baseline[-rule.window :], dtype=float)
    med = float(np.median(b))
    mad = float(np.median(np.abs(b - med)))
    return med, max(rule.k * MAD_SIGMA * mad, rule.delta * abs(med))


def _brief(n: dict) -> dict:
    return {k: n.get(k) for k in ("night_id", "date_utc", "commit", "report", "workflow_run_url")}


def judge_case(
    testbed: str, case_id: str, nights: list[dict], rule: Rule, annotations: Sequence[Annotation] = ()
) -> CaseJudgement:
    """Walk the nights oldest first, judging each on the nights before it only (as it ran)."""
    mine = [a for a in annotations if a.matches(testbed, case_id)]
    excluded = {a.night for a in mine if a.action == "exclude"}
    accepted = {a.night for a in mine if a.action == "accept"}
    j = CaseJudgement(case_id, rule)
    baseline: list[float] = []
    prev: dict | None = None  # the night before (its fingerprint decides a new segment)
    backend = next(
        (str(n["cases"][case_id].get("backend") or "tensorflow") for n in nights if case_id in n["cases"]), None
    )
    bad: list[tuple[dict, dict]] = []  # (night, case line) of the current run of bad nights
    last_good: dict | None = None
    kind = ""
    ever_ok = False
    for night in nights:
        c = night["cases"].get(case_id)
        nid = night["night_id"]
        start = None
        if new_segment(prev, night, backend):
            start = "fingerprint"
            baseline, bad, ever_ok = [], [], False
        prev = night
        if nid in accepted:
            start, baseline, bad = "accepted", [], []
        common = {"night_id": nid, "date_utc": night["date_utc"], "segment_start": start}
        if nid in excluded:
            j.points.append(Point(value=_v(c), ci_low=None, ci_high=None, state="excluded", **common))
            continue
        if c is None or c.get("status") == "unsupported":
            j.points.append(
                Point(value=None, ci_low=None, ci_high=None, state="missing" if c is None else "unsupported", **common)
            )
            continue
        if c.get("status") in FAILED or c.get("value") is None:
            if not ever_ok:
                j.points.append(Point(value=None, ci_low=None, ci_high=None, state="failing", **common))
                continue
            if kind != "failing":
                bad, kind = [], "failing"
            bad.append((night, c))
            state = "failing-confirmed" if len(bad) >= rule.confirm else "failing"
            j.points.append(Point(value=None, ci_low=None, ci_high=None, state=state, **common))
            continue
        v = float(c["value"])
        ever_ok = True
        pt = {"value": v, "ci_low": c.get("ci_low"), "ci_high": c.get("ci_high")}
        if kind == "failing":
            bad, kind = [], ""
        if c.get("busy"):  # slow because something else ran: never evidence, never baseline
            center, half = band(baseline, rule) if len(baseline) >= rule.min_history else (None, None)
            j.points.append(Point(state="busy", center=center, half=half, baseline_n=len(baseline), **pt, **common))
            continue
        if len(baseline) < rule.min_history:
            baseline.append(v)
            last_good, bad = night, []
            j.points.append(Point(state="insufficient", baseline_n=len(baseline), **pt, **common))
            continue
        center, half = band(baseline, rule)
        half = max(half, float(c.get("noise_floor") or 0.0) * center)  # a serve rate is known to its bracket
        judged_on = len(baseline)
        higher = c.get("direction", "higher") == "higher"
        worse = v < center - half if higher else v > center + half
        better = v > center + half if higher else v < center - half
        if worse:
            if kind != "regression":
                bad, kind = [], "regression"
            bad.append((night, c))
            state = "confirmed" if len(bad) >= rule.confirm else "suspect"
        else:
            bad, kind = [], ""
            baseline.append(v)
            last_good = night
            state = "improved" if better else "ok"
        j.points.append(Point(state=state, center=center, half=half, baseline_n=judged_on, **pt, **common))
    if bad and j.points and j.points[-1].state in OPEN:
        j.alert = _alert(testbed, case_id, kind, bad, last_good, j.points[-1], rule)
    return j


def _v(c: dict | None) -> float | None:
    return None if c is None or c.get("value") is None else float(c["value"])


def _alert(testbed, case_id, kind, bad, last_good, latest_point: Point, rule: Rule) -> Alert:
    latest_night, latest = bad[-1]
    mag = ci = None
    if kind == "regression" and latest_point.center:
        mag = latest["value"] / latest_point.center - 1
        lo, hi = latest.get("ci_low"), latest.get("ci_high")
        if lo is not None and hi is not None:
            ci = (lo / latest_point.center - 1, hi / latest_point.center - 1)
    return Alert(
        testbed=testbed,
        case_id=case_id,
        kind=kind,
        state="confirmed" if len(bad) >= rule.confirm else "suspect",
        nights=len(bad),
        first_bad=_brief(bad[0][0]),
        last_good=_brief(last_good) if last_good else None,
        latest=_brief(latest_night),
        magnitude=mag,
        magnitude_ci=ci,
        reason=str(latest.get("reason") or "") if kind == "failing" else "",
    )


JUDGED = ("ok", "improved", "suspect", "confirmed")


@dataclass(frozen=True)
class Gathering:
    """The judge is not judging yet: ``have`` of the ``need`` baseline nights, for ``cases`` cases."""

    have: int
    need: int
    cases: int
    rule: Rule

    def line(self) -> str:
        """``judge: 3 of 10 nights gathered, not judging yet``."""
        return f"judge: {self.have} of {self.need} nights gathered, not judging yet"

    def watches(self) -> str:
        """What the judge will watch once it has its nights."""
        r = self.rule
        return (
            f"From then on each case's throughput is held against the median of its last {r.window} nights "
            f"+- max({r.k:g} x MAD, {r.delta:.0%}); {r.confirm} bad nights in a row confirm a regression, and a case "
            f"that measured before and fails {r.confirm} nights in a row is a failing alert."
        )


@dataclass
class TestbedVerdict:
    """Everything the judge says about one testbed."""

    testbed: str
    nights: list[dict]
    cases: dict[str, CaseJudgement]

    @property
    def alerts(self) -> list[Alert]:
        """Open alerts, confirmed first, largest magnitude first."""
        al = [c.alert for c in self.cases.values() if c.alert]
        return sorted(al, key=lambda a: (a.state != "confirmed", a.magnitude if a.magnitude is not None else 0))

    @property
    def confirmed(self) -> list[Alert]:
        """Confirmed open alerts (what turns the judge red)."""
        return [a for a in self.alerts if a.state == "confirmed"]

    def count(self, state: str) -> int:
        """How many cases are in ``state`` on the latest night."""
        return sum(1 for c in self.cases.values() if c.state == state)

    @property
    def last_good_night(self) -> dict | None:
        """The latest complete night with no suspect, confirmed or failing case."""
        bad = {"suspect", "confirmed", "failing", "failing-confirmed"}
        for i in range(len(self.nights) - 1, -1, -1):  # every case has one point per night, in order
            if self.nights[i].get("status") == "complete" and not any(
                c.points[i].state in bad for c in self.cases.values()
            ):
                return self.nights[i]
        return None

    def gathering(self) -> Gathering | None:
        """The judge still gathering its baseline for every case on the latest night; None once it judges one.

        (A case judged on the latest night: ok, improved, suspect or confirmed.)
        """
        latest = [c for c in self.cases.values() if c.points]
        if not latest or any(c.state in JUDGED for c in latest):
            return None
        waiting = [
            c for c in latest if c.state in ("insufficient", "busy") and c.points[-1].baseline_n < c.rule.min_history
        ]
        if not waiting:
            return None
        have = max(c.points[-1].baseline_n for c in waiting)
        need = max(c.rule.min_history for c in waiting)
        rule = waiting[0].rule
        return Gathering(have, need, len(waiting), rule)

    def expected_false_alerts(self, rate_per_case_night: float = 0.001) -> float:
        """Expected false confirmed alerts per night: cases judged x the rule's measured A/A rate."""
        return rate_per_case_night * sum(1 for c in self.cases.values() if c.state not in ("missing", "unsupported"))


def judge_testbed(
    testbed: str, nights: list[dict], thresholds: Thresholds, annotations: list[Annotation]
) -> TestbedVerdict:
    """Judge every case ever seen on the testbed."""
    ids: dict[str, None] = {}
    for n in nights:
        ids.update(dict.fromkeys(n["cases"]))
    cases = {cid: judge_case(testbed, cid, nights, thresholds.rule(testbed, cid), annotations) for cid in ids}
    return TestbedVerdict(testbed, nights, cases)
