import pytest

from bench import capability
from bench.devices import CPUInfo, Machine
from bench.planning import RunOptions, device_configs, plan
from bench.telemetry.gpus import Discovery

BF16_CPU = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16")


@pytest.mark.parametrize(
    "precision, flags, ok, why",
    [
        ("fp32", (), True, ""),
        ("mixed_bfloat16", ("avx512_bf16",), True, ""),
        ("mixed_bfloat16", ("amx_bf16",), True, ""),
        ("mixed_bfloat16", ("avx2", "avx512f"), False, "emulated"),
        ("mixed_float16", BF16_CPU, False, "emulate"),
        ("tf32", BF16_CPU, False, "compute capability >= 8.0"),
    ],
)
def test_cpu_precision_rules(precision, flags, ok, why):
    s = capability.cpu_precision(precision, flags)
    assert s.supported is ok and why in s.reason


@pytest.mark.parametrize(
    "gpu, cc, supported",
    [
        ("Tesla P100", (6, 0), {"fp32"}),
        ("Tesla V100", (7, 0), {"fp32", "mixed_float16"}),
        ("Tesla T4", (7, 5), {"fp32", "mixed_float16"}),
        ("NVIDIA A100-SXM4-40GB", (8, 0), {"fp32", "tf32", "mixed_float16", "mixed_bfloat16"}),
        ("NVIDIA H200", (9, 0), {"fp32", "tf32", "mixed_float16", "mixed_bfloat16"}),
        ("mystery", None, {"fp32"}),
    ],
)
def test_gpu_precision_rules_by_compute_capability(gpu, cc, supported):
    got = {
        p for p in ("fp32", "tf32", "mixed_float16", "mixed_bfloat16") if capability.gpu_precision(p, cc, gpu).supported
    }
    assert got == supported
    if cc == (7, 0):
        assert capability.gpu_precision("mixed_bfloat16", cc, gpu).reason == (
            "mixed_bfloat16 (bf16 tensor cores) needs an NVIDIA GPU with compute capability >= 8.0; Tesla V100 has 7.0"
        )


def machine(tf_gpus=(), nvml_gpus=0, built_with_cuda=True, flags=BF16_CPU):
    from bench.telemetry.gpus import GPUInfo

    nv = [
        GPUInfo(i, "NVIDIA A100-SXM4-40GB", f"GPU-{i}", f"0000:{i:02x}:00.0", 40 * 2**30, (8, 0))
        for i in range(nvml_gpus)
    ]
    gpus = [
        {
            "tf_index": i,
            "cuda_ordinal": i,
            "pci_bus_id": f"0000:{i:02x}:00.0",
            "name": n,
            "compute_capability": list(cc),
        }
        for i, (n, cc) in enumerate(tf_gpus)
    ]
    return Machine(
        CPUInfo("Test CPU", 2, 1, 2, flags),
        Discovery(nv, "560", "12.6", None if nvml_gpus else "NVML library not found"),
        {"gpus": gpus, "built_with_cuda": built_with_cuda},
    )


def test_cpu_only_machine_lists_gpu_cases_as_unsupported_with_reason():
    p = plan(RunOptions(profile="smoke", workloads=("mlp",), modes=("train",)), machine())
    verdict = {c.id: s for c, s in p}
    assert verdict["mlp-train-cpu-fp32-b64"].supported
    assert verdict["mlp-train-cpu-mixed_bfloat16-b64"].supported
    assert not verdict["mlp-train-cpu-tf32-b64"].supported
    assert "no NVIDIA GPU" in verdict["mlp-train-gpu1-fp32-b64"].reason
    assert len(p) == 8  # cpu and gpu1, four precisions each; nothing dropped


@pytest.mark.parametrize(
    "nvml, cuda, phrase",
    [
        (2, False, "no CUDA support"),
        (2, True, "CUDA libraries not loadable"),
        (0, True, "no NVIDIA GPU on this machine"),
    ],
)
def test_why_tensorflow_sees_no_gpu(nvml, cuda, phrase):
    assert phrase in machine(nvml_gpus=nvml, built_with_cuda=cuda).no_gpu_reason()


def test_device_configs_scale_to_all_gpus_and_virtual_split():
    m = machine(tf_gpus=[("NVIDIA A100-SXM4-40GB", (8, 0))] * 8)
    labels = [d.label for d in device_configs(RunOptions(), m)]
    assert labels == ["cpu", "gpu1", "gpu2", "gpu4", "gpu8"]
    m6 = machine(tf_gpus=[("NVIDIA A100-SXM4-40GB", (8, 0))] * 6)
    assert [d.label for d in device_configs(RunOptions(), m6)] == ["cpu", "gpu1", "gpu2", "gpu4", "gpu6"]
    assert [d.label for d in device_configs(RunOptions(virtual_devices=4), m)][-2:] == ["gpu2-virtual", "gpu4-virtual"]
    assert [d.label for d in device_configs(RunOptions(virtual_devices=2), machine())] == [
        "cpu",
        "gpu1",
        "cpu2-virtual",
    ]


def test_mixed_gpu_generations_use_the_lowest_compute_capability():
    m = machine(tf_gpus=[("NVIDIA A100-SXM4-40GB", (8, 0)), ("Tesla V100", (7, 0))])
    verdict = {
        c.id: s
        for c, s in plan(RunOptions(profile="smoke", workloads=("mlp",), modes=("train",), devices=("gpu:2",)), m)
    }
    assert not verdict["mlp-train-gpu2-mixed_bfloat16-b64"].supported
    assert verdict["mlp-train-gpu2-mixed_float16-b64"].supported


def test_xla_over_virtual_cpus_trains_but_cannot_infer():
    p = plan(
        RunOptions(
            profile="smoke",
            workloads=("mlp",),
            devices=("cpu",),
            precisions=("fp32",),
            xla="both",
            virtual_devices=2,
        ),
        machine(),
    )
    verdict = {c.id: s for c, s in p}
    assert verdict["mlp-train-cpu-fp32-xla-b64"].supported
    # training compiles forward+backward only, which works over logical CPUs
    assert verdict["mlp-train-cpu2-virtual-fp32-xla-b64"].supported
    assert "XLA inference over several logical CPU devices" in verdict["mlp-infer-cpu2-virtual-fp32-xla-b64"].reason


def test_virtual_gpus_need_nvml_memory_to_be_sized():
    opts = RunOptions(profile="smoke", workloads=("mlp",), modes=("train",), devices=("gpu:1",), virtual_devices=2)
    a100 = [("NVIDIA A100-SXM4-40GB", (8, 0))]
    ok = {c.id: s for c, s in plan(opts, machine(tf_gpus=a100, nvml_gpus=1))}
    assert ok["mlp-train-gpu2-virtual-fp32-b64"].supported
    blind = {c.id: s for c, s in plan(opts, machine(tf_gpus=a100, nvml_gpus=0))}
    assert "NVML's total memory" in blind["mlp-train-gpu2-virtual-fp32-b64"].reason
    assert machine(tf_gpus=a100, nvml_gpus=1).gpu_plan("gpu", 2, True) == {
        "cuda_ordinals": [0],
        "pci_bus_ids": ["0000:00:00.0"],
        "memory_total_bytes": 40 * 2**30,
    }


def test_keyword_selection_uses_pytest_expression_semantics():
    p = plan(RunOptions(profile="smoke", keyword="mlp and not infer and bfloat"), machine())
    assert [c.id for c, _ in p] == ["mlp-train-cpu-mixed_bfloat16-b64", "mlp-train-gpu1-mixed_bfloat16-b64"]


@pytest.mark.parametrize(
    "desc, expected",
    [
        (
            "device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0",
            {
                "cuda_ordinal": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "pci_bus_id": "0000:3b:00.0",
                "compute_capability": [9, 0],
            },
        ),
        (
            # TF numbers this GPU:0, but CUDA's ordinal is 1: a display GPU at bus 01 was ignored
            "device: 1, name: NVIDIA RTX A6000, pci bus id: 0000:41:00.0, compute capability: 8.6",
            {"cuda_ordinal": 1, "name": "NVIDIA RTX A6000", "pci_bus_id": "0000:41:00.0", "compute_capability": [8, 6]},
        ),
        ("", {"cuda_ordinal": None, "name": None, "pci_bus_id": None, "compute_capability": None}),
    ],
)
def test_tensorflow_gpu_descriptions_give_bus_ids_and_cuda_ordinals(desc, expected):
    from bench.tfprobe import parse_gpu_desc

    assert parse_gpu_desc(desc) == expected


def test_a_gpu_tensorflow_ignores_is_never_picked():
    # CUDA sees a display GPU (ordinal 0) that TensorFlow ignores; TF's GPU:0 is CUDA ordinal 1
    m = machine(tf_gpus=[("NVIDIA RTX A6000", (8, 6))], nvml_gpus=2)
    m.tf["gpus"][0].update(cuda_ordinal=1, pci_bus_id="0000:01:00.0")
    assert m.gpu_plan("gpu", 1, False) == {
        "cuda_ordinals": [1],
        "pci_bus_ids": ["0000:01:00.0"],
        "memory_total_bytes": 40 * 2**30,
    }


def test_shards_are_disjoint_and_cover_the_plan():
    opts = dict(profile="smoke", workloads=("mlp", "cnn"), virtual_devices=2)
    whole = [c.id for c, _ in plan(RunOptions(**opts), machine())]
    parts = [[c.id for c, _ in plan(RunOptions(**opts, shard=f"{i}/3"), machine())] for i in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(whole) and all(parts)
    assert not set(parts[0]) & set(parts[1]) and not set(parts[1]) & set(parts[2])
