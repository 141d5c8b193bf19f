"""Sweeps: a plan's batch and size knobs over several values, each point an ordinary case.

``--sweep batch=1,4,16,64`` (or ``pow2:1..256``) and the workloads' size knobs
(``workloads.base.Workload.knobs``: ``width=256,1024``, ``image=64,128``, ``seq=32,128``). By
default each axis is swept alone through the profile's point (``--grid additive``, as ParaDnn's
axes are read and as qvac's batch axis was added: the cost stays additive); ``--grid full`` takes
the cross product. The profile's point is always in the plan, and a point whose knobs leave the
profile's size as it is *is* that point (ResNet-50 v1.5 stays itself, id and all).
Pure: no I/O.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.cases import KNOB_RE, MAX_KNOB
from bench.errors import UserError
from workloads import WORKLOADS

HELP = (
    "sweep batch or a size knob (mlp: width, depth; cnn: image; transformer: seq, dmodel, layers) over "
    "values, e.g. batch=1,4,16 or batch=pow2:1..256 (batch=...,max adds the largest batch that fits); "
    "repeatable; each point is a case"
)
MAX_BATCH = 0  # a batch value standing for "the largest that fits" (bench.maxbatch resolves it per case)
EVERY_POINT_HELP = (
    "measure every point of a batch sweep (by default a pair's higher batches are left out once its crossover "
    "is bracketed and the speed-up's CI lies above 1 at two more points)"
)
GRIDS = ("additive", "full")
MAX_POINTS = 64  # values of one axis (pow2:1..1048576 has 21)
_POW2 = re.compile(r"pow2:(\d{1,7})\.\.(\d{1,7})")


@dataclass(frozen=True)
class Axis:
    """One swept axis: ``batch`` or a size knob, and its values in increasing order."""

    name: str
    values: tuple[int, ...]


def parse(text: str) -> Axis:
    """``NAME=V1,V2,...`` or ``NAME=pow2:A..B``; a UserError naming what is wrong otherwise.

    For batch, ``max`` may be among the values (or alone): it is kept as :data:`MAX_BATCH`.
    """
    name, eq, spec = text.partition("=")
    name = name.strip().lower()
    if not eq or not KNOB_RE.fullmatch(name):
        raise UserError(f"--sweep takes NAME=VALUES, e.g. batch=1,4,16 or batch=pow2:1..256; got {text!r}")
    spec = spec.strip()
    parts = [p.strip() for p in spec.split(",")]
    with_max = "max" in parts
    if with_max and name != "batch":
        raise UserError(f"--sweep {name}=...max: only batch has a largest value that fits; got {text!r}")
    spec = ",".join(p for p in parts if p != "max")
    if with_max and not spec:
        return Axis(name, (MAX_BATCH,))
    m = _POW2.fullmatch(spec)
    if m:
        lo, hi = int(m[1]), int(m[2])
        if not (1 <= lo <= hi <= MAX_KNOB) or lo & (lo - 1):
            raise UserError(f"--sweep {name}=pow2:A..B needs a power of two 1 <= A <= B <= {MAX_KNOB}; got {spec!r}")
        values = []
        v = lo
        while v <= hi:
            values.append(v)
            v *= 2
    else:
        parts = spec.split(",")
        if not all(re.fullmatch(r"\d{1,7}", p.strip()) for p in parts):
            raise UserError(f"--sweep {name}= takes whole numbers (1,4,16) or pow2:A..B; got {spec!r}")
        values = [int(p) for p in parts]
        if not all(1 <= v <= MAX_KNOB for v in values):
            raise UserError(f"--sweep {name}= values must be from 1 to {MAX_KNOB}; got {spec!r}")
    if len(set(values)) > MAX_POINTS:
        raise UserError(f"--sweep {name}: at most {MAX_POINTS} values; got {len(set(values))}")
    return Axis(name, tuple(sorted(set(values) | ({MAX_BATCH} if with_max else set()))))


def parse_all(texts: Sequence[str], workloads: Mapping[str, Any]) -> tuple[Axis, ...]:
    """Every ``--sweep``: each axis once, each ``batch`` or a knob of one of ``workloads``."""
    axes = tuple(parse(t) for t in texts)
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise UserError(f"--sweep names an axis twice: {', '.join(names)}")
    for a in axes:
        if a.name != "batch" and not any(a.name in w.knobs for w in workloads.values()):
            have = sorted({k for w in workloads.values() for k in w.knobs})
            raise UserError(f"--sweep {a.name}: no chosen workload has that knob (batch, {', '.join(have)})")
    return axes


Point = tuple[int, tuple[tuple[str, int], ...]]  # (per-replica batch, size knobs)


def points(axes: Sequence[Axis], grid: str, workload: Any, profile: str, anchor_batch: int) -> list[Point]:
    """A workload's points: the profile's first, then each axis alone (additive) or every combination (full).

    Axes the workload has no knob for leave it at its profile's point. Knobs that leave the size
    as the profile's are dropped (the point is the profile's own case).

    Raises:
        UserError: a knob value the workload cannot take (e.g. a width its heads do not divide).
    """
    mine = [a for a in axes if a.name == "batch" or a.name in workload.knobs]
    combos: list[dict[str, int]] = [{}]
    if grid == "full" and mine:
        combos += [dict(zip([a.name for a in mine], vs)) for vs in itertools.product(*(a.values for a in mine))]
    else:
        combos += [{a.name: v} for a in mine for v in a.values]
    out: list[Point] = []
    for combo in combos:
        batch = combo.get("batch", anchor_batch)
        knobs = tuple((name, combo[name]) for name in workload.knobs if name in combo)
        try:
            if workload.anchored(profile, knobs):
                knobs = ()
        except ValueError as e:
            raise UserError(f"--sweep: {workload.name}: {e}") from None
        if (batch, knobs) not in out:
            out.append((batch, knobs))
    return out


def cost_line(measured: Sequence[Any], opts: Any) -> str:
    """What a sweep will cost, said before it runs: its points, measured cases and a rough time.

    The time is rough: each case's rounds budget plus 10 s to build, compile and warm up (a
    slow step's first look, or a large model's compile, takes longer).
    """
    per_workload = {
        w: len(points(opts.axes, opts.grid, WORKLOADS[w], opts.profile, opts.anchor_batch(w))) for w in opts.workloads
    }
    minutes = len(measured) * (opts.timing.case_budget_s + 10.0) / 60
    shown = ", ".join(f"{w} {n}" for w, n in per_workload.items())
    return (
        f"{opts.grid} grid, points per workload: {shown}; {len(measured)} cases to measure, roughly {minutes:.0f} min"
    )


def paired(pa: Mapping[str, str], pb: Mapping[str, str]) -> bool:
    """Whether A is held against B: a device against the CPU at one precision, or a precision against fp32 on one device.

    ``pa``/``pb``: two cases' id parts (``Case.id_parts``). The other parts (workload, mode, size,
    backend, XLA) must match; callers group by them or check them.
    """
    if any(pa[k] != pb[k] for k in ("backend", "xla")):
        return False
    device_pair = pa["device"] != "cpu" and pb["device"] == "cpu" and pa["precision"] == pb["precision"]
    precision_pair = pa["precision"] != "fp32" and pb["precision"] == "fp32" and pa["device"] == pb["device"]
    return device_pair or precision_pair


def label(parts: Mapping[str, str]) -> str:
    """A configuration's name in a sweep: device, backend, precision, XLA."""
    return " ".join(p for p in (parts["device"], parts["backend"], parts["precision"], parts["xla"]) if p)


@dataclass(frozen=True)
class Climb:
    """A pair of batch lines (A over B, ``paired``) whose higher points a worker may leave unmeasured.

    ``a``/``b``: (batch, case id) of each side, increasing. Once the pair's crossing is answered
    (``bench.crossover.settled`` over the points below a case's batch), the case is not measured,
    unless another pair of its line still needs it.
    """

    label: str  # "gpu1 fp32 over cpu fp32"
    a: tuple[tuple[int, str], ...]
    b: tuple[tuple[int, str], ...]

    def to_dict(self) -> dict:
        """JSON-ready (a worker plan's ``climb``)."""
        return {"label": self.label, "a": [list(p) for p in self.a], "b": [list(p) for p in self.b]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Climb:
        """Inverse of :meth:`to_dict`."""
        side = lambda k: tuple((int(x), str(i)) for x, i in d[k])  # noqa: E731
        return cls(str(d["label"]), side("a"), side("b"))

    @property
    def ids(self) -> set[str]:
        """Every case id of both lines."""
        return {i for _, i in (*self.a, *self.b)}

    def batch_of(self, case_id: str) -> int:
        """The batch of one of its cases."""
        return next(x for x, i in (*self.a, *self.b) if i == case_id)


def climbs(cases: Sequence[Any]) -> list[Climb]:
    """The pairs of batch lines among ``cases`` (planned, supported ``Case``s) that can stop climbing.

    A line: the train or infer cases, one per device, alone on it, that differ only in their batch.
    Pairs as the report's crossover table pairs them, each sharing at least CLIMB_MIN batches.
    """
    lines: dict[str, tuple[dict[str, str], dict[int, str]]] = {}
    for c in cases:
        if c.mode not in ("train", "infer") or c.tenants != 1:
            continue
        parts, pts = lines.setdefault(c.id_without("batch"), (c.id_parts(), {}))
        pts[c.per_replica_batch] = c.id
    same = ("workload", "size", "mode", "parallelism", "slo", "tenants")
    out = []
    for pa, a in lines.values():
        for pb, b in lines.values():
            if a is b or any(pa[k] != pb[k] for k in same) or not paired(pa, pb):
                continue
            shared = sorted(a.keys() & b.keys())
            if len(shared) >= CLIMB_MIN:
                out.append(
                    Climb(
                        f"{label(pa)} over {label(pb)}",
                        tuple((x, a[x]) for x in shared),
                        tuple((x, b[x]) for x in shared),
                    )
                )
    return out


CLIMB_MIN = 4  # a bracket (2 points) and 2 more past it: a pair with fewer points never stops climbing


def left_unmeasured(case_id: str, mine: Sequence[Climb], rounds: Mapping[str, Sequence[float]]) -> str | None:
    """Why ``case_id`` need not be measured: every pair of its line answered below its batch (None: measure it).

    ``rounds``: per-round throughput of the cases measured so far in this run.
    """
    from bench import crossover

    hits = [c for c in mine if case_id in c.ids]
    whys = []
    for c in hits:
        bx = c.batch_of(case_id)
        pts = [(x, ia, ib) for (x, ia), (_, ib) in zip(c.a, c.b) if x < bx and rounds.get(ia) and rounds.get(ib)]
        why = crossover.settled(
            [x for x, _, _ in pts], [rounds[ia] for _, ia, _ in pts], [rounds[ib] for *_, ib in pts]
        )
        if why is None:
            return None
        whys.append(f"{c.label}: {why}")
    return "; ".join(whys) if whys else None
