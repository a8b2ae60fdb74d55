"""``ColumnSparseMLP``: the step schedule of Chipmunk Part III's MLP deltas for one DiT MLP
across diffusion steps (issue 16). Sparse steps run ``column_sparse_mlp`` (the kernels) for
bf16/fp16 inputs on a GPU and its float32 reference (``ops/column_sparse_mlp.py``) otherwise,
so a float32 copy of the module is the oracle of the kernel path.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .column_sparse_module import DenseStepSchedule
from .ops.activations import ACTIVATION_FNS, check_activation
from .ops.column_sparse import INDEX_DTYPE, check_group, topk_indices
from .ops.column_sparse_mlp import (
    DTYPES,
    MLP_ACTIVATIONS,
    column_sparse_mlp,
    column_sparse_mlp_reference,
)
from .runtime.validate import check_int

__all__ = ["ColumnSparseMLP"]


class ColumnSparseMLP(DenseStepSchedule, nn.Module):
    """One MLP ``y = act(x W1^T + b1) W2^T + b2`` (``fc1``, ``fc2`` as ``nn.Linear``) run as
    cross-step sparse deltas.

    **Schedule** (``ColumnSparseAttention``'s): ``forward(x, step)`` once per diffusion step,
    steps 0, 1, ... in order. Step s is *dense* when ``s < dense_steps`` or (``refresh_every``)
    ``s % refresh_every == 0``, else *sparse*.

    * A dense step returns the dense ``y``. Before a sparse step it caches ``h = act(x W1^T +
      b1)`` and ``y``, and picks, per group of ``group`` token rows, the ``ceil((1 -
      sparsity) F)`` intermediate columns j with the largest ``sum_rows |h_j| ||W2[:, j]||``
      (the norm of the column's contribution to y): ``topk_indices`` (approximate, recall
      not order) on a GPU, ``torch.topk`` elsewhere.
    * A sparse step recomputes only those columns and adds their change to the cached output
      (``column_sparse_mlp_reference``: ``out += (h_new - h_cached) W2[:, idx]^T``), updating
      both caches; it returns the new output.

    Inputs: x (..., K) (rows flattened to M); the caches follow x's dtype. Forward only
    (inference): nothing here has a backward.

    **Kernel path** (x bf16/fp16 on a GPU): the activation cache is kept M-major (a listed
    column of a group is contiguous), ``fc2.weight`` transposed once per weight version, and
    each sparse step is one ``column_sparse_mlp`` call updating the caches in place; it
    returns a copy of the output cache (the caches change again next step). Otherwise the
    float32 reference runs the same algorithm.
    """

    def __init__(self, fc1: nn.Linear, fc2: nn.Linear, *, activation: str = "gelu_tanh",
                 group: int = 128, sparsity: float = 0.93, dense_steps: int = 2,
                 refresh_every: int | None = 10):
        super().__init__()
        if not isinstance(fc1, nn.Linear) or not isinstance(fc2, nn.Linear):
            raise TypeError("fc1 and fc2 must be torch.nn.Linear layers")
        if fc2.in_features != fc1.out_features:
            raise ValueError(f"fc2 takes {fc2.in_features} features, fc1 gives "
                             f"{fc1.out_features}")
        check_activation("activation", activation, MLP_ACTIVATIONS)
        if not isinstance(sparsity, float) or not 0.0 <= sparsity < 1.0:
            raise ValueError(f"sparsity must be a float in [0, 1), got {sparsity!r}")
        self.fc1, self.fc2 = fc1, fc2
        self.activation, self.group, self.sparsity = activation, check_group(group), sparsity
        self._set_schedule(dense_steps, refresh_every)
        self._state = None

    @classmethod
    def from_mlp(cls, mlp: nn.Module, **kwargs) -> ColumnSparseMLP:
        """From a DiT/ViT MLP block with ``fc1`` / ``fc2`` attributes (timm's ``Mlp``), or
        else its first and last ``nn.Linear``; ``kwargs`` as the constructor's."""
        fc1, fc2 = getattr(mlp, "fc1", None), getattr(mlp, "fc2", None)
        if not (isinstance(fc1, nn.Linear) and isinstance(fc2, nn.Linear)):
            linears = [m for m in mlp.modules() if isinstance(m, nn.Linear)]
            if len(linears) < 2:
                raise ValueError("mlp needs fc1/fc2 attributes or at least two nn.Linear layers")
            fc1, fc2 = linears[0], linears[-1]
        return cls(fc1, fc2, **kwargs)

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        step = check_int("step", step, min_value=0)
        lead = x.shape[:-1]
        rows = x.reshape(-1, x.shape[-1])
        if step == 0:
            self._state = None
        if self.is_dense(step):
            y = self._dense(rows, keep=not self.is_dense(step + 1))
        else:
            if self._state is None:
                raise RuntimeError(f"step {step} is sparse but no dense step came before it "
                                   f"in this sequence (start at step 0)")
            y = self._sparse(rows)
        return y.view(*lead, y.shape[-1])

    def _kernel_path(self, x: torch.Tensor) -> bool:
        return x.is_cuda and x.dtype in DTYPES and self.fc1.weight.dtype == x.dtype

    def _dense(self, x: torch.Tensor, keep: bool) -> torch.Tensor:
        h = ACTIVATION_FNS[self.activation](self.fc1(x))
        y = self.fc2(h)
        if keep:
            act = h.to(x.dtype)
            if self._kernel_path(x):  # M-major: torch.empty(F, M).t() holding h
                act = act.t().contiguous().t()
            self._state = (self._columns(h), act, y.to(x.dtype).contiguous())
        return y

    def _w2t(self) -> torch.Tensor:
        """fc2.weight as the (D, F) view of a contiguous (F, D) copy, remade when the weight
        changes (its version counter or storage)."""
        w = self.fc2.weight
        tag = (w.data_ptr(), w._version, w.dtype, w.device)
        if getattr(self, "_w2t_tag", None) != tag:
            self._w2t_cache, self._w2t_tag = w.detach().t().contiguous().t(), tag
        return self._w2t_cache

    def _columns(self, h: torch.Tensor):
        """(indices, counts) of each group's most important columns (class docstring)."""
        m, f = h.shape
        pad = -m % self.group
        mag = torch.nn.functional.pad(h.float().abs(), (0, 0, 0, pad))
        scores = mag.view(-1, self.group, f).sum(1) * self.fc2.weight.float().norm(dim=0)
        k = max(1, math.ceil((1.0 - self.sparsity) * f))
        if scores.is_cuda:  # the approximate top-k kernel (increasing lists: cache-friendly)
            indices, counts = topk_indices(scores, k)
            return indices.contiguous(), counts
        indices = scores.topk(k, dim=-1).indices.to(INDEX_DTYPE)
        counts = torch.full((indices.shape[0],), k, dtype=INDEX_DTYPE, device=h.device)
        return indices.contiguous(), counts

    def _sparse(self, x: torch.Tensor) -> torch.Tensor:
        (indices, counts), act_cache, out_cache = self._state
        if self._kernel_path(x):
            with torch.no_grad():
                column_sparse_mlp(x, self.fc1.weight, self.fc1.bias, self._w2t(), indices,
                                  counts, act_cache, out_cache, group=self.group,
                                  activation=self.activation)
            return out_cache.clone()
        out, act = column_sparse_mlp_reference(
            x, self.fc1.weight, self.fc1.bias, self.fc2.weight, indices, counts, act_cache,
            out_cache, group=self.group, activation=self.activation)
        self._state = ((indices, counts), act.to(x.dtype), out.to(x.dtype))
        return out.to(x.dtype)
