"""Which matmul kernel runs a linear layer, chosen per number of rows by measuring the whole model.

Decoding this model is a stream of small-M matrix products (M = tokens in the forward: 1 for `ar`,
γ+1 for a chain, the node count for a tree) against weights far larger than the caches, so every
product should cost what reading its weight costs. PyTorch's default CPU path does not: measured on
a 2-core AMD EPYC (Zen 5) in fp32, ``F.linear`` on the 49k-row LM head takes 7 ms for one row (MKL's
gemv streams ~16 GB/s), 16 ms for two and 12 ms for four, while the same product written weight-first,
``(W @ xᵀ)ᵀ``, takes 2.6–2.8 ms for two to four rows (≈ 43 GB/s) and oneDNN's linear 2.7 ms for one row
and 4–5 ms for 8–16. Which kernel wins depends on the CPU, the BLAS, the dtype and M, so nothing here is
assumed: :func:`tune` times whole-model forwards with each kernel for each M and keeps the fastest, and
:mod:`engines.model.verify_cost` stores that choice with the machine's verify-cost curve.

Every kernel computes the same product; they differ only in rounding order (fp32: ~1e-6 relative).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from engines.model import small_m_kernel
from engines.model.exact_numerics import stock_attention


def _weight_first(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``(W @ xᵀ)ᵀ``: BLAS then runs a gemm with a narrow N instead of a gemv-like small-M gemm."""
    rows = x.reshape(-1, x.shape[-1])
    out = (weight @ rows.T).T
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's linear; it has no backward, so training passes (drafter heads) fall back to ``F.linear``."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _small_m(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """:mod:`engines.model.small_m_kernel` for a few fp32 rows without gradients, ``F.linear`` for anything else (so in
    bf16 this kernel is ``F.linear``, bit for bit)."""
    rows = x.numel() // x.shape[-1]
    if (bias is None and rows <= small_m_kernel.MAX_ROWS and x.dtype == torch.float32
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            and small_m_kernel.applies(weight)):
        return small_m_kernel.product(x, weight)
    return F.linear(x, weight, bias)


KERNELS = {"linear": F.linear, "weight_first": _weight_first, "onednn": _onednn, "small_m": _small_m}


def available_kernels(device: torch.device | str) -> list[str]:
    """Kernels that can run on ``device``: the oneDNN op exists only in CPU builds with mkldnn."""
    if torch.device(device).type != "cpu":
        return ["linear"]
    names = ["linear", "weight_first"]
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        names.append("onednn")
    if small_m_kernel.kernel() is not None:
        names.append("small_m")
    return names


class KernelPlan:
    """Kernel name per row count M; rows beyond the largest tuned M use the kernel tuned for it.

    ``row_invariant``: one-row products run as two identical rows, so that a row's bits never depend on
    how many rows share the call (see :mod:`engines.model.exact_numerics`); the plan should then name one
    kernel for every M, as kernels round differently from one another.
    """

    def __init__(self, by_rows: dict[int, str] | None = None, row_invariant: bool = False):
        self.by_rows = {int(m): k for m, k in (by_rows or {}).items()}
        self.row_invariant = row_invariant
        unknown = set(self.by_rows.values()) - set(KERNELS)
        if unknown:
            raise ValueError(f"kernel must be one of {tuple(KERNELS)}, got {sorted(unknown)}")
        self._largest = max(self.by_rows) if self.by_rows else 0

    def kernel(self, rows: int):
        name = self.by_rows.get(min(rows, self._largest), "linear") if self.by_rows else "linear"
        return KERNELS[name]

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``x @ weightᵀ (+ bias)`` with the kernel planned for this many rows."""
        rows = x.numel() // x.shape[-1]
        kernel = self.kernel(rows)
        if rows == 1 and self.row_invariant:  # a one-row gemv rounds unlike the many-row gemm
            pair = x.reshape(1, -1).expand(2, -1).contiguous()
            return kernel(pair, weight, bias)[:1].reshape(*x.shape[:-1], weight.shape[0])
        return kernel(x, weight, bias)

    def to_dict(self) -> dict[str, str]:
        return {str(m): k for m, k in sorted(self.by_rows.items())}


class PlannedLinear(nn.Linear):
    """An ``nn.Linear`` whose product runs the kernel its plan names for this many rows."""

    plan: KernelPlan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.plan.linear(x, self.weight, self.bias)


def install(model: nn.Module, plan: KernelPlan) -> None:
    """Route every ``nn.Linear`` of ``model`` through ``plan`` (in place; weights untouched)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.__class__ = PlannedLinear
            module.plan = plan
        elif hasattr(module, "kernel_plan"):  # modules that multiply by a weight they do not own (SharedHead)
            module.kernel_plan = plan


def uninstall(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, PlannedLinear):
            module.__class__ = nn.Linear
            del module.plan


@contextmanager
def stock_kernels(model: nn.Module):
    """Run ``model`` as PyTorch ships it (``F.linear`` everywhere, ``sdpa`` attention) inside the block, e.g.
    to time Hugging Face's own ``generate`` as its users get it; the tuned plan comes back afterwards."""
    plans = {module: module.plan for module in model.modules() if isinstance(module, PlannedLinear)}
    uninstall(model)
    try:
        with stock_attention(model):
            yield model
    finally:
        for module, plan in plans.items():
            module.__class__ = PlannedLinear
            module.plan = plan
