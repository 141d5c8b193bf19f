import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import records, storage
from bench.cases import Case
from bench.errors import UserError

CASE = Case("mlp", "train", "cpu", 1, False, "fp32", False, 64)


def measured(case=CASE, data=(0.1, 0.11, 0.09, 0.1, 0.1, 0.12)):
    """A measured record as the worker builds it: rounds of 10 steps of 64 samples taking ``data`` seconds."""
    info = records.base_info(case, "r1", 1000)
    info.update(status="ok", steps_per_round=10, samples_per_s=6400.0)
    return records.measured(case, {"group": None, "options": {}}, info, list(data))


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
    assert storage.case_records(d)[0].throughput_samples[0] == pytest.approx(640 / 0.1)
    assert storage.round_times(d["benchmarks"][0]) == pytest.approx([0.1, 0.11, 0.09, 0.1, 0.1, 0.12])


def test_stats_describe_one_sample_so_ops_is_samples_per_second():
    rec = measured()
    st = rec["stats"]
    # 10 steps x 64 samples per round: pytest-benchmark's iterations; stats = round time / iterations
    assert st["iterations"] == 640 and st["rounds"] == 6
    assert st["median"] == pytest.approx(0.1 / 640)
    assert st["data"][1] == pytest.approx(0.11 / 640)
    assert st["ops"] == pytest.approx(1 / st["mean"]) and 5000 < st["ops"] < 7000  # samples/s, not rounds/s
    assert st["total"] == pytest.approx(sum(st["data"]))
    assert st["q1"] <= st["median"] <= st["q3"] and st["iqr"] == pytest.approx(st["q3"] - st["q1"])
    # one name form, measured or not
    assert rec["fullname"] == "bench/suite.py::test_case[mlp-train-cpu-fp32-b64]"
    assert rec["name"] == "test_case[mlp-train-cpu-fp32-b64]"


def test_a_schema_1_file_is_converted_on_read():
    """tests/data/cpu_smoke.json was written by schema 1 (round times in stats): kept as it was."""
    path = Path(__file__).parent / "data" / "cpu_smoke.json"
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 1
    old = {r["extra_info"]["case_id"]: r for r in raw["benchmarks"]}
    d = storage.load(path)
    assert d["schema_version"] == storage.SCHEMA_VERSION == 3
    assert d["benchmarks"] and len(d["benchmarks"]) == len(raw["benchmarks"])
    for r in storage.records(d):
        assert r["fullname"] == f"bench/suite.py::test_case[{r['extra_info']['case_id']}]"
    for r in d["benchmarks"]:
        e, o = r["extra_info"], old[r["extra_info"]["case_id"]]
        n = e["global_batch"] * e["steps_per_round"]
        assert r["stats"]["iterations"] == n
        assert storage.round_times(r) == pytest.approx(o["stats"]["data"])  # nothing lost
        assert r["stats"]["ops"] == pytest.approx(e["samples_per_s"], rel=0.15)
        assert o["stats"]["ops"] < e["samples_per_s"] / 10  # what schema 1 said: rounds per second


def test_tidy_rows_hold_bools_on_every_row_and_join_per_device_lists(tmp_path):
    d = doc()
    d["benchmarks"][0]["extra_info"]["device_peak_mem_per_device_bytes"] = [100, None, 300]
    rows = {r["case_id"]: r for r in storage.tidy_rows(d)}
    for r in rows.values():
        assert all(isinstance(r[c], bool) for c in storage.BOOL_COLUMNS)
    assert rows["mlp-train-gpu1-tf32-b64"]["unstable"] is False  # not measured: not flagged, never empty
    assert rows["mlp-train-cpu-fp32-b64"]["device_peak_mem_per_device_bytes"] == "100;;300"


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


def test_case_records_of_an_older_file_rebuild_every_case_from_its_fields(tmp_path):
    """The typed record of a schema 1 file: ids built from fields match the stored ones, nothing lost."""
    path = Path(__file__).parent / "data" / "cpu_smoke.json"
    raw = json.loads(path.read_text())
    d = storage.load(path)
    recs = storage.case_records(d)
    assert [r.id for r in recs] == [r["extra_info"]["case_id"] for r in storage.records(d)]
    for r in recs:
        assert r.case.id == r.id  # the id is derived from the fields, never edited
        assert r.case.nodes == 1 and r.case.backend == "tensorflow"  # fields older files lack
        assert r.ok == (r.status == "ok") and r.ok == bool(r.per_sample_s)
        if r.ok:
            assert r.samples_per_s == r.info["samples_per_s"] > 0
            assert r.round_times_s == pytest.approx(
                next(o["stats"]["data"] for o in raw["benchmarks"] if o["extra_info"]["case_id"] == r.id)
            )
            assert r.throughput_samples == pytest.approx([r.samples_per_round / t for t in r.round_times_s])
        else:
            assert r.samples_per_s is None and r.reason
    sets = storage.status_sets(d)
    assert sets["ok"] == {r.id for r in recs if r.status == "ok"} and sets["ok"]
    assert sets["unsupported"] == {r.id for r in recs if r.status == "unsupported"} and sets["unsupported"]
    assert not (sets["ok"] & sets["failed"]) and len(set().union(*sets.values())) == len(recs)


def test_a_case_record_is_read_only():
    r = storage.CaseRecord.of(measured())
    with pytest.raises(AttributeError):
        r.status = "error"  # type: ignore[misc]
    with pytest.raises(TypeError):
        r.info["samples_per_s"] = 1.0  # type: ignore[index]
    assert r.failed is False and r.case == CASE


def test_a_record_whose_case_fields_are_damaged_fails_to_load_in_one_line(tmp_path):
    d = doc()
    d["benchmarks"].append(measured())
    d["benchmarks"][0]["extra_info"]["precision"] = "fp8"
    path = tmp_path / "r1.json"
    storage.write_atomic(path, d)
    with pytest.raises(storage.ResultsError) as err:
        storage.load(path)
    msg = str(err.value)
    assert str(path) in msg and "mlp-train-cpu-fp32-b64" in msg and "fp8" in msg and "\n" not in msg
