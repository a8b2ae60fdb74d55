"""Block-sparse (BCSR) attention stages on the tensor cores: SDDMM, sparse row softmax, SpMM.

The three kernels of "Blocked Dynamic Sparse Attention" (the BCSR seed), with the matrices in
torch's ``sparse_bsr`` layout: G x G blocks, ``crow`` (M + 1 row pointers per batch entry),
``col`` (one block column per stored block), ``values`` (nnz, G, G) row-major, G in {16, 32,
64, 128}; a leading flattened batch (B x H) is the grid's y. All three run the same code on
the Ampere and Hopper paths (cp.async, ldmatrix, mma.sync m16n8k16, fp32 accumulation): the
issue allows mma.sync here, and G x G products are too small for a warpgroup's 64-row WGMMA
at G < 64.

* ``BsrSddmm``: one CTA per stored block ``e`` of row ``r = rows[e]`` and column
  ``c = col[e]``: Q rows [r G, r G + G) and K rows [c G, c G + G) by cp.async into swizzled
  smem, S = scale Q K^T by ldmatrix + mma.sync over D, staged in a padded G x (G + 8) smem
  tile and stored to ``values[e]`` in 16-byte vectors. Warps: min(4, G / 16), stacked along
  the block's rows. Shared memory: 2 x G x D x 2 + G x (G + 8) x 2 bytes (99 KiB at G = 128,
  D = 128).
* ``BsrSddmmChunks``: the same over chunks of four consecutive stored blocks per CTA, two
  smem stages of (Q, K) rows, a stage's Q rows kept while the chunk stays in one block row
  (Q read about once per chunk, not once per block); ``ops.bsr.SDDMM_CHUNKED`` picks the
  op's kernel by ``perf/bsr.py``'s measurement of both.
* ``BsrSpmm``: one CTA per block row (rows taken in ``order``: index order, or longest first
  with ``ops.bsr.SPMM_LONGEST_FIRST``, the seed's static balancing by row weight),
  O (G x D) += P(e) V(col[e]) over the row's blocks, two smem stages (P(e + 1) and its V
  rows stream in while block e multiplies). Warps: min(4, G / 16) along the rows. Shared
  memory: 2 stages x (G x G + G x D) x 2 bytes (128 KiB at G = 128, D = 128).
* ``BsrSoftmax``: one warp per scalar row, four to a CTA (N / 4 CTAs): an online max/sum
  pass over the row's stored blocks in 16-byte vectors, a shuffle reduction, then the
  normalised write pass (the second read hits the lines the first just fetched: the kernel
  is bandwidth bound on one read and one write of the stored values). No shared memory.

Stored entries are trusted to lie in range only in debug mode (the op checks them there);
otherwise rows and columns are clamped into the matrix, so a bad layout gives wrong numbers,
never an out-of-bounds access.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import warp

from .common.constants import LOG2E
from .common.reductions import lane_allreduce
from .common.sm80 import g2s_copy, smem_gemm, smem_operand_atom

#: block sizes (G) the kernels take
BLOCKS = (16, 32, 64, 128)
#: elements per 16-byte vector of a 16-bit type
VEC = 8


def _warps(block: int) -> int:
    """Warps of the MMA kernels: one per 16 rows of the block, at most four."""
    return min(4, block // 16)


def _check(block: int, head_dim: int | None = None) -> None:
    if block not in BLOCKS:
        raise ValueError(f"block must be one of {BLOCKS}, got {block}")
    if head_dim is not None and head_dim not in (64, 128):
        raise ValueError(f"head_dim must be 64 or 128, got {head_dim}")


def _tiled_mma(dtype, warps: int) -> cute.TiledMma:
    """mma.sync m16n8k16 with fp32 accumulators, ``warps`` warps stacked along M."""
    return cute.make_tiled_mma(warp.MmaF16BF16Op(dtype, Float32, (16, 8, 16)), (warps, 1, 1),
                               permutation_mnk=(16 * warps, 16, 16))


def _ldmatrix(transpose: bool, dtype):
    return cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose, 4), dtype)


@cute.jit
def _block_row(mOrder, mCrow, nnz, batch, slot):
    """(row, first, end): the block row a row-ordered CTA takes (slot ``slot`` of the host's
    order) and its stored blocks [first, end), all clamped into the matrix (a bad layout
    gives wrong numbers, never an out-of-bounds access)."""
    row = cutlass.min(cutlass.max(mOrder[batch, slot], 0), mOrder.shape[1] - 1)
    first = cutlass.min(cutlass.max(mCrow[batch, row], 0), nnz)
    end = cutlass.min(cutlass.max(mCrow[batch, row + 1], first), nnz)
    return row, first, end


class _MmaStage:
    """The MMA stages' configuration: block G, head dim D, min(4, G / 16) warps."""

    def __init__(self, block: int, head_dim: int):
        _check(block, head_dim)
        self.block, self.head_dim = block, head_dim
        self.warps = _warps(block)
        self.threads = 32 * self.warps

    def scores_smem_layout(self):
        """The (G, G) staging tile of one block's scores: rows padded by 8 elements so the
        MMA fragments' 4-byte writes (8 rows x 4 lanes per store) hit 32 distinct banks and
        each row stays 16-byte aligned for the vector reads."""
        return cute.make_layout((self.block, self.block), stride=(self.block + 8, 1))

    def scores_store(self, dtype):
        """16-byte vector copy of the (G, G) scores tile: G / 8 threads per row."""
        per_row = self.block // VEC
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=128)
        return cute.make_tiled_copy_tv(
            atom, cute.make_layout((self.threads // per_row, per_row), stride=(per_row, 1)),
            cute.make_layout((1, VEC)))

    @cute.jit
    def scores_smem(self, dtype: cutlass.Constexpr, stages: cutlass.Constexpr):
        """The SDDMMs' shared memory: ``stages`` (Q, K) tile pairs, each (G, D) swizzled for
        cp.async and ldmatrix, and the padded scores tile; returns (sQ, sK, sS), sQ and sK
        (G, D, stages)."""
        G, D = self.block, self.head_dim
        layout = cute.tile_to_shape(smem_operand_atom("k", D, 2), (G, D, stages), (0, 1, 2))
        sS_layout = self.scores_smem_layout()

        @cute.struct
        class SharedStorage:
            sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(layout)], 1024]
            sS: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sS_layout)], 128]

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        return (cute.make_tensor(storage.sQ.data_ptr(), layout),
                cute.make_tensor(storage.sK.data_ptr(), layout),
                cute.make_tensor(storage.sS.data_ptr(), sS_layout))

    def block_scores(self, tiled_mma, store, sQ, sK, sS, gS, scale, tidx):
        """One stored block: S = Q K^T from the (G, D) tiles ``sQ`` / ``sK`` (ldmatrix +
        mma.sync over D, fp32), then ``gS`` = scale S through ``sS`` (``_store_scores``)."""
        dtype = sQ.element_type
        thr_mma = tiled_mma.get_slice(tidx)
        tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))
        tSrK = thr_mma.make_fragment_B(thr_mma.partition_B(sK))
        acc = cute.make_rmem_tensor(tiled_mma.partition_shape_C((self.block, self.block)),
                                    Float32)
        acc.fill(0.0)
        lds_q = cute.make_tiled_copy_A(_ldmatrix(False, dtype), tiled_mma)
        lds_k = cute.make_tiled_copy_B(_ldmatrix(False, dtype), tiled_mma)
        thr_q, thr_k = lds_q.get_slice(tidx), lds_k.get_slice(tidx)
        smem_gemm(tiled_mma, acc, lds_q, thr_q.partition_S(sQ), thr_q.retile(tSrQ), tSrQ,
                  lds_k, thr_k.partition_S(sK), thr_k.retile(tSrK), tSrK)
        self._store_scores(tiled_mma, store, acc, scale, sS, gS, tidx)

    @cute.jit
    def _store_scores(self, tiled_mma, store, acc, scale, sS, gS, tidx):
        """``gS`` (one stored block, compact G x G) = scale * acc, through ``sS``: fragments
        to smem, a barrier, then coalesced 16-byte stores (the fragments' own 4-byte stores
        would cost G / 2 store instructions per row). The caller syncs before ``sS`` is
        written again."""
        rS = cute.make_rmem_tensor_like(acc, gS.element_type)
        rS.store((acc.load() * scale).to(gS.element_type))
        cute.autovec_copy(rS, tiled_mma.get_slice(tidx).partition_C(sS))
        cute.arch.sync_threads()
        thr = store.get_slice(tidx)
        tSsS = thr.partition_S(sS)
        tSrS = cute.make_rmem_tensor_like(tSsS)
        cute.autovec_copy(tSsS, tSrS)
        cute.copy(store, tSrS, thr.partition_D(gS))


class BsrSddmm(_MmaStage):
    """``values[b, e] = scale * Q[b, rows[b, e]-th G rows] K[b, col[b, e]-th G rows]^T``.

    Tensors: ``mQ`` (Bt, N, D), ``mK`` (Bt, N_kv, D) (unit-stride D, 16-byte rows),
    ``mRows`` / ``mCols`` (Bt, nnz) int32 (each stored block's block row and column),
    ``mOut`` (Bt, nnz, G, G) compact, Q's dtype. Roles, tiles and shared memory: module
    docstring.
    """

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mRows: cute.Tensor,
                 mCols: cute.Tensor, mOut: cute.Tensor, scale: Float32, stream):
        tiled_mma = _tiled_mma(mQ.element_type, self.warps)
        copy = g2s_copy(mQ.element_type, "k", self.block, self.head_dim, self.threads)
        store = self.scores_store(mQ.element_type)
        self.kernel(mQ, mK, mRows, mCols, mOut, scale, tiled_mma, copy, store).launch(
            grid=(mRows.shape[1], mRows.shape[0], 1), block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mK: cute.Tensor, mRows: cute.Tensor, mCols: cute.Tensor,
               mOut: cute.Tensor, scale: Float32, tiled_mma: cute.TiledMma,
               copy: cute.TiledCopy, store: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        entry, batch, _ = cute.arch.block_idx()
        G, D, dtype = self.block, self.head_dim, mQ.element_type
        # clamped: a bad layout reads wrong rows, never outside the operands
        row = cutlass.min(cutlass.max(mRows[batch, entry], 0), mQ.shape[1] // G - 1)
        col = cutlass.min(cutlass.max(mCols[batch, entry], 0), mK.shape[1] // G - 1)

        sQ, sK, sS = self.scores_smem(dtype, 1)
        sQ, sK = sQ[None, None, 0], sK[None, None, 0]
        gQ = cute.local_tile(mQ[batch, None, None], (G, D), (row, 0))
        gK = cute.local_tile(mK[batch, None, None], (G, D), (col, 0))
        thr_copy = copy.get_slice(tidx)
        cute.copy(copy, thr_copy.partition_S(gQ), thr_copy.partition_D(sQ))
        cute.copy(copy, thr_copy.partition_S(gK), thr_copy.partition_D(sK))
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(0)
        cute.arch.sync_threads()
        self.block_scores(tiled_mma, store, sQ, sK, sS, mOut[batch, entry, None, None], scale,
                          tidx)


class BsrSddmmChunks(_MmaStage):
    """``BsrSddmm`` over chunks: CTA x takes the ``chunk`` consecutive stored blocks
    [x C, x C + C) (C = ``chunk``; blocks are stored row by row, so a chunk mostly lies in one
    block row) and streams them through two smem stages, each holding one block's Q and K
    rows: block j + 1's loads land while block j multiplies, and a stage keeps its Q rows when
    block j + 2 has the same block row, so Q is read about once per chunk instead of once per
    block. Each block's row comes from a binary search of ``mCrow`` (``steps`` halvings, at
    least log2(M + 1)), so the host builds no per-block row list. Scores leave through the
    padded smem tile (``_store_scores``). Shared memory: 2 stages x (G x D + G x D) x 2 bytes
    + G x (G + 8) x 2 bytes (163 KiB at G = 128, D = 128; 73 KiB at G = 64).

    Tensors: ``BsrSddmm``'s, with ``mCrow`` (Bt, M + 1) int32 in place of ``mRows``.
    """

    stages = 2
    chunk = 4

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mCrow: cute.Tensor,
                 mCols: cute.Tensor, mOut: cute.Tensor, scale: Float32, steps: Int32, stream):
        tiled_mma = _tiled_mma(mQ.element_type, self.warps)
        copy = g2s_copy(mQ.element_type, "k", self.block, self.head_dim, self.threads)
        store = self.scores_store(mQ.element_type)
        chunks = (mCols.shape[1] + self.chunk - 1) // self.chunk
        self.kernel(mQ, mK, mCrow, mCols, mOut, scale, steps, tiled_mma, copy, store).launch(
            grid=(chunks, mCols.shape[0], 1), block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mK: cute.Tensor, mCrow: cute.Tensor, mCols: cute.Tensor,
               mOut: cute.Tensor, scale: Float32, steps: Int32, tiled_mma: cute.TiledMma,
               copy: cute.TiledCopy, store: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        chunk_id, batch, _ = cute.arch.block_idx()
        dtype = mQ.element_type
        first = chunk_id * self.chunk
        end = cutlass.min(first + self.chunk, mCols.shape[1])

        sQ, sK, sS = self.scores_smem(dtype, self.stages)
        thr_copy = copy.get_slice(tidx)

        self._load(copy, thr_copy, mQ, mK, mCrow, mCols, sQ, sK, batch, first, first, steps)
        cute.arch.cp_async_commit_group()
        for e in cutlass.range(first, end, unroll=1):
            stage = (e - first) % self.stages
            if e + 1 < end:
                self._load(copy, thr_copy, mQ, mK, mCrow, mCols, sQ, sK, batch, e + 1, first,
                           steps)
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(1)  # block e's stage has landed
            cute.arch.sync_threads()
            self.block_scores(tiled_mma, store, sQ[None, None, stage], sK[None, None, stage],
                              sS, mOut[batch, e, None, None], scale, tidx)
            cute.arch.sync_threads()  # the stage is refilled two blocks on, sS rewritten next
        cute.arch.cp_async_wait_group(0)

    @cute.jit
    def _load(self, copy, thr_copy, mQ, mK, mCrow, mCols, sQ, sK, batch, e, first, steps):
        """cp.async stored block ``e``'s K rows, and its Q rows unless its stage still holds
        them (block e - 2 of this chunk in the same block row), into stage (e - first) % 2."""
        G, D = self.block, self.head_dim
        stage = (e - first) % self.stages
        row = _row_of_entry(mCrow, batch, e, steps)
        # clamped: a bad layout reads wrong rows, never outside the operands
        q_row = cutlass.min(row, mQ.shape[1] // G - 1)
        col = cutlass.min(cutlass.max(mCols[batch, e], 0), mK.shape[1] // G - 1)
        # the stage holds block e - 2's Q rows: this block's when its row began at or before it
        fresh = (e < first + self.stages) | (mCrow[batch, row] > e - self.stages)
        if fresh:
            gQ = cute.local_tile(mQ[batch, None, None], (G, D), (q_row, 0))
            cute.copy(copy, thr_copy.partition_S(gQ), thr_copy.partition_D(sQ[None, None, stage]))
        gK = cute.local_tile(mK[batch, None, None], (G, D), (col, 0))
        cute.copy(copy, thr_copy.partition_S(gK), thr_copy.partition_D(sK[None, None, stage]))


@cute.jit
def _row_of_entry(mCrow, batch, e, steps):
    """The block row r holding stored block ``e``: the last r in [0, M) with crow[r] <= e
    (empty rows before it skipped), by ``steps`` halvings (enough when 2^steps >= M). A bad
    ``mCrow`` gives some row in [0, M), never an index outside it."""
    lo, hi = Int32(0), Int32(mCrow.shape[1] - 1)
    for _ in cutlass.range(steps, unroll=1):
        mid = (lo + hi) // 2
        if mCrow[batch, mid] <= e:
            lo = mid
        else:
            hi = mid
    return lo


class BsrSpmm(_MmaStage):
    """``out[b, r-th G rows] = sum over the stored blocks e of block row r: values[b, e]
    V[b, col[b, e]-th G rows]``, block rows taken in ``mOrder`` (a permutation of 0..M-1 per
    batch entry; the host's longest-first order).

    Tensors: ``mP`` (Bt, nnz, G, G) compact, ``mCrow`` (Bt, M + 1) and ``mCols`` (Bt, nnz)
    int32, ``mOrder`` (Bt, M) int32, ``mV`` (Bt, N_kv, D) (unit-stride D, 16-byte rows),
    ``mOut`` (Bt, M G, D) V's dtype. Roles, stages and shared memory: module docstring.
    """

    stages = 2

    @cute.jit
    def __call__(self, mP: cute.Tensor, mCrow: cute.Tensor, mCols: cute.Tensor,
                 mOrder: cute.Tensor, mV: cute.Tensor, mOut: cute.Tensor, stream):
        dtype = mV.element_type
        tiled_mma = _tiled_mma(dtype, self.warps)
        copy_p = g2s_copy(dtype, "k", self.block, self.block, self.threads)
        copy_v = g2s_copy(dtype, "k", self.block, self.head_dim, self.threads)
        self.kernel(mP, mCrow, mCols, mOrder, mV, mOut, tiled_mma, copy_p, copy_v).launch(
            grid=(mOrder.shape[1], mOrder.shape[0], 1), block=(self.threads, 1, 1),
            stream=stream)

    @cute.kernel
    def kernel(self, mP: cute.Tensor, mCrow: cute.Tensor, mCols: cute.Tensor,
               mOrder: cute.Tensor, mV: cute.Tensor, mOut: cute.Tensor,
               tiled_mma: cute.TiledMma, copy_p: cute.TiledCopy, copy_v: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        slot, batch, _ = cute.arch.block_idx()
        G, D, dtype = self.block, self.head_dim, mV.element_type
        n_cols = mV.shape[1] // G
        row, first, end = _block_row(mOrder, mCrow, mCols.shape[1], batch, slot)

        p_layout = cute.tile_to_shape(smem_operand_atom("k", G, 2), (G, G, self.stages),
                                      (0, 1, 2))
        v_layout = cute.tile_to_shape(smem_operand_atom("k", D, 2), (G, D, self.stages),
                                      (0, 1, 2))

        @cute.struct
        class SharedStorage:
            sP: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(p_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(v_layout)], 1024]

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        sP = cute.make_tensor(storage.sP.data_ptr(), p_layout)
        sV = cute.make_tensor(storage.sV.data_ptr(), v_layout)
        thr_p, thr_v = copy_p.get_slice(tidx), copy_v.get_slice(tidx)

        thr_mma = tiled_mma.get_slice(tidx)
        acc = cute.make_rmem_tensor(tiled_mma.partition_shape_C((G, D)), Float32)
        acc.fill(0.0)
        lds_p = cute.make_tiled_copy_A(_ldmatrix(False, dtype), tiled_mma)
        lds_v = cute.make_tiled_copy_B(_ldmatrix(True, dtype), tiled_mma)
        thr_lp, thr_lv = lds_p.get_slice(tidx), lds_v.get_slice(tidx)

        if first < end:
            self._load(copy_p, thr_p, copy_v, thr_v, mP, mCols, mV, sP, sV, batch, first, 0,
                       n_cols)
        cute.arch.cp_async_commit_group()
        for e in cutlass.range(first, end, unroll=1):
            stage = (e - first) % self.stages
            if e + 1 < end:
                self._load(copy_p, thr_p, copy_v, thr_v, mP, mCols, mV, sP, sV, batch, e + 1,
                           (e + 1 - first) % self.stages, n_cols)
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(1)  # block e's stage has landed
            cute.arch.sync_threads()
            sPe = sP[None, None, stage]
            # V(e) as the (D, G) B operand: its keys are the MMA's K
            sVt = cute.composition(sV[None, None, stage], cute.make_layout((D, G), stride=(G, 1)))
            tOrP = thr_mma.make_fragment_A(thr_mma.partition_A(sPe))
            tOrV = thr_mma.make_fragment_B(thr_mma.partition_B(sVt))
            smem_gemm(tiled_mma, acc, lds_p, thr_lp.partition_S(sPe), thr_lp.retile(tOrP), tOrP,
                       lds_v, thr_lv.partition_S(sVt), thr_lv.retile(tOrV), tOrV)
            cute.arch.sync_threads()  # the stage is refilled two blocks on
        cute.arch.cp_async_wait_group(0)

        rO = cute.make_rmem_tensor_like(acc, dtype)
        rO.store(acc.load().to(dtype))
        gO = cute.local_tile(mOut[batch, None, None], (G, D), (row, 0))
        cute.autovec_copy(rO, thr_mma.partition_C(gO))

    @cute.jit
    def _load(self, copy_p, thr_p, copy_v, thr_v, mP, mCols, mV, sP, sV, batch, e, stage,
              n_cols):
        """cp.async stored block ``e`` and the V rows of its column into ``stage``."""
        col = cutlass.min(cutlass.max(mCols[batch, e], 0), n_cols - 1)
        gV = cute.local_tile(mV[batch, None, None], (self.block, self.head_dim), (col, 0))
        cute.copy(copy_p, thr_p.partition_S(mP[batch, e, None, None]),
                  thr_p.partition_D(sP[None, None, stage]))
        cute.copy(copy_v, thr_v.partition_S(gV), thr_v.partition_D(sV[None, None, stage]))


class BsrSoftmax:
    """``out[b, e, i, :]`` = the softmax of scalar row i of block row r over the row's stored
    blocks only (``values[b, crow[r]:crow[r + 1], i, :]``), computed in fp32. A row with no
    stored block writes nothing.

    One warp per scalar row: CTA x of four warps takes scalar rows 4x .. 4x + 3 (all in one
    block row, G being a multiple of 4), so the grid has N / 4 CTAs and the hardware scheduler
    balances uneven block rows over many waves (no host sort: with one CTA per block row the
    longest-first order mattered; at this grain it cost more than it saved). Per row: an online
    max/sum pass over the stored blocks in 16-byte vectors (loads unrolled so several are in
    flight per lane), a shuffle reduction, then the normalised write pass, whose reads hit the
    cache lines the first pass just brought in. No shared memory.

    Tensors: ``mVals`` / ``mOut`` (Bt, nnz, G, G) compact 16-bit, ``mCrow`` (Bt, M + 1) int32.
    """

    warps = 4

    def __init__(self, block: int):
        _check(block)
        self.block = block
        self.threads = 32 * self.warps

    @cute.jit
    def __call__(self, mVals: cute.Tensor, mCrow: cute.Tensor, mOut: cute.Tensor, stream):
        rows = (mCrow.shape[1] - 1) * self.block
        self.kernel(mVals, mCrow, mOut).launch(
            grid=(rows // self.warps, mCrow.shape[0], 1), block=(self.threads, 1, 1),
            stream=stream)

    @cute.kernel
    def kernel(self, mVals: cute.Tensor, mCrow: cute.Tensor, mOut: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        cta, batch, _ = cute.arch.block_idx()
        G = self.block
        lane, warp_id = tidx % 32, tidx // 32
        scalar_row = cta * self.warps + warp_id
        row, i = scalar_row // G, scalar_row % G
        nnz = mVals.shape[1]
        first = cutlass.min(cutlass.max(mCrow[batch, row], 0), nnz)
        end = cutlass.min(cutlass.max(mCrow[batch, row + 1], first), nnz)
        per_block = G // VEC  # 16-byte vectors per block row
        vectors = (end - first) * per_block
        run_max, run_sum = Float32(-Float32.inf), Float32(0.0)
        for v in cutlass.range(lane, vectors, 32, unroll=4):
            x = self._vector(mVals, batch, first + v // per_block, i, v % per_block)
            new_max = cutlass.max(run_max, x.reduce(cute.ReductionOp.MAX, -Float32.inf, 0))
            # while every value so far is -inf (masked), exponentiate against 0, not -inf:
            # -inf - -inf is NaN, and one NaN would spread to the whole row
            ref = Float32(0.0)
            if new_max > -Float32.inf:
                ref = new_max
            run_sum = run_sum * cute.math.exp2((run_max - ref) * LOG2E, fastmath=True) \
                + cute.math.exp2((x - ref) * LOG2E, fastmath=True).reduce(
                    cute.ReductionOp.ADD, Float32(0.0), 0)
            run_max = new_max
        row_max = lane_allreduce(run_max, True)
        # this lane's sum rescaled to the row max (a lane that saw nothing adds 0)
        row_sum = Float32(0.0)
        if run_max > -Float32.inf:
            row_sum = run_sum * cute.math.exp2((run_max - row_max) * LOG2E, fastmath=True)
        row_sum = lane_allreduce(row_sum, False)
        inv = Float32(1.0) / row_sum
        for v in cutlass.range(lane, vectors, 32, unroll=4):
            e, chunk = first + v // per_block, v % per_block
            x = self._vector(mVals, batch, e, i, chunk)
            y = cute.make_rmem_tensor((VEC,), mOut.element_type)
            y.store((cute.math.exp2((x - row_max) * LOG2E, fastmath=True) * inv).to(
                mOut.element_type))
            dst = cute.zipped_divide(mOut[batch, e, i, None], (VEC,))
            cute.autovec_copy(y, dst[None, chunk])

    @cute.jit
    def _vector(self, mVals, batch, e, i, chunk):
        """Elements ``chunk * 8 ...`` of row ``i`` of stored block ``e``, as fp32."""
        src = cute.zipped_divide(mVals[batch, e, i, None], (VEC,))
        frag = cute.make_rmem_tensor((VEC,), mVals.element_type)
        cute.autovec_copy(src[None, chunk], frag)
        return frag.load().to(Float32)
