"""The history store: a folder (a data branch in CI) of small, append-only, reviewable files.

    testbeds/<testbed>.json                 fingerprints seen, each with its first night
    nights/<testbed>/<YYYY>/<YYYY-MM>.jsonl.gz   one summary line per night (bench.history.summarise)
    reports/<testbed>/<night_id>.html.gz    the night's self-contained report
    annotations.json                        accepted shifts and excluded nights, with who and why
    thresholds.json                         per-testbed / per-case overrides of the judge's rule

Every file is written whole to a temporary file and renamed over the old one, so a killed
``history add`` leaves the store as it was before or after, never half-written. A night's line is
written after its report, and nothing at all is written unless every input file is valid.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from bench.history.rules import ACTIONS, Annotation, Rule, Thresholds, check_rule
from bench.history.summarise import TESTBED_RE, HistoryError
from bench.storage import write_bytes_atomic


def _gzip(text: str) -> bytes:
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)  # mtime 0: identical bytes for identical text


class Store:
    """A history folder; ``create`` makes it if missing (``history add``), readers require it."""

    def __init__(self, root: str | Path, create: bool = False):
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise HistoryError(f"{self.root}: not a folder")
        if not self.root.exists():
            if not create:
                raise HistoryError(f"{self.root}: no such history store (create it with 'accelbench history add')")
            self.root.mkdir(parents=True)

    # ----- nights
    def testbeds(self) -> list[str]:
        """Testbeds with at least one night."""
        d = self.root / "nights"
        return sorted(p.name for p in d.iterdir() if p.is_dir() and TESTBED_RE.match(p.name)) if d.is_dir() else []

    def _month_file(self, testbed: str, date_utc: str) -> Path:
        return self.root / "nights" / testbed / date_utc[:4] / f"{date_utc[:7]}.jsonl.gz"

    def _read_file(self, path: Path) -> Iterator[dict]:
        try:
            text = gzip.decompress(path.read_bytes()).decode()
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise HistoryError(f"{path}: not a readable gzip file ({e}); restore it from the data branch") from None
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                night = json.loads(line)
            except json.JSONDecodeError as e:
                raise HistoryError(f"{path}: line {n}: corrupt history line ({e.msg}, column {e.colno})") from None
            if not isinstance(night, dict) or not {"night_id", "date_utc", "cases", "fingerprint_hash"} <= night.keys():
                raise HistoryError(f"{path}: line {n}: not a night summary (needs night_id, date_utc, cases)")
            if not isinstance(night["cases"], dict):
                raise HistoryError(f"{path}: line {n}: 'cases' must be an object")
            yield night

    def nights(self, testbed: str) -> list[dict]:
        """Every night of a testbed, oldest first."""
        d = self.root / "nights" / testbed
        out = [n for p in sorted(d.glob("*/*.jsonl.gz")) for n in self._read_file(p)] if d.is_dir() else []
        return sorted(out, key=lambda n: (n["date_utc"], n["night_id"]))

    def run_ids(self, testbed: str) -> set[str]:
        """Run ids already stored for a testbed."""
        return {r for n in self.nights(testbed) for r in n.get("run_ids", [n["night_id"]])}

    def add(self, night: dict, report_html: str | None = None) -> Path:
        """Append one night (its report first, then its line, then the testbed registry)."""
        tb = night["testbed"]
        if report_html is not None:
            rel = f"reports/{tb}/{night['night_id']}.html.gz"
            write_bytes_atomic(self.root / rel, _gzip(report_html))
            night = {**night, "report": rel}
        path = self._month_file(tb, night["date_utc"])
        line = json.dumps(night, sort_keys=True, allow_nan=False) + "\n"
        # a gzip file may hold several members (RFC 1952): append the night as one more member, so
        # adding a night never recompresses the month; the whole file is still replaced atomically
        old = path.read_bytes() if path.exists() else b""
        write_bytes_atomic(path, old + _gzip(line))
        self._register(night)
        return path

    def _register(self, night: dict) -> None:
        path = self.root / "testbeds" / f"{night['testbed']}.json"
        reg = json.loads(path.read_text()) if path.exists() else {"name": night["testbed"], "fingerprints": []}
        if not any(f["hash"] == night["fingerprint_hash"] for f in reg["fingerprints"]):
            reg["fingerprints"].append(
                {
                    "hash": night["fingerprint_hash"],
                    "fingerprint": night["fingerprint"],
                    "first_night": night["night_id"],
                }
            )
        write_bytes_atomic(path, (json.dumps(reg, indent=1, sort_keys=True) + "\n").encode())

    def report(self, rel: str) -> str | None:
        """A stored night report's HTML, or None if missing."""
        p = self.root / rel
        if not rel.startswith("reports/") or ".." in rel or not p.is_file():
            return None
        try:
            return gzip.decompress(p.read_bytes()).decode()
        except (OSError, EOFError, UnicodeDecodeError):
            return None

    # ----- annotations and thresholds: JSON files, reviewed like code
    def annotations(self) -> list[Annotation]:
        """Accepted shifts and excluded nights."""
        doc = self._json("annotations.json", {"annotations": []})
        out = []
        for i, a in enumerate(doc.get("annotations", [])):
            where = f"{self.root / 'annotations.json'}: annotation {i + 1}"
            try:
                ann = Annotation(**a)
            except TypeError as e:
                raise HistoryError(f"{where}: {e}") from None
            if ann.action not in ACTIONS or not ann.why.strip():
                raise HistoryError(f"{where}: action must be one of {', '.join(ACTIONS)} and 'why' must say why")
            out.append(ann)
        return out

    def annotate(self, ann: Annotation) -> None:
        """Append an annotation (``history annotate``)."""
        if ann.action not in ACTIONS:
            raise HistoryError(f"action must be one of {', '.join(ACTIONS)}; got {ann.action!r}")
        if not ann.why.strip():
            raise HistoryError("--why must say why (it is shown beside the shift on the site)")
        known = {n["night_id"] for n in self.nights(ann.testbed)} if TESTBED_RE.match(ann.testbed) else set()
        if ann.night not in known:
            raise HistoryError(f"no night {ann.night!r} for testbed {ann.testbed!r} in {self.root}")
        current = self.annotations()
        doc = {"annotations": [asdict(a) for a in current]}
        stamp = ann.date or datetime.now(timezone.utc).isoformat(timespec="seconds")
        doc["annotations"].append({**asdict(ann), "date": stamp})
        write_bytes_atomic(self.root / "annotations.json", (json.dumps(doc, indent=1) + "\n").encode())

    def thresholds(self) -> Thresholds:
        """The default rule and overrides from thresholds.json (missing file = defaults)."""
        doc = self._json("thresholds.json", {})
        where = str(self.root / "thresholds.json")
        default = doc.get("default", {})
        check_rule({**asdict(Rule()), **default}, f"{where}: default")
        overrides = doc.get("overrides", [])
        if not isinstance(overrides, list):
            raise HistoryError(f"{where}: 'overrides' must be a list")
        for i, o in enumerate(overrides):
            extra = set(o) - set(asdict(Rule())) - {"testbed", "cases", "why"}
            if extra:
                raise HistoryError(f"{where}: override {i + 1}: unknown keys {sorted(extra)}")
            check_rule({**asdict(Rule()), **default, **{k: v for k, v in o.items() if k in asdict(Rule())}}, where)
        return Thresholds(Rule(**{**asdict(Rule()), **default}), overrides)

    def _json(self, name: str, empty: dict) -> dict:
        p = self.root / name
        if not p.exists():
            return empty
        try:
            doc = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise HistoryError(f"{p}: not valid JSON ({e})") from None
        if not isinstance(doc, dict):
            raise HistoryError(f"{p}: expected a JSON object")
        return doc
