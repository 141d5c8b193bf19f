"""Time the rendering of a results file with N cases (default 500): python docs/render_benchmark.py [N].

The file is made from the hand-made 8-GPU sample by cloning its cases at other batch sizes.
"""

import copy
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import storage  # noqa: E402
from bench.report.render import render  # noqa: E402


def many(n: int) -> dict:
    """A results document with ``n`` case records."""
    base = storage.load(ROOT / "tests" / "data" / "gpu8.json")
    doc = copy.deepcopy(base)
    doc["benchmarks"], doc["unmeasured"] = [], []
    recs = list(storage.records(base))
    i = 0
    while len(doc["benchmarks"]) + len(doc["unmeasured"]) < n:
        r = copy.deepcopy(recs[i % len(recs)])
        k = i // len(recs)
        e = r["extra_info"]
        e["per_replica_batch"] = e["per_replica_batch"] + k
        e["case_id"] = e["case_id"].rsplit("-b", 1)[0] + f"-b{e['per_replica_batch']}"
        storage.add_record(doc, r)
        i += 1
    doc["run"]["planned"] = [storage.case_id_of(r) for r in storage.records(doc)]
    return doc


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "many.json"
        storage.write_atomic(path, many(n))
        t0 = time.perf_counter()
        out = render([storage.load(path)], Path(d) / "report")
        dt = time.perf_counter() - t0
        size = (out / "index.html").stat().st_size
    print(f"{n} cases: load + render {dt:.1f} s, index.html {size / 2**20:.1f} MiB")
