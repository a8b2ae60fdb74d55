"""Online softmax over accumulator fragments, shared by the attention kernels.

The accumulators of an mma (S = Q K^T and O) are viewed as (rows, cols) of one thread
(``acc_mn_view``); a row is spread over the 4 threads of an mma quad, so row reductions end in a
2-step butterfly shuffle (``quad_allreduce``). Exponentials are ``exp2`` with the softmax scale
and log2(e) folded into one multiplier.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32

from ..common.constants import LN2
from ..common.reductions import lane_allreduce
from .mask_mod import apply_mask_mod, apply_packed_mask, hide_score


def acc_mn_view(acc: cute.Tensor) -> cute.Tensor:
    """mma accumulators as (row, col) of one thread: mma.sync ((2, 2), MMA_M, MMA_N) ->
    ((2, MMA_M), (2, MMA_N)); wgmma ((2, 2, N / 8), MMA_M, MMA_N) -> ((2, MMA_M),
    (2, N / 8, MMA_N)). Mode 0's second entry is the row pair (r, r + 8)."""
    flat = cute.make_layout(acc.layout.shape)
    s0, d0 = flat.shape[0], flat.stride[0]
    mn = cute.make_layout(
        ((s0[1], flat.shape[1]), (s0[0], *s0[2:], flat.shape[2])),
        stride=((d0[1], flat.stride[1]), (d0[0], *d0[2:], flat.stride[2])))
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, mn))


def acc_as_a_operand(acc: cute.Tensor) -> cute.Tensor:
    """The (converted) S accumulators reused as the A operand of the P @ V mma, with no data
    movement: two n8 column groups of C are one k16 block of A.
    mma.sync ((2, 2), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, MMA_N / 2);
    wgmma ((2, 2, N / 8), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, (N / 16, MMA_N))."""
    if cutlass.const_expr(cute.rank(acc.layout.shape[0]) == 3):
        div = cute.logical_divide(acc.layout, ((None, None, 2), None, None))
        layout = cute.make_layout(
            ((div.shape[0][0], div.shape[0][1], div.shape[0][2][0]), div.shape[1],
             (div.shape[0][2][1], div.shape[2])),
            stride=((div.stride[0][0], div.stride[0][1], div.stride[0][2][0]), div.stride[1],
                    (div.stride[0][2][1], div.stride[2])))
    else:
        div = cute.logical_divide(acc.layout, (None, None, 2))
        layout = cute.make_layout(
            ((div.shape[0], div.shape[2][0]), div.shape[1], div.shape[2][1]),
            stride=((div.stride[0], div.stride[2][0]), div.stride[1], div.stride[2][1]))
    return cute.make_tensor(acc.iterator, layout)


@cute.jit
def quad_allreduce(val: Float32, is_max: cutlass.Constexpr) -> Float32:
    """Reduce over the 4 threads of an mma quad (lanes 4r .. 4r + 3)."""
    return lane_allreduce(val, is_max, 4)


@cute.jit
def softmax_step(acc_S: cute.Tensor, acc_O: cute.Tensor, row_max: cute.Tensor,
                 row_sum: cute.Tensor, scale_log2: Float32, first: cutlass.Constexpr,
                 correction=None):
    """Fold one (masked) score tile into the running (max, sum) of each row: rescale O by
    exp2((m_old - m_new) * scale_log2) and turn the scores into unnormalised probabilities.
    Rows whose scores are all -inf so far keep max -inf and contribute nothing.
    With ``correction`` (a per-row tensor) the rescale factors are stored there instead of
    applied, for a caller whose O is still being accumulated by an in-flight MMA
    (``rescale_rows`` applies them later)."""
    s_mn, o_mn = acc_mn_view(acc_S), acc_mn_view(acc_O)
    for r in cutlass.range_constexpr(cute.size(row_max)):
        row = s_mn[r, None].load()
        m_new = quad_allreduce(row.reduce(cute.ReductionOp.MAX, -Float32.inf, 0), True)
        if cutlass.const_expr(not first):
            m_new = cute.arch.fmax(m_new, row_max[r])
        # a fully masked row so far: subtract 0 so exp2(-inf) = 0, not NaN
        m_safe = Float32(0.0) if m_new == -Float32.inf else m_new
        p = cute.math.exp2(row * scale_log2 - m_safe * scale_log2, fastmath=True)
        tile_sum = p.reduce(cute.ReductionOp.ADD, Float32(0.0), 0)
        if cutlass.const_expr(first):
            row_sum[r] = tile_sum
            if cutlass.const_expr(correction is not None):
                correction[r] = Float32(0.0)  # O holds nothing yet
        else:
            # an old max of -inf (no key seen yet) gives exp2(-inf) = 0: nothing to rescale
            # (a 0 stand-in there would overflow to inf for very negative logits: 0 * inf = NaN)
            factor = cute.math.exp2((row_max[r] - m_safe) * scale_log2, fastmath=True)
            row_sum[r] = row_sum[r] * factor + tile_sum
            if cutlass.const_expr(correction is not None):
                correction[r] = factor
            else:
                o_mn[r, None] = o_mn[r, None].load() * factor
        row_max[r] = m_new
        s_mn[r, None] = p


@cute.jit
def rescale_rows(acc_O: cute.Tensor, correction: cute.Tensor):
    """O[r, :] *= correction[r] (the deferred rescale of ``softmax_step``)."""
    o_mn = acc_mn_view(acc_O)
    for r in cutlass.range_constexpr(cute.size(correction)):
        o_mn[r, None] = o_mn[r, None].load() * correction[r]


@cute.jit
def softmax_finish(acc_O: cute.Tensor, row_max: cute.Tensor, row_sum: cute.Tensor,
                   lse: cute.Tensor, scale_log2: Float32):
    """O /= row sum; ``lse[r]`` = natural-log logsumexp of the scaled scores (-inf and O = 0
    for rows that saw no key)."""
    o_mn = acc_mn_view(acc_O)
    for r in cutlass.range_constexpr(cute.size(row_sum)):
        total = quad_allreduce(row_sum[r], False)
        empty = total == Float32(0.0)
        inv = Float32(0.0) if empty else cute.arch.rcp_approx(total)
        o_mn[r, None] = o_mn[r, None].load() * inv
        lse[r] = -Float32.inf if empty else (
            row_max[r] * scale_log2 + cute.math.log2(total, fastmath=True)) * Float32(LN2)


@cute.jit
def apply_mask(acc_S: cute.Tensor, tScS: cute.Tensor, s_q, s_kv, causal: cutlass.Constexpr,
               select: cutlass.Constexpr = True):
    """-inf for keys past ``s_kv`` and, causal (bottom-right), keys past ``i + s_kv - s_q``;
    ``tScS`` holds each score's (query, key) coordinate in the same fragment layout.
    ``select``: see ``mask_mod.hide_score``."""
    s_mn, c_mn = acc_mn_view(acc_S), acc_mn_view(tScS)
    for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
        limit = s_kv
        if cutlass.const_expr(causal):
            limit = cutlass.min(s_kv, c_mn[r, 0][0] + 1 + s_kv - s_q)
        for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
            hide_score(s_mn, r, c, c_mn[r, c][1] >= limit, select)


@cute.jit
def mask_and_softmax(acc_S, acc_O, row_max, row_sum, scale_log2, thr_mma, policy, blocks, n,
                     first, correction=None, step=None, select: cutlass.Constexpr = True):
    """One key block of the online softmax: mask it where the key-block ``policy`` says block
    ``n`` (visit ``step``) of the tile ``blocks`` (block_info.py) holds keys some of the
    tile's rows must not see (and, for block lists, where the policy's element mask hides
    them), then fold it in (``first``: the first key block of the row, at run time;
    ``correction``: see ``softmax_step``; ``select``: how scores are hidden,
    ``mask_mod.hide_score``)."""
    bm, bn = policy.block_m, policy.block_n
    s_q, s_kv = blocks.s_q, blocks.s_kv
    if policy.needs_mask(blocks, n, step):
        tScS = thr_mma.partition_C(cute.local_tile(cute.make_identity_tensor((s_q, s_kv)),
                                                   (bm, bn), (blocks.m_block, n)))
        apply_mask(acc_S, tScS, s_q, s_kv, policy.causal, select)
        if cutlass.const_expr(policy.mask is not None and policy.packed_blocks):
            apply_packed_mask(acc_mn_view(acc_S), acc_mn_view(tScS), policy.mask,
                              policy.entry_keys, blocks.entries, blocks.masked, s_kv, s_q,
                              blocks.keys, blocks.batch, blocks.head, blocks.doc_ids, select)
        elif cutlass.const_expr(policy.mask is not None):
            # block lists: the partial visits only (a full block holding the S_kv residue
            # masks against S_kv alone: full blocks are entirely visible, whatever the mask)
            if step < blocks.n_partial:
                apply_mask_mod(acc_mn_view(acc_S), acc_mn_view(tScS), policy.mask,
                               blocks.batch, blocks.head, s_q, s_kv, blocks.doc_ids, select)
    if first:
        softmax_step(acc_S, acc_O, row_max, row_sum, scale_log2, True, correction)
    else:
        softmax_step(acc_S, acc_O, row_max, row_sum, scale_log2, False, correction)


@cute.jit
def store_lse(lse: cute.Tensor, thr_mma, mLSE: cute.Tensor, batch, head, m_block,
              block_md, s_q, tid):
    """Write each row's lse once: the first thread of each mma quad owns its rows; rows past
    ``s_q`` are skipped. ``thr_mma`` is the slice that partitions O ((block_m, D) tile)."""
    c_mn = acc_mn_view(thr_mma.partition_C(cute.local_tile(
        cute.make_identity_tensor((s_q, block_md[1])), block_md, (m_block, 0))))
    if tid % 4 == 0:
        for r in cutlass.range_constexpr(cute.size(lse)):
            row = c_mn[r, 0][0]
            if row < s_q:
                mLSE[batch, head, row] = lse[r]

