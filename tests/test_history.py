"""The nightly history: store, judge, change points, simulation, CLI (no TensorFlow)."""

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
from nights import night

from bench import storage
from bench.cli import main
from bench.fingerprint import describe_fingerprint
from bench.history import simulate
from bench.history import summarise as summarise_mod
from bench.history.changepoints import change_points
from bench.history.detect import judge_case, judge_testbed
from bench.history.rules import Annotation, Rule, Thresholds
from bench.history.store import Store
from bench.history.summarise import HistoryError, fingerprint, resolve_testbed, summarise
from bench.merge import merge

DATA = Path(__file__).parent / "data"
CPU = storage.load(DATA / "cpu_smoke.json")
HOSTILE = storage.load(DATA / "hostile.json")
SLOWED = "mlp-train"  # the planted slowdown hits these cases


def _nights(values, fp="a", start=0, busy=()):
    """Night summaries of one case 'c' (None = failed that night; ``busy``: indices of busy nights)."""
    out = []
    for i, v in enumerate(values):
        c = (
            {"status": "ok", "value": v, "ci_low": v * 0.99, "ci_high": v * 1.01, "busy": i in busy}
            if v
            else {"status": "error", "reason": "boom"}
        )
        out.append(
            {
                "night_id": f"n{start + i:03d}",
                "date_utc": f"2026-10-{1 + (start + i) // 28:02d}T{(start + i) % 24:02d}",
                "fingerprint_hash": fp,
                "status": "complete",
                "commit": f"c{start + i}",
                "cases": {"c": c},
            }
        )
    return out


def _flat(n, seed=0, cv=0.01):
    return list(100 * np.exp(np.random.default_rng(seed).normal(0, cv, n)))


# ----- the judge


def test_planted_slowdown_is_suspect_on_the_first_night_and_confirmed_on_the_second():
    vals = _flat(20) + [90.0, 90.5, 89.7]
    states = [p.state for p in judge_case("tb", "c", _nights(vals), Rule()).points]
    assert states[:10] == ["insufficient"] * 10
    assert set(states[10:20]) <= {"ok", "improved"}
    assert states[20:] == ["suspect", "confirmed", "confirmed"]
    j = judge_case("tb", "c", _nights(vals), Rule())
    a = j.alert
    assert a.state == "confirmed" and a.nights == 3 and a.first_bad["night_id"] == "n020"
    assert a.last_good["night_id"] == "n019" and a.last_good["commit"] == "c19"
    assert -0.12 < a.magnitude < -0.08 and a.magnitude_ci[0] < a.magnitude < a.magnitude_ci[1]


def test_busy_nights_are_never_evidence_nor_baseline():
    vals = _flat(20) + [80.0, 80.0, 90.0, 90.0]
    j = judge_case("tb", "c", _nights(vals, busy={20, 21}), Rule())
    states = [p.state for p in j.points]
    # two busy slow nights: not suspect, not confirmed; the run of bad nights starts after them
    assert states[20:] == ["busy", "busy", "suspect", "confirmed"]
    assert j.alert.first_bad["night_id"] == "n022" and j.alert.nights == 2
    # a slowdown seen only on busy nights never alerts, and busy nights stay out of the baseline
    j = judge_case("tb", "c", _nights(_flat(20) + [60.0] * 12 + [100.0], busy=set(range(20, 32))), Rule())
    assert j.alert is None and j.points[-1].state == "ok" and j.points[-1].baseline_n == 20
    # while gathering, a busy night is not gathered either
    j = judge_case("tb", "c", _nights(_flat(4), busy={1}), Rule())
    assert [p.state for p in j.points] == ["insufficient", "busy", "insufficient", "insufficient"]
    assert j.points[-1].baseline_n == 3


def test_the_judge_says_it_is_gathering_nights_until_it_can_judge():
    v = judge_testbed("tb", _nights(_flat(3)), Thresholds(), [])
    g = v.gathering()
    assert (g.have, g.need, g.cases) == (3, 10, 1)
    assert g.line() == "judge: 3 of 10 nights gathered, not judging yet"
    from bench.history.verdict import markdown, summary_line

    assert summary_line(v).startswith("judge: 3 of 10 nights gathered") and "0 confirmed" not in summary_line(v)
    assert markdown([v]).startswith("# accelbench nightly: the judge is still gathering nights")
    assert judge_testbed("tb", _nights(_flat(11)), Thresholds(), []).gathering() is None  # judged on night 11
    # a new fingerprint starts gathering again
    nights = _nights(_flat(12)) + _nights(_flat(2), fp="b", start=12)
    g = judge_testbed("tb", nights, Thresholds(), []).gathering()
    assert (g.have, g.need) == (2, 10)


def test_one_bad_night_is_only_a_suspect_and_clears():
    vals = _flat(20) + [85.0, 100.2]
    j = judge_case("tb", "c", _nights(vals), Rule())
    assert [p.state for p in j.points[20:]] == ["suspect", "ok"] and j.alert is None


def test_a_fingerprint_change_starts_a_new_segment_never_an_alert():
    nights = _nights(_flat(15)) + _nights([70.0 + i * 0.01 for i in range(12)], fp="b", start=15)
    j = judge_case("tb", "c", nights, Rule())
    assert j.points[15].segment_start == "fingerprint"
    assert [p.state for p in j.points[15:25]] == ["insufficient"] * 10
    assert j.alert is None and "suspect" not in {p.state for p in j.points}


def test_accepting_a_shift_rebases_and_excluding_a_night_ignores_it():
    vals = _flat(20) + [90.0, 90.2, 89.9]
    nights = _nights(vals)
    acc = Annotation(testbed="tb", night="n020", action="accept", why="new kernel is slower but correct")
    j = judge_case("tb", "c", nights, Rule(), [acc])
    assert j.alert is None and j.points[20].segment_start == "accepted" and j.points[20].state == "insufficient"
    exc = Annotation(testbed="tb", night="n020", action="exclude", why="fan broken", cases="c*")
    j = judge_case("tb", "c", _nights(_flat(20) + [60.0, 100.1]), Rule(), [exc])
    assert j.points[20].state == "excluded" and j.points[21].state == "ok"
    other = Annotation(testbed="tb", night="n020", action="exclude", why="x", cases="cnn-*")
    assert judge_case("tb", "c", _nights(_flat(20) + [60.0, 60.0]), Rule(), [other]).alert.state == "confirmed"


def test_a_case_that_starts_failing_is_a_confirmed_failing_alert_after_two_nights():
    j = judge_case("tb", "c", _nights(_flat(12) + [None, None]), Rule())
    assert [p.state for p in j.points[12:]] == ["failing", "failing-confirmed"]
    assert j.alert.kind == "failing" and j.alert.state == "confirmed" and j.alert.reason == "boom"
    # never measured: not an alert
    assert judge_case("tb", "c", _nights([None] * 5), Rule()).alert is None


def test_noise_scales_the_band_and_delta_is_the_floor():
    quiet, noisy = _flat(30, cv=0.001), _flat(30, cv=0.05)
    jq = judge_case("tb", "c", _nights(quiet), Rule())
    jn = judge_case("tb", "c", _nights(noisy), Rule())
    assert jq.points[-1].half == pytest.approx(0.03 * jq.points[-1].center, rel=1e-9)  # delta floor
    assert jn.points[-1].half > 0.1 * jn.points[-1].center  # 4 x MAD sigma of 5% noise


def test_thresholds_file_overrides_per_case(tmp_path):
    (tmp_path / "thresholds.json").write_text(
        json.dumps({"default": {"delta": 0.05}, "overrides": [{"cases": "cnn-*", "delta": 0.1, "confirm": 3}]})
    )
    th = Store(tmp_path).thresholds()
    assert th.rule("tb", "mlp-x").delta == 0.05 and th.rule("tb", "cnn-x") == Rule(delta=0.1, confirm=3)
    (tmp_path / "thresholds.json").write_text(json.dumps({"overrides": [{"cases": "*", "dleta": 0.1}]}))
    with pytest.raises(HistoryError, match="unknown keys"):
        Store(tmp_path).thresholds()


# ----- the simulation: the research's figures, re-measured on this judge (fixed seeds)


def test_simulated_false_alarm_rate_and_detection_delay_at_1_percent_noise():
    aa = simulate.run(0.01, 0.0, n_series=200, nights=60)
    five = simulate.run(0.01, 0.05, n_series=200, nights=60)
    ten = simulate.run(0.01, 0.10, n_series=200, nights=60)
    assert aa.alerts_per_100 <= 0.15  # research: 0.1 per 100 case-nights
    assert ten.caught >= 0.9 and ten.median_delay == 1  # confirmed on the second slow night, never the first
    assert five.caught >= 0.8 and five.median_delay <= 2  # research: 89 %, 1 night


def test_at_3_percent_noise_false_alarms_stay_rare_but_5_percent_is_invisible():
    aa = simulate.run(0.03, 0.0, n_series=200, nights=60)
    five = simulate.run(0.03, 0.05, n_series=200, nights=60)
    ten = simulate.run(0.03, 0.10, n_series=200, nights=60)
    assert aa.alerts_per_100 <= 0.2
    assert five.caught <= 0.2  # research: 3 %; the fix is measurement, not statistics
    assert 0.2 <= ten.caught <= 0.7  # research: 44 %


def test_change_points_find_a_step_are_deterministic_and_quiet_on_noise():
    x = np.array(_flat(60, seed=3))
    x[40:] *= 0.9
    assert change_points(x) == change_points(x) and any(abs(t - 40) <= 2 for t in change_points(x))
    false = sum(bool(change_points(_flat(60, seed=s))) for s in range(20))
    assert false <= 2


# ----- store and summaries


def test_fingerprint_and_testbed_names():
    fp = fingerprint(CPU)
    assert fp["gpu_count"] == 0 and fp["cpu"] and fp["tensorflow"]
    assert resolve_testbed(CPU).startswith("cpu-") and resolve_testbed(CPU, "a100x1") == "a100x1"
    with pytest.raises(HistoryError, match="testbed name"):
        resolve_testbed(CPU, "../etc")


def test_shards_merge_into_one_night_and_disagreeing_shards_are_refused():
    a, b = night(CPU, 1), night(CPU, 1)
    ids = sorted(storage.case_ids(a))
    a["benchmarks"] = [r for r in a["benchmarks"] if storage.case_id_of(r) in ids[::2]]
    a["unmeasured"] = [r for r in a["unmeasured"] if storage.case_id_of(r) in ids[::2]]
    b["benchmarks"] = [r for r in b["benchmarks"] if storage.case_id_of(r) in ids[1::2]]
    b["unmeasured"] = [r for r in b["unmeasured"] if storage.case_id_of(r) in ids[1::2]]
    b["run"]["id"] = "night0001-shard2"
    n = summarise([("a", a), ("b", b)], "tb")
    assert set(n["cases"]) == set(ids) and n["run_ids"] == ["night0001-0", "night0001-shard2"]
    assert storage.case_ids(merge([("a", a), ("b", b)])) == set(ids)
    with pytest.raises(HistoryError, match="two results files"):
        summarise([("a", a), ("a2", a)], "tb")
    other = night(CPU, 1)
    other["machine_info"]["accelbench"]["cpu"]["model"] = "Other CPU"
    with pytest.raises(HistoryError, match="another machine or software than the shards before it, from a on .cpu"):
        summarise([("a", a), ("o", other)], "tb")


def test_shards_that_ran_different_backends_merge_and_keep_each_ones_versions():
    """A shard of JAX cases next to one of torch cases: each probed only its backend, which is no difference."""
    a, b, c = night(CPU, 1), night(CPU, 1), night(CPU, 1)
    ids = sorted(storage.case_ids(a))
    for d, keep, rid in ((a, ids[:1], "s1"), (b, ids[1:2], "s2"), (c, ids[2:3], "s3")):
        d["benchmarks"] = [r for r in d["benchmarks"] if storage.case_id_of(r) in keep]
        d["unmeasured"] = [r for r in d["unmeasured"] if storage.case_id_of(r) in keep]
        d["run"]["id"] = rid
    a["machine_info"]["accelbench"].update(jax="0.9.1", jaxlib="0.9.1", jax_keras="3.15")
    b["machine_info"]["accelbench"].update(torch="2.13.0", torch_keras="3.15")
    n = summarise([("a", a), ("b", b)], "tb")
    assert n["fingerprint"]["jax"] == "0.9.1" and n["fingerprint"]["torch"] == "2.13.0"
    ab = merge([("a", a), ("b", b)])["machine_info"]["accelbench"]
    assert (ab["jax"], ab["torch"]) == ("0.9.1", "2.13.0")
    assert fingerprint(merge([("a", a), ("b", b)])) == n["fingerprint"]
    # a third shard on another JAX than the first: refused, though the shard between them ran no JAX
    c["machine_info"]["accelbench"].update(jax="0.10.2")
    with pytest.raises(HistoryError, match="jax 0.9.1 -> 0.10.2"):
        summarise([("a", a), ("b", b), ("c", c)], "tb")


def _write(tmp_path, day, **kw):
    p = tmp_path / "raw" / f"n{day:03d}.json"
    storage.write_atomic(p, night(CPU, day, **kw))
    return str(p)


def test_cli_add_check_exit_codes_and_planted_slowdown(tmp_path, capsys):
    store = str(tmp_path / "store")
    for day in range(13):
        slow = 0.9 if day >= 11 else 1.0
        assert (
            main(["history", "add", _write(tmp_path, day, factor=slow, only=SLOWED), "--store", store, "--no-report"])
            == 0
        )
        if day == 11:
            assert main(["history", "check", "--store", store, "--quiet"]) == 0  # suspect only
    capsys.readouterr()
    assert main(["history", "check", "--store", store]) == 1
    out = capsys.readouterr().out
    assert "confirmed regression mlp-train-cpu-fp32-b64" in out and "since night0011-0" in out
    assert "cnn-" not in out.split("\n", 1)[1]
    assert main(["history", "check", "--store", store, "--exit-zero"]) == 0
    capsys.readouterr()
    assert main(["history", "check", "--store", store, "--json"]) == 1
    js = json.loads(capsys.readouterr().out)
    assert js["confirmed"] >= 1 and js["testbeds"][0]["nights"] == 13
    tb = js["testbeds"][0]["testbed"]
    assert (
        main(
            [
                "history",
                "annotate",
                "--store",
                store,
                "--testbed",
                tb,
                "--night",
                "night0011-0",
                "--accept",
                "--cases",
                "mlp-train-*",
                "--why",
                "accepted: new optimizer",
            ]
        )
        == 0
    )
    assert main(["history", "check", "--store", store, "--quiet"]) == 0


def test_a_busy_night_is_reported_busy_never_a_confirmed_regression(tmp_path, capsys):
    store = str(tmp_path / "store")
    for day in range(13):
        doc = night(
            CPU, day, factor=0.85 if day >= 11 else 1.0, busy=day >= 11
        )  # the slow nights ran beside other work
        p = tmp_path / "raw" / f"n{day:03d}.json"
        storage.write_atomic(p, doc)
        assert main(["history", "add", str(p), "--store", store, "--no-report"]) == 0
    capsys.readouterr()
    assert main(["history", "check", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "0 confirmed, 0 suspect" in out and "busy (not judged" in out


def test_duplicate_runs_are_refused_and_nothing_is_written(tmp_path, capsys):
    store = tmp_path / "store"
    f = _write(tmp_path, 1)
    assert main(["history", "add", f, "--store", str(store), "--no-report"]) == 0
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    assert main(["history", "add", _write(tmp_path, 2), f, "--store", str(store), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already in" in err and "nothing written" in err
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before
    assert main(["history", "add", f, "--store", str(store), "--no-report", "--skip-existing"]) == 0


def test_corrupt_history_line_and_bad_input_are_one_line_exit_2(tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["history", "add", _write(tmp_path, 1), "--store", str(store), "--no-report"]) == 0
    evil = night(CPU, 5)
    evil["run"]["id"] = "../../outside"
    storage.write_atomic(tmp_path / "evil.json", evil)
    assert main(["history", "add", str(tmp_path / "evil.json"), "--store", str(store)]) == 2
    assert "is not a plain name" in capsys.readouterr().err and not (tmp_path / "outside.html.gz").exists()
    (month,) = store.glob("nights/*/*/*.jsonl.gz")
    month.write_bytes(gzip.compress(gzip.decompress(month.read_bytes()) + b'{"night_id": "x", "cases": {tru\n'))
    capsys.readouterr()
    assert main(["history", "check", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "line 2: corrupt history line" in err and err.count("\n") == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["history", "add", str(bad), "--store", str(tmp_path / "s2")]) == 2
    assert not list((tmp_path / "s2").rglob("*.gz"))
    assert (
        main(
            [
                "history",
                "annotate",
                "--store",
                str(store),
                "--testbed",
                "nope",
                "--night",
                "x",
                "--exclude",
                "--why",
                "w",
            ]
        )
        == 2
    )


def test_a_write_killed_midway_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    store = Store(tmp_path / "s", create=True)
    store.add(summarise([("a", night(CPU, 1))], "tb"))
    before = store.nights("tb")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        store.add(summarise([("b", night(CPU, 2))], "tb"))
    monkeypatch.undo()
    assert store.nights("tb") == before and not list((tmp_path / "s").rglob("*.tmp"))


def test_hostile_names_are_escaped_in_the_markdown_verdict(tmp_path, capsys):
    store = str(tmp_path / "store")
    for day in range(12):
        d = night(HOSTILE, day, factor=0.5 if day >= 10 else 1.0)
        if day >= 10:  # a case that measured starts failing with a hostile reason
            d["benchmarks"][1]["extra_info"].update(status="error", reason=d["unmeasured"][0]["extra_info"]["reason"])
        p = tmp_path / f"h{day}.json"
        storage.write_atomic(p, d)
        main(["history", "add", str(p), "--store", store, "--no-report", "--testbed", "hostile"])
    capsys.readouterr()
    main(["history", "check", "--store", store, "--markdown"])
    out = capsys.readouterr().out
    assert "failing" in out and "&lt;script&gt;" in out
    assert "<script" not in out.lower() and "<img" not in out.lower() and "](javascript" not in out


def test_the_judge_covers_every_case_of_a_200_case_testbed():  # speed: docs/benchmarks.md, never asserted
    vals = simulate.series(200, 120, 0.01, 0.0, 120, seed=1)
    v = judge_testbed("sim", simulate.nights_of(vals), Thresholds(), [])
    assert len(v.cases) == 200 and v.last_good_night is not None


def test_merge_joins_shards_into_one_results_file_the_report_reads(tmp_path, capsys):
    a, b = night(CPU, 3), night(CPU, 3)
    ids = sorted(storage.case_ids(a))
    for d, keep in ((a, ids[::2]), (b, ids[1::2])):
        d["benchmarks"] = [r for r in d["benchmarks"] if storage.case_id_of(r) in keep]
        d["unmeasured"] = [r for r in d["unmeasured"] if storage.case_id_of(r) in keep]
    b["run"].update(id="night0003-shard2", status="interrupted")
    storage.write_atomic(tmp_path / "a.json", a)
    storage.write_atomic(tmp_path / "b.json", b)
    out = tmp_path / "merged.json"
    assert main(["merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", str(out), "--run-id", "n3"]) == 0
    m = storage.load(out)
    assert storage.case_ids(m) == set(ids) and m["run"]["id"] == "n3" and m["run"]["status"] == "incomplete"
    assert [s["id"] for s in m["run"]["merged_from"]] == ["night0003-0", "night0003-shard2"]
    assert {r["extra_info"]["run_id"] for r in storage.records(m)} == {"n3"}
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0


def test_a_jax_upgrade_starts_a_new_baseline_for_jax_cases_not_an_alert(tmp_path):
    """Nights of a TF and a JAX case; JAX 0.5 -> 0.6 with the JAX case 20% slower from then on."""
    fp = {"gpus": [], **{k: None for k in ("driver", "cuda", "cudnn", "cpu", "image_digest")}}
    old_fp = {
        **fp,
        "gpu_count": 0,
        "tensorflow": "2.21",
        "keras": "3.15",
        "jax": "0.5",
        "jaxlib": "0.5",
        "jax_keras": "3.15",
    }
    nights = []
    for i in range(24):
        upgraded = i >= 20
        f = {**old_fp, "jax": "0.6", "jaxlib": "0.6"} if upgraded else dict(old_fp)
        if i < 5:  # nights added before the Keras and JAX versions were part of the fingerprint
            f = {k: v for k, v in f.items() if k not in ("keras", "jax", "jaxlib", "jax_keras")}
        jv = (80.0 if upgraded else 100.0) * (1 + 0.002 * (i % 3))
        nights.append(
            {
                "night_id": f"n{i:03d}",
                "date_utc": f"2026-10-{1 + i:02d}T02",
                "fingerprint": f,
                "fingerprint_hash": summarise_mod.fingerprint_hash(f),
                "status": "complete",
                "commit": f"c{i}",
                "cases": {
                    "tf": {"status": "ok", "value": 100.0 * (1 + 0.002 * (i % 3)), "backend": "tensorflow"},
                    "jx": {"status": "ok", "value": jv, "backend": "jax"},
                },
            }
        )
    v = judge_testbed("tb", nights, Thresholds(), [])
    jx, tf = v.cases["jx"], v.cases["tf"]
    assert [p.night_id for p in jx.points if p.segment_start] == ["n020"]  # the upgrade, not n005
    assert jx.alert is None and jx.state == "insufficient"  # a new baseline, never a regression
    assert not any(p.segment_start for p in tf.points) and tf.state == "ok"  # TensorFlow cases judged on
    assert summarise_mod.new_segment(nights[19], nights[20]) and not summarise_mod.new_segment(nights[4], nights[5])
    assert "JAX 0.6" in describe_fingerprint(nights[20]["fingerprint"])


def test_tensorflows_cpu_allocator_is_part_of_the_fingerprint_where_recorded():
    """BFC vs TensorFlow's default CPU allocator moves CPU step times by a third: a new baseline for TF cases."""
    from bench.report.render import identity_differences

    def doc(allocator=None):
        ab = {"cpu": {"model": "EPYC"}, "tensorflow": "2.21", "keras": "3.15", "jax": "0.9"}
        return {"machine_info": {"accelbench": {**ab, **({"tf_cpu_allocator": allocator} if allocator else {})}}}

    bfc, default, before = fingerprint(doc("bfc")), fingerprint(doc("default")), fingerprint(doc())
    assert bfc["tf_cpu_allocator"] == "bfc" and "tf_cpu_allocator" not in before
    assert not summarise_mod.same_testbed(bfc, default, "tensorflow") and summarise_mod.same_testbed(
        bfc, default, "jax"
    )
    assert summarise_mod.same_testbed(bfc, before, "tensorflow")  # not recorded before: no difference by itself
    assert "TF CPU allocator default" in describe_fingerprint(default)
    assert identity_differences(doc("default"), doc("bfc")) == ["tf_cpu_allocator bfc -> default"]
    assert identity_differences(doc("bfc"), doc()) == []


def test_a_torch_upgrade_is_a_new_baseline_for_torch_cases_only_and_a_backend_not_run_is_no_difference():
    from bench.fingerprint import ALL_KEYS, BACKEND_KEYS, keys_for
    from bench.report.render import identity_differences

    tf = {"cpu": {"model": "EPYC"}, "tensorflow": "2.21", "keras": "3.15", "tf_cpu_allocator": "bfc"}
    torch = {"torch": "2.13.0", "torch_cuda_build": None, "torch_keras": "3.15"}
    old, new, tf_only = ({"machine_info": {"accelbench": ab}} for ab in (
        {**tf, **torch}, {**tf, **torch, "torch": "2.14.1"}, tf
    ))  # fmt: skip
    a, b = fingerprint(old), fingerprint(new)
    for backend, differs in (("torch", True), ("torch-native", True), ("tensorflow", False), ("jax", False)):
        assert summarise_mod.same_testbed(a, b, backend) is not differs, backend
    assert "torch 2.14.1" in describe_fingerprint(b) and "torch_cuda_build" not in a  # a CPU build: not recorded
    assert identity_differences(new, old) == ["torch 2.13.0 -> 2.14.1"]
    assert identity_differences(new, tf_only) == [] and summarise_mod.same_testbed(fingerprint(tf_only), b)
    # what a run records of each backend is in the fingerprint, and every field is one that a case depends on
    full = {k: "x" for ks in BACKEND_KEYS.values() for k in ks}
    assert set(fingerprint({"machine_info": {"accelbench": full}})) == set(ALL_KEYS)
    assert set(ALL_KEYS) == {k for b in (*BACKEND_KEYS, None) for k in keys_for(b)}


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--cv", "0"], "--cv in (0, 0.5)"),
        (["--cv", "0.6"], "--cv in (0, 0.5)"),
        (["--step", "1.0"], "--step in [0, 1)"),
        (["--nights", "10"], "--nights >= 20"),
        (["--k", "-1"], "k"),
        (["--confirm", "0"], "positive"),
    ],
)
def test_history_simulate_refuses_bad_input_in_one_line(args, msg, capsys):
    assert main(["history", "simulate", "--cases", "5", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("accelbench: error: ") and msg in err and err.count("\n") == 1, err


def test_history_simulate_prints_the_experiment_for_the_rule_given(capsys):
    assert (
        main(["history", "simulate", "--cases", "20", "--nights", "30", "--cv", "0.01", "--step", "0.1", "--k", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert "20 series x 30 nights per row, seed 0; Rule(k=3.0, delta=0.03" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("1%")]
    assert len(rows) == 1 and rows[0][:2] == ["1%", "10%"]  # one cell: 1% noise, a planted 10% slowdown
    assert rows[0][4] == "100%"  # a 10% step at 1% noise is always confirmed


def test_a_serve_case_is_tracked_by_its_rate_at_the_slo_with_its_bracket_as_noise_floor():
    from bench.cases import Case

    serve_case = Case("mlp", "serve", "gpu", 1, False, "fp32", False, 64, slo_ms=10.0)
    info = {
        "case_id": serve_case.id,
        **serve_case.to_dict(),
        "status": "ok",
        "reason": "",
        "samples_per_s": 50000.0,
        "max_rate_at_slo": 20000.0,
        "rate_bracket_low": 20000.0,
        "rate_bracket_high": 21000.0,
        "serve_reason": "",
    }
    line = summarise_mod._case_line(storage.case_records({"benchmarks": [_record(serve_case, info)]})[0])
    assert line["metric"] == "max_rate_at_slo" and line["unit"] == "req/s" and line["value"] == 20000.0
    assert line["noise_floor"] == pytest.approx(0.05) and line["slo_ms"] == 10.0
    # a 4% drop hides inside the search's 5% resolution; a 15% drop does not
    nights = _nights(_flat(12, cv=0.005) + [96.0, 96.0, 85.0, 85.0])
    for n in nights:
        n["cases"]["c"]["noise_floor"] = 0.05
    states = [p.state for p in judge_case("tb", "c", nights, Rule()).points]
    assert states[12:] == ["ok", "ok", "suspect", "confirmed"]
    plain = _nights(_flat(12, cv=0.005) + [96.0, 96.0])  # without the floor the 4% drop is a regression
    assert [p.state for p in judge_case("tb", "c", plain, Rule()).points][12:] == ["suspect", "confirmed"]


def _record(case, info):
    name, fullname = storage.suite_name(case.id)
    stats = storage.per_sample_stats([0.1] * 6, case.global_batch * 10)
    return {"name": name, "fullname": fullname, "params": {}, "extra_info": info, "stats": stats, "options": {}}
