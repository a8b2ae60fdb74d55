"""Hopper decode attention with the operands swapped: keys as the WGMMA's M, query rows as N.

A decode tile has few query rows (a KV head's packed GQA heads times S_q: 4 at S_q = 1 with
H / H_kv = 4), but a WGMMA's M is 64 rows: on ``AttentionSm90``'s 64-row tile 60 of them are
padding, and every key block costs a 64 x 128 x D Q K^T, a 64-row softmax and a 64 x D x 128
P V. Transposed, the rows are the N of the MMA (8, 16, 32 or 64) and the keys its M:

    S^T (keys, rows) = K (keys, D) . Q^T (D, rows)        A = K (K-major), B = Q (K-major)
    O^T (D, rows)   += V^T (D, keys) . P^T (keys, rows)    A = V (MN-major), B = P^T (smem)

so a key block costs block_n x rows x D twice and a softmax over block_n x rows scores. The
softmax runs along the accumulator's M: a query row's scores are spread over all 128 threads
(each holds 2 x block_n / 64 keys of it), so its block maximum ends in a shuffle over the 8
lanes that share the column and one exchange of the 4 warps' maxima through shared memory
(a named barrier). Its running sum stays a per-thread partial until the end. P^T, bf16, goes
to shared memory (the B operand of P V must be there), N-major so each thread's column pair
is one 4-byte store.

The producer (warp 0: Q once, then K and V of every visited key block, ``ProducerLoads``,
producer.py), the key-block iterators (block_info.py: dense, causal, split-KV ranges) and the
split outputs are ``AttentionSm90``'s: the kernel writes O and lse as that kernel does, the
partials of a split launch for the combine kernel, or with ``cluster_splits`` the splits of a
tile combined in a cluster through DSMEM (cluster_combine.py).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from ..common.constants import LN2, LOG2E, SM90_SMEM_BYTES
from .block_info import (
    SplitKeyBlocks,
    key_block_policy,
    key_block_tile,
    split_launch,
    split_of_batch,
)
from .cluster_combine import ClusterCombine
from .kv_loader import TmaKVLoader, _sdhb
from .online_softmax import acc_mn_view
from .producer import ProducerLoads
from .roles import PRODUCER_WARPGROUP, TMA_WARP, NamedBarrier, TileCoord
from .tiles import DECODE_ROWS

#: lanes of a warp that hold the same accumulator column (xor distances of their shuffles)
COLUMN_LANE_STRIDES = (16, 8, 4)


class DecodeTile:
    """One consumer thread's state in ``DecodeSm90``'s loop: the MMAs, their smem fragments
    (K, Q, V, P^T) and accumulators (S^T, O^T), P^T in registers and its smem view, the
    running column max and partial sum, the reduction buffer, the score coordinates, the
    K/V pipelines, the tile's key-block view and the scale."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class DecodeSm90(ProducerLoads):
    """Swap-AB flash attention for tiles of at most 64 query rows (decoding), one CTA per
    (query tile, head, batch entry[, split]).

    Warp roles: warp 0 of the producer warpgroup runs ``load`` (TMA of Q once, then K and V of
    every visited key block into ``stages``-deep rings); warps 1-3 only meet the cluster.
    The consumer warpgroup (warps 4-7) runs ``mma``: per key block S^T = K Q^T by WGMMA
    (m64nRk16, keys as M), the online softmax down the accumulator's columns, P^T to shared
    memory, then O^T += V^T P^T (WGMMA, both operands in shared memory); then the epilogue
    writes O and lse straight from registers (or stages them for the cluster's combine).
    ``rows``: the tile's query rows (``DECODE_ROWS``: 8, 16, 32 or 64), ``block_n``: keys per
    block (64 or 128). No register reallocation (one consumer warpgroup).
    Shared memory (D = 128, 128-key blocks, 2 stages, 8 rows): K and V 2 x 32 KiB each, Q
    rows x D x 2 B, P^T rows x block_n x 2 B, 4 x rows fp32 of warp maxima: about 133 KiB.
    """

    def __init__(self, head_dim: int, causal: bool, rows: int = 8, block_n: int = 128,
                 stages: int = 2, split_kv: bool = False, cluster_splits: int = 1):
        if head_dim not in (64, 128):
            raise ValueError(f"head_dim must be 64 or 128, got {head_dim}")
        # (the MMA takes any multiple of 8, but the DSL aborts the process building the
        # N-major P^T operand of 24 or 40 rows: powers of two only)
        if rows not in DECODE_ROWS:
            raise ValueError(f"rows must be one of {DECODE_ROWS} (the MMA's N), got {rows}")
        # keys are the MMA's M, 64 per atom; the key tiles run on a GPU so far (the default
        # 128 and 64, perf/RESULTS.md "Swap-AB decode tiles")
        if block_n not in (64, 128):
            raise ValueError(f"block_n must be 64 or 128, got {block_n}")
        if stages < 2:
            raise ValueError(f"stages must be >= 2, got {stages}")
        if cluster_splits != 1 and not split_kv:
            raise ValueError("cluster_splits applies to the split_kv kernel")
        self.head_dim, self.causal, self.stages = head_dim, causal, stages
        self.block_m, self.block_n, self.split_kv = rows, block_n, split_kv
        # what the producer mixin reads: one Q stage, no gather, no column sums, the
        # consumers free Q's stage (nothing stores through it)
        self.q_stages, self.consumer_wgs, self.threads = 1, 1, 256
        self.gather = self.gather_prefetch = self.colsum = self.async_store = False
        self.kv_loader = TmaKVLoader(block_n, head_dim)
        self.key_blocks = key_block_policy((rows, block_n), causal)
        if split_kv:
            self.key_blocks = SplitKeyBlocks(self.key_blocks)
        self.cluster_combine = None
        if cluster_splits != 1:
            self.cluster_combine = ClusterCombine(cluster_splits, rows, head_dim, 128)
            k_ring = 2 * stages * block_n * head_dim
            if self.cluster_combine.smem_bytes() > k_ring:
                raise ValueError(f"cluster_splits: the staged partial needs "
                                 f"{self.cluster_combine.smem_bytes()} bytes, more than the "
                                 f"K ring's {k_ring}")
        if self.smem_bytes() > SM90_SMEM_BYTES:
            raise ValueError(f"{stages} stages of {block_n}-key blocks at head dim {head_dim} "
                             f"need {self.smem_bytes()} bytes of shared memory, more than the "
                             f"{SM90_SMEM_BYTES} an sm_90 CTA may have")

    def smem_bytes(self) -> int:
        """Shared memory of the SharedStorage built in ``__call__`` (alignment included)."""
        R, BN, D = self.block_m, self.block_n, self.head_dim
        kv = 2 * 2 * self.stages * BN * D
        q_and_p = 2 * R * D + 2 * R * BN
        return 1024 + 3 * 1024 + kv + q_and_p + 4 * 4 * R  # barriers, alignment

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor, mPrevLSE, mColsum, mIndices, mCounts, scale: Float32,
                 out_scale, stream, mFullIndices=None, mFullCounts=None, mDocIds=None,
                 mTileOrder=None, num_ctas=None):
        """``AttentionSm90.__call__``'s parameters (the op calls both alike); the column-sum,
        list, accumulate and persistent ones must be None."""
        dtype = mQ.element_type
        R, BN, D = self.block_m, self.block_n, self.head_dim
        # S^T = K Q^T: keys as M (block_n / 64 atoms down the warpgroup's M), rows as N; its
        # first k-step's copy overwrites S^T (no zero fill for ptxas to order against the
        # wgmmas, no accumulate flag rebound inside the loop)
        qk_mma, qk_first = (sm90_utils.make_trivial_tiled_mma(
            dtype, dtype, OperandMajorMode.K, OperandMajorMode.K, Float32, (1, 1, 1),
            tiler_mn=(64, R)) for _ in range(2))
        # O^T += V^T P^T: head dims as M (V read D-contiguous: MN-major), P^T N-major
        pv_mma = sm90_utils.make_trivial_tiled_mma(
            dtype, dtype, OperandMajorMode.MN, OperandMajorMode.MN, Float32, (1, 1, 1),
            tiler_mn=(64, R))
        sQ_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BN, R, D), dtype, 1)
        sK_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BN, R, D), dtype,
                                                  self.stages)
        sV_layout = sm90_utils.make_smem_layout_a(LayoutEnum.COL_MAJOR, (D, R, BN), dtype,
                                                  self.stages)
        sP_layout = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (D, R, BN), dtype, 1)
        tma_q, tQ = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), _sdhb(mQ),
                                                cute.slice_(sQ_layout, (None, None, 0)), (R, D))
        tma_k, tK, tma_v, tV = self.kv_loader.make_atoms(mK, mV, sK_layout, sV_layout)

        @cute.struct
        class SharedStorage:
            mbar: cute.struct.MemRange[cutlass.Int64, 2 + 4 * self.stages]
            sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sV_layout)], 1024]
            sP: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sP_layout)], 1024]
            # the 4 consumer warps' block maxima (then their partial sums) per query row
            sRed: cute.struct.Align[cute.struct.MemRange[Float32, 4 * R], 16]

        self.storage_cls = SharedStorage
        combine = self.cluster_combine
        grid, cluster = split_launch(cute.ceil_div(mQ.shape[2], R), mQ.shape[1], mQ.shape[0],
                                     mO.shape[0], self.split_kv,
                                     combine.splits if combine is not None else None)
        self.kernel(qk_mma, qk_first, pv_mma, tma_q, tQ, tma_k, tK, tma_v, tV, mO, mLSE,
                    mQ.shape[2], mK.shape[2], mQ.shape[1] // mK.shape[1], scale * Float32(LOG2E),
                    sQ_layout, sK_layout, sV_layout, sP_layout,
                    mQ.shape[0] if cutlass.const_expr(self.split_kv) else None).launch(
            grid=grid, block=(self.threads, 1, 1), stream=stream, cluster=cluster)

    @cute.kernel
    def kernel(self, qk_mma: cute.TiledMma, qk_first: cute.TiledMma, pv_mma: cute.TiledMma,
               tma_q: cute.CopyAtom, tQ: cute.Tensor, tma_k: cute.CopyAtom, tK: cute.Tensor,
               tma_v: cute.CopyAtom, tV: cute.Tensor, mO: cute.Tensor, mLSE: cute.Tensor,
               s_q: Int32, s_kv: Int32,
               q_per_kv: Int32, scale_log2: Float32, sQ_layout: cute.ComposedLayout,
               sK_layout: cute.ComposedLayout, sV_layout: cute.ComposedLayout,
               sP_layout: cute.ComposedLayout, q_batch):
        """The tile's coordinates and shared state, then the producer warp's ``load`` or the
        consumers' ``mma``; with ``cluster_splits``, the cluster's combine."""
        tidx, _, _ = cute.arch.thread_idx()
        m_block, head, batch = cute.arch.block_idx()
        out_batch = batch
        split, batch, n_splits = split_of_batch(
            self.split_kv, batch, q_batch, mLSE,
            self.cluster_combine.splits if cutlass.const_expr(self.cluster_combine) else None)
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp == TMA_WARP:
            for atom in (tma_q, tma_k, tma_v):
                cpasync.prefetch_descriptor(atom)
        storage = cutlass.memory.SmemAllocator().allocate(self.storage_cls)
        sQ, sK, sV, pipes = self._smem_tiles(storage, sQ_layout, sK_layout, sV_layout)
        tile = TileCoord(m_block, head, head // q_per_kv, batch, out_batch)
        blocks = key_block_tile(self.key_blocks, m_block, s_q, s_kv, (None,) * 5, batch, head,
                                split, n_splits)
        if warp // 4 == PRODUCER_WARPGROUP:
            if warp == TMA_WARP:
                self.load(tma_q, tQ, tma_k, tK, tma_v, tV, sQ, sK, sV, pipes, blocks, tile)
        else:
            self.mma(qk_mma, qk_first, pv_mma, sQ, sK, sV, storage, sP_layout, pipes, blocks,
                     tile, mO, mLSE, s_q, scale_log2, tidx - 128)
        if cutlass.const_expr(self.cluster_combine is not None):
            # as AttentionSm90's: every role meets the cluster once the partials are staged,
            # the consumers merge their rows, and no CTA frees its staging before all read it
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
            if warp // 4 != PRODUCER_WARPGROUP:
                self.cluster_combine.combine(storage.sK.data_ptr(), mO, mLSE, batch, head,
                                             m_block, s_q, tidx - 128)
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()

    @cute.jit
    def mma(self, qk_mma, qk_first, pv_mma, sQ, sK, sV, storage, sP_layout, pipes, blocks, tile, mO,
            mLSE, s_q, scale_log2, ctid):
        """The consumer warpgroup: fragments and the running softmax state, the key-block
        loop, then the epilogue."""
        R, BN, D = self.block_m, self.block_n, self.head_dim
        thr_qk = qk_mma.get_slice(ctid)
        thr_pv = pv_mma.get_slice(ctid)
        sP = storage.sP.get_tensor(sP_layout.outer, swizzle=sP_layout.inner)
        acc_S = cute.make_rmem_tensor(qk_mma.partition_shape_C((BN, R)), Float32)
        acc_O = cute.make_rmem_tensor(pv_mma.partition_shape_C((D, R)), Float32)
        acc_O.fill(0.0)
        pv_mma.set(warpgroup.Field.ACCUMULATE, True)
        qk_mma.set(warpgroup.Field.ACCUMULATE, True)
        qk_first.set(warpgroup.Field.ACCUMULATE, False)
        cols = cute.size(acc_mn_view(acc_S), mode=[1])
        dt = DecodeTile(
            qk_mma=qk_mma, qk_first=qk_first, pv_mma=pv_mma,
            tSrK=qk_mma.make_fragment_A(thr_qk.partition_A(sK)),
            tSrQ=qk_mma.make_fragment_B(thr_qk.partition_B(sQ)),
            tOrV=pv_mma.make_fragment_A(thr_pv.partition_A(sV)),
            tOrP=pv_mma.make_fragment_B(thr_pv.partition_B(sP)),
            # P^T as (keys, rows), partitioned like the S^T accumulator it is stored from
            tPsP=thr_qk.partition_C(cute.make_tensor(
                sP.iterator, cute.select(sP.layout, mode=[1, 0, 2]))[None, None, 0]),
            acc_S=acc_S, acc_O=acc_O, rP=cute.make_rmem_tensor_like(acc_S, sQ.element_type),
            col_max=cute.make_rmem_tensor(cols, Float32),
            col_sum=cute.make_rmem_tensor(cols, Float32),
            sRed=cute.make_tensor(storage.sRed.data_ptr(),
                                  cute.make_layout((R, 4), stride=(1, R))),
            # each thread's (key, row) coordinates within a block, for the masks
            tScS=thr_qk.partition_C(cute.make_identity_tensor((BN, R))),
            k_pipe=pipes.k_pipe, v_pipe=pipes.v_pipe, blocks=blocks, scale_log2=scale_log2,
            warp_c=ctid // 32, lane=ctid % 32)
        dt.col_max.fill(-Float32.inf)
        dt.col_sum.fill(0.0)
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        pipes.q_pipe.consumer_wait(q_state)
        self._key_loop(dt)
        if cutlass.const_expr(self.split_kv and self.cluster_combine is None):
            # the combine kernel (a programmatic dependent) may launch: it waits for our writes
            cute.arch.griddepcontrol_launch_dependents()
        lse = self._finish(dt)
        self._epilogue(acc_O, lse, thr_pv, dt.tScS, storage, mO, mLSE, tile, s_q, ctid)

    @cute.jit
    def _key_loop(self, dt):
        """Per key block: S^T, the softmax, P^T to smem, O^T += V^T P^T, each retired before
        the next. (Issuing S^T(n) beside P V(n - 1), as ``AttentionSm90``'s overlap does,
        measured 3-6% slower here: the V stage held a block longer halves the bytes the
        producer keeps in flight, and these CTAs are bound by those, not by their MMAs;
        perf/RESULTS.md "Swap-AB decode tiles".)"""
        k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        k_pipe, v_pipe, blocks = dt.k_pipe, dt.v_pipe, dt.blocks
        for step in cutlass.range(blocks.n_blocks, unroll=1):
            n = self.key_blocks.block(blocks, step)
            self._issue(dt.k_pipe, k_state, dt.qk_first, dt.qk_mma, dt.acc_S, dt.tSrK, dt.tSrQ)
            warpgroup.wait_group(0)
            k_pipe.consumer_release(k_state)
            k_state.advance()
            self._softmax(dt, n, step)
            self._store_p(dt)
            self._issue(dt.v_pipe, v_state, dt.pv_mma, dt.pv_mma, dt.acc_O, dt.tOrV, dt.tOrP)
            warpgroup.wait_group(0)
            v_pipe.consumer_release(v_state)
            v_state.advance()

    @cute.jit
    def _issue(self, pipe, state, first_mma, mma, acc, tA, tB):
        """Wait for stage ``state`` of ``pipe``, then issue ``acc`` (+)= A B over its k-blocks
        as one commit group: S^T = K Q^T (``first_mma`` overwrites) or O^T += V^T P^T."""
        pipe.consumer_wait(state)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tB, mode=[2])):
            cute.gemm(first_mma if kb == 0 else mma, acc, tA[(None, None, kb, state.index)],
                      tB[(None, None, kb, 0)], acc)
        warpgroup.commit_group()

    @cute.jit
    def _store_p(self, dt):
        """P^T (bf16) into shared memory, visible to the wgmmas (async proxy) once every warp
        has passed the barrier."""
        dt.rP.store(dt.acc_S.load().to(dt.rP.element_type))
        cute.autovec_copy(dt.rP, dt.tPsP)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=int(NamedBarrier.DECODE_COLUMNS), number_of_threads=128)

    @cute.jit
    def _mask(self, acc_S, tScS, n, blocks):
        """-inf for keys past S_kv and, causal (bottom-right), past row + S_kv - S_q."""
        s_mn, c_mn = acc_mn_view(acc_S), acc_mn_view(tScS)
        first_key, first_row = n * self.block_n, blocks.m_block * self.block_m
        for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
            limit = blocks.s_kv
            if cutlass.const_expr(self.causal):
                limit = cutlass.min(limit, first_row + c_mn[0, c][1] + 1 + blocks.s_kv
                                    - blocks.s_q)
            for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
                s_mn[r, c] = cutlass.select_(first_key + c_mn[r, c][0] >= limit,
                                             -Float32.inf, s_mn[r, c])

    @cute.jit
    def _softmax(self, dt, n, step):
        """Fold key block ``n`` (visit ``step``; masked where the key-block iterator says so)
        of S^T into each query row's running max and (per-thread partial) sum: the block's
        column maxima over all 128 threads, O^T's columns rescaled, S^T turned into
        unnormalised probabilities. A row with every score -inf so far keeps max -inf and
        gets nothing (exp2(-inf) = 0, never inf - inf)."""
        if self.key_blocks.needs_mask(dt.blocks, n, step):
            self._mask(dt.acc_S, dt.tScS, n, dt.blocks)
        s_mn, o_mn = acc_mn_view(dt.acc_S), acc_mn_view(dt.acc_O)
        col_max, col_sum, scale_log2 = dt.col_max, dt.col_sum, dt.scale_log2
        block_max = cute.make_rmem_tensor(cute.size(col_max), Float32)
        for c in cutlass.range_constexpr(cute.size(col_max)):
            block_max[c] = s_mn[None, c].load().reduce(cute.ReductionOp.MAX, -Float32.inf, 0)
        self._exchange(dt, block_max, True)
        for c in cutlass.range_constexpr(cute.size(col_max)):
            m_new = cute.arch.fmax(block_max[c], col_max[c])
            m_safe = Float32(0.0) if m_new == -Float32.inf else m_new
            p = cute.math.exp2(s_mn[None, c].load() * scale_log2 - m_safe * scale_log2,
                               fastmath=True)
            factor = cute.math.exp2((col_max[c] - m_safe) * scale_log2, fastmath=True)
            col_sum[c] = col_sum[c] * factor + p.reduce(cute.ReductionOp.ADD, Float32(0.0), 0)
            o_mn[None, c] = o_mn[None, c].load() * factor
            col_max[c] = m_new
            s_mn[None, c] = p

    @cute.jit
    def _exchange(self, dt, values, is_max: cutlass.Constexpr):
        """``values[c]`` (one per column of this thread) reduced (max, or sum) over the
        warpgroup's 128 threads: shuffles across the 8 lanes of a warp that hold the column,
        then the 4 warps' results through ``sRed`` (lanes 0-3 hold every column between
        them) and one named barrier. The caller's next barrier orders ``sRed``'s reuse."""
        sRed, c_mn = dt.sRed, acc_mn_view(dt.tScS)
        for c in cutlass.range_constexpr(cute.size(values)):
            for stride in cutlass.range_constexpr(len(COLUMN_LANE_STRIDES)):
                other = cute.arch.shuffle_sync_bfly(values[c],
                                                    offset=COLUMN_LANE_STRIDES[stride])
                if cutlass.const_expr(is_max):
                    values[c] = cute.arch.fmax(values[c], other)
                else:
                    values[c] = values[c] + other
        if dt.lane < 4:
            for c in cutlass.range_constexpr(cute.size(values)):
                sRed[c_mn[0, c][1], dt.warp_c] = values[c]
        cute.arch.barrier(barrier_id=int(NamedBarrier.DECODE_COLUMNS), number_of_threads=128)
        for c in cutlass.range_constexpr(cute.size(values)):
            row = c_mn[0, c][1]
            if cutlass.const_expr(is_max):
                values[c] = cute.arch.fmax(cute.arch.fmax(sRed[row, 0], sRed[row, 1]),
                                           cute.arch.fmax(sRed[row, 2], sRed[row, 3]))
            else:
                values[c] = (sRed[row, 0] + sRed[row, 1]) + (sRed[row, 2] + sRed[row, 3])

    @cute.jit
    def _finish(self, dt):
        """O^T's columns divided by their rows' sums; returns each column's lse (natural
        log; -inf and O = 0 for a row that saw no key)."""
        o_mn, col_max, col_sum = acc_mn_view(dt.acc_O), dt.col_max, dt.col_sum
        self._exchange(dt, col_sum, False)
        lse = cute.make_rmem_tensor(cute.size(col_sum), Float32)
        for c in cutlass.range_constexpr(cute.size(col_sum)):
            total = col_sum[c]
            empty = total == Float32(0.0)
            inv = Float32(0.0) if empty else cute.arch.rcp_approx(total)
            o_mn[None, c] = o_mn[None, c].load() * inv
            lse[c] = -Float32.inf if empty else (
                col_max[c] * dt.scale_log2 + cute.math.log2(total, fastmath=True)) * Float32(LN2)
        return lse

    @cute.jit
    def _epilogue(self, acc_O, lse, thr_pv, tScS, storage, mO, mLSE, tile, s_q, ctid):
        """O and lse of the tile's rows below S_q straight from registers into ``mO`` /
        ``mLSE`` (split launches: the partial's batch entry), or with ``cluster_splits``
        staged in the K ring for the cluster's combine."""
        R, D = self.block_m, self.head_dim
        c_mn = acc_mn_view(tScS)
        first_row = tile.m_block * R
        combine = self.cluster_combine
        if cutlass.const_expr(combine is not None):
            # (the K ring is free: every consumer passed ``_finish``'s barrier after its
            # last Q K^T retired, and every K load was consumed)
            sO, sL = combine.staging(storage.sK.data_ptr(), transposed=True)
            cute.autovec_copy(acc_O, thr_pv.partition_C(sO))
            if ctid < 4:
                for c in cutlass.range_constexpr(cute.size(lse)):
                    sL[c_mn[0, c][1]] = lse[c]
        else:
            gO = mO[tile.out_batch, tile.head, None, None]
            gOt = cute.local_tile(cute.make_tensor(gO.iterator, cute.select(gO.layout,
                                                                            mode=[1, 0])),
                                  (D, R), (0, tile.m_block))
            tOgO = thr_pv.partition_C(gOt)
            tOcO = thr_pv.partition_C(cute.make_identity_tensor((D, R)))
            rO = cute.make_rmem_tensor_like(acc_O, mO.element_type)
            rO.store(acc_O.load().to(mO.element_type))
            for i in cutlass.range_constexpr(cute.size(rO)):
                if first_row + tOcO[i][1] < s_q:
                    tOgO[i] = rO[i]
            if ctid < 4:
                for c in cutlass.range_constexpr(cute.size(lse)):
                    row = first_row + c_mn[0, c][1]
                    if row < s_q:
                        mLSE[tile.out_batch, tile.head, row] = lse[c]
