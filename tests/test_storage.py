import os
import subprocess
import sys

import pytest

from bench import records, storage
from bench.cases import Case
from bench.errors import UserError

CASE = Case("mlp", "train", "cpu", 1, False, "fp32", False, 64)


def measured(case=CASE, data=(0.1, 0.11, 0.09, 0.1, 0.1, 0.12)):
    info = records.base_info(case, "r1", 1000)
    info.update(status="ok", steps_per_round=10, samples_per_s=6400.0)
    rec = records.unmeasured(case, info)
    n = len(data)
    rec["stats"] = {
        "min": min(data),
        "max": max(data),
        "mean": sum(data) / n,
        "stddev": 0.01,
        "rounds": n,
        "median": sorted(data)[n // 2],
        "iqr": 0.01,
        "q1": 0.1,
        "q3": 0.11,
        "iqr_outliers": 0,
        "stddev_outliers": 0,
        "outliers": "0;0",
        "ld15iqr": min(data),
        "hd15iqr": max(data),
        "ops": 10.0,
        "total": sum(data),
        "data": list(data),
        "iterations": 1,
    }
    return rec


def doc():
    d = storage.new_document(
        {
            "id": "r1",
            "profile": "smoke",
            "argv": [],
            "start": "x",
            "end": None,
            "status": "running",
            "options": {},
            "planned": [],
        },
        {"node": "h", "cpu": {}},
        {},
        "2026-12-02T00:00:00+00:00",
        "0.1.0",
    )
    storage.add_record(d, measured())
    info = records.base_info(Case("mlp", "train", "gpu", 1, False, "tf32", False, 64), "r1")
    info.update(status="unsupported", reason="no GPU")
    storage.add_record(d, records.unmeasured(Case("mlp", "train", "gpu", 1, False, "tf32", False, 64), info))
    return d


def test_round_trip_and_tidy_rows(tmp_path):
    p = tmp_path / "r1.json"
    storage.write_atomic(p, doc())
    d = storage.load(p)
    assert storage.case_ids(d) == {"mlp-train-cpu-fp32-b64", "mlp-train-gpu1-tf32-b64"}
    assert [r["extra_info"]["status"] for r in d["benchmarks"]] == ["ok"]
    rows = {r["case_id"]: r for r in storage.tidy_rows(d)}
    assert rows["mlp-train-gpu1-tf32-b64"]["samples_per_s"] is None  # unknown is empty, never 0
    assert rows["mlp-train-cpu-fp32-b64"]["samples_per_s"] == 6400.0
    assert list(rows["mlp-train-cpu-fp32-b64"]) == storage.COLUMNS
    assert storage.throughput_samples(d["benchmarks"][0])[0] == pytest.approx(640 / 0.1)


def test_add_record_replaces_same_case():
    d = doc()
    info = records.base_info(CASE, "r1")
    info.update(status="error", reason="boom")
    storage.add_record(d, records.unmeasured(CASE, info))
    assert not d["benchmarks"] and len(d["unmeasured"]) == 2


def test_atomic_write_keeps_old_file_when_writing_fails(tmp_path, monkeypatch):
    p = tmp_path / "r1.json"
    storage.write_atomic(p, doc())
    before = p.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)  # the temp file is written, the disk fails before the rename
    with pytest.raises(OSError):
        storage.write_atomic(p, {"schema_version": 1})
    assert p.read_bytes() == before
    assert [x.name for x in tmp_path.iterdir()] == ["r1.json"]  # no temp file left behind


def test_nan_is_stored_as_null(tmp_path):
    d = doc()
    d["benchmarks"][0]["extra_info"]["loss_final"] = float("nan")
    storage.write_atomic(tmp_path / "x.json", d)
    assert storage.load(tmp_path / "x.json")["benchmarks"][0]["extra_info"]["loss_final"] is None


@pytest.mark.parametrize(
    "content, msg",
    [
        (None, "no such results file"),
        ('{"schema_version": 1, "benchm', "not valid JSON"),
        ('{"benchmarks": []}', "not an accelbench results file"),
        ("[1, 2]", "not an accelbench results file"),
        ('{"schema_version": 99, "benchmarks": [], "run": {}, "machine_info": {}}', "newer than this accelbench"),
        ('{"schema_version": 1, "benchmarks": [{"x": 1}], "run": {}, "machine_info": {}}', "damaged"),
        ('{"schema_version": 1, "run": {}}', "damaged"),
    ],
)
def test_broken_files_give_one_line_errors_naming_the_file(tmp_path, content, msg):
    p = tmp_path / "bad.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(UserError, match=msg) as e:
        storage.load(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_pytest_benchmark_compare_reads_results(tmp_path):
    p = tmp_path / "20261202-000000-abcd.json"  # a run-id name, as accelbench writes it
    storage.write_atomic(p, doc())
    out = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(p)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Failed to load" not in out.stderr
    assert "test_case[mlp-train-cpu-fp32-b64]" in out.stdout
