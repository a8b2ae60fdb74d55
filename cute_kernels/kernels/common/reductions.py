"""Butterfly all-reductions over lanes of a warp (``shfl.sync.bfly``)."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32


@cute.jit
def lane_allreduce(val: Float32, is_max: cutlass.Constexpr, lanes: cutlass.Constexpr = 32
                   ) -> Float32:
    """Max (``is_max``) or sum of ``val`` over each group of ``lanes`` consecutive lanes (a
    power of two: 4 is an mma quad, 32 the warp); every lane of the group gets the result."""
    for step in cutlass.range_constexpr(lanes.bit_length() - 1):
        other = cute.arch.shuffle_sync_bfly(val, offset=(lanes // 2) >> step)
        if cutlass.const_expr(is_max):
            val = cute.arch.fmax(val, other)
        else:
            val = val + other
    return val
