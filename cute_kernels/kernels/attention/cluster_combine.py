"""Split-KV partials combined inside the split kernel, through distributed shared memory.

With ``AttentionSm90(split_kv=True, cluster_splits=n)`` the n key ranges of a query tile run
on the n CTAs of one thread-block cluster (grid z = batch * n + split, cluster (1, 1, n)).
After its range each CTA leaves its normalised O (fp32) and per-row lse in its own shared
memory (``stage``). After a cluster barrier, CTA r merges rows r, r + n, r + 2n, ... of the
tile's valid rows from all n CTAs' shared memory (``ld.shared::cluster``) and writes them
to O and lse (``combine``):

    lse = log sum_i exp(lse_i),    O = sum_i exp(lse_i - lse) O_i

(a range that saw no key has lse_i = -inf and weighs nothing; a row no range saw gets O = 0,
lse = -inf). A second cluster barrier keeps every CTA's shared memory alive until its peers
have read it. No workspace and no second kernel: the combine costs two cluster barriers and
n remote loads per row and lane, where the combine kernel costs a dependent launch's drain
and start after the split kernel (perf/RESULTS.md "Decode attention").

Roles in the combine: the consumer threads, ``lanes = D / 4`` per row (16 bytes of fp32
each), ``threads / lanes`` rows at a time. Shared memory: the kernel's K ring, free once the
key loop is done, holds O as (block_m, D + 8) fp32 (the pad puts the 8 rows of a warp's
fragment store on different banks), then block_m lse words.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32

from ..common.constants import LN2, LOG2E
from ..common.warp_ptx import ld_dsmem_f32, ld_dsmem_v4_f32
from .online_softmax import store_lse
from .tiles import MAX_CLUSTER_SPLITS

#: fp32 words each staged O row is padded by (bank spread of the fragment stores)
ROW_PAD = 8
#: fp32 values per lane and row in the combine (one 16-byte load per peer)
LANE_VALUES = 4


class ClusterCombine:
    """The stage / combine pair of a split kernel whose ``splits`` ranges of a
    ``block_m`` x ``head_dim`` tile form one cluster (module docstring);
    ``consumer_threads`` run the combine."""

    def __init__(self, splits: int, block_m: int, head_dim: int, consumer_threads: int):
        if not 2 <= splits <= MAX_CLUSTER_SPLITS:
            raise ValueError(f"cluster_splits must be 2 to {MAX_CLUSTER_SPLITS} (the CTAs of "
                             f"one portable cluster), got {splits}")
        self.splits, self.block_m, self.head_dim = splits, block_m, head_dim
        self.row_stride = head_dim + ROW_PAD
        self.lanes = head_dim // LANE_VALUES
        self.rows_per_pass = consumer_threads // self.lanes

    def o_words(self) -> int:
        """fp32 words of the staged O."""
        return self.block_m * self.row_stride

    def smem_bytes(self) -> int:
        """Shared memory of the staged O and lse."""
        return 4 * (self.o_words() + self.block_m)

    def _o_layout(self):
        return cute.make_layout((self.block_m, self.head_dim), stride=(self.row_stride, 1))

    def _pointers(self, smem_ptr):
        """(O, lse) fp32 pointers of the staging area at ``smem_ptr``."""
        o_ptr = cute.recast_ptr(smem_ptr, dtype=Float32)
        return o_ptr, o_ptr + self.o_words()

    def staging(self, smem_ptr, transposed: bool = False):
        """(O, lse) staging tensors at ``smem_ptr`` for a kernel that writes them itself: O
        as (block_m, D) fp32, or (``transposed``: a swap-AB kernel's O^T accumulator) the
        same memory as (D, block_m); lse as (block_m,)."""
        o_ptr, lse_ptr = self._pointers(smem_ptr)
        layout = self._o_layout()
        if transposed:
            layout = cute.select(layout, mode=[1, 0])
        return (cute.make_tensor(o_ptr, layout),
                cute.make_tensor(lse_ptr, cute.make_layout(self.block_m)))

    @cute.jit
    def stage(self, acc_O: cute.Tensor, lse: cute.Tensor, thr_pv, pv_mma, smem_ptr, ctid):
        """This CTA's normalised O fragment and its rows' lse into its shared memory at
        ``smem_ptr`` (16-byte aligned, ``smem_bytes`` long)."""
        o_ptr, lse_ptr = self._pointers(smem_ptr)
        sO = cute.make_tensor(o_ptr, self._o_layout())
        r2s = cute.make_tiled_copy_C(
            cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), Float32), pv_mma)
        thr_r2s = r2s.get_slice(ctid)
        cute.copy(r2s, thr_r2s.retile(acc_O), thr_r2s.partition_D(sO))
        sL = cute.make_tensor(lse_ptr, cute.make_layout((1, 1, self.block_m)))
        store_lse(lse, thr_pv, sL, 0, 0, 0, (self.block_m, self.head_dim), self.block_m, ctid)

    @cute.jit
    def combine(self, smem_ptr, mO: cute.Tensor, mLSE: cute.Tensor, batch, head, m_block, s_q,
                ctid):
        """Rows rank, rank + n, ... of the tile's rows below ``s_q``: the n partials staged
        at ``smem_ptr`` in the cluster's CTAs merged into ``mO`` (B, H, S, D) and ``mLSE``
        (B, H, S)."""
        n = self.splits
        o_ptr, lse_ptr = self._pointers(smem_ptr)
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        lane, slot = ctid % self.lanes, ctid // self.lanes
        first = m_block * self.block_m
        valid = cutlass.min(self.block_m, s_q - first)
        for i in cutlass.range(rank + n * slot, valid, n * self.rows_per_pass, unroll=1):
            lses = cute.make_rmem_tensor((n,), Float32)
            for j in cutlass.range_constexpr(n):
                lses[j] = ld_dsmem_f32((lse_ptr + i).toint(), j)
            top = lses[0]
            for j in cutlass.range_constexpr(1, n):
                top = cutlass.max(top, lses[j])
            total = Float32(0.0)
            acc = cute.make_rmem_tensor((LANE_VALUES,), Float32)
            acc.fill(0.0)
            if top > -Float32.inf:
                for j in cutlass.range_constexpr(n):
                    weight = cute.math.exp2((lses[j] - top) * Float32(LOG2E), fastmath=True)
                    total = total + weight
                    part = ld_dsmem_v4_f32(
                        (o_ptr + (i * self.row_stride + lane * LANE_VALUES)).toint(), j)
                    for e in cutlass.range_constexpr(LANE_VALUES):
                        acc[e] = acc[e] + part[e] * weight
            row_lse = Float32(-Float32.inf)
            if total > Float32(0.0):
                acc.store(acc.load() * (Float32(1.0) / total))
                row_lse = top + cute.math.log2(total, fastmath=True) * Float32(LN2)
            out = cute.make_rmem_tensor((LANE_VALUES,), mO.element_type)
            out.store(acc.load().to(mO.element_type))
            cute.autovec_copy(out, self._lane_chunk(mO[batch, head, first + i, None], lane))
            if lane == 0:
                mLSE[batch, head, first + i] = row_lse

    def _lane_chunk(self, row: cute.Tensor, lane) -> cute.Tensor:
        """Lane ``lane``'s LANE_VALUES consecutive elements of ``row``."""
        return cute.zipped_divide(row, (LANE_VALUES,))[None, lane]

