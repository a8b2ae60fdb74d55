"""The cache writeback as its own kernel (issue 16): ``dest[g rows, idx[g, j]] += src[g rows,
j]`` for the positions j below group g's count.

``ScatterAdd`` walks (group, 64-position chunk) tiles, persistent over a grid of
``num_ctas`` CTAs of 128 threads (the op passes the tile count, or ``num_sms`` to keep the
writeback on a few SMs next to a GEMM). Per tile the chunk's feature ids go to smem, then:

* **bulk** (Hopper, M-major ``dest`` with 16-byte aligned columns): the (group, 64) source
  tile is transposed into smem so each listed column's ``group`` rows are contiguous, and
  one thread per column issues ``cp.reduce.async.bulk .add`` of those rows into ``dest`` (the
  TMA unit adds them in the L2: no register round trip, atomic per element; Chipmunk Part
  III measured it 3x faster than in-register reductions);
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
from .common.warp_ptx import bulk_reduce_add_s2g
from .mlp_delta import CACHE_BATCH, group_count

#: list positions per tile
TILE_COLS = 64
#: padding of the transposed tile's columns (elements): 16-byte aligned, fewer bank conflicts
COL_PAD = 8


class ScatterAdd:
    """``mDest[g rows, feat] += mSrc[g rows, j]`` (module docstring).

    Warps: 4, all loading and adding (elements) or transposing and issuing bulk reductions
    (bulk: one thread per listed column). Schedule: persistent, tile ``t`` = (group ``t //
    chunks``, chunk ``t % chunks``), CTAs striding by the grid. Shared memory: 64 feature ids
    + (bulk) the transposed (group, 64) tile, 64 x (group + 8) x 2 bytes (17 KiB at group 128).

    Tensors: ``mSrc`` (M, L) (unit column stride), ``mDest`` (M, F) row-major, or M-major with
    ``m_major``, ``mIdx`` (G, L) / ``mCounts`` (G,) int32.
    """

    threads = 128

    def __init__(self, group: int, m_major: bool, bulk: bool):
        if bulk and not m_major:
            raise ValueError("the bulk reduction needs an M-major dest (a listed column's rows "
                             "contiguous)")
        self.group, self.m_major, self.bulk = group, m_major, bulk

    @cute.jit
    def __call__(self, mSrc: cute.Tensor, mDest: cute.Tensor, mIdx: cute.Tensor,
                 mCounts: cute.Tensor, num_ctas: Int32, stream):
        self.kernel(mSrc, mDest, mIdx, mCounts).launch(
            grid=(num_ctas, 1, 1), block=(self.threads, 1, 1), stream=stream)

    @cute.jit
    def smem(self, dtype: cutlass.Constexpr):
        col_stride = self.group + COL_PAD
        tile_elems = col_stride * TILE_COLS if self.bulk else 8

        @cute.struct
        class SharedStorage:
            tile: cute.struct.Align[cute.struct.MemRange[dtype, tile_elems], 128]
            feat: cute.struct.Align[cute.struct.MemRange[Int32, TILE_COLS], 16]

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        sT = cute.make_tensor(storage.tile.data_ptr(),
                              cute.make_layout((self.group, TILE_COLS), stride=(1, col_stride)))
        return sT, cute.make_tensor(storage.feat.data_ptr(), cute.make_layout(TILE_COLS))

    @cute.kernel
    def kernel(self, mSrc: cute.Tensor, mDest: cute.Tensor, mIdx: cute.Tensor,
               mCounts: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        sT, sFeat = self.smem(mSrc.element_type)
        width = mIdx.shape[1]
        chunks = cute.ceil_div(width, TILE_COLS)
        for tile in cutlass.range(bidx, mIdx.shape[0] * chunks, gdim, unroll=1):
            g, j0 = tile // chunks, (tile % chunks) * TILE_COLS
            count = group_count(mCounts, g, width)
            row0 = g * self.group
            if j0 < count and row0 < mDest.shape[0]:
                if tidx < TILE_COLS:
                    pos = cutlass.min(j0 + tidx, count - 1)
                    sFeat[tidx] = cutlass.min(cutlass.max(mIdx[g, pos], 0), mDest.shape[1] - 1)
                cute.arch.sync_threads()
                rows_valid = cutlass.min(mDest.shape[0] - row0, self.group)
                if cutlass.const_expr(self.bulk):
                    self.bulk_tile(mSrc, mDest, sT, sFeat, row0, rows_valid, j0, count - j0,
                                   tidx)
                else:
                    self.element_tile(mSrc, mDest, sFeat, row0, rows_valid, j0, count - j0,
                                      tidx)
                cute.arch.sync_threads()  # sFeat (and sT) are rewritten by the next tile

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
                        old[u] = Float32(mDest[row0 + r, sFeat[c]])
                for u in cutlass.range_constexpr(U):
                    r, c = self._element(b * U + u, tidx)
                    if r < rows_valid and c < cols_valid:
                        mDest[row0 + r, sFeat[c]] = (old[u] + add[u]).to(mDest.element_type)

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
    def bulk_tile(self, mSrc, mDest, sT, sFeat, row0, rows_valid, j0, cols_valid, tidx):
        """Transpose the tile into ``sT`` (lanes along positions: coalesced source reads),
        then one bulk reduction of ``rows_valid`` rows per listed column."""
        per_thread = self.group * TILE_COLS // self.threads
        vals = cute.make_rmem_tensor((per_thread,), mSrc.element_type)
        with python_unrolled():
            for e in cutlass.range_constexpr(per_thread):  # every load in flight, then stores
                r, c = self._element_by_position(e, tidx)
                if r < rows_valid and c < cols_valid:
                    vals[e] = mSrc[row0 + r, j0 + c]
            for e in cutlass.range_constexpr(per_thread):
                r, c = self._element_by_position(e, tidx)
                if r < rows_valid and c < cols_valid:
                    sT[r, c] = vals[e]
        # the bulk copies read sT through the async proxy
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()
        if tidx < cols_valid and tidx < TILE_COLS:
            suffix = "bf16" if mDest.element_type == cutlass.BFloat16 else "f16"
            dst = mDest.iterator + cute.crd2idx((row0, sFeat[tidx]), mDest.layout)
            src = sT.iterator + cute.crd2idx((0, tidx), sT.layout)
            bulk_reduce_add_s2g(dst.toint(), src.toint(), rows_valid * 2, suffix)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)  # sT is rewritten next tile
