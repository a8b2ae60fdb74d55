"""Top-k columns of each row, as increasing column lists: an exact radix select, over the
row or (long rows) over the candidates above a sampled threshold.

``topk_indices`` (ops/column_sparse.py) picks, per row of scores (e.g. column sums, one row
per query group), the k largest columns. Instead of sorting, each row's k-th largest value is
found digit by digit (8 bits a pass, most significant first) from shared-memory histograms,
and one last pass writes the selected columns in increasing order:

0. **Digits.** 8 bits by default; ``digit_bits=11`` reads a float32 row three times instead
   of four (histograms of 2048 bins, one per ``hist_copies`` group of warps); it measured
   slower on an H100 (perf/RESULTS.md), so the default stays 8.
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
   by column, deterministic. (``write_tile``: one tile's counts, scan and writes, shared with
   step 6.)

Sampled candidates (``candidates`` = C > 0; the op's default when the expected candidates
fit): the radix select above reads the row ``passes + 1`` times. Instead, per row:

4. **Sample.** ``samples`` keys at evenly spaced columns (hashed jitter within each stride, so
   a periodic row does not alias), radix-selected in shared memory for the
   ``sample_rank``-th largest, T. The op sets the rank a few standard deviations above
   ``samples x k / N`` (the sampled keys above the true k-th largest are Binomial), so the
   keys >= T hold the top k but for a ~3e-5 chance per row.
5. **Candidates.** One read of the row in tiles of ``threads x unroll x vec`` columns (the next
   tile's loads issued before this one is compacted): keys >= T and their columns are
   appended to shared memory in column order (a block scan of the per-thread counts).
6. **Select and write from shared memory.** If the candidates number at least k and fit in
   C, the radix select of step 2 runs over them (the k-th largest of the row is among them,
   and so is every key equal to it), and step 3's ordered write walks them instead of the
   row. Else (the sample missed, or ties overflow C) the CTA runs steps 2-3 on the row: the
   same lists either way, exact.

So the row is read once from DRAM (the sample pulls at most its sectors into L2 first) instead
of ``passes + 1`` times: 2.5-4.1x ``torch.topk`` at the issue's shapes on an H100, against
1.75-2.6x for the radix select over the row (perf/RESULTS.md).

Warp roles: none (every thread loads, histograms and writes; warp 0 also finds each pass's
bin). One CTA per row (``threads`` threads); a row is read ``passes + 1`` times (from L2 after
the first), or once with candidates. Shared memory: ``warps x 256`` int32 histograms, 256 bin
totals, the scan's warp totals (two buffers, so consecutive tiles need one barrier) and the
chosen bin: 17.3 KiB at 512 threads; with candidates also C x 8 bytes (key and column; the
sample borrows the key array). Memory-bound SIMT code: the same kernel on the Hopper and
Ampere paths.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32

from .common.block_scan import block_exclusive_scan

DIGIT_BITS = 8
#: keys sampled per row for the candidates' threshold (step 4)
SAMPLES = 2048
#: per-tile counts are packed into the two halves of a 32-bit word
HALF = 16


class TopkRows:
    """k largest columns of every row of ``mScores`` (R, N) into ``mIndices[:, :k]`` (int32,
    increasing). ``key_bits``: 16 (bfloat16 / float16 scores) or 32 (float32); ``vec``:
    columns per thread load (16 bytes: 8 or 4, when rows are 16-byte aligned and N a
    multiple; else 1). Module docstring: algorithm, roles, shared memory."""

    def __init__(self, key_bits: int, vec: int, threads: int = 512,
                 digit_bits: int = DIGIT_BITS, hist_copies: int | None = None,
                 candidates: int = 0, samples: int = SAMPLES, unroll: int | None = None):
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
        # sampled candidates (module docstring, steps 4-6): C keys and columns in smem
        # 32 bytes per thread per tile of the candidates' read, twice in flight (prefetch)
        unroll = unroll or (4 if vec == 1 else max(1, 256 // (vec * key_bits)))
        if candidates and (candidates < samples or candidates % threads
                           or samples % threads or threads * unroll * vec >= 1 << HALF):
            raise ValueError(f"candidates must be 0 or a multiple of threads >= samples "
                             f"({samples}, itself a multiple of threads), got {candidates}")
        self.candidates, self.samples, self.unroll = candidates, samples, unroll

    @cute.jit
    def __call__(self, mScores: cute.Tensor, mIndices: cute.Tensor, k: Int32,
                 sample_rank: Int32, stream):
        """``mScores`` (R, N) 16- or 32-bit floats, unit column stride; ``mIndices`` (R, L)
        int32 with L >= k; 1 <= k <= N (the op checks). ``sample_rank``: the sampled key
        taken as the candidates' threshold, 1..samples, or 0 for the plain radix select
        (ignored without ``candidates``)."""
        bits_type = cutlass.Uint16 if cutlass.const_expr(self.key_bits == 16) else Uint32
        mBits = cute.recast_tensor(mScores, bits_type)
        cand = max(1, self.candidates)

        @cute.struct
        class SharedStorage:
            hist: cute.struct.MemRange[Int32, self.bins * self.hist_copies]
            totals: cute.struct.MemRange[Int32, self.bins]
            scan: cute.struct.MemRange[Uint32, 2 * self.warps]
            chosen: cute.struct.MemRange[Int32, 2]
            cand_keys: cute.struct.MemRange[Uint32, cand]
            cand_cols: cute.struct.MemRange[Int32, cand]

        self.storage_cls = SharedStorage
        self.kernel(mBits, mIndices, k, sample_rank).launch(
            grid=(mScores.shape[0], 1, 1), block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mBits: cute.Tensor, mIndices: cute.Tensor, k: Int32, sample_rank: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        warp, lane = tidx // 32, tidx % 32
        storage = cutlass.memory.SmemAllocator().allocate(self.storage_cls)
        smem = (storage.hist.get_tensor(cute.make_layout((self.bins, self.hist_copies))),
                storage.totals.get_tensor(cute.make_layout(self.bins)),
                storage.chosen.get_tensor(cute.make_layout(2)))
        sScan = storage.scan.get_tensor(cute.make_layout((self.warps, 2)))
        gRow = cute.zipped_divide(mBits[row, None], (self.vec,))  # (vec, N / vec)
        n_vec = cute.size(gRow, mode=[1])
        if cutlass.const_expr(self.candidates > 0):
            sKeys = storage.cand_keys.get_tensor(cute.make_layout(self.candidates))
            sCols = storage.cand_cols.get_tensor(cute.make_layout(self.candidates))
            done = Int32(0)
            if sample_rank > 0:
                done = self.select_sampled(mBits, gRow, n_vec, mIndices, row, k, sample_rank,
                                           sKeys, sCols, smem, sScan, tidx, warp, lane)
            if done == 0:
                self.select_exact(gRow, n_vec, mIndices, row, k, smem, sScan, tidx, warp,
                                  lane)
        else:
            self.select_exact(gRow, n_vec, mIndices, row, k, smem, sScan, tidx, warp, lane)

    @cute.jit
    def select_exact(self, gRow, n_vec, mIndices, row, k, smem, sScan, tidx, warp, lane):
        """Steps 2-3: the radix select over the row, then the ordered write."""
        threshold, equal_wanted = self.radix_select(gRow, n_vec, None, k, smem, tidx, lane,
                                                    False)
        self.write_selected(gRow, mIndices, row, n_vec, threshold, equal_wanted, sScan, tidx,
                            warp, lane)

    @cute.jit
    def select_sampled(self, mBits, gRow, n_vec, mIndices, row, k, sample_rank, sKeys, sCols,
                       smem, sScan, tidx, warp, lane) -> Int32:
        """Steps 4-6; returns 1 when the row's list is written, 0 when the candidates missed
        (the caller then runs the exact select)."""
        n = Int32(mBits.shape[1])
        span = n // self.samples  # columns per sample (the op keeps n >= samples)
        for m in cutlass.range_constexpr(self.samples // self.threads):
            i = Int32(m * self.threads) + tidx
            # hashed jitter inside the sample's stride (Knuth's multiplicative hash)
            jitter = Int32((Uint32(i) * Uint32(2654435761)) >> Uint32(8)) % span
            sKeys[i] = self.key(mBits[row, i * span + jitter])
        cute.arch.sync_threads()
        threshold, _ = self.radix_select(None, Int32(self.samples), sKeys, sample_rank, smem,
                                         tidx, lane, True)
        found = self.compact_candidates(gRow, n_vec, threshold, sKeys, sCols, sScan, tidx,
                                        warp, lane)
        done = Int32(0)
        if found >= k:
            if found <= self.candidates:
                kth, equal_wanted = self.radix_select(None, found, sKeys, k, smem, tidx, lane,
                                                      True)
                self.write_candidates(sKeys, sCols, found, mIndices, row, kth, equal_wanted,
                                      sScan, tidx, warp, lane)
                done = Int32(1)
        # the exact select reuses the histograms and scan buffers
        cute.arch.sync_threads()
        return done

    @cute.jit
    def radix_select(self, gRow, count, sKeys, rank, smem, tidx, lane,
                     from_smem: cutlass.Constexpr):
        """Step 2: (the ``rank``-th largest key, how many keys equal to it are among the
        ``rank`` largest) of the row (``gRow``, ``count`` vectors) or of ``sKeys[:count]``
        (keys already made, ``from_smem``)."""
        sHist, sTotals, sChosen = smem
        bins, copies = self.bins, self.hist_copies
        warp = tidx // 32
        copy = warp if cutlass.const_expr(copies == self.warps) else warp // (self.warps // copies)
        prefix, mask, remaining = Uint32(0), Uint32(0), rank
        for d in cutlass.range_constexpr(self.passes):
            shift, width = self.digits[d]
            for i in cutlass.range_constexpr(bins * copies // self.threads):
                sHist[(tidx + i * self.threads) % bins, (tidx + i * self.threads) // bins] = 0
            cute.arch.sync_threads()
            if cutlass.const_expr(from_smem):
                for j in cutlass.range(tidx, count, self.threads, unroll=1):
                    self.count_digit(sKeys[j], prefix, mask, shift, width, sHist, copy)
            else:
                for j in cutlass.range(tidx, count, self.threads, unroll=1):
                    rVec = cute.make_rmem_tensor((self.vec,), gRow.element_type)
                    cute.autovec_copy(gRow[None, j], rVec)
                    for e in cutlass.range_constexpr(self.vec):
                        self.count_digit(self.key(rVec[e]), prefix, mask, shift, width, sHist,
                                         copy)
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
        return prefix, remaining

    @cute.jit
    def count_digit(self, key, prefix, mask, shift, width, sHist, copy):
        """One key into this warp's histogram copy, if it matches the digits chosen so far."""
        if (key & mask) == prefix:
            digit = Int32((key >> Uint32(shift)) & Uint32((1 << width) - 1))
            cute.arch.atomic_add(sHist[None, copy].iterator + digit, Int32(1))

    @cute.jit
    def compact_candidates(self, gRow, n_vec, threshold, sKeys, sCols, sScan, tidx, warp,
                           lane) -> Int32:
        """Step 5: the keys >= ``threshold`` and their columns, in column order, into
        ``sKeys``/``sCols`` (those past C dropped); returns how many there are. Thread t of
        tile i owns vectors ``(i threads + t) unroll + u``; the next tile loads first."""
        per_thread = self.unroll * self.vec
        tiles = cute.ceil_div(n_vec, self.threads * self.unroll)
        # (vec, unroll): element e of the flat index is column first + e
        rVec = cute.make_rmem_tensor((self.vec, self.unroll), gRow.element_type)
        rNext = cute.make_rmem_tensor((self.vec, self.unroll), gRow.element_type)
        self.load_span(gRow, n_vec, tidx, rVec)
        base = Int32(0)
        for t in cutlass.range(tiles, unroll=1):
            self.load_span(gRow, n_vec, (t + 1) * self.threads + tidx, rNext)
            first = Int32(((t * self.threads + tidx) * self.unroll) * self.vec)
            valid = cutlass.min(Int32(n_vec * self.vec) - first, Int32(per_thread))
            own = Int32(0)
            for e in cutlass.range_constexpr(per_thread):
                if e < valid:
                    if self.key(rVec[e]) >= threshold:
                        own += 1
            before, tile_total = block_exclusive_scan(Uint32(own), sScan, t % 2, warp, lane,
                                                      self.warps)
            position = base + Int32(before)
            for e in cutlass.range_constexpr(per_thread):
                key = self.key(rVec[e])
                if e < valid:
                    if key >= threshold:
                        if position < self.candidates:
                            sKeys[position] = key
                            sCols[position] = first + e
                        position += 1
            base += Int32(tile_total)
            for e in cutlass.range_constexpr(per_thread):
                rVec[e] = rNext[e]
        cute.arch.sync_threads()  # the candidates are read by every thread next
        return base

    @cute.jit
    def load_span(self, gRow, n_vec, slot, rSpan):
        """The ``unroll`` vectors of thread slot ``slot`` (vectors past the row: zeros)."""
        for u in cutlass.range_constexpr(self.unroll):
            j = slot * self.unroll + u
            if j < n_vec:
                cute.autovec_copy(gRow[None, j], rSpan[None, u])

    @cute.jit
    def write_candidates(self, sKeys, sCols, found, mIndices, row, threshold, equal_wanted,
                         sScan, tidx, warp, lane):
        """Step 6's ordered write over the candidates (in column order): thread t of tile i
        owns candidates (i threads + t) unroll + u, as step 3 owns row columns."""
        bases = (Int32(0), Int32(0))
        for t in cutlass.range(cute.ceil_div(found, self.threads * self.unroll), unroll=1):
            first = (t * self.threads + tidx) * self.unroll
            rKeys = cute.make_rmem_tensor((self.unroll,), Uint32)
            rCols = cute.make_rmem_tensor((self.unroll,), Int32)
            for u in cutlass.range_constexpr(self.unroll):
                rKeys[u] = Uint32(0)
                rCols[u] = Int32(0)
                if first + u < found:
                    rKeys[u] = sKeys[first + u]
                    rCols[u] = sCols[first + u]
            bases = self.write_tile(rKeys, rCols, found - first, t, threshold, equal_wanted,
                                    bases, mIndices, row, sScan, warp, lane)

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
        bases = (Int32(0), Int32(0))
        for t in cutlass.range(cute.ceil_div(n_vec, self.threads), unroll=1):
            j = t * self.threads + tidx
            rKeys = cute.make_rmem_tensor((self.vec,), Uint32)
            valid = Int32(0)
            if j < n_vec:
                valid = Int32(self.vec)
                rVec = cute.make_rmem_tensor((self.vec,), gRow.element_type)
                cute.autovec_copy(gRow[None, j], rVec)
                for e in cutlass.range_constexpr(self.vec):
                    rKeys[e] = self.key(rVec[e])
            bases = self.write_tile(rKeys, Int32(j * self.vec), valid, t, threshold,
                                    equal_wanted, bases, mIndices, row, sScan, warp, lane)

    @cute.jit
    def write_tile(self, rKeys, cols, valid, t, threshold, equal_wanted, bases, mIndices,
                   row, sScan, warp, lane):
        """One tile of an ordered write (steps 3 and 6): this thread's first ``valid`` keys
        ``rKeys`` (columns ``cols[e]``, or ``cols + e`` for an integer ``cols``: in column
        order, after every earlier thread's) are
        counted above and equal to ``threshold``, one block-wide scan of both counts (packed
        in one 32-bit word) places them after ``bases`` (the counts of the tiles before),
        and the selected ones are written: keys above ``threshold`` and the first
        ``equal_wanted`` keys equal to it. Returns the bases after this tile."""
        above_base, equal_base = bases
        n_above, n_equal = Int32(0), Int32(0)
        for e in cutlass.range_constexpr(cute.size(rKeys)):
            if e < valid:
                if rKeys[e] > threshold:
                    n_above += 1
                if rKeys[e] == threshold:
                    n_equal += 1
        packed = Uint32(n_above) | (Uint32(n_equal) << Uint32(HALF))
        before, tile_total = block_exclusive_scan(packed, sScan, t % 2, warp, lane, self.warps)
        above = above_base + Int32(before & Uint32((1 << HALF) - 1))
        equal = equal_base + Int32(before >> Uint32(HALF))
        for e in cutlass.range_constexpr(cute.size(rKeys)):
            if e < valid:
                key = rKeys[e]
                take = key > threshold
                if key == threshold:
                    take = equal < equal_wanted
                if take:
                    col = cols + e if cutlass.const_expr(isinstance(cols, Int32)) else cols[e]
                    mIndices[row, above + cutlass.min(equal, equal_wanted)] = col
                if key > threshold:
                    above += 1
                if key == threshold:
                    equal += 1
        return (above_base + Int32(tile_total & Uint32((1 << HALF) - 1)),
                equal_base + Int32(tile_total >> Uint32(HALF)))
