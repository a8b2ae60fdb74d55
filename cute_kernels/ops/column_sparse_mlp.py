"""The column-sparse MLP delta (issue 16, Chipmunk Part III's second half): the contract, its
validation and its float32 reference, ahead of the kernels.

A diffusion transformer's MLP ``y = act(x W1^T + b1) W2^T + b2`` changes little between steps,
so a sparse step recomputes, per group of ``group`` token rows, only the intermediate columns
``indices[g, :counts[g]]`` and adds their change to the cached output:

    h       = act(x_g W1[idx]^T + b1[idx])                 (group, c)
    delta   = h - act_cache[g rows, idx]
    act_cache[g rows, idx]  = h                             (the cache writeback)
    out_cache[g rows]      += delta W2[:, idx]^T            (mm2 on the packed delta)

``column_sparse_mlp_reference`` computes that in float32 for every group at once (one
gather, two batched matmuls) and returns the new caches; ``scatter_add_reference`` is the
writeback alone (``dest[g rows, idx] += src[g rows, :c]``). Not exported: the kernels (the
GEMM with a gathered weight operand and a fused epilogue, the TMA-reduce writeback) come next
(docs/column_sparse_mlp.md); until they exist these references live here only, not in
``cute_kernels.reference``.
"""

from __future__ import annotations

import torch

from ..runtime.validate import check_tensor
from .activations import ACTIVATION_FNS, check_activation
from .column_sparse import INDEX_DTYPE, check_group

#: activations of the fused mm1 epilogue (DiT MLPs use gelu_tanh)
MLP_ACTIVATIONS = ("gelu_tanh", "gelu", "silu")
DTYPES = (torch.bfloat16, torch.float16)


def _check_lists(indices, counts, groups: int, columns: int) -> None:
    check_tensor("indices", indices, dtypes=(INDEX_DTYPE,), ndim=2, on_cuda=False)
    check_tensor("counts", counts, dtypes=(INDEX_DTYPE,), ndim=1, on_cuda=False)
    if indices.shape[0] != groups or counts.shape[0] != groups or indices.shape[1] < 1:
        raise ValueError(f"indices must be (ceil(M / group) = {groups}, L >= 1) and counts "
                         f"({groups},), got {tuple(indices.shape)} and {tuple(counts.shape)}")
    if indices.shape[1] > columns:
        raise ValueError(f"indices has {indices.shape[1]} columns per group, more than the "
                         f"{columns} intermediate columns")


def validate_column_sparse_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group,
                               activation) -> None:
    """The shape, dtype and device rules of :func:`column_sparse_mlp_reference` (and of the
    op to come): x (M, K); w1 (F, K) and b1 (F,) or None (``nn.Linear`` storage); w2 (D, F);
    indices int32 (ceil(M / group), L) and counts int32 (ceil(M / group)); act_cache (M, F),
    out_cache (M, D); one 16-bit dtype and one device for the floating tensors."""
    check_group(group)
    check_activation("activation", activation, MLP_ACTIVATIONS)
    check_tensor("x", x, dtypes=DTYPES, ndim=2, on_cuda=False)
    m, k = x.shape
    for name, t, ndim in (("w1", w1, 2), ("w2", w2, 2), ("act_cache", act_cache, 2),
                          ("out_cache", out_cache, 2)):
        check_tensor(name, t, dtypes=DTYPES, ndim=ndim, on_cuda=False)
        if t.dtype != x.dtype:
            raise TypeError(f"{name} must have x's dtype {x.dtype}, got {t.dtype}")
    f = w1.shape[0]
    if w1.shape[1] != k:
        raise ValueError(f"w1 must be (F, K = {k}), got {tuple(w1.shape)}")
    if w2.shape[1] != f:
        raise ValueError(f"w2 must be (D, F = {f}), got {tuple(w2.shape)}")
    if b1 is not None:
        check_tensor("b1", b1, dtypes=DTYPES, ndim=1, on_cuda=False)
        if b1.shape[0] != f or b1.dtype != x.dtype:
            raise ValueError(f"b1 must be ({f},) in x's dtype, got {tuple(b1.shape)} "
                             f"{b1.dtype}")
    if act_cache.shape != (m, f):
        raise ValueError(f"act_cache must be (M, F) = ({m}, {f}), got "
                         f"{tuple(act_cache.shape)}")
    if out_cache.shape != (m, w2.shape[0]):
        raise ValueError(f"out_cache must be (M, D) = ({m}, {w2.shape[0]}), got "
                         f"{tuple(out_cache.shape)}")
    _check_lists(indices, counts, -(-m // group), f)
    devices = {t.device for t in (x, w1, w2, indices, counts, act_cache, out_cache)
               if t is not None} | ({b1.device} if b1 is not None else set())
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")


def _live(indices, counts):
    """(B, L) bool: list positions below each group's count (counts clamped into [0, L])."""
    width = indices.shape[1]
    return (torch.arange(width, device=indices.device)
            < counts.long().clamp(0, width).unsqueeze(-1))


def _grouped(t: torch.Tensor, group: int) -> torch.Tensor:
    """(M, ...) -> (G, group, ...) float32, rows past M zero."""
    m = t.shape[0]
    pad = -m % group
    t = t.float()
    if pad:
        t = torch.cat([t, t.new_zeros(pad, *t.shape[1:])])
    return t.view(-1, group, *t.shape[1:])


def column_sparse_mlp_reference(x, w1, b1, w2, indices, counts, act_cache, out_cache, *,
                                group: int = 128, activation: str = "gelu_tanh"):
    """One sparse step of the MLP delta in float32 (module docstring): returns the updated
    ``(out_cache, act_cache)`` as new float32 tensors (M, D) and (M, F); the inputs are not
    modified. Only positions below each group's count are used; indices there must lie in
    [0, F) and be distinct within a group (a repeated column would be added twice)."""
    validate_column_sparse_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group,
                               activation)
    m = x.shape[0]
    idx = indices.long().clamp(0, w1.shape[0] - 1)
    live = _live(indices, counts).float().unsqueeze(1)  # (G, 1, L)
    x_g = _grouped(x, group)  # (G, group, K)
    pre = x_g @ w1.float()[idx].transpose(1, 2)  # (G, group, L)
    if b1 is not None:
        pre = pre + b1.float()[idx].unsqueeze(1)
    h = ACTIVATION_FNS[activation](pre)
    act_g = _grouped(act_cache, group)  # (G, group, F)
    old = act_g.gather(2, idx.unsqueeze(1).expand(-1, group, -1))
    delta = (h - old) * live
    out = _grouped(out_cache, group) + delta @ w2.float().t()[idx]  # (G, group, D)
    new_act = act_g.scatter(2, idx.unsqueeze(1).expand(-1, group, -1),
                            torch.where(live.bool(), h, old))
    return (out.reshape(-1, out.shape[-1])[:m], new_act.reshape(-1, new_act.shape[-1])[:m])


def scatter_add_reference(src_packed, dest, indices, counts, *, group: int = 128):
    """The cache writeback alone, in float32: ``dest[g rows, indices[g, j]] += src_packed[g
    rows, j]`` for j below group g's count; ``src_packed`` (M, L), ``dest`` (M, F). Returns
    the new ``dest`` (float32); the inputs are not modified."""
    check_group(group)
    check_tensor("src_packed", src_packed, ndim=2, on_cuda=False)
    check_tensor("dest", dest, ndim=2, on_cuda=False)
    m = dest.shape[0]
    if src_packed.shape[0] != m or src_packed.shape[1] != indices.shape[-1]:
        raise ValueError(f"src_packed must be (M = {m}, L = {indices.shape[-1]}), got "
                         f"{tuple(src_packed.shape)}")
    _check_lists(indices, counts, -(-m // group), dest.shape[1])
    idx = indices.long().clamp(0, dest.shape[1] - 1).unsqueeze(1).expand(-1, group, -1)
    add = _grouped(src_packed, group) * _live(indices, counts).float().unsqueeze(1)
    out = _grouped(dest, group).scatter_add(2, idx, add)
    return out.reshape(-1, dest.shape[1])[:m]
