"""Sweeps (bench.sweep): the points, their case ids, the plan and the table; no framework runs here."""

import pandas as pd
import pytest
from test_capability import machine

from bench import planning, storage, sweep
from bench.cases import Case, parse_id
from bench.errors import UserError
from bench.records import case_info
from workloads import WORKLOADS


def test_values_and_powers_of_two_parse_sorted_once():
    assert sweep.parse("batch=64,1,16,4,16") == sweep.Axis("batch", (1, 4, 16, 64))
    assert sweep.parse("batch=pow2:1..256").values == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert sweep.parse(" width = 256 ").values == (256,)
    # max: the largest batch that fits, kept as its sentinel beside the values (or alone)
    assert sweep.parse("batch=16,max,4").values == (sweep.MAX_BATCH, 4, 16)
    assert sweep.parse("batch=max").values == (sweep.MAX_BATCH,)
    assert sweep.parse("batch=pow2:1..4,max").values == (sweep.MAX_BATCH, 1, 2, 4)
    with pytest.raises(UserError, match="only batch has a largest value"):
        sweep.parse("depth=2,max")


def test_a_case_asked_at_max_is_planned_at_its_found_batch_or_unsupported_with_why():
    m = machine()
    common = dict(profile="smoke", workloads=("mlp",), devices=("cpu",), precisions=("fp32",), modes=("train", "serve"))
    opts = planning.RunOptions(**common, batch_size="max")
    assert opts.wants_max and opts.anchor_batch("mlp") == sweep.MAX_BATCH
    # what to search: the train case (a serve case's batch is its batcher's), at the profile's batch
    assert [c.id for c in planning.max_cases(opts, m)] == ["mlp-train-cpu-fp32-b64"]
    # not searched yet: planned unsupported, saying so (nothing silently measured at another batch)
    unresolved = {c.id: s for c, s in planning.plan(opts, m)}
    assert not unresolved["mlp-train-cpu-fp32-b64"].supported
    assert "no largest batch was searched" in unresolved["mlp-train-cpu-fp32-b64"].reason
    found = planning.RunOptions.from_dict(
        {**opts.to_dict(), "max_batches": [["mlp-train-cpu-fp32", 1800, 2048, 2304, "largest that fits 2048"]]}
    )
    verdicts = {c.id: s for c, s in planning.plan(found, m)}
    assert verdicts["mlp-train-cpu-fp32-b1800"].supported and "mlp-train-cpu-fp32-b64" not in verdicts
    assert any(i.startswith("mlp-serve-cpu-fp32") for i in verdicts)  # serve stays the profile's serve case
    nothing = planning.RunOptions.from_dict(
        {**opts.to_dict(), "max_batches": [["mlp-train-cpu-fp32", None, None, 1, "no batch found (nothing fits)"]]}
    )
    (refused,) = [s for c, s in planning.plan(nothing, m) if c.mode == "train"]
    assert not refused.supported and refused.reason == "batch max: no batch found (nothing fits)"
    # tenants of the refused case, and the mix beside it, share its verdict; those of a found one are planned
    for o, want in ((nothing, False), (found, True)):
        shared = planning.RunOptions.from_dict({**o.to_dict(), "modes": ["train"], "tenants": [2], "tenant_mix": True})
        planned = {c.id: s for c, s in planning.plan(shared, m)}
        assert len(planned) == 3 and {s.supported for s in planned.values()} == {want}, planned
    # in a sweep, max is one more point; where the profile's batch is also a point, that case is measured as usual
    swept = planning.RunOptions.from_dict(
        {**found.to_dict(), "modes": ["train"], "sweeps": ["batch=16,64,max"], "batch_size": None}
    )
    ids = {c.id: s.supported for c, s in planning.plan(swept, m)}
    assert ids == {"mlp-train-cpu-fp32-b16": True, "mlp-train-cpu-fp32-b64": True, "mlp-train-cpu-fp32-b1800": True}
    swept_nothing = planning.RunOptions.from_dict({**swept.to_dict(), "max_batches": nothing.to_dict()["max_batches"]})
    assert {c.id: s.supported for c, s in planning.plan(swept_nothing, m)} == {
        "mlp-train-cpu-fp32-b16": True,
        "mlp-train-cpu-fp32-b64": True,
    }
    with pytest.raises(UserError, match="batch max and --cluster"):
        planning.RunOptions(**common, batch_size="max", nodes=2)


def test_additive_points_sweep_each_axis_alone_through_the_profile_point_and_full_takes_every_combination():
    mlp = WORKLOADS["mlp"]
    axes = sweep.parse_all(["batch=1,64,256", "width=256,1024"], WORKLOADS)
    add = sweep.points(axes, "additive", mlp, "smoke", 64)
    # the profile's point first (batch 64, its own size), then batch alone, then width alone
    assert add == [(64, ()), (1, ()), (256, ()), (64, (("width", 256),)), (64, (("width", 1024),))]
    full = sweep.points(axes, "full", mlp, "smoke", 64)
    assert len(full) == 1 + 3 * 2 and (256, (("width", 1024),)) in full
    # a knob set to the profile's own value is the profile's point (smoke MLP: hidden 512)
    assert sweep.points(sweep.parse_all(["width=512"], WORKLOADS), "additive", mlp, "smoke", 64) == [(64, ())]
    # a workload without the knob keeps its profile point only
    cnn = WORKLOADS["cnn"]
    assert sweep.points(axes, "additive", cnn, "smoke", 8) == [(8, ()), (1, ()), (64, ()), (256, ())]


def test_resnet50_stays_itself_at_its_anchor_and_a_knob_makes_another_model_with_its_own_flops():
    cnn = WORKLOADS["cnn"]
    assert cnn.anchored("standard", (("image", 224),)) and not cnn.anchored("standard", (("image", 128),))
    small = cnn.size("standard", (("image", 112),))
    assert small.image == 112 and cnn.forward_flops(small) < cnn.forward_flops(cnn.size("standard"))
    mlp = WORKLOADS["mlp"]
    wide = mlp.size("smoke", (("width", 1024), ("depth", 3)))
    assert wide.hidden == (1024, 1024, 1024) and mlp.knob_values(wide) == {"width": 1024, "depth": 3}
    t = WORKLOADS["transformer"].size("standard", (("dmodel", 256),))
    assert (t.d_model, t.heads, t.ffn) == (256, 4, 1024)
    with pytest.raises(ValueError, match="no size knob"):
        mlp.size("smoke", (("image", 64),))


def test_a_point_is_an_ordinary_case_whose_id_carries_its_knobs_and_reads_back():
    c = Case("mlp", "train", "cpu", 1, False, "fp32", False, 16, knobs=(("width", 2048), ("depth", 2)))
    assert c.id == "mlp-width2048-depth2-train-cpu-fp32-b16"
    assert parse_id(c.id)["size"] == "width2048-depth2" and parse_id(c.id)["mode"] == "train"
    assert Case.from_dict(c.to_dict()) == c == Case.of(c.to_dict())
    assert Case.of({**c.to_dict(), "knobs": "width=2048;depth=2"}) == c  # a CSV row
    plain = Case("cnn", "infer", "gpu", 2, False, "mixed_bfloat16", True, 64, backend="jax")
    assert plain.id == "cnn-infer-gpu2-jax-mixed_bfloat16-b64" and parse_id(plain.id)["size"] == ""
    for bad in ((("Width", 2),), (("width", 0),), (("w1", 2),)):
        with pytest.raises(UserError, match="size knob"):
            Case("mlp", "train", "cpu", 1, False, "fp32", False, 16, knobs=bad)


def test_the_plan_of_the_issue_has_one_case_per_point_and_the_table_a_row_per_point_with_knob_columns(tmp_path):
    opts = planning.RunOptions(
        profile="smoke",
        workloads=("mlp",),
        devices=("cpu",),
        precisions=("fp32", "mixed_bfloat16"),
        modes=("train",),
        sweeps=("batch=1,4,16,64,256",),
    )
    cases = []
    for batch, knobs in sweep.points(opts.axes, opts.grid, WORKLOADS["mlp"], "smoke", 64):
        cases += [Case("mlp", "train", "cpu", 1, False, p, False, batch, knobs=knobs) for p in opts.precisions]
    assert sorted(c.per_replica_batch for c in cases) == sorted([1, 4, 16, 64, 256] * 2)
    assert len({c.id for c in cases}) == 10
    wide = Case("mlp", "train", "cpu", 1, False, "fp32", False, 64, knobs=(("width", 1024),))
    doc = storage.new_document({"id": "r"}, {}, {}, "2026-12-04T00:00:00", "t")
    for c in [*cases, wide]:
        info = {**case_info(c, "r", "smoke"), "status": "unsupported", "reason": "not run here"}
        storage.add_record(doc, {"extra_info": info, "stats": None, "name": c.id})
    df = pd.DataFrame(storage.tidy_rows(doc), columns=storage.COLUMNS)
    assert len(df) == 11 and sorted(df["per_replica_batch"].head(10)) == sorted([1, 4, 16, 64, 256] * 2)
    row = df.set_index("case_id").loc[wide.id]
    assert row["knobs"] == "width=1024" and row["size_width"] == 1024 and row["size_depth"] == 2
    assert df["size_width"].head(10).eq(512).all() and df["knobs"].head(10).isna().all()
    assert pd.isna(row["size_image"])  # the MLP has no image knob


def test_a_full_grid_says_its_cost_before_it_runs():
    opts = planning.RunOptions(
        profile="smoke", workloads=("mlp", "cnn"), sweeps=("batch=1,8", "width=256,1024"), grid="full"
    )
    line = sweep.cost_line(list(range(12)), opts)
    assert line.startswith("full grid, points per workload: mlp 5, cnn 3; 12 cases to measure, roughly")


def test_a_knob_sweep_builds_each_size_for_real_and_records_its_flops_and_parameters(tmp_path):
    """TensorFlow on this CPU: the MLP at two widths, each point a case of its own size."""
    import subprocess
    import sys

    args = ["run", "--profile", "smoke", "--sweep", "width=128", "--workloads", "mlp", "--modes", "train"]
    args += [
        "--devices",
        "cpu",
        "--precisions",
        "fp32",
        "--repeats",
        "0",
        "--no-report",
        "--results-dir",
        str(tmp_path),
    ]
    r = subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "accelbench sweep: additive grid, points per workload: mlp 2;" in r.stderr
    (path,) = tmp_path.glob("*.json")
    infos = {e["case_id"]: e for e in (x["extra_info"] for x in storage.records(storage.load(path)))}
    mlp = WORKLOADS["mlp"]
    for cid, knobs in (("mlp-train-cpu-fp32-b64", ()), ("mlp-width128-train-cpu-fp32-b64", (("width", 128),))):
        e, size = infos[cid], mlp.size("smoke", knobs)
        assert e["status"] == "ok" and e["flops_per_sample"] == mlp.flops_per_sample(size, "train"), cid
        widths = (size.features, *size.hidden, size.classes)
        assert e["params"] == sum(a * b + b for a, b in zip(widths[:-1], widths[1:])), (
            cid
        )  # the model built was that size
        assert e["size_width"] == size.hidden[0]
