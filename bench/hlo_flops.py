"""FLOPs of the dots and convolutions in an XLA HLO module's text: what the compiled program multiplies.

XLA's own cost analysis (``compiled.cost_analysis()["flops"]``) adds every elementwise op and the
optimizer's per-parameter arithmetic to the dots, and on GPUs it does not see the cuBLAS/cuDNN
custom calls at all (the H200's fp32 MLP step: 0.38 MFLOP per sample for 394 MFLOP of GEMMs). This
counts the dots and convolutions alone, 2 FLOPs per multiply-add, from the HLO text (``as_text()``
of a lowered or compiled JAX program), so it can be held against the analytic count of a workload.

Pure text in, numbers out: no framework is imported.
"""

from __future__ import annotations

import math
import re

# ``name = f32[64,512]{1,0} dot(a, b), lhs_contracting_dims={1}, ...`` (operands may carry their shapes)
_INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<type>\w+)\[(?P<dims>[\d,]*)\]\S*\s+(?P<op>[\w\-]+)\("
)
_OPERANDS = re.compile(r"\((?P<args>[^()]*)\)")
_CONTRACT = re.compile(r"lhs_contracting_dims=\{(?P<d>[\d,]*)\}")
_DIM_LABELS = re.compile(r"dim_labels=(?P<lhs>\w+)_(?P<rhs>\w+)->(?P<out>\w+)")
_LHS_DILATE = re.compile(r"lhs_dilate=(?P<d>[\dx]+)")


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(",") if d)


def _operand_names(line: str, op: str) -> list[str]:
    """The operands' names: the last word of each top-level argument (``f32[2,3]{1,0} %a`` -> ``a``)."""
    m = _OPERANDS.search(line, line.index(f" {op}(") + len(op))
    if not m:
        return []
    args, depth, cur = [], 0, ""
    for ch in m.group("args"):
        depth += 1 if ch in "[{" else -1 if ch in "]}" else 0
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
        else:
            cur += ch
    args.append(cur)
    return [a.split()[-1].lstrip("%") if a.strip() else "" for a in args]


def dot_conv_flops(hlo_text: str) -> dict[str, int]:
    """``{"dot": F, "convolution": F}``: FLOPs (2 per multiply-add) of every dot and convolution in the module.

    Each instruction is counted once, as written: a computation called several times (a loop body)
    would be undercounted, which the whole-step programs this is used on do not have.

    Raises:
        ValueError: an operand whose shape the text does not define (not an HLO module).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    found: list[tuple[str, str, tuple[int, ...]]] = []
    for line in hlo_text.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        out = _dims(m.group("dims"))
        shapes[m.group("name")] = out
        if m.group("op") in ("dot", "convolution"):
            found.append((m.group("op"), line, out))
    totals = {"dot": 0, "convolution": 0}
    for op, line, out in found:
        operands = _operand_names(line, op)
        if len(operands) < 2 or operands[0] not in shapes or operands[1] not in shapes:
            raise ValueError(f"HLO {op} with operands of unknown shape: {line.strip()[:120]}")
        lhs, rhs = shapes[operands[0]], shapes[operands[1]]
        if op == "dot":
            c = _CONTRACT.search(line)
            contracted = math.prod(lhs[i] for i in _dims(c.group("d"))) if c else 1
            totals["dot"] += 2 * math.prod(out) * contracted
        else:
            labels = _DIM_LABELS.search(line)
            if not labels:
                raise ValueError(f"HLO convolution without dim_labels: {line.strip()[:120]}")
            rhs_out = rhs[labels.group("rhs").index("o")]
            # each output element contracts the kernel's window and input features: |rhs| / (output features);
            # a dilated input (the input gradient of a strided convolution) is mostly inserted zeros, which
            # no library multiplies: 1 / prod(dilation) of the taps are real
            dilation = math.prod(_dims(d.group("d").replace("x", ","))) if (d := _LHS_DILATE.search(line)) else 1
            totals["convolution"] += 2 * math.prod(out) * (math.prod(rhs) // rhs_out) // dilation
    return totals
