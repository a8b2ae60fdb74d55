"""The cache writeback as its own kernel (issue 16): ``dest[g rows, idx[g, j]] += src[g rows,
j]`` for the positions j below group g's count.

``ScatterAdd`` walks (group, 64-position chunk) tiles, persistent over a grid of
``num_ctas`` CTAs of 128 threads (the op passes the tile count, or ``num_sms`` to keep the
writeback on a few SMs next to a GEMM). Per tile the chunk's feature ids go to smem, then:

* **bulk** (Hopper, M-major ``dest`` with 16-byte aligned columns): the (group, 64) source
  tile is transposed into smem so each listed column's ``group`` rows are contiguous, and
  one thread per column issues ``cp.reduce.async.bulk .add`` of those rows into ``dest``
  (the TMA unit adds them in the L2: no register round trip, atomic per element; Chipmunk
  Part III measured it 3x faster than in-register reductions). A CTA that walks several
  tiles double-buffers the transposed tile: a tile's loads and transpose run while the bulk
  reductions of the tile before still read the other buffer. A launch of one CTA per tile
  (the op's default, also on the side SMs of a green-context ``SmPartition``) takes one
  buffer: half the smem, so 9 CTAs fit an SM instead of 6 (by registers, 56 a thread), which
  keeps more tiles in flight per SM (perf/RESULTS.md: 1.33x the GB/s on 8 SMs). With ``vec``
  (source rows 16-byte aligned) a thread loads a row's 64 positions as 16-byte vectors (32
  data registers instead of 64 scalars' worth). Two other adders of the transposed tile
  (``ops.column_sparse_mlp.SCATTER_ADDER``): ``"red"``, the threads'
  ``red.global.add.noftz.v4`` (within 3% of the bulk reduction on an H200, on 8 SMs and on
  all), and ``"rmw"``, 16-byte loads of ``dest``, an fp32 add and 16-byte stores (no
  atomics: race-free as the element path is);
* **elements** (Ampere, row-major ``dest``, unaligned columns): each thread reads its
  elements' source and destination values (``CACHE_BATCH`` loads in flight first), adds in
  fp32 and stores; lanes run along ``dest``'s contiguous dimension. Race-free because a
  group's listed columns are distinct and groups own disjoint rows (the op checks
  distinctness in debug mode; the bulk path is atomic and would add repeats correctly).

Indices are clamped into [0, F), so bad lists never write out of bounds.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass import Float32, Int32

from .common.dsl import python_unrolled
from .common.warp_ptx import bulk_copy_g2s, bulk_reduce_add_s2g, red_add_v4_16x2
from .mlp_delta import CACHE_BATCH, group_count

#: list positions per tile
TILE_COLS = 64
#: padding of the transposed tile's columns (elements): 16-byte aligned, fewer bank conflicts
COL_PAD = 8
#: elements per 16-byte source load (``vec``)
VEC = 8
#: transposed-tile buffers of the bulk path (``bulk_tiles``) when its CTAs walk several tiles;
#: a launch of one CTA per tile takes one (half the smem: more CTAs per SM)
BULK_BUFFERS = 2
#: how the bulk path adds its transposed tile into ``dest``: TMA bulk reductions, the threads'
#: vector ``red.global``, or the threads' 16-byte read-add-writes
ADDERS = ("bulk", "red", "rmw")


class ScatterAdd:
    """``mDest[g rows, feat] += mSrc[g rows, j]`` (module docstring).

    Warps: 4, all loading and adding (elements) or transposing, then adding 16-byte pieces
    (red, rmw) or issuing bulk reductions (bulk: one thread per listed column); with
    ``src_m_major`` 2, thread j moving list position j by one bulk copy in and one bulk
    reduction out. Schedule: persistent, tile ``t`` = (group ``t // chunks``, chunk ``t %
    chunks``), CTAs striding by the grid. Shared memory: 64 feature ids per buffer + (bulk
    path) ``buffers`` transposed (group, 64) tiles of 64 x (group + 8) x 2 bytes (17 KiB each at
    group 128); with ``src_m_major`` one dense (group, 64) tile (16 KiB) and an mbarrier.

    Tensors: ``mSrc`` (M, L) (unit column stride; with ``src_m_major`` unit row stride and
    16-byte aligned columns), ``mDest`` (M, F) row-major, or M-major with ``m_major``,
    ``mIdx`` (G, L) / ``mCounts`` (G,) int32.
    """

    threads = 128

    def __init__(self, group: int, m_major: bool, bulk: bool, vec: bool = False,
                 adder: str = "bulk", buffers: int = BULK_BUFFERS, src_m_major: bool = False):
        if bulk and not m_major:
            raise ValueError("the bulk reduction needs an M-major dest (a listed column's rows "
                             "contiguous)")
        if adder not in ADDERS:
            raise ValueError(f"adder must be one of {ADDERS}, got {adder!r}")
        if (vec or adder != "bulk") and not bulk:
            raise ValueError("vec (16-byte source loads) and the red / rmw adders are variants "
                             "of the bulk path")
        if buffers not in (1, 2):
            raise ValueError(f"buffers (transposed tiles in flight per CTA) must be 1 or 2, "
                             f"got {buffers}")
        if src_m_major and not (bulk and adder == "bulk" and not vec):
            raise ValueError("src_m_major (an M-major source moved by bulk copies) is the bulk "
                             "path with the bulk adder and no vector loads")
        self.group, self.m_major, self.bulk, self.vec = group, m_major, bulk, vec
        self.adder, self.buffers = adder, buffers
        # src_m_major: a listed position's rows are contiguous in the source too, so each
        # column goes smem-ward by one bulk copy and back out by one bulk reduction (no
        # registers, no transpose): one warp pair, thread j owning position j of the tile
        self.src_m_major = src_m_major
        if src_m_major:
            self.threads = TILE_COLS

    @cute.jit
    def __call__(self, mSrc: cute.Tensor, mDest: cute.Tensor, mIdx: cute.Tensor,
                 mCounts: cute.Tensor, num_ctas: Int32, stream):
        self.kernel(mSrc, mDest, mIdx, mCounts).launch(
            grid=(num_ctas, 1, 1), block=(self.threads, 1, 1), stream=stream)

    @cute.jit
    def smem(self, dtype: cutlass.Constexpr):
        col_stride = self.group + COL_PAD
        buffers = self.buffers
        tile_elems = col_stride * TILE_COLS * buffers if self.bulk else 8

        @cute.struct
        class SharedStorage:
            tile: cute.struct.Align[cute.struct.MemRange[dtype, tile_elems], 128]
            feat: cute.struct.Align[cute.struct.MemRange[Int32, TILE_COLS * buffers], 16]

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        # (row, position, buffer): a listed column's rows contiguous (the bulk copy's source)
        sT = cute.make_tensor(storage.tile.data_ptr(), cute.make_layout(
            (self.group, TILE_COLS, buffers),
            stride=(1, col_stride, col_stride * TILE_COLS)))
        return sT, cute.make_tensor(storage.feat.data_ptr(),
                                    cute.make_layout((TILE_COLS, buffers)))

    @cute.jit
    def column_smem(self, dtype: cutlass.Constexpr):
        """The ``src_m_major`` path's smem: a dense (group, 64) tile, each position's rows
        contiguous (16-byte aligned: bulk copies land there and bulk reductions leave from
        there), and the mbarrier the copies complete."""

        @cute.struct
        class SharedStorage:
            mbar: cute.struct.MemRange[cutlass.Int64, 1]
            tile: cute.struct.Align[cute.struct.MemRange[dtype, self.group * TILE_COLS], 128]

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        sT = cute.make_tensor(storage.tile.data_ptr(),
                              cute.make_layout((self.group, TILE_COLS), stride=(1, self.group)))
        return sT, storage.mbar.data_ptr()

    @cute.kernel
    def kernel(self, mSrc: cute.Tensor, mDest: cute.Tensor, mIdx: cute.Tensor,
               mCounts: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        if cutlass.const_expr(self.src_m_major):
            sT, mbar = self.column_smem(mSrc.element_type)
            self.column_tiles(mSrc, mDest, mIdx, mCounts, sT, mbar, tidx, bidx, gdim)
            return
        sT, sFeat = self.smem(mSrc.element_type)
        if cutlass.const_expr(self.bulk):
            self.bulk_tiles(mSrc, mDest, mIdx, mCounts, sT, sFeat, tidx, bidx, gdim)
        else:
            self.element_tiles(mSrc, mDest, mIdx, mCounts, sFeat, tidx, bidx, gdim)

    @cute.jit
    def element_tiles(self, mSrc, mDest, mIdx, mCounts, sFeat, tidx, bidx, gdim):
        width = mIdx.shape[1]
        chunks = cute.ceil_div(width, TILE_COLS)
        for tile in cutlass.range(bidx, mIdx.shape[0] * chunks, gdim, unroll=1):
            g, j0, count, row0 = self._tile_at(tile, chunks, mCounts, width)
            if j0 < count and row0 < mDest.shape[0]:
                if tidx < TILE_COLS:
                    pos = cutlass.min(j0 + tidx, count - 1)
                    sFeat[tidx, 0] = cutlass.min(cutlass.max(mIdx[g, pos], 0),
                                                 mDest.shape[1] - 1)
                cute.arch.sync_threads()
                rows_valid = cutlass.min(mDest.shape[0] - row0, self.group)
                self.element_tile(mSrc, mDest, sFeat, row0, rows_valid, j0, count - j0, tidx)
                cute.arch.sync_threads()  # sFeat is rewritten by the next tile

    @cute.jit
    def element_tile(self, mSrc, mDest, sFeat, row0, rows_valid, j0, cols_valid, tidx):
        per_thread = self.group * TILE_COLS // self.threads
        U = math.gcd(CACHE_BATCH, per_thread)  # batches cover every element (96 at group 192)
        add = cute.make_rmem_tensor((U,), Float32)
        old = cute.make_rmem_tensor((U,), Float32)
        for b in cutlass.range(per_thread // U, unroll=1):
            with python_unrolled():
                for u in cutlass.range_constexpr(U):
                    r, c = self._element(b * U + u, tidx)
                    add[u], old[u] = Float32(0.0), Float32(0.0)
                    if r < rows_valid and c < cols_valid:
                        add[u] = Float32(mSrc[row0 + r, j0 + c])
                        old[u] = Float32(mDest[row0 + r, sFeat[c, 0]])
                for u in cutlass.range_constexpr(U):
                    r, c = self._element(b * U + u, tidx)
                    if r < rows_valid and c < cols_valid:
                        mDest[row0 + r, sFeat[c, 0]] = (old[u] + add[u]).to(mDest.element_type)

    def _tile_at(self, tile, chunks, mCounts, width):
        """Tile ``tile``'s group, first list position, the group's (clamped) count and first
        row: it adds something where the position is below the count and the row inside
        ``dest``."""
        g, j0 = tile // chunks, (tile % chunks) * TILE_COLS
        return g, j0, group_count(mCounts, g, width), g * self.group

    def _element(self, e, tidx):
        """(row, position) of a thread's ``e``-th element: lanes along ``dest``'s contiguous
        dimension (rows when M-major, list positions when row-major)."""
        if self.m_major:
            flat = e * self.threads + tidx
            return flat % self.group, flat // self.group
        return self._element_by_position(e, tidx)

    def _element_by_position(self, e, tidx):
        """(row, position) with lanes along the list positions (coalesced source reads)."""
        flat = e * self.threads + tidx
        return flat // TILE_COLS, flat % TILE_COLS

    @cute.jit
    def bulk_tiles(self, mSrc, mDest, mIdx, mCounts, sT, sFeat, tidx, bidx, gdim):
        """The bulk path's loop: per tile, load the source tile into registers (the previous
        tile's bulk reductions still reading the other buffer), wait until this buffer's
        reductions of two tiles ago have read it, transpose it in, issue one bulk reduction
        per listed column. Thread j < 64 owns column j: it reads the column's feature id into a
        register, issues its reduction and commits a (possibly empty) bulk group every tile,
        so ``wait_group(1)`` always means "the group of two tiles ago"."""
        width = mIdx.shape[1]
        chunks = cute.ceil_div(width, TILE_COLS)
        suffix = "bf16" if mDest.element_type == cutlass.BFloat16 else "f16"
        per_thread = self.group * TILE_COLS // self.threads
        frag = cute.make_rmem_tensor((per_thread,), mSrc.element_type)
        buf = Int32(0)
        for tile in cutlass.range(bidx, mIdx.shape[0] * chunks, gdim, unroll=1):
            g, j0, count, row0 = self._tile_at(tile, chunks, mCounts, width)
            if j0 < count and row0 < mDest.shape[0]:
                rows_valid = cutlass.min(mDest.shape[0] - row0, self.group)
                cols_valid = cutlass.min(count - j0, TILE_COLS)
                feat = Int32(0)
                if tidx < TILE_COLS:
                    pos = cutlass.min(j0 + tidx, count - 1)
                    feat = cutlass.min(cutlass.max(mIdx[g, pos], 0), mDest.shape[1] - 1)
                self.load_tile(mSrc, frag, row0, rows_valid, j0, cols_valid, tidx)
                if cutlass.const_expr(self.adder != "bulk"):
                    if tidx < TILE_COLS:
                        sFeat[tidx, buf] = feat
                elif tidx < TILE_COLS:
                    cute.arch.cp_async_bulk_wait_group(self.buffers - 1, read=True)
                cute.arch.sync_threads()  # buffer ``buf`` is free for every thread
                self.store_tile(sT, frag, buf, tidx)
                if cutlass.const_expr(self.adder == "bulk"):
                    # the bulk copies read sT through the async proxy
                    cute.arch.fence_proxy("async.shared", space="cta")
                cute.arch.sync_threads()
                if cutlass.const_expr(self.adder == "red"):
                    self.red_tile(mDest, sT, sFeat, buf, row0, rows_valid, cols_valid, tidx,
                                  suffix)
                elif cutlass.const_expr(self.adder == "rmw"):
                    self.rmw_tile(mDest, sT, sFeat, buf, row0, rows_valid, cols_valid, tidx)
                elif tidx < TILE_COLS:
                    if tidx < cols_valid:
                        dst = mDest.iterator + cute.crd2idx((row0, feat), mDest.layout)
                        src = sT.iterator + cute.crd2idx((0, tidx, buf), sT.layout)
                        bulk_reduce_add_s2g(dst.toint(), src.toint(), rows_valid * 2, suffix)
                    cute.arch.cp_async_bulk_commit_group()
                buf = (buf + 1) % self.buffers
        if cutlass.const_expr(self.adder == "bulk"):
            if tidx < TILE_COLS:  # smem must outlive the last reductions' reads
                cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def column_tiles(self, mSrc, mDest, mIdx, mCounts, sT, mbar, tidx, bidx, gdim):
        """The ``src_m_major`` path's loop: per tile, thread j < the tile's listed count copies
        position j's rows from the source into smem column j (one bulk copy onto ``mbar``,
        which every thread arrives on with its bytes expected), then, once all have landed,
        adds them into ``dest`` with one bulk reduction and waits until it has read the
        column. A CTA-wide sync ends each tile (the mbarrier's next phase starts after every
        thread has seen this one end)."""
        width = mIdx.shape[1]
        chunks = cute.ceil_div(width, TILE_COLS)
        suffix = "bf16" if mDest.element_type == cutlass.BFloat16 else "f16"
        if tidx == 0:
            cute.arch.mbarrier_init(mbar, self.threads)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()
        phase = Int32(0)
        for tile in cutlass.range(bidx, mIdx.shape[0] * chunks, gdim, unroll=1):
            g, j0, count, row0 = self._tile_at(tile, chunks, mCounts, width)
            if j0 < count and row0 < mDest.shape[0]:
                nbytes = Int32(0)
                feat = Int32(0)
                if tidx < count - j0:
                    nbytes = cutlass.min(mDest.shape[0] - row0, self.group) * 2
                    feat = cutlass.min(cutlass.max(mIdx[g, j0 + tidx], 0), mDest.shape[1] - 1)
                cute.arch.mbarrier_arrive_and_expect_tx(mbar, nbytes)
                column = sT.iterator + cute.crd2idx((0, tidx), sT.layout)
                if tidx < count - j0:
                    src = mSrc.iterator + cute.crd2idx((row0, j0 + tidx), mSrc.layout)
                    bulk_copy_g2s(column.toint(), src.toint(), nbytes, mbar.toint())
                cute.arch.mbarrier_wait(mbar, phase)
                phase = phase ^ 1
                if tidx < count - j0:
                    dst = mDest.iterator + cute.crd2idx((row0, feat), mDest.layout)
                    bulk_reduce_add_s2g(dst.toint(), column.toint(), nbytes, suffix)
                    cute.arch.cp_async_bulk_commit_group()
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
                cute.arch.sync_threads()

    @cute.jit
    def red_tile(self, mDest, sT, sFeat, buf, row0, rows_valid, cols_valid, tidx, suffix):
        """``red``: every thread adds 16-byte pieces of the transposed tile's columns into
        ``dest`` with ``red.global.add.v4`` (lanes along a column's rows: one warp covers two
        128-row columns, 512 contiguous bytes). rows_valid is a multiple of 8 (the op sends
        only M % 8 == 0 here)."""
        pieces = self.group // VEC
        for e in cutlass.range_constexpr(pieces * TILE_COLS // self.threads):
            col, r = self._piece(e, tidx)
            if col < cols_valid and r < rows_valid:
                src = sT.iterator + cute.crd2idx((r, col, buf), sT.layout)
                words = cute.make_rmem_tensor((4,), Int32)
                cute.autovec_copy(cute.make_tensor(cute.make_ptr(
                    Int32, src.toint(), cute.AddressSpace.smem, assumed_align=16),
                    cute.make_layout(4)), words)
                dst = mDest.iterator + cute.crd2idx((row0 + r, sFeat[col, buf]), mDest.layout)
                red_add_v4_16x2(dst.toint(), [words[i] for i in range(4)], suffix)

    @cute.jit
    def rmw_tile(self, mDest, sT, sFeat, buf, row0, rows_valid, cols_valid, tidx):
        """``rmw``: ``red_tile``'s 16-byte pieces added by plain loads and stores: every
        thread's ``dest`` loads are in flight before its first add (fp32), then its stores.
        Race-free: a group's listed columns are distinct and groups own disjoint rows."""
        pieces = self.group // VEC
        per_thread = pieces * TILE_COLS // self.threads
        dtype = mDest.element_type
        rOld = cute.make_rmem_tensor((VEC, per_thread), dtype)
        with python_unrolled():
            for e in cutlass.range_constexpr(per_thread):
                col, r = self._piece(e, tidx)
                if col < cols_valid and r < rows_valid:
                    cute.autovec_copy(self._dest_piece(mDest, sFeat, buf, row0, r, col),
                                      rOld[None, e])
            for e in cutlass.range_constexpr(per_thread):
                col, r = self._piece(e, tidx)
                if col < cols_valid and r < rows_valid:
                    src = sT.iterator + cute.crd2idx((r, col, buf), sT.layout)
                    sPiece = cute.make_tensor(cute.make_ptr(
                        dtype, src.toint(), cute.AddressSpace.smem, assumed_align=16),
                        cute.make_layout(VEC))
                    total = rOld[None, e].load().to(Float32) + sPiece.load().to(Float32)
                    self._dest_piece(mDest, sFeat, buf, row0, r, col).store(total.to(dtype))

    def _piece(self, e, tidx):
        """(column, first row) of a thread's ``e``-th 16-byte piece of the transposed tile:
        lanes along a column's rows (one warp covers two 128-row columns, 512 bytes)."""
        pieces = self.group // VEC
        u = e * self.threads + tidx
        return u // pieces, u % pieces * VEC

    @staticmethod
    def _dest_piece(mDest, sFeat, buf, row0, r, col):
        """The 16 bytes of M-major ``dest`` at rows ``row0 + r`` .. ``+ VEC`` of the feature
        listed at column ``col`` (aligned: the op sends M % 8 == 0 and 16-byte columns)."""
        dst = mDest.iterator + cute.crd2idx((row0 + r, sFeat[col, buf]), mDest.layout)
        return cute.make_tensor(cute.make_ptr(mDest.element_type, dst.toint(),
                                              cute.AddressSpace.gmem, assumed_align=16),
                                cute.make_layout(VEC))

    @cute.jit
    def load_tile(self, mSrc, frag, row0, rows_valid, j0, cols_valid, tidx):
        """The (group, 64) source tile into ``frag``, every load in flight before any use.
        ``vec``: element ``v * VEC + i`` of a thread is (row ``(v * threads + tidx) % group``,
        position ``(v * threads + tidx) // group * VEC + i``): lanes along rows, a thread's
        vectors along one row's 128 bytes. Else element ``e`` is (``_element_by_position``):
        lanes along positions."""
        if cutlass.const_expr(self.vec):
            rVec = cute.make_tensor(frag.iterator, cute.make_layout((VEC, frag.shape[0] // VEC)))
            with python_unrolled():
                for v in cutlass.range_constexpr(frag.shape[0] // VEC):
                    r, c = self._vector_slot(v, tidx)
                    if r < rows_valid:
                        if c + VEC <= cols_valid:
                            row = cute.zipped_divide(mSrc[row0 + r, None], (VEC,))
                            cute.autovec_copy(row[None, (j0 + c) // VEC], rVec[None, v])
                        else:  # the list's last, partial vector
                            for i in cutlass.range_constexpr(VEC):
                                if c + i < cols_valid:
                                    rVec[i, v] = mSrc[row0 + r, j0 + c + i]
        else:
            with python_unrolled():
                for e in cutlass.range_constexpr(frag.shape[0]):
                    r, c = self._element_by_position(e, tidx)
                    if r < rows_valid and c < cols_valid:
                        frag[e] = mSrc[row0 + r, j0 + c]

    @cute.jit
    def store_tile(self, sT, frag, buf, tidx):
        """``frag`` (``load_tile``'s order) into buffer ``buf`` of the transposed tile. Entries
        past the valid rows and positions are stored too (never read)."""
        if cutlass.const_expr(self.vec):
            rVec = cute.make_tensor(frag.iterator, cute.make_layout((VEC, frag.shape[0] // VEC)))
            with python_unrolled():
                for v in cutlass.range_constexpr(frag.shape[0] // VEC):
                    r, c = self._vector_slot(v, tidx)
                    for i in cutlass.range_constexpr(VEC):
                        sT[r, c + i, buf] = rVec[i, v]
        else:
            with python_unrolled():
                for e in cutlass.range_constexpr(frag.shape[0]):
                    r, c = self._element_by_position(e, tidx)
                    sT[r, c, buf] = frag[e]

    def _vector_slot(self, v, tidx):
        """(row, first position) of a thread's ``v``-th 16-byte vector (``vec``)."""
        flat = v * self.threads + tidx
        return flat % self.group, flat // self.group * VEC
