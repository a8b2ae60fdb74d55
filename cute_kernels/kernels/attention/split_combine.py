"""The combine step of split-KV attention (flash-decoding): one kernel instead of ~10 torch ops.

The split kernels leave, per split ``i`` and query row, a partial ``O_i`` (normalised over the
split's keys, in q's dtype) and its ``lse_i``; the row's answer is

    lse = log sum_i exp(lse_i),    O = sum_i exp(lse_i - lse) O_i

(a split that saw no key has lse_i = -inf and weighs nothing; a row no split saw gets O = 0,
lse = -inf). Roles: one warp per query row, ``warps`` rows per CTA; lanes split the splits for
the max and the sum (then shuffle reductions), and the head dim for the weighted sum (D / 32
consecutive elements per lane, one vector load per split). No shared memory. The same code on
both paths. On sm_90 (``pdl``) it is launched as a programmatic dependent of the split kernel
before it: its CTAs are launched while the split kernel's last CTAs finish (the Hopper split
kernel signals ``griddepcontrol.launch_dependents`` once its key loop is done) and wait in
``griddepcontrol.wait`` until that grid has completed and its writes are visible, so the
second launch's latency overlaps the first kernel's tail.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from ..common.constants import LN2, LOG2E
from ..common.reductions import lane_allreduce


class SplitCombine:
    """``mO`` (B, H, S, D) and ``mLSE`` (B, H, S) fp32 from the partials ``mOParts``
    (n B, H, S, D; split ``i`` of batch ``b`` at ``i * B + b``) and ``mLseParts`` (n B, H, S)
    fp32. ``mO`` may have any strides but a unit-stride D. Module docstring: roles."""

    warps = 4

    def __init__(self, head_dim: int, pdl: bool = False):
        if head_dim not in (64, 128):
            raise ValueError(f"head_dim must be 64 or 128, got {head_dim}")
        self.head_dim = head_dim
        self.pdl = pdl  # programmatic dependent launch (sm_90+)
        self.per_lane = head_dim // 32
        self.threads = 32 * self.warps

    @cute.jit
    def __call__(self, mOParts: cute.Tensor, mLseParts: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor, stream):
        rows = mO.shape[0] * mO.shape[1] * mO.shape[2]
        self.kernel(mOParts, mLseParts, mO, mLSE).launch(
            grid=(cute.ceil_div(rows, self.warps), 1, 1), block=(self.threads, 1, 1),
            stream=stream, use_pdl=self.pdl)

    @cute.kernel
    def kernel(self, mOParts: cute.Tensor, mLseParts: cute.Tensor, mO: cute.Tensor,
               mLSE: cute.Tensor):
        if cutlass.const_expr(self.pdl):
            cute.arch.griddepcontrol_wait()  # the split kernel's partials are all written
        tidx, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        lane, warp_id = tidx % 32, tidx // 32
        batches, heads, seq = mO.shape[0], mO.shape[1], mO.shape[2]
        row = block * self.warps + warp_id
        if row < batches * heads * seq:
            s, h, b = row % seq, (row // seq) % heads, row // (seq * heads)
            splits = mLseParts.shape[0] // batches
            top = Float32(-Float32.inf)
            for i in cutlass.range(lane, splits, 32, unroll=1):
                top = cutlass.max(top, mLseParts[i * batches + b, h, s])
            top = lane_allreduce(top, True)
            total = Float32(0.0)
            acc = cute.make_rmem_tensor((self.per_lane,), Float32)
            acc.fill(0.0)
            if top > -Float32.inf:
                for i in cutlass.range(lane, splits, 32, unroll=1):
                    total = total + cute.math.exp2(
                        (mLseParts[i * batches + b, h, s] - top) * LOG2E, fastmath=True)
                total = lane_allreduce(total, False)
                for i in cutlass.range(splits, unroll=1):
                    weight = cute.math.exp2((mLseParts[i * batches + b, h, s] - top) * LOG2E,
                                            fastmath=True)
                    part = self._lane_chunk(mOParts, i * batches + b, h, s, lane)
                    frag = cute.make_rmem_tensor((self.per_lane,), mOParts.element_type)
                    cute.autovec_copy(part, frag)
                    acc.store(acc.load() + frag.load().to(Float32) * weight)
            lse = Float32(-Float32.inf)
            if total > Float32(0.0):
                acc.store(acc.load() * (Float32(1.0) / total))
                lse = top + cute.math.log2(total, fastmath=True) * Float32(LN2)
            out = cute.make_rmem_tensor((self.per_lane,), mO.element_type)
            out.store(acc.load().to(mO.element_type))
            cute.autovec_copy(out, self._lane_chunk(mO, b, h, s, lane))
            if lane == Int32(0):
                mLSE[b, h, s] = lse

    def _lane_chunk(self, t: cute.Tensor, b, h, s, lane) -> cute.Tensor:
        """Lane ``lane``'s ``D / 32`` consecutive elements of row (b, h, s) of ``t``."""
        return cute.zipped_divide(t[b, h, s, None], (self.per_lane,))[None, lane]
