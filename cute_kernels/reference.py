"""Float32 references of every op, in plain torch: they run on any device, the CPU included.

Each takes the arguments of the op of the same name (``ck.attention`` ->
``ck.reference.attention``) and returns what it returns, computed in float32 (the bit ops:
exactly). They are the oracle the GPU tests compare the kernels against, and what to use to
check a result, or to run the same math where there is no CUDA device::

    import cute_kernels as ck

    o = ck.attention(q, k, v, causal=True)                       # CUDA, bf16
    torch.testing.assert_close(o.float(), ck.reference.attention(q, k, v, causal=True),
                               rtol=2e-2, atol=2e-2)

    o_cpu = ck.reference.attention(q.cpu(), k.cpu(), v.cpu())    # no GPU needed

Argument rules follow the ops' where the math needs them (attention: the op's shape, dtype and
head-dim rules, with the same error messages); the GEMMs take any sizes and dtypes.

An op whose kernels have not run on a GPU yet stays out of ``cute_kernels``' exports and is
listed in ``NOT_YET_PUBLIC`` (name -> the module it lives in) while its reference is here;
none is at the moment.
"""

from __future__ import annotations

import torch

from .ops.activations import ACTIVATION_FNS, GATED_ACTIVATIONS, check_activation
from .ops.attention import attention_colsum_reference, attention_reference
from .ops.bitpack import pack_mask_reference, unpack_mask_reference
from .ops.block_sparse import block_sparse_attention_reference
from .ops.bsr import bsr_sddmm_reference, bsr_softmax_reference, bsr_spmm_reference
from .ops.column_sparse import (
    column_indices_reference,
    column_sparse_attention_reference,
    topk_indices_reference,
)
from .ops.column_sparse_mlp import column_sparse_mlp_reference, scatter_add_reference
from .ops.gated_mlp import gated_mlp_up_reference

__all__ = ["attention", "attention_colsum", "block_sparse_attention", "bsr_sddmm", "bsr_softmax",
           "bsr_spmm", "column_indices", "column_sparse_attention", "column_sparse_mlp",
           "gated_mlp_up", "gemm", "linear", "pack_mask", "scatter_add", "topk_indices",
           "unpack_mask"]

#: References whose ops are not exported from ``cute_kernels`` yet: name -> the op's module
#: (the column-sparse, block-sparse and BCSR ops left it when their kernels passed on a GPU).
NOT_YET_PUBLIC: dict[str, str] = {}


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None, return_lse: bool = False):
    """``softmax(scale * q k^T [+ causal mask]) v`` in float32, as :func:`cute_kernels.attention`.

    q (B, H, S_q, D), k and v (B, H_kv, S_kv, D); GQA by repeating kv heads; causal masks
    aligned bottom-right; a query that sees no key gets o = 0 and lse = -inf. Returns o
    (B, H, S_q, D) fp32, and with ``return_lse`` also lse (B, H, S_q) fp32 (natural log).
    """
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    o, lse = attention_reference(q, k, v, causal=causal, scale=scale)
    return (o, lse) if return_lse else o


def attention_colsum(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prev_lse: torch.Tensor,
                     *, group: int = 192, scale: float | None = None):
    """``(o, lse, colsum)`` in float32, as :func:`cute_kernels.attention_colsum`:
    ``colsum[b, h, g, j] = sum over queries i of group g of exp(scale q_i . k_j -
    prev_lse[b, h, i])``, shape (B, H, ceil(S_q / group), S_kv)."""
    return attention_colsum_reference(q, k, v, prev_lse, group=group, scale=scale)


def column_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            indices: torch.Tensor, counts: torch.Tensor, *, group: int = 192,
                            scale: float | None = None, out: torch.Tensor | None = None,
                            accumulate: bool = False, out_scale: float = 1.0,
                            return_lse: bool = False):
    """Column-sparse attention in float32, as ``cute_kernels.ops.column_sparse.
    column_sparse_attention``: query group g of head h (``group`` rows) attends to the keys
    ``indices[b, h, g, :counts[b, h, g]]`` (a duplicate counts twice; a count of 0 gives o = 0,
    lse = -inf). Returns the value the op writes, ``out_scale * attention`` (plus ``out`` with
    ``accumulate``; ``out`` is only read), fp32 (B, H, S_q, D), and with ``return_lse`` also lse
    (B, H, S_q). Checks the index values (the op does so only in debug mode)."""
    o, lse = column_sparse_attention_reference(q, k, v, indices, counts, group=group,
                                               scale=scale, out=out, accumulate=accumulate,
                                               out_scale=out_scale)
    return (o, lse) if return_lse else o


def block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask, *,
                           mask=None, doc_ids: torch.Tensor | None = None,
                           scale: float | None = None, return_lse: bool = False):
    """Block-sparse attention in float32, as :func:`cute_kernels.block_sparse_attention`:
    dense attention under the element mask the block lists (a FlexAttention ``BlockMask`` or
    its tensors) and ``mask`` (``cute_kernels.masks``, inside partial blocks) describe; a
    query with no visible key gets o = 0, lse = -inf. Returns o fp32 (B, H, S_q, D), and with
    ``return_lse`` also lse (B, H, S_q)."""
    o, lse = block_sparse_attention_reference(q, k, v, block_mask, mask=mask, doc_ids=doc_ids,
                                              scale=scale)
    return (o, lse) if return_lse else o


def column_indices(mask: torch.Tensor, *, group: int = 192, multiple_of: int = 1,
                   n: int | None = None):
    """``(indices, counts)`` of a bool (..., S_kv) or bitpacked uint8 (..., ceil(n / 8)) column
    mask, as ``cute_kernels.ops.column_sparse.column_indices`` (bit-exact), by a stable sort:
    selected columns in increasing order, then the unselected ones; counts padded to
    ``multiple_of`` (capped at S_kv) with the lowest unselected columns."""
    return column_indices_reference(mask, group=group, multiple_of=multiple_of, n=n)


def column_sparse_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, *,
                      group: int = 128, activation: str = "gelu_tanh"):
    """One sparse step of :func:`cute_kernels.column_sparse_mlp` in float32. The op updates
    its caches in place; this returns the updated ``(out_cache, act_cache)`` as new float32
    tensors and leaves its arguments unchanged."""
    return column_sparse_mlp_reference(x, w1, b1, w2, indices, counts, act_cache, out_cache,
                                       group=group, activation=activation)


def scatter_add(src_packed, dest, indices, counts, *, group: int = 128):
    """:func:`cute_kernels.scatter_add` in float32: the new ``dest`` (``dest[g rows,
    indices[g, j]] += src_packed[g rows, j]`` for j below ``counts[g]``) as a new tensor."""
    return scatter_add_reference(src_packed, dest, indices, counts, group=group)


def topk_indices(scores: torch.Tensor, k: int | None = None, *, sparsity: float | None = None,
                 multiple_of: int = 1, random_fraction: float = 0.0,
                 generator: torch.Generator | None = None):
    """``(indices, counts)`` of the k largest columns of each row of ``scores`` by
    ``torch.topk`` (exact: the recall baseline of ``cute_kernels.ops.column_sparse.
    topk_indices``), with its sizes, increasing column order and random extra columns."""
    return topk_indices_reference(scores, k, sparsity=sparsity, multiple_of=multiple_of,
                                  random_fraction=random_fraction, generator=generator)


def _epilogue(acc: torch.Tensor, bias: torch.Tensor | None, epilogue: str | None):
    check_activation("epilogue", epilogue, tuple(ACTIVATION_FNS))
    if bias is not None:
        acc = acc + bias.float()
    return ACTIVATION_FNS[epilogue](acc)


def gemm(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
         epilogue: str | None = None) -> torch.Tensor:
    """``act(a @ b + bias)`` in float32, as :func:`cute_kernels.gemm` (``epilogue`` None,
    "relu", "gelu", "gelu_tanh" or "silu"); a (M, K), b (K, N), or both with a batch dim."""
    return _epilogue(a.float() @ b.float(), bias, epilogue)


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
           epilogue: str | None = None) -> torch.Tensor:
    """``act(x @ w.T + bias)`` in float32, as :func:`cute_kernels.linear`; x (..., K),
    w (N, K)."""
    return _epilogue(x.float() @ w.float().t(), bias, epilogue)


def gated_mlp_up(x: torch.Tensor, w_packed: torch.Tensor, *, activation: str = "swiglu",
                 bias: torch.Tensor | None = None) -> torch.Tensor:
    """``act(x @ W_gate^T + b_gate) * (x @ W_up^T + b_up)`` in float32, as
    :func:`cute_kernels.gated_mlp_up`; ``w_packed`` (2I, K) with up rows even, gate rows odd
    (:func:`cute_kernels.pack_gated_weight`)."""
    check_activation("activation", activation, GATED_ACTIVATIONS)
    return gated_mlp_up_reference(x, w_packed, activation, bias)


def pack_mask(mask: torch.Tensor) -> torch.Tensor:
    """``bool [..., N]`` -> ``uint8 [..., ceil(N / 8)]``, bit b of byte j = mask[..., 8j + b],
    as :func:`cute_kernels.pack_mask` (bit-exact)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() < 1:
        raise TypeError("mask must be a bool torch.Tensor with at least 1 dimension")
    return pack_mask_reference(mask)


def unpack_mask(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_mask`: ``uint8 [..., ceil(n / 8)]`` -> ``bool [..., n]``, as
    :func:`cute_kernels.unpack_mask` (bit-exact)."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        raise TypeError("packed must be a uint8 torch.Tensor")
    if isinstance(n, bool) or not isinstance(n, int) or packed.shape[-1] != (n + 7) // 8:
        raise ValueError(f"n must be an int with packed.shape[-1] == ceil(n / 8), got n = {n!r} "
                         f"for packed.shape[-1] = {packed.shape[-1]}")
    return unpack_mask_reference(packed, n)


def bsr_sddmm(q: torch.Tensor, k: torch.Tensor, layout: torch.Tensor, *,
              scale: float | None = None) -> torch.Tensor:
    """``scale * q k^T`` at the stored G x G blocks of ``layout`` (a torch ``sparse_bsr``
    tensor, values ignored), in float32, as ``cute_kernels.ops.bsr.bsr_sddmm``: q (*batch, N,
    D), k (*batch, N_kv, D); the layout's batch dims match q's or are absent (shared).
    Returns a BSR tensor of the layout's pattern with fp32 values; scale defaults to
    1 / sqrt(D)."""
    return bsr_sddmm_reference(q, k, layout, scale=scale)


def bsr_softmax(s: torch.Tensor) -> torch.Tensor:
    """Row softmax of the BSR tensor ``s`` over its stored blocks only, in float32, as
    ``cute_kernels.ops.bsr.bsr_softmax`` (absent blocks count as -inf; a block row with no
    stored block stores nothing). Returns a BSR tensor of s's pattern with fp32 values.
    Plain torch: any device, slow (a loop over block rows)."""
    return bsr_softmax_reference(s)


def bsr_spmm(p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``p @ v`` for a BSR tensor ``p`` (*batch, N, N_kv) and a dense v (*batch, N_kv, D), in
    float32, as ``cute_kernels.ops.bsr.bsr_spmm``, without materialising p; block rows with no
    stored block give zeros. Returns (*batch, N, D) fp32."""
    return bsr_spmm_reference(p, v)

