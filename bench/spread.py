"""The run-level interval: how far a rerun in a fresh worker may land, from second workers of this run.

The CI of a case's median describes rounds inside one worker. A rerun starts a fresh process,
compiles afresh (XLA's autotuning is nondeterministic), and meets other clocks: the H200's
smoke MLP measured 541,000 samples/s [523,000-556,000] in a run and 434,000 in a fresh worker
minutes later. Here some cases (a rotating share, or all with ``--repeats N``) run again in
independent workers; the spread of their workers' medians, pooled per device kind, gives the
between-worker standard deviation of log throughput, and every measured case of that kind
gets a 95% prediction interval for a rerun's median:

    median x exp(+- t(0.975, df) x sigma x sqrt(2))

(its own worker and the rerun's each carry one sigma; df = the pooled degrees of freedom).
Pure: no I/O, records in and figures out.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scipy import stats as sps

from bench.profiles import Timing

SPREAD_SHARE = 4  # without --repeats: one case in this many (rotating with the run id) runs a second worker
MIN_CASES = 3  # and at least this many (df 3: t = 3.2; one pair alone would give t = 12.7)
METHOD = "rerun interval: between-worker spread of log medians, pooled per device kind (t, sqrt 2)"


def chosen(
    run_id: str,
    case_ids: Sequence[str],
    repeats: int,
    costs: Mapping[str, float] | None = None,
    share: int = SPREAD_SHARE,
) -> list[str]:
    """The cases that run again in fresh workers: all of them with ``repeats`` > 1, else a rotating share.

    The share is one case in ``share`` (never fewer than ``MIN_CASES``, or all of a smaller run),
    drawn in the order of a hash of the run id and the case id, so each run picks others. With
    ``costs`` (each case's wall time in its first worker) the share costs at most 1 / ``share``
    of the run's time: only cases within their fair part of it (that time over the picks) are
    drawn, so a 10 s CNN step on two CPU cores never costs five quick pairs; the cheapest make
    up ``MIN_CASES`` where too few are within it. The spread is pooled per device kind, so the
    dear cases get the interval the quick ones measure.
    """
    if repeats > 1:
        return list(case_ids)
    if not case_ids or repeats < 1:  # 0: no further workers at all (a quick check)
        return []

    def h(c: str) -> str:
        return hashlib.sha256(f"{run_id}/{c}".encode()).hexdigest()

    want = max(MIN_CASES, math.ceil(len(case_ids) / share))
    cost = {c: float((costs or {}).get(c) or 0.0) for c in case_ids}
    fair = sum(cost.values()) / share / want if costs else math.inf
    picks = [c for c in sorted(case_ids, key=h) if cost[c] <= fair][:want]
    for c in sorted((c for c in case_ids if c not in picks), key=lambda c: (cost[c], h(c))):
        if len(picks) >= min(MIN_CASES, len(case_ids)):
            break
        picks.append(c)
    return [c for c in case_ids if c in picks]  # in run order


def repeat_timing(timing: Timing) -> Timing:
    """A second worker's timing: rounds as long as the first's, up to the first look, no latency steps.

    Its median is the figure the spread needs (its own CI is not shown): the first look's rounds
    give it, and the cap's would only cost time.
    """
    return timing.first_look_only()


@dataclass(frozen=True)
class Spread:
    """Between-worker spread of one device kind: sigma of log medians, its degrees of freedom, the cases behind it."""

    sigma_log: float
    df: int
    cases: int

    def half_factor(self, confidence: float = 0.95) -> float:
        """``exp(t x sigma x sqrt 2)``: a rerun's median lies within median / f .. median x f."""
        t = float(sps.t.ppf(0.5 + confidence / 2, self.df))
        return math.exp(t * self.sigma_log * math.sqrt(2))


def pooled(groups: Iterable[Sequence[float]]) -> Spread | None:
    """Pooled within-case variance of log worker medians over cases with two or more workers; None if none."""
    ss, df, n = 0.0, 0, 0
    for medians in groups:
        logs = [math.log(m) for m in medians if m and m > 0]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        ss += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
        n += 1
    return Spread(math.sqrt(ss / df), df, n) if df else None


def worker_medians(info: Mapping) -> list[float]:
    """A record's medians: its own worker's first, then each further worker that measured it."""
    out = [float(info["samples_per_s"])] if info.get("samples_per_s") else []
    out += [float(w["samples_per_s"]) for w in info.get("repeat_workers") or [] if w.get("samples_per_s")]
    return out


def annotate(infos: Sequence[dict]) -> dict[str, dict]:
    """Add ``run_ci_low`` / ``run_ci_high`` (the rerun interval) to every measured train or infer case.

    Returns the spread per device kind (for the run block). Cases of a kind with no second
    worker get nothing: no interval is printed where the run cannot resolve one.
    """
    kinds: dict[str, list[list[float]]] = {}
    for e in infos:
        if eligible(e):
            kinds.setdefault(str(e["device_kind"]), []).append(worker_medians(e))
    out: dict[str, dict] = {}
    for kind, groups in kinds.items():
        s = pooled(groups)
        if s is None:
            continue
        f = s.half_factor()
        out[kind] = {"sigma_log": s.sigma_log, "df": s.df, "cases": s.cases, "factor": f, "method": METHOD}
        for e in infos:
            if eligible(e) and e["device_kind"] == kind:
                e["run_ci_low"], e["run_ci_high"] = e["samples_per_s"] / f, e["samples_per_s"] * f
                e["run_spread_cases"] = s.cases
    return out


def eligible(e: Mapping) -> bool:
    """A record whose worker median the spread uses: a measured train or infer case alone on its device."""
    return e.get("status") == "ok" and e.get("mode") in ("train", "infer") and int(e.get("tenants") or 1) == 1
