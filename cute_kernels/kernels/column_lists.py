"""Index lists of a bitpacked column mask (``column_indices``): per mask row, the selected
columns in increasing order, then the unselected ones, the first ``L`` of them.

One CTA per row (``threads`` threads). The row's packed bytes are walked in tiles of
``threads x vec`` bytes, thread ``t`` owning ``vec`` consecutive bytes (``8 vec`` columns;
bits past ``n`` are no columns). Per thread: its selected and unselected column counts (popc),
one CTA-wide exclusive scan of both (packed in one 32-bit word: a tile spans at most 32,768
columns), then the writes: the ``i``-th selected column of the row goes to position ``i``,
the ``j``-th unselected one to ``count + j`` while that is below ``L`` (``count``, the row's
selected columns, is an input: the op needs the counts anyway to size ``L``). Set bits are
visited by lowest-bit extraction (``popc((w & -w) - 1)``), so a sparse mask costs a few
instructions per selected column, not one per column; a thread whose unselected columns all
land past ``L`` skips them.

Warp roles: none (SIMT; the same code on the Hopper and Ampere paths). Shared memory: the
scan's warp totals, 2 x warps x 4 bytes.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint8, Uint32

from .common.block_scan import block_exclusive_scan

HALF = 16
WORD_BYTES = 4


class ColumnLists:
    """``mIndices[r, :]`` (int32, width L) from the packed mask ``mPacked[r, :]`` (uint8,
    ceil(n / 8) bytes, bit b of byte j = column 8 j + b) and the selected count
    ``mCounts[r]``. ``vec``: bytes per thread load (16 when rows are 16-byte aligned and the
    byte count a multiple of 16, else 1). Module docstring: algorithm, roles, shared memory."""

    def __init__(self, vec: int, threads: int = 256):
        if vec not in (1, 16):
            raise ValueError(f"vec must be 1 or 16 bytes, got {vec}")
        if threads % 32 or not 64 <= threads <= 1024 or threads * vec * 8 >= 1 << HALF:
            raise ValueError(f"threads x vec x 8 columns must stay below 2^{HALF}")
        self.vec, self.threads, self.warps = vec, threads, threads // 32
        self.words = max(1, vec // WORD_BYTES)

    @cute.jit
    def __call__(self, mPacked: cute.Tensor, mCounts: cute.Tensor, mIndices: cute.Tensor,
                 n: Int32, stream):
        """``mPacked`` (R, ceil(n / 8)) uint8 with a unit column stride, ``mCounts`` (R,)
        int32, ``mIndices`` (R, L) int32, ``n`` the mask's columns."""

        @cute.struct
        class SharedStorage:
            scan: cute.struct.MemRange[Uint32, 2 * self.warps]

        self.storage_cls = SharedStorage
        self.kernel(mPacked, mCounts, mIndices, n).launch(
            grid=(mPacked.shape[0], 1, 1), block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mPacked: cute.Tensor, mCounts: cute.Tensor, mIndices: cute.Tensor,
               n: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        warp, lane = tidx // 32, tidx % 32
        storage = cutlass.memory.SmemAllocator().allocate(self.storage_cls)
        sScan = storage.scan.get_tensor(cute.make_layout((self.warps, 2)))
        gRow = cute.zipped_divide(mPacked[row, None], (self.vec,))  # (vec, bytes / vec)
        n_vec = cute.size(gRow, mode=[1])
        count = mCounts[row]
        width = Int32(mIndices.shape[1])
        selected_base, unselected_base = Int32(0), Int32(0)
        for t in cutlass.range(cute.ceil_div(n_vec, self.threads), unroll=1):
            j = t * self.threads + tidx
            rWords = cute.make_rmem_tensor((self.words,), Uint32)
            rValid = cute.make_rmem_tensor((self.words,), Uint32)
            n_selected, n_valid = Int32(0), Int32(0)
            for w in cutlass.range_constexpr(self.words):
                rWords[w] = Uint32(0)
                rValid[w] = Uint32(0)
            if j < n_vec:
                rBytes = cute.make_rmem_tensor((self.vec,), Uint8)
                cute.autovec_copy(gRow[None, j], rBytes)
                first_col = Int32(j * self.vec * 8)
                for w in cutlass.range_constexpr(self.words):
                    word = Uint32(0)
                    for b in cutlass.range_constexpr(min(self.vec, WORD_BYTES)):
                        word = word | (Uint32(rBytes[w * WORD_BYTES + b]) << Uint32(8 * b))
                    bits = min(self.vec, WORD_BYTES) * 8
                    # columns of this word inside the mask: n - its first column, clamped
                    inside = cutlass.max(cutlass.min(n - first_col - w * 32, Int32(bits)), 0)
                    valid = Uint32(0xFFFFFFFF)
                    if inside < 32:
                        valid = (Uint32(1) << Uint32(inside)) - Uint32(1)
                    rWords[w] = word & valid
                    rValid[w] = valid
                    n_selected += Int32(cute.arch.popc(word & valid))
                    n_valid += inside
            packed = Uint32(n_selected) | (Uint32(n_valid - n_selected) << Uint32(HALF))
            before, tile_total = block_exclusive_scan(packed, sScan, t % 2, warp, lane,
                                                      self.warps)
            selected = selected_base + Int32(before & Uint32((1 << HALF) - 1))
            unselected = count + unselected_base + Int32(before >> Uint32(HALF))
            if j < n_vec:
                first_col = Int32(j * self.vec * 8)
                for w in cutlass.range_constexpr(self.words):
                    self.write_bits(mIndices, row, rWords[w], first_col + w * 32, selected)
                    selected += Int32(cute.arch.popc(rWords[w]))
                if unselected < width:  # some of this thread's unselected columns fit
                    for w in cutlass.range_constexpr(self.words):
                        rest = ~rWords[w] & rValid[w]
                        self.write_bits(mIndices, row, rest, first_col + w * 32, unselected,
                                        width)
                        unselected += Int32(cute.arch.popc(rest))
            selected_base += Int32(tile_total & Uint32((1 << HALF) - 1))
            unselected_base += Int32(tile_total >> Uint32(HALF))

    @cute.jit
    def write_bits(self, mIndices: cute.Tensor, row, bits: Uint32, first_col, position,
                   limit=None):
        """The columns ``first_col + b`` of the set bits ``b`` of ``bits``, lowest first, to
        ``mIndices[row, position + i]`` (positions at or past ``limit`` skipped)."""
        rest = bits
        for i in cutlass.range(Int32(cute.arch.popc(bits)), unroll=1):
            low = rest & (Uint32(0) - rest)
            b = Int32(cute.arch.popc(low - Uint32(1)))
            if cutlass.const_expr(limit is None):
                mIndices[row, position + i] = first_col + b
            else:
                if position + i < limit:
                    mIndices[row, position + i] = first_col + b
            rest = rest ^ low
