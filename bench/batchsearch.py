"""The largest-batch search, pure: doubling then bisection over a probe, its outcomes, the safe batch.

The probes themselves (one-case runs in fresh workers) and the command are ``bench.maxbatch``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from bench.cases import MAX_KNOB, Case

RESOLUTION = 8  # bisect until the bracket is within 1/8 of the batch that fit
HEADROOM = 0.9  # the safe batch's peak stays within this share of the limit


@dataclass(frozen=True)
class Outcome:
    """One probe: the batch, ok / oom / error / timeout, why, and the peaks it reached (bytes)."""

    batch: int
    status: str
    reason: str = ""
    device_peak_bytes: int | None = None
    host_peak_bytes: int | None = None

    @property
    def ok(self) -> bool:
        """The step ran at this batch."""
        return self.status == "ok"

    @property
    def oom(self) -> bool:
        """Out of memory: the backend said so, the limit was passed, or the kernel killed the worker."""
        return self.status in ("oom", "oom-suspect")


@dataclass(frozen=True)
class Search:
    """A search's answer: the largest batch that fit, the first that did not, and every probe in order."""

    max_ok: int | None
    first_fail: int | None
    probes: tuple[Outcome, ...]
    stopped: str  # "bracketed", "limit" (fit up to the largest batch tried), "error", "nothing fits"

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "max_ok": self.max_ok,
            "first_fail": self.first_fail,
            "stopped": self.stopped,
            "probes": [dataclasses.asdict(p) for p in self.probes],
        }


def search(probe: Callable[[int], Outcome], start: int, limit: int = MAX_KNOB) -> Search:
    """Double from ``start`` until a probe runs out of memory (halve where ``start`` does), then bisect.

    The bracket ends within ``1/RESOLUTION`` of the batch that fit (or at adjacent batches). An
    error that is not out of memory ends the search where it is.
    """
    probes: list[Outcome] = []

    def run(b: int) -> Outcome:
        out = probe(b)
        probes.append(out)
        return out

    lo = hi = None
    b = max(1, min(start, limit))
    while True:
        out = run(b)
        if out.ok:
            lo = b
            if b >= limit:
                return Search(lo, None, tuple(probes), "limit")
            if hi is not None:
                break
            b = min(2 * b, limit)
        elif out.oom:
            hi = b
            if lo is not None:
                break
            if b == 1:
                return Search(None, 1, tuple(probes), "nothing fits")
            b //= 2
        else:
            return Search(lo, hi, tuple(probes), "error")
    assert lo is not None and hi is not None
    while hi - lo > max(1, lo // RESOLUTION):
        mid = (lo + hi) // 2
        out = run(mid)
        if out.ok:
            lo = mid
        elif out.oom:
            hi = mid
        else:
            return Search(lo, hi, tuple(probes), "error")
    return Search(lo, hi, tuple(probes), "bracketed")


def safe_batch(s: Search, limit_bytes: float | None) -> int | None:
    """The largest batch that fit with its peak within HEADROOM of ``limit_bytes`` (the largest that fit, without one)."""
    fits = [p for p in s.probes if p.ok]
    if limit_bytes:
        fits = [p for p in fits if (p.device_peak_bytes or p.host_peak_bytes or 0) <= HEADROOM * limit_bytes]
    return max((p.batch for p in fits), default=None)


def outcome(batch: int, info: dict, memory_limit_bytes: float | None) -> Outcome:
    """A probe's outcome from its record's ``extra_info``; over the CPU limit counts as out of memory."""
    status, reason = str(info.get("status") or "error"), str(info.get("reason") or "")
    dev, host = info.get("device_peak_mem_bytes"), info.get("host_peak_rss_bytes")
    if status == "error" and "SIGKILL" in reason:
        status = "oom-suspect"  # the kernel's OOM killer, most often
    if status == "ok" and memory_limit_bytes and info.get("device_kind") == "cpu" and (host or 0) > memory_limit_bytes:
        status, reason = (
            "oom",
            f"peak resident memory {float(host or 0) / 2**30:.2f} GiB passed the limit of {memory_limit_bytes / 2**30:.2f} GiB",
        )
    return Outcome(batch, status, reason[-300:], int(dev) if dev else None, int(host) if host else None)


def key(case: Case, profile: str, memory_limit_bytes: float | None, machine_info: dict, cap: int = MAX_KNOB) -> str:
    """What a search's answer depends on: the case without its batch, profile, limits, device, versions, allocator."""
    env = {k: os.environ.get(k, "") for k in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_FLAGS", "TF_GPU_ALLOCATOR")}
    return json.dumps(
        {
            "case": case.id_without("batch"),
            "profile": profile,
            "memory_limit_bytes": memory_limit_bytes,
            "max_batch_tried": cap,
            "machine": machine_info,
            "env": env,
        },
        sort_keys=True,
    )
