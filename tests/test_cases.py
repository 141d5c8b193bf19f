import pytest

from bench.cases import Case, DeviceConfig, expand, parse_device_spec
from bench.errors import UserError
from bench.precision import PRECISIONS


def case(**kw):
    base = dict(
        workload="cnn",
        mode="train",
        device_kind="gpu",
        device_count=2,
        virtual=False,
        precision="mixed_bfloat16",
        xla=True,
        per_replica_batch=64,
    )
    return Case(**{**base, **kw})


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({}, "cnn-train-gpu2-mixed_bfloat16-xla-b64"),
        ({"device_kind": "cpu", "device_count": 1, "xla": False, "precision": "fp32"}, "cnn-train-cpu-fp32-b64"),
        ({"device_kind": "cpu", "virtual": True, "xla": False}, "cnn-train-cpu2-virtual-mixed_bfloat16-b64"),
        ({"device_count": 1, "mode": "infer", "per_replica_batch": 1}, "cnn-infer-gpu1-mixed_bfloat16-xla-b1"),
        ({"virtual": True, "device_count": 4}, "cnn-train-gpu4-virtual-mixed_bfloat16-xla-b64"),
    ],
)
def test_case_id_is_derived_from_fields(kw, expected):
    assert case(**kw).id == expected


def test_case_round_trips_through_dict_and_global_batch_is_weak_scaling():
    c = case()
    assert Case.from_dict({**c.to_dict(), "extra": 1}) == c
    assert c.global_batch == 128


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"mode": "eval"}, "mode must be"),
        ({"precision": "fp8"}, "precision must be"),
        ({"per_replica_batch": 0}, "positive"),
        ({"device_kind": "tpu"}, "device kind"),
        ({"device_kind": "cpu", "device_count": 2}, "virtual"),
    ],
)
def test_invalid_cases_are_user_errors(kw, msg):
    with pytest.raises(UserError, match=msg):
        case(**kw)


@pytest.mark.parametrize(
    "text, dev", [("cpu", DeviceConfig("cpu")), ("gpu", DeviceConfig("gpu", 1)), ("GPU:4", DeviceConfig("gpu", 4))]
)
def test_parse_device_spec(text, dev):
    assert parse_device_spec(text) == dev


@pytest.mark.parametrize("text", ["gpu:0", "gpu:x", "tpu", "cpu:2", ""])
def test_parse_device_spec_rejects(text):
    with pytest.raises(UserError, match="device must be"):
        parse_device_spec(text)


def test_matrix_expansion_order_and_batch1_latency_cases():
    devs = [DeviceConfig("cpu"), DeviceConfig("gpu", 1)]
    cases = expand(
        ["mlp", "cnn"],
        ["train", "infer"],
        devs,
        ["fp32", "mixed_bfloat16"],
        [False, True],
        {"mlp": 32, "cnn": 8},
        latency_batch1=True,
    )
    # 2 workloads x (train: 1 batch + infer: 2 batches) x 2 devices x 2 precisions x 2 xla
    assert len(cases) == 2 * 3 * 2 * 2 * 2
    assert cases[0].id == "mlp-train-cpu-fp32-b32"
    assert cases[1].id == "mlp-train-cpu-fp32-xla-b32"
    assert "mlp-infer-gpu1-mixed_bfloat16-b1" in {c.id for c in cases}
    assert not any(c.mode == "train" and c.per_replica_batch == 1 for c in cases)
    assert len({c.id for c in cases}) == len(cases)


def test_related_cases_are_built_from_fields_never_from_id_strings():

    c = Case("cnn", "train", "gpu", 8, False, "mixed_bfloat16", True, 64, nodes=2)
    assert c.baseline().id == "cnn-train-cpu-fp32-b64"
    assert c.single_device().id == "cnn-train-gpu1-mixed_bfloat16-xla-b64"
    assert c.related(precision="fp32").id == "cnn-train-gpu8x2nodes-fp32-xla-b64"
    assert c.related(xla=False).id == "cnn-train-gpu8x2nodes-mixed_bfloat16-b64"
    v = Case("mlp", "infer", "cpu", 2, True, "fp32", False, 64)
    assert v.single_device().id == "mlp-infer-cpu-fp32-b64" and v.baseline().id == "mlp-infer-cpu-fp32-b64"
    # JAX: its baseline is JAX's own CPU fp32 case; model parallel on one device is data parallel
    j = Case("mlp", "train", "gpu", 2, False, "tf32", True, 1024, backend="jax", parallelism="model")
    assert j.id == "mlp-train-gpu2-jax-mp-tf32-b1024"
    assert j.baseline().id == "mlp-train-cpu-jax-fp32-b1024"
    assert j.single_device().id == "mlp-train-gpu1-jax-tf32-b1024"
    assert j.related(parallelism="data").id == "mlp-train-gpu2-jax-tf32-b1024"
    assert j.related(backend="tensorflow", parallelism="data", xla=False).id == "mlp-train-gpu2-tf32-b1024"


def test_a_case_reads_from_a_table_row_or_an_older_record():
    import numpy as np
    import pandas as pd

    c = Case("cnn", "infer", "gpu", 4, False, "fp32", True, 32, backend="jax")
    row = pd.Series({**c.to_dict(), "device_count": np.int64(4), "xla": np.bool_(True), "extra": 1})
    assert Case.of(row) == c
    old = {k: v for k, v in Case("mlp", "train", "cpu", 1, False, "fp32", False, 64).to_dict().items()}
    for k in ("nodes", "backend", "parallelism"):
        del old[k]  # results written before those fields existed
    assert Case.of(old) == Case("mlp", "train", "cpu", 1, False, "fp32", False, 64)
    assert Case.of({**old, "nodes": float("nan"), "backend": None}).id == "mlp-train-cpu-fp32-b64"


def test_every_planned_id_reads_back_into_its_named_parts():
    """The id is a table of named parts: parse_id(case.id) == case.id_parts() for every kind of case."""
    from bench.cases import ID_PARTS, parse_id

    cases = [
        *expand(
            ["mlp", "cnn"],
            ["train", "infer"],
            [DeviceConfig("cpu"), DeviceConfig("gpu", 2), DeviceConfig("cpu", 2, True)],
            list(PRECISIONS),
            (False, True),
            {"mlp": 64, "cnn": 16},
        ),
        Case("mlp", "train", "gpu", 8, False, "tf32", True, 1024, nodes=2),
        Case("mlp", "infer", "cpu", 2, True, "fp32", True, 64, backend="jax", parallelism="model"),
        Case("transformer", "serve", "gpu", 1, False, "mixed_bfloat16", False, 32, backend="jax", slo_ms=130.0),
        Case("mlp", "train", "gpu", 1, False, "fp32", False, 64, tenants=4),
        Case("mlp", "train", "gpu", 1, False, "fp32", True, 64, backend="jax").mix(),
    ]
    for c in cases:
        parts = parse_id(c.id)
        assert parts == c.id_parts() and list(parts) == list(ID_PARTS), c.id
    with pytest.raises(ValueError, match="not a case id"):
        parse_id("mlp-train-gpu1-fp64-b64")
