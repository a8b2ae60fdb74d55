"""Top-k columns of each row, as increasing column lists: an exact radix select.

``topk_indices`` (ops/column_sparse.py) picks, per row of scores (e.g. column sums, one row
per query group), the k largest columns. Instead of sorting, each row's k-th largest value is
found digit by digit (8 bits a pass, most significant first) from shared-memory histograms,
and one last pass writes the selected columns in increasing order:

0. **Digits.** 8 bits by default; ``digit_bits=11`` reads a float32 row three times instead
   of four (histograms of 2048 bins, one per ``hist_copies`` group of warps). Not yet
   measured on a GPU (``perf/topk_tuning.py``), so the default stays 8.
1. **Keys.** A score's bits become an unsigned key with the same order (negative: all bits
   flipped; positive: the sign bit set; NaN: the largest key, as ``torch.topk`` ranks it).
   16-bit scores (bfloat16, float16) keep 16-bit keys, so two passes suffice; float32 takes
   four.
2. **Radix select.** Pass ``d`` histograms the ``d``-th byte of the keys that match the bytes
   chosen so far (per-warp histograms: shared-memory atomics contend only within a warp),
   then warp 0 finds the bin that holds the k-th largest from the top (suffix sums over
   the 256 bins, a shuffle scan) and keeps how many of the k are still to come from it.
   After the last pass, ``K*`` is the k-th largest key and ``e`` how many keys equal to it
   belong to the top k.
3. **Ordered write.** The row is walked in tiles of ``threads x vec`` columns, thread ``t``
   owning ``vec`` consecutive ones: per thread the count of keys above ``K*`` and equal to
   it, one block-wide exclusive scan of both counts (packed in one 32-bit word; a tile
   holds at most 65535 columns), and each selected column goes to position
   ``above_before + min(equal_before, e)``: keys above ``K*``, and the first ``e`` keys equal
   to it (lowest columns first), in increasing column order. Exactly k columns, ties broken
   by column, deterministic.

Warp roles: none (every thread loads, histograms and writes; warp 0 also finds each pass's
bin). One CTA per row (``threads`` threads); a row is read ``passes + 1`` times (from L2 after
the first). Shared memory: ``warps x 256`` int32 histograms, 256 bin totals, the scan's warp
totals (two buffers, so consecutive tiles need one barrier) and the chosen bin: 17.3 KiB at
512 threads. Memory-bound SIMT code: the same kernel on the Hopper and Ampere paths.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32

from .common.block_scan import block_exclusive_scan

DIGIT_BITS = 8
#: per-tile counts are packed into the two halves of a 32-bit word
HALF = 16


class TopkRows:
    """k largest columns of every row of ``mScores`` (R, N) into ``mIndices[:, :k]`` (int32,
    increasing). ``key_bits``: 16 (bfloat16 / float16 scores) or 32 (float32); ``vec``:
    columns per thread load (16 bytes: 8 or 4, when rows are 16-byte aligned and N a
    multiple; else 1). Module docstring: algorithm, roles, shared memory."""

    def __init__(self, key_bits: int, vec: int, threads: int = 512,
                 digit_bits: int = DIGIT_BITS, hist_copies: int | None = None):
        if key_bits not in (16, 32):
            raise ValueError(f"key_bits must be 16 or 32, got {key_bits}")
        if threads % 32 or not 256 <= threads <= 1024:
            raise ValueError(f"threads must be a multiple of 32 in [256, 1024], got {threads}")
        if vec < 1 or threads * vec >= 1 << HALF:
            raise ValueError(f"a tile of threads x vec columns must stay below 2^{HALF}")
        self.key_bits, self.vec, self.threads = key_bits, vec, threads
        self.warps = threads // 32
        # digits, most significant first: (shift, width); e.g. 32-bit keys in 11-bit digits
        # take three passes (11, 11, 10) instead of four
        if digit_bits not in (8, 11):
            raise ValueError(f"digit_bits must be 8 or 11, got {digit_bits}")
        self.bins = 1 << digit_bits
        self.digits, low = [], key_bits
        while low > 0:
            width = min(digit_bits, low)
            low -= width
            self.digits.append((low, width))
        self.passes = len(self.digits)
        # histogram copies: one per warp (contention within a warp only) by default; wide
        # digits share a copy between warps (2048 bins x 16 warps would not fit)
        self.hist_copies = hist_copies or (self.warps if digit_bits == 8 else 4)
        if self.warps % self.hist_copies or (self.bins * self.hist_copies) % threads:
            raise ValueError(f"hist_copies must divide the {self.warps} warps, got "
                             f"{self.hist_copies}")

    @cute.jit
    def __call__(self, mScores: cute.Tensor, mIndices: cute.Tensor, k: Int32, stream):
        """``mScores`` (R, N) 16- or 32-bit floats, unit column stride; ``mIndices`` (R, L)
        int32 with L >= k; 1 <= k <= N (the op checks)."""
        bits_type = cutlass.Uint16 if cutlass.const_expr(self.key_bits == 16) else Uint32
        mBits = cute.recast_tensor(mScores, bits_type)

        @cute.struct
        class SharedStorage:
            hist: cute.struct.MemRange[Int32, self.bins * self.hist_copies]
            totals: cute.struct.MemRange[Int32, self.bins]
            scan: cute.struct.MemRange[Uint32, 2 * self.warps]
            chosen: cute.struct.MemRange[Int32, 2]

        self.storage_cls = SharedStorage
        self.kernel(mBits, mIndices, k).launch(grid=(mScores.shape[0], 1, 1),
                                               block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mBits: cute.Tensor, mIndices: cute.Tensor, k: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        warp, lane = tidx // 32, tidx % 32
        storage = cutlass.memory.SmemAllocator().allocate(self.storage_cls)
        bins, copies = self.bins, self.hist_copies
        sHist = storage.hist.get_tensor(cute.make_layout((bins, copies)))
        sTotals = storage.totals.get_tensor(cute.make_layout(bins))
        copy = warp if cutlass.const_expr(copies == self.warps) else warp // (self.warps // copies)
        sScan = storage.scan.get_tensor(cute.make_layout((self.warps, 2)))
        sChosen = storage.chosen.get_tensor(cute.make_layout(2))
        gRow = cute.zipped_divide(mBits[row, None], (self.vec,))  # (vec, N / vec)
        n_vec = cute.size(gRow, mode=[1])

        prefix, mask, remaining = Uint32(0), Uint32(0), k
        for d in cutlass.range_constexpr(self.passes):
            shift, width = self.digits[d]
            for i in cutlass.range_constexpr(bins * copies // self.threads):
                sHist[(tidx + i * self.threads) % bins, (tidx + i * self.threads) // bins] = 0
            cute.arch.sync_threads()
            for j in cutlass.range(tidx, n_vec, self.threads, unroll=1):
                rVec = cute.make_rmem_tensor((self.vec,), mBits.element_type)
                cute.autovec_copy(gRow[None, j], rVec)
                for e in cutlass.range_constexpr(self.vec):
                    key = self.key(rVec[e])
                    if (key & mask) == prefix:
                        digit = Int32((key >> Uint32(shift)) & Uint32((1 << width) - 1))
                        cute.arch.atomic_add(sHist[None, copy].iterator + digit, Int32(1))
            cute.arch.sync_threads()
            for b in cutlass.range(tidx, bins, self.threads, unroll=1):
                total = Int32(0)
                for w in cutlass.range_constexpr(copies):
                    total += sHist[b, w]
                sTotals[b] = total
            cute.arch.sync_threads()
            if warp == 0:
                self.choose_bin(sTotals, sChosen, lane, remaining)
            cute.arch.sync_threads()
            prefix = prefix | (Uint32(sChosen[0]) << Uint32(shift))
            mask = mask | (Uint32((1 << width) - 1) << Uint32(shift))
            remaining = sChosen[1]
            # the next pass zeroes the histograms only after every thread read sChosen
            cute.arch.sync_threads()
        self.write_selected(gRow, mIndices, row, n_vec, prefix, remaining, sScan, tidx, warp,
                            lane)

    @cute.jit
    def key(self, bits) -> Uint32:
        """Order-preserving unsigned key of a float's bits (module docstring, step 1)."""
        top = 1 << (self.key_bits - 1)
        full = (1 << self.key_bits) - 1
        inf = 0x7F80 if cutlass.const_expr(self.key_bits == 16) else 0x7F800000
        u = Uint32(bits)
        negative = u >> Uint32(self.key_bits - 1)
        key = u ^ (((Uint32(0) - negative) & Uint32(full)) | Uint32(top))
        magnitude = u & Uint32(full >> 1)
        if magnitude > Uint32(inf):  # NaN: the largest key (torch.topk ranks NaN first)
            key = Uint32(full)
        return key

    @cute.jit
    def choose_bin(self, sTotals: cute.Tensor, sChosen: cute.Tensor, lane, remaining):
        """Warp 0: the bin holding the ``remaining``-th largest key (counting from bin 255
        down) into ``sChosen[0]``, and how many of ``remaining`` lie in it into
        ``sChosen[1]``. Lane l owns bins 8l .. 8l + 7; suffix sums over lanes by shuffles."""
        per_lane = self.bins // 32
        own = Int32(0)
        for b in cutlass.range_constexpr(per_lane):
            own += sTotals[lane * per_lane + b]
        suffix = own  # sum over lanes >= this one
        for step in cutlass.range_constexpr(5):
            offset = 1 << step
            other = cute.arch.shuffle_sync_down(suffix, offset=offset)
            if lane + offset < 32:
                suffix += other
        above = suffix - own  # keys in bins of higher lanes
        if above < remaining:
            if remaining <= suffix:  # the one lane whose bins hold the remaining-th key
                acc = above
                for b in cutlass.range_constexpr(per_lane):
                    bin_ = lane * per_lane + (per_lane - 1 - b)
                    count = sTotals[bin_]
                    if acc < remaining:
                        if remaining <= acc + count:
                            sChosen[0] = bin_
                            sChosen[1] = remaining - acc
                    acc += count

    @cute.jit
    def write_selected(self, gRow, mIndices, row, n_vec, threshold, equal_wanted, sScan, tidx,
                       warp, lane):
        """Module docstring, step 3: keys above ``threshold`` and the first ``equal_wanted``
        keys equal to it, in increasing column order, to ``mIndices[row, :k]``."""
        above_base, equal_base = Int32(0), Int32(0)
        tiles = cute.ceil_div(n_vec, self.threads)
        for t in cutlass.range(tiles, unroll=1):
            j = t * self.threads + tidx
            rKeys = cute.make_rmem_tensor((self.vec,), Uint32)
            n_above, n_equal = Int32(0), Int32(0)
            if j < n_vec:
                rVec = cute.make_rmem_tensor((self.vec,), gRow.element_type)
                cute.autovec_copy(gRow[None, j], rVec)
                for e in cutlass.range_constexpr(self.vec):
                    key = self.key(rVec[e])
                    rKeys[e] = key
                    if key > threshold:
                        n_above += 1
                    if key == threshold:
                        n_equal += 1
            packed = Uint32(n_above) | (Uint32(n_equal) << Uint32(HALF))
            before, tile_total = block_exclusive_scan(packed, sScan, t % 2, warp, lane,
                                                      self.warps)
            above = above_base + Int32(before & Uint32((1 << HALF) - 1))
            equal = equal_base + Int32(before >> Uint32(HALF))
            if j < n_vec:
                for e in cutlass.range_constexpr(self.vec):
                    key = rKeys[e]
                    take = key > threshold
                    if key == threshold:
                        take = equal < equal_wanted
                    if take:
                        mIndices[row, above + cutlass.min(equal, equal_wanted)] = Int32(
                            j * self.vec + e)
                    if key > threshold:
                        above += 1
                    if key == threshold:
                        equal += 1
            above_base += Int32(tile_total & Uint32((1 << HALF) - 1))
            equal_base += Int32(tile_total >> Uint32(HALF))
