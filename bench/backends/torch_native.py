"""Native PyTorch: the same models written in plain torch, the step a PyTorch user writes.

The reference beside Keras on torch (``torch-native`` in ids and reports): the same shapes, the
same parameter counts and FLOPs as the Keras builds (``tests/test_torch.py``), not the same
initialisation. ResNet-50 v1.5 is torchvision's where torchvision is installed (the model a
PyTorch user trusts), else this module's own of the same layout (equal state-dict shapes: a
test); the smaller CNNs, the MLP and the post-LN encoder blocks are written here with ``nn.Linear``,
``nn.Conv2d``/``nn.BatchNorm2d`` and ``nn.TransformerEncoderLayer``. Logits in float32 as the Keras
builds. The step: ``torch.autocast`` for the mixed precisions (a ``GradScaler`` for fp16 only),
``torch.optim.SGD(lr=0.01, momentum=0.9)`` (fused where the device has it), channels_last for the
CNN, data resident on the device. Compiled: ``torch.compile(fullgraph=True)`` over model and loss
(a graph break is a case error, reported).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bench.backends.base import Step
from bench.backends.torch_backend import TorchBackend
from bench.cases import Case
from bench.precision import PrecisionSpec


class _MLP(nn.Module):
    def __init__(self, size: Any):
        super().__init__()
        widths = (size.features, *size.hidden)
        self.body = nn.Sequential(*(m for a, b in zip(widths[:-1], widths[1:]) for m in (nn.Linear(a, b), nn.ReLU())))
        self.logits = nn.Linear(widths[-1], size.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _fp32_head(self.logits, self.body(x))


class _Encoder(nn.Module):
    def __init__(self, size: Any):
        super().__init__()
        layer = dict(dropout=0.0, activation="gelu", layer_norm_eps=1e-12, batch_first=True, norm_first=False)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(size.d_model, size.heads, size.ffn, **layer) for _ in range(size.layers)
        )
        self.logits = nn.Linear(size.d_model, size.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return _fp32_head(self.logits, x.mean(dim=1))


class _Bottleneck(nn.Module):
    """torchvision's Bottleneck (v1.5: the stride in the 3x3 convolution)."""

    def __init__(self, cin: int, width: int, stride: int, project: bool):
        super().__init__()
        out = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (
            nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out)) if project else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (self.downsample(x) if self.downsample is not None else x))


class _ResNet(nn.Module):
    """torchvision's ResNet layout over the workload's size (stem, stages of bottlenecks, pool, fc)."""

    def __init__(self, size: Any):
        super().__init__()
        k = size.stem_kernel
        self.conv1 = nn.Conv2d(size.channels, size.widths[0], k, size.stem_stride, k // 2, bias=False)
        self.bn1, self.relu = nn.BatchNorm2d(size.widths[0]), nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1) if size.stem_pool else nn.Identity()
        stages, cin = [], size.widths[0]
        for s, (n, width) in enumerate(zip(size.blocks, size.widths)):
            stride = 1 if s == 0 else 2
            blocks = [
                _Bottleneck(cin if b == 0 else width * 4, width, stride if b == 0 else 1, b == 0) for b in range(n)
            ]
            stages.append(nn.Sequential(*blocks))
            cin = width * 4
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, size.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return _fp32_head(self.fc, self.layers(x).mean(dim=(2, 3)))


def _fp32_head(head: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The logits layer in float32 under autocast, as the Keras builds (``dtype="float32"``)."""
    with torch.autocast(x.device.type, enabled=False):
        return head(x.float())


def build_model(workload: str, size: Any) -> tuple[nn.Module, str]:
    """The native model of a workload at ``size``, and where it comes from (torchvision or this module)."""
    if workload == "mlp":
        return _MLP(size), "accelbench (plain torch)"
    if workload == "transformer":
        if size.d_model % size.heads:
            raise ValueError(f"d_model {size.d_model} is not divisible by heads {size.heads}")
        return _Encoder(size), "accelbench (nn.TransformerEncoderLayer, post-LN)"
    from workloads.cnn import RESNET50

    if size == RESNET50:
        try:
            import torchvision

            return torchvision.models.resnet50(weights=None), f"torchvision {torchvision.__version__} resnet50"
        except ImportError:
            pass
    return _ResNet(size), "accelbench (torchvision's ResNet layout)"


def make_batch(workload: str, size: Any, input_shape: tuple[int, ...], classes: int, batch: int, seed: int) -> Any:
    """Synthetic inputs (images NCHW) and int64 labels on the CPU (the caller moves them)."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch, *input_shape)
    x = torch.randn(shape, generator=g)
    if workload == "cnn":
        x = x.permute(0, 3, 1, 2).contiguous()
    return x, torch.randint(0, classes, (batch,), generator=g)


class NativeBackend(TorchBackend):
    """The same surface as Keras on torch; the model and the step are plain torch."""

    name = "torch-native"

    def versions(self) -> dict:
        v = {"torch": torch.__version__, "torch_cuda_build": torch.version.cuda}
        try:
            import torchvision

            v["torchvision"] = torchvision.__version__
        except ImportError:
            pass
        return v

    def apply_precision(self, spec: PrecisionSpec, device_kind: str) -> str:
        self.spec = spec
        return self._math(spec, spec.compute_dtype, "float32", device_kind)

    def build(self, case: Case, profile: str) -> Step:
        from workloads import WORKLOADS

        w = WORKLOADS[case.workload]
        size = w.size(profile, case.knobs)
        rank = self.group.rank if self.group else 0
        model, source = build_model(case.workload, size)
        cnn = case.workload == "cnn"
        fmt = torch.channels_last if cnn else torch.contiguous_format
        model = model.to(self.dev, memory_format=fmt)
        x, y = make_batch(
            case.workload, size, w.input_shape(size), w.num_classes(size), case.per_replica_batch, 17 + rank
        )
        x, y = x.to(self.dev, memory_format=fmt) if cnn else x.to(self.dev), y.to(self.dev)
        # as Keras' count_params: the weights and BatchNorm's moving statistics (not its step counter)
        params = sum(p.numel() for p in model.parameters()) + sum(
            b.numel() for b in model.buffers() if b.is_floating_point()
        )
        net = self.group.wrap(model, self.dev) if self.group else model
        spec = case.precision_spec
        dtype = getattr(torch, spec.compute_dtype)
        mixed = spec.mixed

        def autocast() -> Any:
            return torch.autocast(self.dev.type, dtype=dtype, enabled=mixed)

        loss_fn = nn.CrossEntropyLoss()
        extra = {"model_source": source, "channels_last": cnn}
        if self.dev.type == "cuda":
            torch.backends.cudnn.benchmark = True
            extra["cudnn_benchmark"] = True
        if case.mode == "train":
            model.train()
            fused = self.dev.type == "cuda"
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=fused or None)
            scaler = torch.amp.GradScaler(self.dev.type, enabled=spec.loss_scaling)
            extra.update(optimizer=f"torch.optim.SGD({'fused' if fused else 'foreach'})", grad_scaler=spec.loss_scaling)

            def forward(x: Any, y: Any) -> Any:
                with autocast():
                    return loss_fn(net(x), y)

            fwd = self._compiled(forward, case, fullgraph=True)

            def step() -> Any:
                opt.zero_grad(set_to_none=True)
                loss = fwd(x, y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                return loss.detach()

        else:
            model.eval()

            def infer(x: Any) -> Any:
                with autocast():
                    return net(x)

            fwd_infer = self._compiled(infer, case, fullgraph=True)

            def step() -> Any:
                with torch.inference_mode():
                    return fwd_infer(x)

        holder = _Holder(model, x, y)
        serve = self._serve(case, fwd_infer, x) if case.mode == "serve" else None
        return self._step(case, step, holder, int(params), serve=serve, extra=extra)

    def end_case(self) -> None:
        self._end()


class _Holder:
    def __init__(self, model: nn.Module, x: Any, y: Any):
        self.model, self.x, self.y = model, x, y

    def params(self) -> list:
        return list(self.model.parameters()) + list(self.model.buffers())
