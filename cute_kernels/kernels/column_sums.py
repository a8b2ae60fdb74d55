"""Column sums of a score tile across its rows, for the column-sum attention variant.

The accumulator layouts of mma.sync m16n8k16 and wgmma share one structure: a warp's 32 lanes
hold 8 row groups (lane // 4) x 4 column pairs (lane % 4); a thread's local column ``c`` is
tile column ``8 * (c // 2) + 2 * (lane % 4) + c % 2``. Summing over rows therefore means
summing the thread's own rows, then the 8 lanes that share ``lane % 4`` (lane bits 2, 3, 4).

That cross-lane step is a reduce-scatter rather than an all-reduce: in each of the three rounds
a lane keeps half of its columns and sends the other half to its partner, so C columns cost
C / 2 + C / 4 + C / 8 shuffles (14 at C = 16) instead of 3 C, and the warp ends with every
lane holding C / 8 distinct column sums: the warp's whole row-sum, each column exactly once.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from .online_softmax import acc_mn_view


@cute.jit
def previous_step_factors(row_max: cute.Tensor, prev_l2: cute.Tensor, scale_log2):
    """Per row, ``exp2(m * scale_log2 - prev_lse * log2 e)``: turns the softmax numerators
    ``exp2((s - m) * scale_log2)`` into exp(scale s - prev_lse) (``prev_l2``: prev_lse in
    log2 units, +inf for rows without a query). A row with no key yet counts m as 0."""
    factors = cute.make_rmem_tensor(cute.size(row_max), Float32)
    for r in cutlass.range_constexpr(cute.size(row_max)):
        m_safe = Float32(0.0) if row_max[r] == -Float32.inf else row_max[r]
        factors[r] = cute.math.exp2(m_safe * scale_log2 - prev_l2[r], fastmath=True)
    return factors


@cute.jit
def weighted_column_sums(acc_S: cute.Tensor, factors: cute.Tensor) -> cute.Tensor:
    """Per thread: ``sum_r factors[r] * S[r, c]`` over its own rows, one value per local
    column ``c`` (fp32)."""
    s_mn = acc_mn_view(acc_S)
    cols = cute.size(s_mn, mode=[1])
    part = cute.make_rmem_tensor(cols, Float32)
    for c in cutlass.range_constexpr(cols):
        part[c] = s_mn[0, c] * factors[0]
    for r in cutlass.range_constexpr(1, cute.size(factors)):
        for c in cutlass.range_constexpr(cols):
            part[c] = part[c] + s_mn[r, c] * factors[r]
    return part


@cute.jit
def reduce_scatter_rows(part: cute.Tensor, lane: Int32, rounds: cutlass.Constexpr = 3):
    """Sum ``part`` over the lanes sharing ``lane % 4`` (see the module docstring), in
    ``rounds`` halving steps over lane bits 4, 3, 2. Afterwards ``part[0 : C >> rounds]`` holds
    sums of local columns ``first + i``, over 2^rounds lanes; returns ``first``. With fewer than
    3 rounds, 2^(3 - rounds) lanes (those differing in the lane bits left) hold partial sums
    of the same columns."""
    half = cute.size(part)
    first = Int32(0)
    for bit in cutlass.range_constexpr(rounds):
        offset = 16 >> bit
        half = half // 2
        upper = (lane & offset) != 0
        first = first + Int32(cutlass.select_(upper, half, 0))
        for i in cutlass.range_constexpr(half):
            lo, hi = part[i], part[i + half]
            send = Float32(cutlass.select_(upper, lo, hi))
            keep = Float32(cutlass.select_(upper, hi, lo))
            part[i] = keep + cute.arch.shuffle_sync_bfly(send, offset=offset)
    return first


@cute.jit
def tile_column(local_col, lane_col0):
    """The tile column of a thread's local accumulator column (``lane_col0``: its column 0)."""
    return lane_col0 + 8 * (local_col // 2) + local_col % 2
