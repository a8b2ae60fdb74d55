"""Index lists of a bitpacked column mask (``column_indices``), warp per row, in two kernels:

* :class:`ColumnCounts` — each row's selected columns (popc), its count padded up to a
  multiple (capped at ``n``) and, by one ``red.max`` per row (no return, so no warp waits
  on the shared word), the largest padded count: the op reads that one int to size L (its
  only sync).
* :class:`ColumnLists` — per row, the selected columns in increasing order, then the
  unselected ones, the first ``L`` of them.

Both walk a row in chunks of 1024 columns, one 32-bit word (32 columns) per lane, so every
load is a coalesced 128-byte line; ``prefetch`` chunks are loaded a batch ahead of the batch
being processed (two register batches), which keeps enough bytes in flight per warp that the
walk runs at memory speed instead of at one load latency per chunk.

Per chunk, ColumnLists: ``popc`` of the lane's word, a five-shuffle inclusive scan gives the
lane's offset in the chunk's output, the lane writes its set bits' columns (lowest bit first:
``popc((w & -w) - 1)``) into the warp's 1024-entry shared-memory stage, and the warp copies
the stage to ``mIndices[row, base:]`` with consecutive lanes on consecutive addresses
(coalesced stores, whatever the density: lane-scattered stores of the same lists measured
0.29 of copy bandwidth). The unselected columns take the same route to position ``count +
(unselected before)`` while that is below ``L`` (the warp skips them once past: they are only
the ``multiple_of`` padding in ``column_indices``).

Warp roles: none (SIMT, every warp owns one row; the same code on the Hopper and Ampere paths).
Shared memory: ColumnLists 4 KiB per warp (the stage, int32 x 1024), ColumnCounts none.
Rows are independent, so the grid is ceil(R / warps) CTAs; a few very long rows walk serially
(one warp each), which only matters below ~1000 rows.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32

from .common.block_scan import warp_inclusive_scan
from .common.warp_ptx import red_max_s32

WORD_BITS = 32
CHUNK_WORDS = 32  # one word per lane
CHUNK_COLUMNS = WORD_BITS * CHUNK_WORDS
WORD_BYTES = 4


class _RowWalk:
    """The warp-per-row walk both kernels share: ``word_loads`` (rows 4-byte aligned and a
    multiple of 4 bytes long: one 32-bit load per lane per chunk; else four byte loads),
    ``warps`` per CTA (one row each), ``prefetch`` chunks per register batch."""

    def __init__(self, word_loads: bool, warps: int = 4, prefetch: int = 8):
        if not 1 <= warps <= 32 or not 1 <= prefetch <= 16:
            raise ValueError(f"warps must be in [1, 32] and prefetch in [1, 16], got {warps}, "
                             f"{prefetch}")
        self.word_loads, self.warps, self.prefetch = word_loads, warps, prefetch

    def grid(self, rows):
        return (cute.ceil_div(rows, self.warps), 1, 1)

    def words_of(self, mPacked: cute.Tensor) -> cute.Tensor:
        """(R, ceil(n / 32)) words with ``word_loads``, else the (R, bytes) uint8 rows."""
        if cutlass.const_expr(self.word_loads):
            return cute.recast_tensor(mPacked, Uint32)
        return mPacked

    @cute.jit
    def load_batch(self, mRows: cute.Tensor, row, batch, n, rWords: cute.Tensor, lane):
        """``rWords[c]`` = word ``lane`` of chunk ``batch * prefetch + c`` of the row (0 past
        the row; bits past ``n`` are masked by the caller)."""
        row_bytes = cute.ceil_div(n, 8)
        for c in cutlass.range_constexpr(self.prefetch):
            word = (batch * self.prefetch + c) * CHUNK_WORDS + lane
            rWords[c] = Uint32(0)
            if cutlass.const_expr(self.word_loads):
                if word * WORD_BYTES < row_bytes:
                    rWords[c] = mRows[row, word]
            else:
                value = Uint32(0)
                for b in cutlass.range_constexpr(WORD_BYTES):
                    if word * WORD_BYTES + b < row_bytes:
                        value = value | (Uint32(mRows[row, word * WORD_BYTES + b])
                                         << Uint32(8 * b))
                rWords[c] = value

    @cute.jit
    def valid_bits(self, first_col, n) -> Uint32:
        """The bits of the word starting at column ``first_col`` that are mask columns."""
        inside = cutlass.max(cutlass.min(n - first_col, Int32(WORD_BITS)), 0)
        valid = Uint32(0xFFFFFFFF)
        if inside < WORD_BITS:
            valid = (Uint32(1) << Uint32(inside)) - Uint32(1)
        return valid


class ColumnCounts(_RowWalk):
    """``mCounts[r]`` = set bits of row r of ``mPacked`` (R, ceil(n / 8)) uint8 (bits past n
    ignored), ``mPadded[r]`` = min(ceil(count / multiple_of) * multiple_of, n), and
    ``mMax[0]`` raised to the largest padded count (atomic max: the caller zeroes it).
    Module docstring: the walk."""

    @cute.jit
    def __call__(self, mPacked: cute.Tensor, mCounts: cute.Tensor, mPadded: cute.Tensor,
                 mMax: cute.Tensor, n: Int32, multiple_of: Int32, stream):
        self.kernel(self.words_of(mPacked), mCounts, mPadded, mMax, n, multiple_of).launch(
            grid=self.grid(mPacked.shape[0]), block=(32 * self.warps, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mRows: cute.Tensor, mCounts: cute.Tensor, mPadded: cute.Tensor,
               mMax: cute.Tensor, n: Int32, multiple_of: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp, lane = tidx // 32, tidx % 32
        row = bidx * self.warps + warp
        if row < mRows.shape[0]:
            self.count_row(mRows, mCounts, mPadded, mMax, row, n, multiple_of, lane)

    @cute.jit
    def count_row(self, mRows, mCounts, mPadded, mMax, row, n, multiple_of, lane):
        batches = cute.ceil_div(cute.ceil_div(n, CHUNK_COLUMNS), self.prefetch)
        rWords = cute.make_rmem_tensor((self.prefetch,), Uint32)
        count = Int32(0)
        for b in cutlass.range(batches, unroll=1):
            self.load_batch(mRows, row, b, n, rWords, lane)
            for c in cutlass.range_constexpr(self.prefetch):
                first_col = (b * self.prefetch + c) * CHUNK_COLUMNS + lane * WORD_BITS
                count += Int32(cute.arch.popc(rWords[c] & self.valid_bits(first_col, n)))
        for step in cutlass.range_constexpr(5):
            count += cute.arch.shuffle_sync_bfly(count, offset=1 << step)
        if lane == 0:
            padded = cutlass.min(cute.ceil_div(count, multiple_of) * multiple_of, n)
            mCounts[row] = count
            mPadded[row] = padded
            red_max_s32(mMax.iterator.toint(), padded)


class ColumnLists(_RowWalk):
    """``mIndices[r, :]`` (int32, width L) from the packed mask ``mPacked[r, :]`` (uint8,
    ceil(n / 8) bytes, bit b of byte j = column 8 j + b) and the selected count
    ``mCounts[r]`` (trusted: ColumnCounts writes it). Module docstring: algorithm, roles,
    shared memory."""

    @cute.jit
    def __call__(self, mPacked: cute.Tensor, mCounts: cute.Tensor, mIndices: cute.Tensor,
                 n: Int32, stream):
        """``mPacked`` (R, ceil(n / 8)) uint8 with a unit column stride, ``mCounts`` (R,)
        int32, ``mIndices`` (R, L) int32, ``n`` the mask's columns."""

        @cute.struct
        class SharedStorage:
            stage: cute.struct.Align[cute.struct.MemRange[Int32, CHUNK_COLUMNS * self.warps],
                                     16]

        self.storage_cls = SharedStorage
        self.kernel(self.words_of(mPacked), mCounts, mIndices, n).launch(
            grid=self.grid(mPacked.shape[0]), block=(32 * self.warps, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mRows: cute.Tensor, mCounts: cute.Tensor, mIndices: cute.Tensor,
               n: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp, lane = tidx // 32, tidx % 32
        storage = cutlass.memory.SmemAllocator().allocate(self.storage_cls)
        sStage = storage.stage.get_tensor(cute.make_layout((CHUNK_COLUMNS, self.warps)))
        row = bidx * self.warps + warp
        if row < mRows.shape[0]:
            self.list_row(mRows, mCounts, mIndices, row, n, sStage[None, warp], lane)

    @cute.jit
    def list_row(self, mRows, mCounts, mIndices, row, n, sStage, lane):
        """One row: batches of ``prefetch`` chunks, the next batch loading while this one is
        compacted (selected columns, then unselected ones while below L)."""
        count = mCounts[row]
        width = Int32(mIndices.shape[1])
        batches = cute.ceil_div(cute.ceil_div(n, CHUNK_COLUMNS), self.prefetch)
        rWords = cute.make_rmem_tensor((self.prefetch,), Uint32)
        rNext = cute.make_rmem_tensor((self.prefetch,), Uint32)
        self.load_batch(mRows, row, 0, n, rWords, lane)
        selected, unselected = Int32(0), count  # the next list positions
        for b in cutlass.range(batches, unroll=1):
            self.load_batch(mRows, row, b + 1, n, rNext, lane)
            for c in cutlass.range_constexpr(self.prefetch):
                chunk_first = (b * self.prefetch + c) * CHUNK_COLUMNS
                first_col = chunk_first + lane * WORD_BITS
                valid = self.valid_bits(first_col, n)
                taken = self.compact(rWords[c] & valid, first_col, selected, width, mIndices,
                                     row, sStage, lane)
                selected += taken
                if unselected < width:
                    self.compact(~rWords[c] & valid, first_col, unselected, width, mIndices,
                                 row, sStage, lane)
                columns = cutlass.max(cutlass.min(n - chunk_first, Int32(CHUNK_COLUMNS)), 0)
                unselected += columns - taken
            for c in cutlass.range_constexpr(self.prefetch):
                rWords[c] = rNext[c]

    @cute.jit
    def compact(self, bits: Uint32, first_col, base, limit, mIndices: cute.Tensor, row,
                sStage: cute.Tensor, lane) -> Int32:
        """The columns ``first_col + b`` of the set bits ``b`` of every lane's ``bits``, in lane
        then bit order, to ``mIndices[row, base + i]`` for ``base + i < limit``; returns how
        many the chunk holds. Through the warp's stage, so the global stores coalesce."""
        own = Int32(cute.arch.popc(bits))
        inclusive = warp_inclusive_scan(own, lane)
        total = cute.arch.shuffle_sync(inclusive, 31)
        position = inclusive - own
        rest = bits
        for _ in cutlass.range(own, unroll=1):
            low = rest & (Uint32(0) - rest)
            sStage[position] = first_col + Int32(cute.arch.popc(low - Uint32(1)))
            position += 1
            rest = rest ^ low
        cute.arch.sync_warp()
        stop = cutlass.min(total, limit - base)
        for i in cutlass.range(lane, stop, 32, unroll=1):
            mIndices[row, base + i] = sStage[i]
        cute.arch.sync_warp()  # the stage is rewritten by the next compaction
        return total
