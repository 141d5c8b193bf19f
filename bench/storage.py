"""The results format: pytest-benchmark JSON, extended, versioned, written atomically.

A results file is what ``pytest-benchmark compare`` reads (``machine_info``, ``commit_info``,
``benchmarks``, ``datetime``, ``version``) plus ``schema_version``, a ``run`` block and
``unmeasured``: the cases without timing statistics (unsupported, failed), which
pytest-benchmark would refuse inside ``benchmarks``. Every case record has the same shape:
``name``, ``fullname`` (``bench/suite.py::test_case[ID]`` for every case), ``params``,
``extra_info`` (case fields, status, reason, figures) and, for measured cases, pytest-benchmark's
``stats``. Everything else reads results through here.

Schema 2: ``stats`` describe the time of one *sample* (pytest-benchmark's "iteration"): a round
of K steps of B samples took ``t`` seconds, so ``stats.data`` holds ``t / (K * B)``,
``stats.iterations`` is ``K * B`` (pytest-benchmark's own rule: stats are a round's time over
its iterations) and ``stats.ops`` is samples/s. Tools that read pytest-benchmark JSON
(github-action-benchmark, Bencher, ``pytest-benchmark compare``) then see throughput. Schema 1
stored round times in ``stats``; ``load`` converts such files on read.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bench import upgrades
from bench.cases import Case, knobs_text
from bench.columns import BOOL_COLUMNS, COLUMN_DEFAULTS, COLUMNS, LIST_COLUMNS
from bench.errors import UserError
from bench.fingerprint import describe_differences, machine_fingerprint

SUITE_NODE = "bench/suite.py::test_case"

SCHEMA_VERSION = 3
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")  # run ids name files: plain names only
FORMAT = "accelbench-results"

MEASURED_STATUSES = ("ok",)
# slo_missed: a serve case that was measured (service times, capacity) and whose latency SLO no rate meets
# skipped: a batch sweep's higher point left unmeasured once its crossings were answered below it (bench.sweep)
STATUSES = ("ok", "slo_missed", "unsupported", "skipped", "numerics", "oom", "timeout", "error")
NOT_FAILED = ("ok", "slo_missed", "unsupported", "skipped")  # statuses that are answers, not failures


class ResultsError(UserError):
    """A results file that cannot be used; the message names the file and the problem."""


def suite_name(case_id: str) -> tuple[str, str]:
    """(name, fullname) of a case's record, the same form measured or not."""
    return f"test_case[{case_id}]", f"{SUITE_NODE}[{case_id}]"


def per_sample_stats(round_times_s: list[float], samples_per_round: int) -> dict:
    """pytest-benchmark's ``stats`` block of one sample's time (see the module doc), from round times.

    The statistics are pytest-benchmark's own (its ``Stats`` class), so quartiles, outliers and
    ``ops`` mean what that tool means by them; ``iterations`` = samples per round.
    """
    from pytest_benchmark.stats import Stats

    st = Stats()
    for t in round_times_s:
        st.update(t / samples_per_round)
    out = st.as_dict()
    out["data"] = list(st.data)
    out["iterations"] = samples_per_round
    return out


def _update_to_2(doc: dict) -> dict:
    """Schema 1 -> 2: round-time ``stats`` become per-sample, every fullname the suite's."""
    for r in records(doc):
        e = r.get("extra_info") or {}
        if "case_id" in e:
            r["name"], r["fullname"] = suite_name(e["case_id"])
        st = r.get("stats")
        n = int(e.get("global_batch") or 0) * int(e.get("steps_per_round") or 0)
        if st and st.get("data") and n > 0:
            r["stats"] = per_sample_stats([float(t) for t in st["data"]], n)
    return doc


def _update_to_3(doc: dict) -> dict:
    """Schema 2 -> 3: FLOPs as executed, GPU cost analysis renamed, short-window energy from instant power.

    Training FLOPs become the executed count (the old 3 x forward kept as model FLOPs); XLA's cost analysis of a GPU step, which misses the library calls, is no longer a FLOP column;
    energy read from the counter over a window too short for it comes from the instant-power trace
    (each step in ``bench.upgrades``).
    """
    profile = (doc.get("run") or {}).get("profile")
    for r in records(doc):
        e = r.get("extra_info") or {}
        upgrades.gpu_cost_analysis(e)
        upgrades.short_window_energy(e)
        upgrades.executed_flops(e, profile)
        upgrades.serve_outcome(e)
        upgrades.mix_rate(r)
    return doc


# Version N -> ``update_to_{N+1}`` lifting a document from N to N+1; chained by ``load``.
MIGRATIONS: dict[int, Callable[[dict], dict]] = {1: _update_to_2, 2: _update_to_3}


def new_document(run: dict, machine_info: dict, commit_info: dict, datetime_iso: str, version: str) -> dict:
    """An empty results document."""
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "machine_info": machine_info,
        "commit_info": commit_info,
        "benchmarks": [],
        "unmeasured": [],
        "datetime": datetime_iso,
        "version": version,
        "run": run,
    }


def case_id_of(record: dict) -> str:
    """The case id of a record."""
    return record["extra_info"]["case_id"]


def records(doc: dict) -> Iterator[dict]:
    """Every case record, measured first, in stored order."""
    yield from doc.get("benchmarks", [])
    yield from doc.get("unmeasured", [])


def case_ids(doc: dict) -> set[str]:
    """Ids of every case present."""
    return {case_id_of(r) for r in records(doc)}


def add_record(doc: dict, record: dict) -> None:
    """Insert or replace a case record (measured ones into ``benchmarks``)."""
    cid = case_id_of(record)
    for key in ("benchmarks", "unmeasured"):
        doc[key] = [r for r in doc.get(key, []) if case_id_of(r) != cid]
    measured = record["extra_info"]["status"] in MEASURED_STATUSES and record.get("stats")
    doc["benchmarks" if measured else "unmeasured"].append(record)


REPEAT_FIELDS = (
    "status",
    "reason",
    "samples_per_s",
    "samples_per_s_ci_low",
    "samples_per_s_ci_high",
    "rounds",
    "ci_looks",  # a second worker looks once (bench.spread.repeat_timing)
    "stop_reason",
    "compile_s",
    "compile_cache",
    "case_wall_s",
)


def add_repeat(doc: dict, record: dict) -> None:
    """A further worker's measurement of a recorded case: appended to its ``repeat_workers`` (bench.spread).

    The case's own figures stay its first worker's; a repeat never replaces or removes a record.
    """
    cid, e = case_id_of(record), record["extra_info"]
    for key in ("benchmarks", "unmeasured"):
        for r in doc.get(key, []):
            if case_id_of(r) == cid:
                r["extra_info"].setdefault("repeat_workers", []).append({k: e.get(k) for k in REPEAT_FIELDS})
                return


def _clean(obj):
    """NaN/inf are not JSON: store them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, rename over ``path``: all or nothing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # an ordinary file, not mkstemp's 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def write_atomic(path: str | Path, doc: dict) -> None:
    """A results document as JSON, atomically (NaN/inf stored as null)."""
    write_bytes_atomic(path, json.dumps(_clean(doc), indent=1, allow_nan=False).encode())


def load_all(paths: list[str]) -> list[tuple[str, dict]]:
    """(path, document) of each results file, in order; ResultsError on the first that cannot be used."""
    return [(p, load(p)) for p in paths]


def load(path: str | Path) -> dict:
    """Read and validate a results file; ResultsError (one line, names the file) if unusable."""
    path = Path(path)
    if not path.exists():
        raise ResultsError(f"{path}: no such results file")
    if path.is_dir():
        raise ResultsError(f"{path}: is a folder, expected a results .json file")
    try:
        doc = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise ResultsError(f"{path}: not a text file, expected accelbench results JSON") from None
    except json.JSONDecodeError as e:
        raise ResultsError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno}); truncated or not a results file"
        ) from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise ResultsError(f"{path}: not an accelbench results file (no schema_version)")
    v = doc["schema_version"]
    if not isinstance(v, int) or v < 1:
        raise ResultsError(f"{path}: schema_version must be a positive integer, got {v!r}")
    if v > SCHEMA_VERSION:
        raise ResultsError(
            f"{path}: schema_version {v} is newer than this accelbench understands ({SCHEMA_VERSION}); upgrade accelbench"
        )
    while v < SCHEMA_VERSION:
        doc = MIGRATIONS[v](doc)
        v += 1
        doc["schema_version"] = v
    for key in ("benchmarks", "run", "machine_info"):
        if key not in doc:
            raise ResultsError(f"{path}: accelbench results without '{key}'; the file is damaged")
    doc.setdefault("unmeasured", [])
    for r in records(doc):
        if not isinstance(r, dict) or "case_id" not in r.get("extra_info", {}) or "status" not in r["extra_info"]:
            raise ResultsError(f"{path}: a case record without extra_info.case_id/status; the file is damaged")
        try:
            CaseRecord.of(r)
        except (UserError, ValueError, TypeError, KeyError) as e:
            raise ResultsError(f"{path}: case {r['extra_info']['case_id']!r} is damaged ({e})") from None
    return doc


def commit_of(doc: dict) -> str | None:
    """The commit a run measured: the CI's checkout, else pytest-benchmark's commit info."""
    ci = doc.get("run", {}).get("ci") or {}
    return ci.get("sha") or (doc.get("commit_info") or {}).get("id")


def check_shards(docs: list[tuple[str, dict]]) -> dict:
    """Shards of one run or night: the same testbed fingerprint and commit, no case twice; else ResultsError.

    Returns their fingerprint: each shard's fields (a backend only one shard ran is no difference).
    """
    first_path, first = docs[0]
    fp: dict = {}
    commit = commit_of(first)
    seen: dict[str, str] = {}
    for path, doc in docs:
        mine = machine_fingerprint(doc)
        diff = describe_differences(mine, fp)  # the same machine and software in every field both have
        if diff:
            raise ResultsError(
                f"{path}: another machine or software than the shards before it, from {first_path} on "
                f"({'; '.join(diff)}); shard only across identical testbeds"
            )
        fp = {**mine, **fp}
        if commit_of(doc) != commit:
            raise ResultsError(f"{path}: commit {commit_of(doc)} differs from {first_path}'s {commit}")
        for rec in records(doc):
            cid = case_id_of(rec)
            if cid in seen:
                raise ResultsError(
                    f"{path}: case {cid} is in two results files (also {seen[cid]}); shards must not overlap"
                )
            seen[cid] = path
    return fp


@dataclass(frozen=True)
class CaseRecord:
    """One case of a results file as every consumer reads it (after ``load`` migrated the file).

    ``case`` is rebuilt from the stored fields, so related cases and device counts come from
    fields, never from editing the id; ``info`` is the record's ``extra_info``, read-only.
    """

    case: Case
    id: str  # as stored (the id the case had when it ran)
    status: str
    reason: str
    info: Mapping[str, Any]
    per_sample_s: tuple[float, ...]  # pytest-benchmark's stats.data (schema 2); () unless measured
    samples_per_round: int
    record: Mapping[str, Any]  # the stored record, read-only (merge copies it whole)

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> CaseRecord:
        """Read one stored record; ValueError (or UserError) when its case fields are unusable."""
        e = record["extra_info"]
        stats = record.get("stats") or {}
        return cls(
            case=Case.of(e),
            id=str(e["case_id"]),
            status=str(e["status"]),
            reason=str(e.get("reason") or ""),
            info=MappingProxyType(e),
            per_sample_s=tuple(float(t) for t in stats.get("data") or ()),
            samples_per_round=int(stats.get("iterations") or 1),
            record=MappingProxyType(record),  # type: ignore[arg-type]
        )

    @property
    def ok(self) -> bool:
        """Measured (status ``ok``)."""
        return self.status in MEASURED_STATUSES

    @property
    def failed(self) -> bool:
        """Planned and runnable here, but the run could not measure it (oom, timeout, error, numerics)."""
        return self.status not in NOT_FAILED

    @property
    def samples_per_s(self) -> float | None:
        """The case's median throughput, or None unless measured."""
        v = self.info.get("samples_per_s")
        return float(v) if self.ok and v is not None else None

    @property
    def round_times_s(self) -> list[float]:
        """Per-round wall times (s): per-sample time x samples per round."""
        return [t * self.samples_per_round for t in self.per_sample_s]

    @property
    def throughput_samples(self) -> list[float]:
        """Per-round global throughput (samples/s)."""
        return [1.0 / t for t in self.per_sample_s if t > 0]

    def get(self, name: str, default: Any = None) -> Any:
        """A figure of ``extra_info`` (None where not measured)."""
        return self.info.get(name, default)


def case_records(doc: dict) -> list[CaseRecord]:
    """Every case of a loaded document as a :class:`CaseRecord`, measured first, in stored order."""
    return [CaseRecord.of(r) for r in records(doc)]


def status_sets(doc: dict) -> dict[str, set[str]]:
    """Case ids by status: ``ok``, ``failed`` (could not be measured), ``unsupported``."""
    out: dict[str, set[str]] = {
        "ok": set(),
        "failed": set(),
        "unsupported": set(),
        "slo_missed": set(),
        "skipped": set(),
    }
    for r in case_records(doc):
        out["ok" if r.ok else "failed" if r.failed else r.status].add(r.id)
    return out


def round_times(record: dict) -> list[float]:
    """Per-round times (s) of a measured record (per-sample time x samples per round); [] otherwise."""
    return CaseRecord.of(record).round_times_s


def tidy_rows(doc: dict) -> list[dict]:
    """One row per case with ``COLUMNS``; None = not measured (never 0 for unknown).

    ``BOOL_COLUMNS`` hold True/False on every row; ``LIST_COLUMNS`` hold ``;``-joined values.
    """
    run_id = doc.get("run", {}).get("id")
    rows = []
    for r in case_records(doc):
        row = {c: r.get(c) for c in COLUMNS}
        row.update({c: v for c, v in COLUMN_DEFAULTS.items() if row.get(c) is None})
        row.update({c: bool(row.get(c)) for c in BOOL_COLUMNS})
        if row.get("knobs"):
            row["knobs"] = knobs_text(row["knobs"])
        for c in LIST_COLUMNS:
            if isinstance(row.get(c), (list, tuple)):
                row[c] = ";".join("" if v is None else str(v) for v in row[c])
        row["run_id"] = run_id
        rows.append(row)
    return rows
