"""Published reference figures: citations that hold, the matching rule, the report's section and verdicts."""

import re
import sys

import pytest
from conftest import DATA

from bench import storage
from bench.cases import MODES, PRECISIONS, Case
from bench.report import reference
from bench.report.peaks import DATASHEET
from bench.report.published import PUBLISHED, for_gpu
from bench.report.render import html_report, markdown_report
from workloads import WORKLOADS

sys.path.insert(0, str(DATA))
import make_samples  # noqa: E402  (the hand-made sample writer: its record builder)

A100 = "NVIDIA A100-SXM4-40GB"


def test_every_row_is_cited_and_its_value_is_in_its_quote():
    models = {m for w in WORKLOADS.values() for m in w.published_as.values()}
    for p in PUBLISHED:
        s = p.source
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", s.repo) and s.path and s.heading and s.setup, p
        assert re.fullmatch(r"[0-9a-f]{40}", s.commit), p
        assert s.url == f"https://github.com/{s.repo}/blob/{s.commit}/{s.path}"
        numbers = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", p.quote)]
        assert p.value in numbers, (p.value, p.quote)
        assert str(p.batch) in re.findall(r"\d+", p.quote) or p.source.repo == "lambdal/deeplearning-benchmark", p
        assert p.gpu in DATASHEET, f"{p.gpu!r} is not an exact NVML name the project knows"
        assert p.model in models and p.mode in MODES and p.precision in PRECISIONS, p
        assert p.differs, "every row says how the publisher's setup differs"
    # the design's rows: NVIDIA's TF ResNet-50 README on the A100 40GB (training 909 / 2375 img/s at 256)
    a100_train = {(p.precision, p.xla, p.batch): p.value for p in for_gpu(A100) if p.mode == "train"}
    assert a100_train == {("tf32", True, 256): 909, ("mixed_float16", True, 256): 2375}


def test_only_the_resnet50_size_of_the_cnn_has_a_published_name():
    assert reference.published_model("cnn", "standard") == "resnet50_v1.5"
    assert reference.published_model("cnn", "large") == "resnet50_v1.5"
    assert reference.published_model("cnn", "smoke") is None  # a 2-stage toy CNN is no ResNet-50
    assert reference.published_model("transformer", "standard") is None  # 4 blocks are no BERT-base
    assert reference.published_model("mlp", "standard") is None


def cnn(mode="train", precision="tf32", xla=True, batch=256, **kw):
    return Case("cnn", mode, kw.pop("kind", "gpu"), kw.pop("count", 1), kw.pop("virtual", False), precision, xla,
                batch, **kw)  # fmt: skip


@pytest.mark.parametrize(
    ("case", "profile", "gpu", "value"),
    [
        (cnn(), "standard", A100, 909),
        (cnn(precision="mixed_float16"), "large", A100, 2375),
        (cnn(batch=128), "standard", A100, 909),  # within 2x: compared, the batch named
        (cnn(batch=512), "standard", A100, 909),
        (cnn(batch=64), "standard", A100, None),  # 4x off: not comparable
        (cnn(xla=False), "standard", A100, None),  # no published TF32 training figure without XLA
        (cnn(precision="fp32"), "standard", A100, None),
        (cnn(count=2), "standard", A100, None),  # published single-GPU figures: one real GPU only
        (cnn(count=2, virtual=True), "standard", A100, None),
        (cnn(nodes=2), "standard", A100, None),
        (cnn(), "smoke", A100, None),
        (cnn(), "standard", "NVIDIA A100-SXM4-80GB", None),  # a neighbour's row is never used
        (cnn(), "standard", "NVIDIA A100-SXM4-40GB ", 909),  # NVML's padding stripped
        (cnn(kind="cpu"), "standard", A100, None),
        (cnn("infer", xla=False, batch=64), "standard", A100, 1793.81),
        (cnn("infer", xla=False, batch=1), "standard", A100, 191.23),  # the batch-1 latency case
        (cnn("infer", xla=False, batch=128), "standard", A100, 1793.81),  # equally far from 64 and 256: the smaller
        (cnn("infer", "mixed_float16", batch=200), "standard", A100, 3676.14),
        (cnn(precision="mixed_float16", xla=False, batch=2048), "standard", "NVIDIA H200", 3079.0),
    ],
)
def test_a_case_matches_only_the_same_gpu_model_mode_precision_xla_and_a_batch_within_2x(case, profile, gpu, value):
    row = reference.match(case, profile, gpu)
    assert (row.value if row else None) == value


def a100_doc(shares: dict[Case, float], gpu_name: str = A100) -> dict:
    """A results document of one A100 machine whose cases ran at the given share of their published figure."""
    return make_samples.one_gpu(shares, gpu_name)


def test_the_report_shows_measured_against_published_with_the_verdict_bands():
    doc = a100_doc({cnn(): 0.9, cnn(precision="mixed_float16"): 0.3, cnn("infer", xla=False, batch=64): 1.5})
    run_table = reference_table(doc)
    found = {c.case_id: c for c in reference.comparisons(doc, run_table)}
    assert set(found) == {cnn().id, cnn(precision="mixed_float16").id, cnn("infer", xla=False, batch=64).id}
    ok, low, high = (
        found[cnn().id],
        found[cnn(precision="mixed_float16").id],
        found[cnn("infer", xla=False, batch=64).id],
    )
    assert ok.ratio == pytest.approx(0.9, rel=0.03) and ok.verdict == ""
    assert low.ratio == pytest.approx(0.3, rel=0.03) and low.verdict == "check this machine"
    assert high.verdict == "check the configurations are equal"
    # the low verdict carries what the run recorded: clocks, throttling, the lowered cap and the slow link
    for what in ("SM clock 1095 of max 1410 MHz", "sw_power_cap", "LOWERED from the default 400 W", "PCIe gen3 x16",
                 "the GPU can do gen4"):  # fmt: skip
        assert what in low.machine, low.machine
    html = html_report([doc])
    assert "Against published figures" in html
    # the ratios as the records give them (the sample writer's rounds are noisy: 0.9 may show as 0.91x)
    assert f"{ok.ratio:.2f}x" in html and f"{low.ratio:.2f}x" in html and "check this machine" in html
    src = "https://github.com/NVIDIA/DeepLearningExamples/blob/1d4211fe9d94550d7bc72bb9b0ac4f576533ca52/"
    assert src in html and "TensorFlow 1 estimator" in html
    # the published rows this run did not cover are named, with the way to run them
    assert "devices --check --reference" in html and "resnet50_v1.5 infer tf32 + XLA b64" in html
    md = markdown_report([doc])
    assert "## Against published figures" in md and "**check this machine**" in md


def reference_table(doc):
    from bench.report import analysis

    return analysis.load_run(doc).table


def test_a_gpu_without_published_rows_is_told_so_and_a_cpu_only_report_has_no_section():
    doc = a100_doc({cnn(precision="mixed_float16", xla=False): 1.0}, gpu_name="NVIDIA L4")
    html = html_report([doc])
    assert "No published figure for this GPU (NVIDIA L4)" in html
    assert "0.90x" not in html and "img/s" not in html  # no neighbour's figure
    cpu_only = storage.load(DATA / "cpu_smoke.json")
    assert "Against published figures" not in html_report([cpu_only])
    assert "published" not in markdown_report([cpu_only])


def test_hostile_gpu_names_are_escaped_in_the_section():
    doc = a100_doc({cnn(): 1.0}, gpu_name='<img src=x onerror="alert(1)">')
    html = html_report([doc])
    assert "<img src=x" not in html and "&lt;img src=x" in html


def test_the_console_says_the_published_comparison_in_one_line():
    from bench.report import analysis, console

    doc = a100_doc({cnn(): 0.9, cnn(precision="mixed_float16"): 0.3})
    text = console.table(analysis.load_run(doc))
    lines = [ln for ln in text.splitlines() if ln.startswith("published: ")]
    assert len(lines) == 2
    measured = next(r["extra_info"]["samples_per_s"] for r in storage.records(doc) if storage.case_id_of(r) == cnn().id)
    assert measured / 909 == pytest.approx(0.9, rel=0.03)
    want = f"published: cnn-train-gpu1-tf32-xla-b256 is {measured / 909:.2f}x of the published 909 img/s"
    assert lines[0].startswith(want), lines[0]
    assert lines[1].endswith(": CHECK THIS MACHINE")
    assert "published" not in console.table(analysis.load_run(storage.load(DATA / "cpu_smoke.json")))
