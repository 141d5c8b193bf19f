"""``accelbench merge``: the shards of one night (``run --shard i/n`` on several runners) -> one results file.

Shards must come from the same testbed (machine fingerprint) and commit and hold disjoint cases;
the merged run is complete only if every shard is, and records which runs it was made from.
"""

from __future__ import annotations

import copy

from bench import storage
from bench.errors import UserError
from bench.history.summarise import describe_fingerprint, fingerprint


def _commit(doc: dict) -> object:
    return ((doc.get("run") or {}).get("ci") or {}).get("sha") or (doc.get("commit_info") or {}).get("id")


def merge(docs: list[tuple[str, dict]], run_id: str | None = None) -> dict:
    """One document from shard documents; UserError naming the file that does not fit."""
    if not docs:
        raise UserError("nothing to merge")
    first_path, first = docs[0]
    out = copy.deepcopy(first)
    out["benchmarks"], out["unmeasured"] = [], []
    seen: dict[str, str] = {}
    planned: list[str] = []
    for path, doc in docs:
        if fingerprint(doc) != fingerprint(first):
            raise UserError(
                f"{path}: ran on another machine ({describe_fingerprint(fingerprint(doc))}) than {first_path} "
                f"({describe_fingerprint(fingerprint(first))}); shard only across identical testbeds"
            )
        if _commit(doc) != _commit(first):
            raise UserError(f"{path}: commit {_commit(doc)} differs from {first_path}'s {_commit(first)}")
        for rec in storage.records(doc):
            cid = storage.case_id_of(rec)
            if cid in seen:
                raise UserError(f"{path}: case {cid} is also in {seen[cid]}; shards must not overlap")
            seen[cid] = path
            storage.add_record(out, copy.deepcopy(rec))
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
    for rec in storage.records(out):
        rec["extra_info"]["run_id"] = out["run"]["id"]
    return out
