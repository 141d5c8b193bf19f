"""``accelbench merge``: the shards of one night (``run --shard i/n`` on several runners) -> one results file.

Shards must come from the same testbed (machine fingerprint) and commit and hold disjoint cases;
the merged run is complete only if every shard is, and records which runs it was made from.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

from bench import storage
from bench.errors import UserError


def add_parser(sub) -> None:
    """Register ``merge`` on the main parser."""
    m = sub.add_parser("merge", help="merge the shards of one run (run --shard i/n) into one results file")
    m.add_argument("files", nargs="+", help="results JSON files of the shards")
    m.add_argument("-o", "--output", required=True, help="merged results file (must not exist)")
    m.add_argument("--run-id", help="id of the merged run (default: the first shard's id + '-merged')")


def merge(docs: list[tuple[str, dict]], run_id: str | None = None) -> dict:
    """One document from shard documents; ResultsError (a UserError) naming the file that does not fit."""
    if not docs:
        raise UserError("nothing to merge")
    storage.check_shards(docs)
    first = docs[0][1]
    out = copy.deepcopy(first)
    out["benchmarks"], out["unmeasured"] = [], []
    # each shard's backends' versions (check_shards: they agree where two shards both have one); the first's otherwise
    ab = out.setdefault("machine_info", {}).setdefault("accelbench", {})
    for _, doc in docs[1:]:
        ab.update({k: v for k, v in doc.get("machine_info", {}).get("accelbench", {}).items() if k not in ab})
    planned: list[str] = []
    for _, doc in docs:
        for rec in storage.case_records(doc):
            storage.add_record(out, copy.deepcopy(dict(rec.record)))
        planned += [c for c in doc["run"].get("planned", []) if c not in planned]
    runs = [d["run"] for _, d in docs]
    out["run"].update(
        id=run_id or f"{first['run']['id']}-merged",
        start=min(str(r.get("start")) for r in runs),
        end=max(str(r.get("end")) for r in runs) if all(r.get("end") for r in runs) else None,
        status="complete" if all(r.get("status") == "complete" for r in runs) else "incomplete",
        planned=planned,
        merged_from=[{"id": r["id"], "shard": r.get("shard"), "runner_name": r.get("runner_name")} for r in runs],
        shard=None,
    )
    for raw in storage.records(out):  # the merged document being written: its raw records
        raw["extra_info"]["run_id"] = out["run"]["id"]
    return out


def command(a: argparse.Namespace) -> int:
    """Merge shards into a new file (never over an existing one)."""
    out = Path(a.output)
    if a.run_id and not storage.RUN_ID_RE.match(a.run_id):
        raise UserError(f"--run-id must be letters, digits, '.', '_' or '-'; got {a.run_id!r}")
    if out.exists():
        raise UserError(f"{out}: exists; merge writes a new file")
    doc = merge(storage.load_all(a.files), a.run_id)
    storage.write_atomic(out, doc)
    print(f"merged {len(a.files)} shards ({len(storage.case_records(doc))} cases, run {doc['run']['status']}) -> {out}")
    return 0
