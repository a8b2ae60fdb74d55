"""Ampere-path flash attention forward (FlashAttention-2 structure): cp.async, ldmatrix,
mma.sync m16n8k16, online softmax in registers.

Tensors: q (B, H, S_q, D), k/v (B, H_kv, S_kv, D), o like q, lse (B, H, S_q) fp32; any strides
with a unit-stride head dim. GQA: query head h reads kv head h // (H / H_kv). Causal masks are
bottom-right aligned (ops/attention.py). Column-sparse attention (``gather``): query group g of
head h attends to the key rows ``indices[b, h, g, :count]`` only (``AttentionSm80``).

"""

from __future__ import annotations

from typing import Any, NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import warp

from ..common.constants import BYTES_PER_VEC, LOG2E
from ..common.grid_order import ordered_tile
from ..common.sm80 import g2s_copy, in_bounds_predicate, smem_gemm, smem_operand_atom
from .block_info import (
    BlockListKeyBlocks,
    PackedBlockLists,
    PackedKeyRows,
    SplitKeyBlocks,
    gather_key_tile,
    key_block_policy,
    key_block_tile,
    split_of_batch,
)
from .column_sums import (
    previous_step_factors,
    reduce_scatter_rows,
    tile_column,
    weighted_column_sums,
)
from .online_softmax import (
    acc_as_a_operand,
    acc_mn_view,
    mask_and_softmax,
    softmax_finish,
    store_lse,
)


class GatherRows(NamedTuple):
    """One thread's gather state in a column-sparse tile (``AttentionSm80._gather_setup``)."""

    indices: Any  # the query group's index list (L,)
    count: Any  # its count, clamped into [0, L]
    coords: Any  # this thread's (row, column) coordinates of its vectors in a (BN, D) tile
    rows: Any  # per owned row: the key row it copies for the pending chunk, -1 past the count
    s_kv: Any


class AttentionSm80:
    """One CTA per (``block_m``-query block, head, batch); ``warps`` warps (default 4 at D = 64,
    8 at D = 128, at most ``block_m / 16``; plain attention runs 4 at both:
    tuning/attention.py ``ampere_config``),
    each owning ``block_m / warps`` rows of the query block in 16-row slices.

    Warp roles: all warps load (cp.async) and compute (mma.sync); S = Q K^T and O += P V both
    partitioned by one tiled mma (warps x 1).
    Pipeline: Q once; K and V one stage each — V(n) loads during S(n) = Q K(n)^T, the next
    visit's K during the softmax and P V(n) (FlashAttention-2's schedule). The key blocks and
    their order come from the key-block iterator (block_info.py: dense or causal, last to
    first, so the masked ones come first).
    Shared memory: (128 + 2 x 64) x D x 2 B = 32 KiB (D = 64) / 64 KiB (D = 128); the O tile
    reuses Q's bytes.
    Column-sum variant (``colsum``, non-causal): after each key block's softmax every warp sums
    exp(scale s - prev_lse) over its rows (column_sums.py), per query group its rows belong to
    (a 128-row block spans at most two ``group``-row groups); the warps' partials meet in smem
    (2 x warps x 64 fp32) and are added to the zero-initialised output with one atomic add per
    (group, key). At most two blocks add to one element (group <= 256), and fp32 addition of
    two terms onto zero is commutative, so the result does not depend on their order.

    Column-sparse variant (``gather``; non-causal, no column sums; "tile packing"): query
    group g (``group`` query rows) of (b, h) attends to the key rows ``indices[b, h, g,
    :count]`` only: any order, a duplicate counted twice, the softmax over that set, count 0
    giving o = 0 and lse = -inf.

    * Tiles: a query tile lies inside one group (``block_m`` divides ``group``): 128 rows for
      groups that are multiples of 128, else 64 (groups 64 and 192; a 192-row group is three
      64-row CTAs); one warp per 16 rows (4 or 8 warps), so the per-thread fragments are at
      most the dense kernel's. A 192-row tile (12 warps; block_n 96 at D = 64, 48 at D = 128,
      so the copy's 48 / 24 rows per pass tile it) gathers a group's keys once instead of three
      times and builds without spills, but at D = 128 it sits at the 168-register ceiling of
      384 threads: an option to measure, not the default.
    * Key blocks: ``block_info.PackedKeyRows``: chunk n is the list's packed positions n BN ..
      n BN + BN - 1, visited in the dense order over a count-long sequence (last chunk first);
      only the last, partial chunk masks (positions >= count).
    * The gather: chunk n's K and V rows land in the same swizzled tiles the dense kernel
      fills, through the dense cp.async partition (a thread owns one 16-byte column vector of
      every (threads / (D / 8))-th row of the tile). Per owned row the thread reads the row's
      index (once per chunk, for K; V reuses the register), clamps it into [0, S_kv) and copies
      its vector of that key row: as many cp.async as the dense kernel. Positions >= count are
      zero-filled (cp.async src-size 0): nothing is read, and zero V rows add nothing to P V
      even if a mask missed them. The list is read at min(position, count - 1) with count
      clamped into [0, L], so no index read leaves it. A chunk's indices are read right after
      the previous chunk's V is issued, so their latency hides behind S = Q K^T (the first
      chunk's is exposed).
    * Shared memory: (block_m + 2 x 64) x D x 2 B: 24 / 48 KiB (64 rows, D = 64 / 128), 32 /
      64 KiB (128 rows).
    * Block entries (``gather_entry_keys`` > 1) with an element ``mask``: block-sparse
      attention's packed small blocks, partial ones first; the key-block policy is
      ``block_info.PackedBlockLists`` (as the Hopper kernel's), reading each group's full
      positions from ``mFullCounts`` and the document ids from ``mDocIds``.
    """

    def __init__(self, head_dim: int, causal: bool = False, block_m: int | None = None,
                 block_n: int = 64, warps: int | None = None, colsum: bool = False,
                 group: int = 192, gather: bool = False, accumulate: bool = False,
                 block_sparse: bool = False, mask=None, split_kv: bool = False,
                 gather_entry_keys: int = 1, tile_order: bool = False):
        self.head_dim, self.causal = head_dim, causal
        # tile_order (gather): CTAs run the tiles in the order ``mTileOrder`` gives (the
        # op's longest key lists first), as AttentionSm90's
        if tile_order and not gather:
            raise ValueError("tile_order applies to the gather (column-sparse) variant")
        self.tile_order = tile_order
        # gather_entry_keys E > 1: the gather list names blocks of E consecutive key rows
        # (packed small blocks), position p being row E * list[p // E] + p % E
        if gather_entry_keys < 1 or gather_entry_keys & (gather_entry_keys - 1):
            raise ValueError(f"gather_entry_keys must be a power of two >= 1, got "
                             f"{gather_entry_keys}")
        if gather_entry_keys != 1 and not gather:
            raise ValueError("gather_entry_keys applies to the gather variant (gather=True)")
        self.entry_keys = gather_entry_keys
        # accumulate: out += out_scale * O, read-modify-written by the CTA that owns the tile
        # (each output element has exactly one writer, so nothing races)
        if accumulate and colsum:
            raise ValueError("accumulate does not combine with the column-sum variant")
        self.accumulate = accumulate
        if colsum and causal:
            raise ValueError("the column-sum variant is non-causal")
        if gather and causal:
            raise ValueError("the column-sparse (gather) variant is non-causal")
        if gather and colsum:
            raise ValueError("the column-sparse (gather) variant has no column sums")
        if block_m is None:
            block_m = 64 if gather and group % 128 else 128
        if colsum and (group % 16 or not block_m <= 2 * group):
            raise ValueError(f"group must be a multiple of 16 of at least block_m / 2, got "
                             f"{group}")
        self.colsum, self.gather, self.group = colsum, gather, group
        self.block_m, self.block_n = block_m, block_n
        # block_sparse: FlexAttention-style block lists of 128 x 128 blocks; the query tile is
        # the block (128 rows), each listed key block two 64-key tiles (block_info.py)
        self.block_sparse = block_sparse
        if block_sparse:
            if causal or colsum or gather or accumulate:
                raise ValueError("the block-sparse variant is not causal (use the causal "
                                 "mask), a column-sum, gather or accumulating kernel")
            if block_m not in (64, 128):
                raise ValueError(f"the block-sparse variant's query tile is the 64- or 128-row "
                                 f"block, got block_m {block_m}")
            self.key_blocks = BlockListKeyBlocks((block_m, block_n), mask)
        elif mask is not None and gather and gather_entry_keys > 1 and not accumulate:
            # block-sparse attention's small blocks, packed: the mask inside the partial ones
            self.key_blocks = PackedBlockLists((block_m, block_n), group, gather_entry_keys,
                                               mask)
        elif mask is not None:
            raise ValueError("an element mask applies to the block-sparse variant and to the "
                             "writing gather variant's block entries (gather_entry_keys > 1)")
        else:
            self.key_blocks = (PackedKeyRows((block_m, block_n), group) if gather
                               else key_block_policy((block_m, block_n), causal))
        # split_kv (flash-decoding), as AttentionSm90's: split s of batch b reads its range of
        # key blocks and writes O and lse at batch entry s * B + b
        self.split_kv = split_kv
        if split_kv:
            if colsum or gather or block_sparse or accumulate:
                raise ValueError("split_kv applies to plain (dense or causal) attention")
            self.key_blocks = SplitKeyBlocks(self.key_blocks)
        # The default here is the spill-free one; plain attention passes its tuned count
        # (tuning/attention.py ampere_config: at D = 128, 4 warps of 32 rows spill 160 bytes
        # yet run 1.3x faster than these 8 warps of 16 rows). The gather gives every warp one
        # 16-row slice (its index registers took D = 64 with 32-row warps to 254 registers)
        self.warps = warps or (block_m // 16 if gather
                               else min(4 if head_dim <= 64 else 8, block_m // 16))
        self.threads = 32 * self.warps
        copy_rows = self.threads // (head_dim * 2 // BYTES_PER_VEC)  # rows per cp.async pass
        if block_m % (16 * self.warps) or block_n % 16:
            raise ValueError(f"block_m ({block_m}) must be a multiple of 16 x warps "
                             f"({self.warps}) and block_n ({block_n}) of 16")
        if block_m % copy_rows or block_n % copy_rows:
            raise ValueError(f"block_m ({block_m}) and block_n ({block_n}) must be multiples "
                             f"of the {copy_rows} rows {self.threads} threads copy per pass")

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor, mPrevLSE, mColsum, mIndices, mCounts, scale: Float32,
                 out_scale, stream, mFullIndices=None, mFullCounts=None, mDocIds=None,
                 mTileOrder=None, num_ctas=None):
        """``mPrevLSE`` (B, H, S_q) and ``mColsum`` (B, H, groups, S_kv), both compact fp32,
        the latter zero-filled: the column-sum variant's (None otherwise). ``mIndices``
        (B, H, groups, L) and ``mCounts`` (B, H, groups) int32: the key rows each query group
        attends to, for column-sparse attention (None otherwise). ``out_scale``: the
        accumulating variant's factor (None otherwise). ``mFullIndices``, ``mFullCounts``,
        ``mDocIds``: block-sparse attention's (``block_sparse``; partial blocks in
        ``mIndices`` / ``mCounts`` then). ``mTileOrder``: with ``tile_order``, the tile each
        CTA runs (``ordered_tile``); ``num_ctas``: the Hopper kernel's persistent schedule
        (one argument list for both paths), None here."""
        dtype = mQ.element_type
        tiled_mma = cute.make_tiled_mma(
            warp.MmaF16BF16Op(dtype, Float32, (16, 8, 16)), (self.warps, 1, 1),
            permutation_mnk=(16 * self.warps, 16, 16))
        copy_qkv = g2s_copy(dtype, "k", self.block_n, self.head_dim, self.threads)
        grid = (cute.ceil_div(mQ.shape[2], self.block_m), mQ.shape[1],
                mO.shape[0] if cutlass.const_expr(self.split_kv) else mQ.shape[0])
        self.kernel(mQ, mK, mV, mO, mLSE, mPrevLSE, mColsum, mIndices, mCounts,
                    scale * Float32(LOG2E), tiled_mma, copy_qkv, out_scale, mFullIndices,
                    mFullCounts, mDocIds,
                    mQ.shape[0] if cutlass.const_expr(self.split_kv) else None,
                    mTileOrder).launch(grid=grid, block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
               mLSE: cute.Tensor, mPrevLSE, mColsum, mIndices, mCounts, scale_log2: Float32,
               tiled_mma: cute.TiledMma, copy_qkv: cute.TiledCopy, out_scale, mFullIndices,
               mFullCounts, mDocIds, q_batch, mTileOrder):
        tidx, _, _ = cute.arch.thread_idx()
        m_block, head, batch = cute.arch.block_idx()
        if cutlass.const_expr(self.tile_order):
            m_block, head, batch = ordered_tile(mTileOrder, m_block, head, batch)
        out_batch = batch
        split, batch, n_splits = split_of_batch(self.split_kv, batch, q_batch, mLSE)
        dtype = mQ.element_type
        BM, BN, D = self.block_m, self.block_n, self.head_dim
        s_q, s_kv = mQ.shape[2], mK.shape[2]
        kv_head = head // (mQ.shape[1] // mK.shape[1])

        # ---- shared memory ----
        sQ_layout = cute.tile_to_shape(smem_operand_atom("k", D, 2), (BM, D), (0, 1))
        sKV_layout = cute.tile_to_shape(smem_operand_atom("k", D, 2), (BN, D), (0, 1))

        @cute.struct
        class SharedStorage:
            sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sKV_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sKV_layout)], 1024]
            # column-sum partials: (key, warp, group slot)
            sCol: cute.struct.MemRange[Float32, BN * self.warps * 2 if self.colsum else 1]

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        # the swizzles are in elements, so they stay in the layout (a pointer swizzle would act
        # on byte addresses)
        sQ = cute.make_tensor(storage.sQ.data_ptr(), sQ_layout)
        sK = cute.make_tensor(storage.sK.data_ptr(), sKV_layout)
        sV = cute.make_tensor(storage.sV.data_ptr(), sKV_layout)
        sVt = cute.composition(sV, cute.make_layout((D, BN), stride=(BN, 1)))  # (D, keys)

        # ---- this block's tiles and coordinates ----
        gQ = cute.local_tile(mQ[batch, head, None, None], (BM, D), (m_block, 0))
        gK = cute.local_tile(mK[batch, kv_head, None, None], (BN, D), (None, 0))
        gV = cute.local_tile(mV[batch, kv_head, None, None], (BN, D), (None, 0))
        cQ = cute.local_tile(cute.make_identity_tensor((s_q, D)), (BM, D), (m_block, 0))
        cKV = cute.local_tile(cute.make_identity_tensor((s_kv, D)), (BN, D), (None, 0))
        thr_g2s = copy_qkv.get_slice(tidx)
        tQgQ, tQsQ, tQcQ = (thr_g2s.partition_S(gQ), thr_g2s.partition_D(sQ),
                            thr_g2s.partition_S(cQ))
        tKgK, tKsK = thr_g2s.partition_S(gK), thr_g2s.partition_D(sK)
        tVgV, tVsV = thr_g2s.partition_S(gV), thr_g2s.partition_D(sV)
        tKVcKV = thr_g2s.partition_S(cKV)

        gat = None
        if cutlass.const_expr(self.gather):
            # K/V come from the kv head's (S_kv, D) rows the index list names (_gather_rows)
            tKgK, tVgV = mK[batch, kv_head, None, None], mV[batch, kv_head, None, None]
            gat = self._gather_setup(thr_g2s, mIndices, mCounts, batch, head, m_block, s_kv)
            blocks = gather_key_tile(self.key_blocks, m_block, s_q, gat.count, gat.indices,
                                     self.key_blocks.group_of(m_block), s_kv, batch, head,
                                     mFullCounts, mDocIds)  # over packed positions
        else:
            blocks = key_block_tile(self.key_blocks, m_block, s_q, s_kv,
                                    (mIndices, mCounts, mFullIndices, mFullCounts, mDocIds),
                                    batch, head, split, n_splits)
        n_blocks = blocks.n_blocks

        # ---- mma partitions and ldmatrix copies ----
        thr_mma = tiled_mma.get_slice(tidx)
        tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))
        tSrK = thr_mma.make_fragment_B(thr_mma.partition_B(sK))
        tOrVt = thr_mma.make_fragment_B(thr_mma.partition_B(sVt))
        acc_O = cute.make_rmem_tensor(tiled_mma.partition_shape_C((BM, D)), Float32)
        acc_O.fill(0.0)
        ldsm = lambda t: cute.make_copy_atom(warp.LdMatrix8x8x16bOp(t, 4), dtype)  # noqa: E731
        lds_q = cute.make_tiled_copy_A(ldsm(False), tiled_mma).get_slice(tidx)
        lds_k = cute.make_tiled_copy_B(ldsm(False), tiled_mma).get_slice(tidx)
        lds_v = cute.make_tiled_copy_B(ldsm(True), tiled_mma).get_slice(tidx)
        lds_q_tiled = cute.make_tiled_copy_A(ldsm(False), tiled_mma)
        lds_k_tiled = cute.make_tiled_copy_B(ldsm(False), tiled_mma)
        lds_v_tiled = cute.make_tiled_copy_B(ldsm(True), tiled_mma)
        tSsQ, tSrQ_v = lds_q.partition_S(sQ), lds_q.retile(tSrQ)
        tSsK, tSrK_v = lds_k.partition_S(sK), lds_k.retile(tSrK)
        tOsVt, tOrVt_v = lds_v.partition_S(sVt), lds_v.retile(tOrVt)

        rows = cute.size(acc_mn_view(acc_O), mode=[0])
        row_max = cute.make_rmem_tensor(rows, Float32)
        row_sum = cute.make_rmem_tensor(rows, Float32)
        row_max.fill(-Float32.inf)
        row_sum.fill(0.0)
        col = None
        if cutlass.const_expr(self.colsum):
            col = self._colsum_setup(thr_mma, mPrevLSE, storage, batch, head, m_block, s_q,
                                     s_kv, rows)

        # ---- prologue: Q and the last key block's K ----
        self._load_rows(copy_qkv, tQgQ, tQsQ, tQcQ, s_q)
        if n_blocks > 0:
            first = self.key_blocks.block(blocks, 0)
            if cutlass.const_expr(self.gather):
                self._read_rows(gat, first)
            self._load_kv(copy_qkv, tKgK, tKsK, tKVcKV, first, s_kv, gat)
        cute.arch.cp_async_commit_group()

        for step in cutlass.range(n_blocks, unroll=1):
            n = self.key_blocks.block(blocks, step)
            acc_S = cute.make_rmem_tensor(tiled_mma.partition_shape_C((BM, BN)), Float32)
            acc_S.fill(0.0)
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            # V(n) streams in while S(n) = Q K(n)^T runs
            self._load_kv(copy_qkv, tVgV, tVsV, tKVcKV, n, s_kv, gat)
            cute.arch.cp_async_commit_group()
            if cutlass.const_expr(self.gather):  # the next chunk's indices, read during S(n)
                if self.key_blocks.has_next(blocks, step, n):
                    self._read_rows(gat, self.key_blocks.next_block(blocks, step, n))
            smem_gemm(tiled_mma, acc_S, lds_q_tiled, tSsQ, tSrQ_v, tSrQ, lds_k_tiled,
                            tSsK, tSrK_v, tSrK)
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            # the next visit's K streams in during the softmax and P V(n)
            if self.key_blocks.has_next(blocks, step, n):
                n_next = self.key_blocks.next_block(blocks, step, n)
                self._load_kv(copy_qkv, tKgK, tKsK, tKVcKV, n_next, s_kv, gat)
            cute.arch.cp_async_commit_group()

            # masks as runtime ifs, not selects: at this kernel's register limit the selects
            # ran causal attention 17-20% slower (H100; mask_mod.hide_score)
            mask_and_softmax(acc_S, acc_O, row_max, row_sum, scale_log2, thr_mma, self.key_blocks,
                             blocks, n, step == 0, None, step, select=False)
            if cutlass.const_expr(self.colsum):
                self._colsum(acc_S, row_max, scale_log2, col, thr_mma, mColsum, batch, head, n,
                             s_kv, tidx)

            rP = cute.make_rmem_tensor_like(acc_S, dtype)
            rP.store(acc_S.load().to(dtype))
            tOrP = acc_as_a_operand(rP)
            for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
                cute.copy(lds_v_tiled, tOsVt[None, None, kb], tOrVt_v[None, None, kb])
                cute.gemm(tiled_mma, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb],
                          acc_O)

        # ---- epilogue: normalise, lse, O through smem (Q's bytes), predicated stores ----
        cute.arch.cp_async_wait_group(0)
        lse = cute.make_rmem_tensor(rows, Float32)
        softmax_finish(acc_O, row_max, row_sum, lse, scale_log2)
        if cutlass.const_expr(self.accumulate):
            acc_O.store(acc_O.load() * Float32(out_scale))
        self._store(acc_O, lse, thr_mma, tiled_mma, sQ, mO, mLSE, out_batch, head, m_block,
                    tidx)

    @cute.jit
    def _colsum_setup(self, thr_mma, mPrevLSE, storage, batch, head, m_block, s_q, s_kv, rows):
        """Per thread row: its previous-step normaliser in log2 units (+inf past S_q: no
        contribution) and its group slot (0: the block's first group, 1: the next)."""
        BM, BN = self.block_m, self.block_n
        c_rows = acc_mn_view(thr_mma.partition_C(cute.local_tile(
            cute.make_identity_tensor((s_q, s_kv)), (BM, BN), (m_block, 0))))
        prev_l2 = cute.make_rmem_tensor(rows, Float32)
        slot = cute.make_rmem_tensor(rows, Int32)
        first_group = (m_block * BM) // self.group
        for r in cutlass.range_constexpr(rows):
            row = c_rows[r, 0][0]
            prev_l2[r] = Float32.inf
            if row < s_q:
                prev_l2[r] = mPrevLSE[batch, head, row] * Float32(LOG2E)
            slot[r] = row // self.group - first_group
        last_group = (cutlass.min((m_block + 1) * BM, s_q) - 1) // self.group
        sCol = cute.make_tensor(storage.sCol.data_ptr(), cute.make_layout((BN, self.warps, 2)))
        return prev_l2, slot, first_group, last_group - first_group + 1, sCol

    @cute.jit
    def _colsum(self, acc_S, row_max, scale_log2, col, thr_mma, mColsum, batch, head, n, s_kv,
                tidx):
        """This key block's column sums, per group slot: exp(scale s - prev_lse) is the softmax
        numerator times ``exp2(m * scale_log2 - prev_lse * log2 e)`` per row; summed over each
        warp's rows (shuffle reduce-scatter), then over the warps through smem, then one
        atomic add per (group, key)."""
        BN = self.block_n
        prev_l2, slot, first_group, slots, sCol = col
        lane, warp_i = tidx % 32, tidx // 32
        lane_col0 = acc_mn_view(thr_mma.partition_C(
            cute.make_identity_tensor((self.block_m, BN))))[0, 0][1]
        factors = previous_step_factors(row_max, prev_l2, scale_log2)
        for g in cutlass.range_constexpr(2):
            in_slot = cute.make_rmem_tensor(cute.size(row_max), Float32)
            for r in cutlass.range_constexpr(cute.size(row_max)):
                in_slot[r] = factors[r] if slot[r] == g else Float32(0.0)
            part = weighted_column_sums(acc_S, in_slot)
            first = reduce_scatter_rows(part, lane)
            for i in cutlass.range_constexpr(cute.size(part) // 8):
                sCol[tile_column(first + i, lane_col0), warp_i, g] = part[i]
        cute.arch.sync_threads()
        if tidx < slots * BN:
            c, g = tidx % BN, tidx // BN
            total = sCol[c, 0, g]
            for w in cutlass.range_constexpr(1, self.warps):
                total = total + sCol[c, w, g]
            if n * BN + c < s_kv:
                row = mColsum[batch, head, first_group + g, None]
                cute.arch.atomic_add(row.iterator + (n * BN + c), total)
        cute.arch.sync_threads()  # sCol is rewritten by the next key block

    @cute.jit
    def _gather_setup(self, thr_g2s, mIndices, mCounts, batch, head, m_block, s_kv):
        """The column-sparse tile's ``GatherRows``: its group's list and count (clamped into
        [0, L]; 0 when S_kv is), and a register per owned row for the key row it copies
        (filled by ``_read_rows``)."""
        g = self.key_blocks.group_of(m_block)
        idx = mIndices[batch, head, g, None]
        count = cutlass.min(cutlass.max(mCounts[batch, head, g], Int32(0)),
                            Int32(mIndices.shape[3]) * self.entry_keys)
        count = count if s_kv > 0 else Int32(0)  # no row to clamp into: attend to nothing
        tKVc = thr_g2s.partition_S(cute.make_identity_tensor((self.block_n, self.head_dim)))
        assert cute.size(tKVc, mode=[2]) == 1  # K-major copy: one vector per row and thread
        kv_rows = cute.make_rmem_tensor(cute.size(tKVc, mode=[1]), Int32)
        return GatherRows(idx, count, tKVc, kv_rows, Int32(s_kv))

    @cute.jit
    def _read_rows(self, gat: GatherRows, n):
        """``gat.rows[i]``: the key row behind this thread's row i of packed chunk ``n``, the
        index clamped into [0, S_kv); -1 past the count (zero-filled). The list is read at
        min(position, count - 1), never past its end."""
        idx, count, tKVc, kv_rows, s_kv = gat
        for i in cutlass.range_constexpr(cute.size(kv_rows)):
            pos = n * self.block_n + tKVc[(0, 0), i, 0][0]
            at = cutlass.min(pos, count - 1)
            listed = Int32(0)
            if cutlass.const_expr(self.entry_keys == 1):
                listed = idx[at]
            else:  # key (at % E) of listed block at // E, the block clamped first
                e = self.entry_keys
                block = cutlass.min(cutlass.max(idx[at // e], Int32(0)), (s_kv - 1) // e)
                listed = block * e + at % e
            row = cutlass.max(cutlass.min(listed, s_kv - 1), Int32(0))
            kv_rows[i] = row if pos < count else Int32(-1)

    @cute.jit
    def _gather_rows(self, tiled_copy, mX, tXsX, gat: GatherRows):
        """cp.async this thread's 16-byte vector of each owned row of the tile from key row
        ``gat.rows[i]`` of ``mX`` (S_kv, D), into the slot the dense copy fills; -1 rows
        zero-filled."""
        tKVc, kv_rows = gat.coords, gat.rows
        per_vec = BYTES_PER_VEC * 8 // mX.element_type.width
        chunk = tKVc[(0, 0), 0, 0][1] // per_vec  # this thread's column vector
        pred = cute.make_rmem_tensor((1, 1), cutlass.Boolean)
        for i in cutlass.range_constexpr(cute.size(kv_rows)):
            row = kv_rows[i]
            src = cute.local_tile(mX[cutlass.max(row, Int32(0)), None], (per_vec,), (chunk,))
            dst = tXsX[None, i, None]
            pred[0, 0] = row >= 0
            cute.copy(tiled_copy, cute.make_tensor(src.iterator, cute.make_layout(dst.shape)),
                      dst, pred=pred)

    @cute.jit
    def _load_kv(self, tiled_copy, tXgX, tXsX, tKVcKV, n, s_kv, gat):
        """Key block ``n``'s K or V tile: dense (``tXgX`` the thread's tiles) or gathered
        (``tXgX`` the kv head's rows, ``_read_rows`` having named chunk ``n``'s)."""
        if cutlass.const_expr(self.gather):
            self._gather_rows(tiled_copy, tXgX, tXsX, gat)
        else:
            self._load_rows(tiled_copy, tXgX[None, None, None, n], tXsX,
                            tKVcKV[None, None, None, n], s_kv)

    @cute.jit
    def _load_rows(self, tiled_copy, tXgX, tXsX, tXcX, rows):
        """cp.async one (block, D) tile, rows past ``rows`` zero-filled (D is whole)."""
        cute.copy(tiled_copy, tXgX, tXsX,
                  pred=in_bounds_predicate(tXcX, (rows, self.head_dim)))

    @cute.jit
    def _store(self, acc_O, lse, thr_mma, tiled_mma, sQ, mO, mLSE, batch, head, m_block, tidx):
        BM, D = self.block_m, self.head_dim
        dtype = mO.element_type
        s_q = mO.shape[2]
        rO = cute.make_rmem_tensor_like(acc_O, dtype)
        rO.store(acc_O.load().to(dtype))
        cute.arch.sync_threads()  # every warp is done reading sQ
        r2s = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype),
                                     tiled_mma)
        thr_r2s = r2s.get_slice(tidx)
        cute.copy(r2s, thr_r2s.retile(rO), thr_r2s.partition_D(sQ))
        store_lse(lse, thr_mma, mLSE, batch, head, m_block, (BM, D), s_q, tidx)
        cute.arch.sync_threads()
        per_vec = BYTES_PER_VEC // (dtype.width // 8)
        chunks = D // per_vec
        s2g = cute.make_tiled_copy_tv(
            cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=128),
            cute.make_layout((self.threads // chunks, chunks), stride=(chunks, 1)),
            cute.make_layout((1, per_vec)))
        thr_s2g = s2g.get_slice(tidx)
        gO = cute.local_tile(mO[batch, head, None, None], (BM, D), (m_block, 0))
        cOg = cute.local_tile(cute.make_identity_tensor((s_q, D)), (BM, D), (m_block, 0))
        tSsO, tSgO, tScO = (thr_s2g.partition_S(sQ), thr_s2g.partition_D(gO),
                            thr_s2g.partition_D(cOg))
        tSrO = cute.make_rmem_tensor_like(tSsO)
        cute.autovec_copy(tSsO, tSrO)
        pred = in_bounds_predicate(tScO, (s_q, D))
        if cutlass.const_expr(self.accumulate):
            # out += this tile (already times out_scale), in fp32, one rounding
            tSrOld = cute.make_rmem_tensor_like(tSrO)
            tSrOld.fill(0.0)
            cute.copy(s2g, tSgO, tSrOld, pred=pred)
            tSrO.store((tSrO.load().to(Float32) + tSrOld.load().to(Float32)).to(dtype))
        cute.copy(s2g, tSrO, tSgO, pred=pred)
