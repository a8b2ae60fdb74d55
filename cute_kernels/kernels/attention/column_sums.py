"""Column sums of a score tile across its rows, for the column-sum attention variant.

The accumulator layouts of mma.sync m16n8k16 and wgmma share one structure: a warp's 32 lanes
hold 8 row groups (lane // 4) x 4 column pairs (lane % 4); a thread's local column ``c`` is
tile column ``8 * (c // 2) + 2 * (lane % 4) + c % 2``. Summing over rows therefore means
summing the thread's own rows, then the 8 lanes that share ``lane % 4`` (lane bits 2, 3, 4).

Shuffle sums: that cross-lane step is a reduce-scatter rather than an all-reduce: in each of
the three rounds a lane keeps half of its columns and sends the other half to its partner, so C
columns cost C / 2 + C / 4 + C / 8 shuffles (14 at C = 16) instead of 3 C, and the warp ends
with every lane holding C / 8 distinct column sums: the warp's whole row-sum, each column
exactly once.

mma.sync sums (``mma_sync_column_sums``) hand the row sum to the tensor cores instead: with P
in bf16, movmatrix transposes each 8 x 8 block in registers, so 16 keys x the warp's 16 rows
form the A operand of one mma.sync m16n8k16 whose B operand holds the rows' factors. Per
thread and 128-key tile that is 34 movmatrix + 8 mma.sync against ~180 ALU instructions for
the shuffle sums.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from ..common.warp_ptx import mma_m16n8k16_bf16, movmatrix_trans, pack_bf16x2
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


@cute.jit
def mma_sync_column_sums(rP: cute.Tensor, factors: cute.Tensor, lane: Int32,
                         sums: cute.Tensor):
    """One warp's ``sum_r factors[r] * P[r, c]`` over its 16 rows for every key ``c`` of the
    tile, on the tensor cores. ``rP``: P in bf16 in the (wg)mma accumulator layout (per lane:
    rows ``lane // 4`` and ``+ 8``, column pairs ``8 j + 2 (lane % 4)``); ``factors``: the
    lane's two rows' factors. The tile's keys must be a multiple of 64.

    A = P^T of 16 keys (movmatrix of four 8 x 8 blocks), B = the factors down K (rows): one
    m16n8k16 per 16 keys. Four of them chain into one accumulator with B nonzero only in
    columns 2 c' and 2 c' + 1 for the c'-th, so every lane ends with distinct keys: writes
    ``sums[2 t + e]`` (``block_n / 32`` values) = key ``64 t + 16 (lane % 4) + 8 e + lane // 4``.
    Products are bf16 x bf16 with fp32 accumulation. The mma.syncs are issued, not waited for:
    read ``sums`` late (after issuing other work) to hide their latency."""
    words = cute.recast_tensor(rP, Int32)  # word h + 2 j: row pair h, column chunk j
    chains = cute.size(words) // 16
    # B's fragment (rows 2 q, 2 q + 1 and + 8; column lane // 4): the factors transposed
    f_lo = movmatrix_trans(pack_bf16x2(factors[0], factors[0]))
    f_hi = movmatrix_trans(pack_bf16x2(factors[1], factors[1]))
    column_pair = lane // 8
    for t in cutlass.range_constexpr(chains):
        d = [Float32(0.0)] * 4
        for cp in cutlass.range_constexpr(4):
            w = 16 * t + 4 * cp  # words of keys 16 (4 t + cp) .. + 15
            a = [movmatrix_trans(words[w]), movmatrix_trans(words[w + 2]),
                 movmatrix_trans(words[w + 1]), movmatrix_trans(words[w + 3])]
            b = [Int32(cutlass.select_(column_pair == cp, f_lo, Int32(0))),
                 Int32(cutlass.select_(column_pair == cp, f_hi, Int32(0)))]
            d = mma_m16n8k16_bf16(a, b, d)
        sums[2 * t] = d[0]
        sums[2 * t + 1] = d[2]


def mma_sync_sum_key(i: int, lane):
    """The tile column of ``mma_sync_column_sums``'s result ``i`` in lane ``lane``."""
    return 64 * (i // 2) + 16 * (lane % 4) + 8 * (i % 2) + lane // 4
