"""Published throughput figures a one-GPU case can be held against, each with its citation.

A row is one number from one table of one file at one commit, with the table's line quoted
verbatim (a test checks the number is in the quote, and the citation's shape). Rows are keyed by
the exact NVML name of the GPU (``shared/design/measurement.md`` rule 24: "NVIDIA H200" is not
"NVIDIA H200 NVL"); no row is scaled or derived from another. ``differs`` says, in words, how the
publisher's setup differs from accelbench's (framework, data, statistic, precision meaning):
the comparison is a guard-rail against a misconfigured machine, not a like-for-like result.

Adding a row needs the file at a 40-hex commit, the table heading and the quoted line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """Where a figure was published: repository, file, commit, table heading, and what produced it."""

    repo: str
    path: str
    commit: str
    heading: str
    setup: str  # framework, container, script, data: what the publisher ran

    @property
    def url(self) -> str:
        """The file at the commit on GitHub."""
        return f"https://github.com/{self.repo}/blob/{self.commit}/{self.path}"


@dataclass(frozen=True)
class Published:
    """One published figure: a model run one way on one GPU, and the line it was read from."""

    gpu: str  # exact NVML name
    model: str  # Workload.published_as
    mode: str  # train | infer
    precision: str  # accelbench's precision the publisher's setting corresponds to
    xla: bool
    batch: int  # per GPU
    value: float
    unit: str
    source: Source
    quote: str  # the table line, verbatim
    differs: tuple[str, ...]  # how the publisher's setup differs from accelbench's


DLE = "NVIDIA/DeepLearningExamples"
DLE_RN50 = "TensorFlow/Classification/ConvNets/resnet50v1.5/README.md"
DLE_COMMIT = "1d4211fe9d94550d7bc72bb9b0ac4f576533ca52"
DLE_SETUP = "TensorFlow 1 estimator, NGC container 20.06-tf1-py3"
DLE_TRAIN = (
    "TensorFlow 1 estimator with Horovod (NGC 20.06-tf1), not Keras 3",
    "real ImageNet TFRecords through tf.data (accelbench: synthetic batches on the device)",
    "mean of per-step images/s over 500 iterations after 200 warm-up (NVIDIA/DeepLearningExamples#1264; "
    "accelbench: median of per-round throughput)",
)
DLE_INFER = (
    "TensorFlow 1 estimator (NGC 20.06-tf1), not Keras 3",
    "real ImageNet TFRecords through tf.data (accelbench: synthetic batches on the device)",
    "average over 400 batches after 50 warm-up (accelbench: median of per-round throughput)",
)


def _dle(heading: str) -> Source:
    return Source(DLE, DLE_RN50, DLE_COMMIT, heading, DLE_SETUP)


_A100_TRAIN = _dle("Training performance: NVIDIA DGX A100 (8x A100 40GB), 1 GPU row")
_A100_TRAIN_Q = "| 1  | 256 | 909 img/s  | 2375 img/s    | 2.60x           | 1.00x     | 1.00x             |"
_V100_TRAIN = _dle("Training performance: NVIDIA DGX-1 (8x V100 16G), 1 GPU row")
_V100_TRAIN_Q = (
    "| 1  | 128 (FP32) / 256 (AMP) | 412 img/s  | 1270 img/s | 3.08x           | 1.00x     | 1.00x             |"
)

# (gpu, heading of the sub-table, precision, xla, [(batch, value, quote)])
_DLE_INFER_TABLES: list[tuple[str, str, str, bool, list[tuple[int, float, str]]]] = [
    (
        "NVIDIA A100-SXM4-40GB",
        "Inference performance: NVIDIA DGX A100 (1x A100 40GB), TF32 Inference Latency",
        "tf32",
        False,
        [
            (1, 191.23, "| 1 | 191.23 img/s | 5.26 ms | 5.29 ms | 5.31 ms | 5.42 ms |"),
            (64, 1793.81, "| 64 | 1793.81 img/s | 35.82 ms | 37.22 ms | 37.43 ms | 37.84 ms |"),
            (256, 1911.96, "| 256 | 1911.96 img/s | 133.90 ms | 135.16 ms | 135.59 ms | 136.49 ms |"),
        ],
    ),
    (
        "NVIDIA A100-SXM4-40GB",
        "Inference performance: NVIDIA DGX A100 (1x A100 40GB), TF32 Inference Latency + XLA",
        "tf32",
        True,
        [
            (1, 158.67, "| 1 | 158.67 img/s | 6.34 ms | 6.39 ms | 6.46 ms | 7.16 ms |"),
            (64, 2313.13, "| 64 | 2313.13 img/s | 27.81 ms | 28.68 ms | 29.10 ms | 30.33 ms |"),
            (256, 2548.87, "| 256 | 2548.87 img/s | 100.45 ms | 102.34 ms | 103.04 ms | 104.81 ms |"),
        ],
    ),
    (
        "NVIDIA A100-SXM4-40GB",
        "Inference performance: NVIDIA DGX A100 (1x A100 40GB), Mixed Precision Inference Latency",
        "mixed_float16",
        False,
        [
            (1, 223.35, "| 1 | 223.35 img/s | 4.51 ms | 4.50 ms | 4.52 ms | 4.76 ms |"),
            (64, 3570.46, "| 64 | 3570.46 img/s | 18.14 ms | 18.26 ms | 18.43 ms | 19.35 ms |"),
            (256, 3229.32, "| 256 | 3229.32 img/s | 81.02 ms | 96.21 ms | 105.67 ms | 126.31 ms |"),
        ],
    ),
    (
        "NVIDIA A100-SXM4-40GB",
        "Inference performance: NVIDIA DGX A100 (1x A100 40GB), Mixed Precision Inference Latency + XLA",
        "mixed_float16",
        True,
        [
            (1, 174.68, "| 1 | 174.68 img/s | 5.76 ms | 5.81 ms | 5.95 ms | 6.13 ms |"),
            (64, 3940.95, "| 64 | 3940.95 img/s | 18.76 ms | 26.58 ms | 35.41 ms | 59.06 ms |"),
            (256, 3676.14, "| 256 | 3676.14 img/s | 71.67 ms | 82.36 ms | 88.53 ms | 108.18 ms |"),
        ],
    ),
    (
        "Tesla V100-SXM2-16GB",
        "Inference performance: NVIDIA DGX-1 (1x V100 16G), FP32 Inference Latency",
        "fp32",
        False,
        [
            (1, 173.35, "|1\t|173.35 img/s\t|5.79 ms\t|5.90 ms\t|5.95 ms\t|6.04 ms  |"),
            (64, 1252.06, "|64\t|1252.06 img/s\t|51.12 ms\t|51.82 ms\t|52.75 ms\t|53.45 ms |"),
            (256, 1348.52, "|256\t|1348.52 img/s\t|189.85 ms\t|191.16 ms\t|191.77 ms\t|192.47 ms|"),
        ],
    ),
    (
        "Tesla V100-SXM2-16GB",
        "Inference performance: NVIDIA DGX-1 (1x V100 16G), Mixed Precision Inference Latency",
        "mixed_float16",
        False,
        [
            (1, 237.35, "|1\t|237.35 img/s\t|4.25 ms\t|4.39 ms\t|4.54 ms\t|5.30 ms  |"),
            (64, 2706.11, "|64\t|2706.11 img/s\t|23.86 ms\t|23.82 ms\t|23.89 ms\t|24.10 ms |"),
            (256, 2742.14, "|256\t|2742.14 img/s\t|94.67 ms\t|108.02 ms\t|119.34 ms\t|145.55 ms|"),
        ],
    ),
    (
        "Tesla V100-SXM2-16GB",
        "Inference performance: NVIDIA DGX-1 (1x V100 16G), Mixed Precision Inference Latency + XLA",
        "mixed_float16",
        True,
        [
            (1, 162.95, "|1\t|162.95 img/s\t|6.16 ms\t|6.28 ms\t|6.34 ms\t|6.50 ms  |"),
            (64, 2910.05, "|64\t|2910.05 img/s\t|22.66 ms\t|21.82 ms\t|24.71 ms\t|48.61 ms |"),
            (256, 2898.12, "|256\t|2898.12 img/s\t|90.53 ms\t|106.12 ms\t|118.12 ms\t|150.78 ms|"),
        ],
    ),
]

LAMBDA = "lambdal/deeplearning-benchmark"
LAMBDA_COMMIT = "aa5addb6a53675a649a80036dad548f1c27cbcc4"
LAMBDA_SETUP = "PyTorch DeepLearningExamples ResNet-50 (synthetic data) run by Lambda's benchmark scripts"
LAMBDA_COMMON = (
    "PyTorch eager, not Keras 3 on TensorFlow",
    "the resnet50 column of a one-GPU host's CSV line (header: ,ssd,bert_base_squad,bert_large_squad,gnmt,"
    "resnet50,tacotron2,waveglow)",
)
LAMBDA_FP32 = "'FP32' in PyTorch runs convolutions in TF32 by default (cudnn.allow_tf32)"
LAMBDA_AMP = "AMP with a static loss scale of 256 (accelbench: dynamic loss scaling)"


def _lambda(path: str, config: str) -> Source:
    return Source(
        LAMBDA, path, LAMBDA_COMMIT, f"resnet50 column; batch from pytorch/scripts/config_v2/{config}", LAMBDA_SETUP
    )


def _rows() -> list[Published]:
    rows = [
        Published("NVIDIA A100-SXM4-40GB", "resnet50_v1.5", "train", "tf32", True, 256, 909, "img/s",
                  _A100_TRAIN, _A100_TRAIN_Q, DLE_TRAIN),
        Published("NVIDIA A100-SXM4-40GB", "resnet50_v1.5", "train", "mixed_float16", True, 256, 2375, "img/s",
                  _A100_TRAIN, _A100_TRAIN_Q, DLE_TRAIN),
        Published("Tesla V100-SXM2-16GB", "resnet50_v1.5", "train", "fp32", True, 128, 412, "img/s",
                  _V100_TRAIN, _V100_TRAIN_Q, DLE_TRAIN),
        Published("Tesla V100-SXM2-16GB", "resnet50_v1.5", "train", "mixed_float16", True, 256, 1270, "img/s",
                  _V100_TRAIN, _V100_TRAIN_Q, DLE_TRAIN),
    ]  # fmt: skip
    for gpu, heading, precision, xla, lines in _DLE_INFER_TABLES:
        for batch, value, quote in lines:
            rows.append(
                Published(gpu, "resnet50_v1.5", "infer", precision, xla, batch, value, "img/s", _dle(heading), quote,
                          DLE_INFER)
            )  # fmt: skip
    fp16, fp32 = "pytorch/pytorch-train-throughput-v2-fp16.csv", "pytorch/pytorch-train-throughput-v2-fp32.csv"
    h200, h100 = "config_pytorch_140GB.sh", "config_pytorch_80GB.sh"
    rows += [
        Published("NVIDIA H200", "resnet50_v1.5", "train", "mixed_float16", False, 2560, 3079.0, "img/s",
                  _lambda(fp16, h200),
                  "LambdaBM_ENG04_1xH200_140GB_SXM_h200_v2,946.0,932.0,350.0,570504.0,3079.0,128468.0,549126.0",
                  (*LAMBDA_COMMON, LAMBDA_AMP)),
        Published("NVIDIA H200", "resnet50_v1.5", "train", "tf32", False, 1280, 2259.0, "img/s",
                  _lambda(fp32, h200),
                  "LambdaBM_ENG04_1xH200_140GB_SXM_h200_v2,683.0,514.0,181.0,285142.0,2259.0,128210.0,533327.0",
                  (*LAMBDA_COMMON, LAMBDA_FP32)),
        Published("NVIDIA H100 80GB HBM3", "resnet50_v1.5", "train", "mixed_float16", False, 1280, 2791.0, "img/s",
                  _lambda(fp16, h100),
                  "LambdaOD_1x_Texas_1xH100_80GB_SXM5_192-222-52-60_v2,859.0,859.0,311.0,481761.0,2791.0,90692.0,"
                  "471987.0",
                  (*LAMBDA_COMMON, LAMBDA_AMP)),
        Published("NVIDIA H100 80GB HBM3", "resnet50_v1.5", "train", "tf32", False, 640, 1895.0, "img/s",
                  _lambda(fp32, h100),
                  "LambdaOD_1x_Texas_1xH100_80GB_SXM5_192-222-52-60_v2,585.0,439.0,149.0,249138.0,1895.0,89290.0,"
                  "455834.0",
                  (*LAMBDA_COMMON, LAMBDA_FP32)),
    ]  # fmt: skip
    return rows


PUBLISHED: tuple[Published, ...] = tuple(_rows())


def for_gpu(gpu_name: str | None) -> list[Published]:
    """Every published row for exactly this GPU (none for a neighbour: an A100 80GB is not a 40GB)."""
    name = (gpu_name or "").strip()
    return [p for p in PUBLISHED if p.gpu == name]
