"""A CTA-wide exclusive prefix sum of one 32-bit value per thread, for the ordered
compactions (top-k lists, column lists): a shuffle scan inside each warp
(``warp_inclusive_scan``, also used alone by warp-per-row kernels), the warp totals through
shared memory. Two packed 16-bit counts may ride in one word (each count's total
over the CTA must stay below 2^16)."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Uint32


@cute.jit
def warp_inclusive_scan(value, lane):
    """Sum of ``value`` over this lane and the lanes below it (five shuffles)."""
    inclusive = value
    for step in cutlass.range_constexpr(5):
        offset = 1 << step
        other = cute.arch.shuffle_sync_up(inclusive, offset=offset)
        if lane >= offset:
            inclusive += other
    return inclusive


@cute.jit
def block_exclusive_scan(value: Uint32, sScan: cute.Tensor, buf, warp, lane,
                         warps: cutlass.Constexpr):
    """(sum of ``value`` over the threads before this one, sum over all ``32 * warps``
    threads). ``sScan`` is (warps, 2) Uint32 shared memory; ``buf`` (0 or 1) picks its column:
    consecutive calls alternate, so one barrier per call suffices (the next call writes the
    other column while a slow warp may still read this one)."""
    inclusive = warp_inclusive_scan(value, lane)
    if lane == 31:
        sScan[warp, buf] = inclusive
    cute.arch.sync_threads()
    before, total = inclusive - value, Uint32(0)
    for w in cutlass.range_constexpr(warps):
        warp_total = sScan[w, buf]
        if w < warp:
            before += warp_total
        total += warp_total
    return before, total
