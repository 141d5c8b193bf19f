"""The largest batch that fits (bench.maxbatch): the search against a fake worker, and its outcomes."""

import math

import pytest

from bench import batchsearch as maxbatch
from bench.batchsearch import Outcome


def fake(threshold, fail="oom", peak_per_sample=1000):
    """A worker that runs up to ``threshold`` and fails above it, as a real OOM would."""
    calls = []

    def probe(b):
        calls.append(b)
        if b > threshold:
            return Outcome(b, fail, "RESOURCE_EXHAUSTED: out of memory")
        return Outcome(b, "ok", device_peak_bytes=b * peak_per_sample)

    return probe, calls


@pytest.mark.parametrize("start", [1, 16, 64])
def test_the_search_brackets_any_threshold_within_an_eighth_in_a_few_probes(start):
    for threshold in [*range(1, 300), 1000, 1023, 1024, 4095, 100_000, 777_777]:
        probe, calls = fake(threshold)
        s = maxbatch.search(probe, start)
        assert s.stopped == "bracketed" and s.max_ok <= threshold < s.first_fail, (start, threshold, s)
        assert s.first_fail - s.max_ok <= max(1, s.max_ok // maxbatch.RESOLUTION)
        # doubling to the first failure (or halving to the first fit), then three halvings of the bracket
        assert len(calls) <= math.ceil(abs(math.log2(max(threshold, 1) / start))) + 5, (start, threshold, calls)
        assert len(set(calls)) == len(calls) and [p.batch for p in s.probes] == calls


def test_what_is_not_an_oom_ends_the_search_and_nothing_fitting_or_everything_fitting_say_so():
    probe, _ = fake(100, fail="error")
    s = maxbatch.search(probe, 64)
    assert s.stopped == "error" and s.max_ok == 64 and s.first_fail is None
    probe, calls = fake(0)
    s = maxbatch.search(probe, 8)
    assert s.stopped == "nothing fits" and s.max_ok is None and calls == [8, 4, 2, 1]
    probe, calls = fake(10**9)
    s = maxbatch.search(probe, 256, limit=1024)
    assert s.stopped == "limit" and s.max_ok == 1024 and calls == [256, 512, 1024]
    probe, _ = fake(1000, fail="oom-suspect")  # a worker the kernel killed counts as out of memory
    assert maxbatch.search(probe, 64).stopped == "bracketed"


def test_the_safe_batch_leaves_headroom_below_the_limit():
    probe, _ = fake(1000, peak_per_sample=1000)
    s = maxbatch.search(probe, 64)
    assert maxbatch.safe_batch(s, None) == s.max_ok
    safe = maxbatch.safe_batch(s, 1_000_000)  # 1000 bytes a sample: 900 samples within 90%
    assert safe is not None and safe * 1000 <= 0.9 * 1_000_000 and safe < s.max_ok


def test_outcomes_from_records_tell_an_oom_a_killed_worker_and_a_cpu_over_its_limit():
    gib = 2**30
    ok = {"status": "ok", "device_kind": "cpu", "host_peak_rss_bytes": 3 * gib}
    assert maxbatch.outcome(64, ok, None).ok
    over = maxbatch.outcome(64, ok, 2 * gib)
    assert over.oom and "passed the limit of 2.00 GiB" in over.reason and over.host_peak_bytes == 3 * gib
    assert maxbatch.outcome(64, {**ok, "device_kind": "gpu"}, 2 * gib).ok  # a GPU's limit is its memory
    killed = {"status": "error", "reason": "worker killed by signal 9 (SIGKILL: often the kernel's OOM killer)"}
    assert maxbatch.outcome(64, killed, None).status == "oom-suspect"
    assert maxbatch.outcome(64, {"status": "oom", "reason": "ResourceExhaustedError"}, None).oom
    assert not maxbatch.outcome(64, {"status": "error", "reason": "shape mismatch"}, None).oom


def test_a_real_cpu_search_under_a_memory_limit_finds_a_batch_and_records_its_probes(tmp_path):
    """JAX on this CPU: one probe measures the worker's resident memory, then the limit sits a little above it."""
    import json
    import subprocess
    import sys

    base = [sys.executable, "-m", "bench", "maxbatch", "--profile", "smoke", "--workloads", "mlp", "--modes", "infer"]
    base += ["--devices", "cpu", "--precisions", "fp32", "--backend", "jax", "--results-dir", str(tmp_path)]
    r = subprocess.run(
        [*base, "--start", "1024", "--max", "1024", "--memory-limit", "100"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (first,) = json.loads((tmp_path / "maxbatch.json").read_text()).values()
    assert first["stopped"] == "limit" and first["max_ok"] == 1024 and len(first["probes"]) == 1
    rss = first["probes"][0]["host_peak_bytes"]
    # the safe batch's peak within 90% of the limit: about 20,000 more samples of 5 KB there, 8192 fits with room
    # (a worker's resident memory varies by some 40 MB from probe to probe)
    limit_gib = (rss + 100 * 2**20) / 0.9 / 2**30
    args = [*base, "--start", "8192", "--max", "65536", "--memory-limit", f"{limit_gib:.4f}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    store = json.loads((tmp_path / "maxbatch.json").read_text())
    (e,) = [v for v in store.values() if v is not first and v["probes"][0]["batch"] == 8192]
    probes = e["probes"]
    assert e["stopped"] == "bracketed" and 8192 <= e["max_ok"] < e["first_fail"] <= 65536, e
    assert all(p["host_peak_bytes"] for p in probes) and any(p["status"] == "oom" for p in probes)
    assert "max batch" in r.stdout and len(probes) <= math.ceil(math.log2(e["first_fail"] / 8192)) + 4
    assert e["safe_batch"] and 8192 <= e["safe_batch"] <= e["max_ok"]
    assert len(list((tmp_path / "maxbatch-probes").glob("*.json"))) == 1 + len(probes)  # every probe's run is kept
    from bench import storage

    # the matmul peak and the copy probe measured once per search, by its first probe, and handed to the others
    recs = [
        r.info for p in (tmp_path / "maxbatch-probes").glob("*.json") for r in storage.case_records(storage.load(p))
    ]
    later = [e for e in recs if e["per_replica_batch"] != 1024]
    assert len(later) == len(probes) and all(e["peak_tflops_per_device"] for e in later if e["status"] == "ok")
    first_id = "mlp-infer-cpu-jax-fp32-b8192"
    assert {(e["probe_case"], e["copy_probe_case"]) for e in later if e["status"] == "ok"} == {(first_id, first_id)}
    # asked again, the answer is read back instead of probed
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "recorded" in r.stdout and "--fresh" in r.stdout
    # a run asked at --batch-size max reads the same answer back (no probe: the search had bracketed the limit
    # below the largest batch the run would try) and measures the case at the safe batch
    run = [sys.executable, "-m", "bench", "run", *base[4:-2], "--batch-size", "max", "--repeats", "0"]
    run += ["--memory-limit", f"{limit_gib:.4f}", "--results-dir", str(tmp_path), "--reports-dir", str(tmp_path / "r")]
    r = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"batch max -> {e['safe_batch']}: largest that fits {e['max_ok']}" in r.stdout and "recorded" in r.stdout
    assert len(list((tmp_path / "maxbatch-probes").glob("*.json"))) == 1 + len(probes)  # no new probe

    (path,) = [p for p in tmp_path.glob("*.json") if p.name != "maxbatch.json"]
    data = storage.load(path)
    (rec,) = storage.records(data)
    assert rec["extra_info"]["status"] == "ok" and rec["extra_info"]["per_replica_batch"] == e["safe_batch"]
    assert rec["extra_info"]["case_id"] == f"mlp-infer-cpu-jax-fp32-b{e['safe_batch']}"
    ((key, safe, max_ok, first_fail, why),) = data["run"]["options"]["max_batches"]
    assert (key, safe, max_ok, first_fail) == ("mlp-infer-cpu-jax-fp32", e["safe_batch"], e["max_ok"], e["first_fail"])
