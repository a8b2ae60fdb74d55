"""Hopper-path flash attention forward: TMA, WGMMA, warp specialization, online softmax.

Tensors as in attention_sm80.py: q (B, H, S_q, D), k/v (B, H_kv, S_kv, D), o like q, lse
(B, H, S_q) fp32; unit-stride head dim. Causal masks bottom-right aligned.

"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from ..common.constants import LOG2E
from .column_sums import (
    mma_sync_column_sums,
    mma_sync_sum_key,
    previous_step_factors,
    reduce_scatter_rows,
    tile_column,
    weighted_column_sums,
)
from .online_softmax import (
    acc_as_a_operand,
    acc_mn_view,
    key_blocks,
    mask_and_softmax,
    rescale_rows,
    softmax_finish,
    store_lse,
)


def _sdhb(t: cute.Tensor) -> cute.Tensor:
    """(B, H, S, D) -> the (S, D, H, B) view TMA tiles over (tile mode first)."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[2, 3, 1, 0]))


def _dshb(t: cute.Tensor) -> cute.Tensor:
    """(B, H, S, D) -> (D, S, H, B): V as the MN-major B operand of O += P V."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[3, 2, 1, 0]))


class AttentionSm90:
    """Warp-specialized flash attention, one CTA per (query block, head, batch).

    Warp roles: warpgroup 0 is the producer (``setmaxnreg`` down; warp 0 issues TMA: Q once,
    then K and V tiles); the consumer warpgroups (``setmaxnreg`` up) own 64 query rows each:
    S = Q K^T by WGMMA from smem, online softmax in registers (exp2, scale folded), P kept in
    registers as the A operand of O += P V (WGMMA, V an MN-major smem operand).
    Tiles: ``block_m`` = 64 x consumers (128: registers 40 / 232; 192: 32 / 160) by
    ``block_n`` keys. Schedules per consumer: sequential (S, softmax, P V), ``overlap`` (S(n)
    and P(n + 1) V(n + 1) in flight together) or sequential with ``pingpong`` (consumers issue
    Q K^T in turn, named barriers 2 + consumer).
    Column-sum variant (``colsum``, any tile and schedule above): per key tile, the column
    sums sum_r P[r, c] f[r] of each consumer's rows, f = exp2(m * scale_log2 - prev_lse *
    log2 e), by one of three ``colsum_method``s:
    ``"mma"`` (D = 128 default): P (bf16, stmatrix) and f to smem, one small WGMMA (m64n8k16,
    keys as M, P read transposed, rows as K) that retires with O += P V; one ring slot per
    consumer. ``"mma_sync"`` (D = 64 default): P transposed in registers (movmatrix), one
    mma.sync m16n8k16 per 16 keys and warp, issued before O += P V and read after it (behind
    a wgmma they stall on the busy tensor pipe); one slot per warp. ``"shuffle"``: fp32 P f
    summed on the ALUs and reduce-scattered by shuffles (exact fp32; the tile must be the
    group). The sums reach warp 1 of the producer warpgroup through a ``colsum_stages``-deep
    smem ring (``PipelineAsync``); it adds the slots of one query group and writes each
    (group, key) once: a plain store when the group is the CTA's tile, else an fp32
    ``red.add`` onto zeros, at most two terms per element (a 64-row-aligned group of 128 or
    192 rows spans at most two CTAs), hence deterministic.
    Pipeline: Q in a one-stage barrier; K and V each in a ``stages``-deep ``PipelineTmaAsync``
    ring; key blocks run last to first so the masked ones come first.
    Shared memory (D = 128, 128 x 128, 2 stages): Q 32 KiB + K 64 KiB + V 64 KiB; column sums
    add the ring, colsum_stages x slots x block_n x 4 B, and for wgmma sums per consumer P
    64 x block_n x 2 B + factors 8 x 64 x 2 B (204 KiB in all at the D = 128 default).
    Epilogue: O normalised, converted, written to Q's smem and stored by TMA (which clips
    rows past S_q); lse written by the first thread of each quad.
    """

    SMEM_LIMIT = 232448  # bytes per CTA on sm_90 (227 KiB)
    REGISTERS = {2: (40, 232), 3: (32, 160)}  # consumers -> (producer, consumer) per thread

    def __init__(self, head_dim: int, causal: bool, stages: int = 2, colsum: bool = False,
                 overlap: bool = False, block_m: int | None = None,
                 block_n: int | None = None, group: int = 192, pingpong: bool = False,
                 colsum_method: str = "mma", colsum_rounds: int = 3, colsum_writers: int = 1,
                 colsum_stages: int = 4):
        self.head_dim, self.causal, self.stages, self.colsum = head_dim, causal, stages, colsum
        # overlap: the softmax of S(n) runs while O += P(n + 1) V(n + 1) is on the tensor cores
        # (intra-warpgroup pipelining)
        self.overlap = overlap
        self.block_m, self.block_n = block_m or 128, block_n or 128
        if self.block_m // 64 not in self.REGISTERS or self.block_m % 64:
            raise ValueError(f"block_m must be 128 or 192, got {self.block_m}")
        if self.block_n % 16 or not 32 <= self.block_n <= 256:
            raise ValueError(f"block_n must be a multiple of 16 in [32, 256], got "
                             f"{self.block_n}")
        if colsum:
            if causal:
                raise ValueError("the column-sum variant is non-causal")
            if colsum_method not in ("mma", "mma_sync", "shuffle"):
                raise ValueError(f"colsum_method must be 'mma', 'mma_sync' or 'shuffle', got "
                                 f"{colsum_method!r}")
            # keys are the column-sum MMA's M (64 per wgmma atom, per chain of four mma.sync);
            # the reduce-scatter needs block_n / 4 columns per thread divisible by 8
            key_multiple = 32 if colsum_method == "shuffle" else 64
            if self.block_n % key_multiple:
                raise ValueError(f"the column-sum variant ({colsum_method}) needs block_n a "
                                 f"multiple of {key_multiple}, got {self.block_n}")
            # 64-row consumers each lie in one group, and a group spans at most two CTAs
            if group not in (128, 192):
                raise ValueError(f"group must be 128 or 192, got {group}")
            # shuffle sums: the writers add whole CTAs, so the query tile is the group
            if colsum_method == "shuffle" and group != self.block_m:
                raise ValueError(f"colsum_method='shuffle' needs block_m == group, got "
                                 f"{self.block_m} and {group}")
        # shuffle rounds per consumer warp (3: one partial per warp and column; fewer leave
        # 2^(3 - rounds) partials per warp for the writer warps to add)
        if colsum_rounds not in (1, 2, 3) or colsum_writers not in (1, 2, 3):
            raise ValueError("colsum_rounds and colsum_writers must be 1, 2 or 3")
        # depth of the consumers -> writer ring of column sums
        if colsum_stages < 2:
            raise ValueError(f"colsum_stages must be >= 2, got {colsum_stages}")
        self.group, self.colsum_method, self.colsum_stages = group, colsum_method, colsum_stages
        self.colsum_rounds, self.colsum_writers = colsum_rounds, colsum_writers
        self.consumer_wgs = self.block_m // 64
        # ring slots per key tile: one per consumer (wgmma sums), per warp (mma.sync sums), or
        # per warp and lane spread (shuffle sums)
        self.colsum_partials = {"mma": self.consumer_wgs, "mma_sync": self.consumer_wgs * 4}.get(
            colsum_method, self.consumer_wgs * 4 << (3 - colsum_rounds))
        self.producer_regs, self.consumer_regs = self.REGISTERS[self.consumer_wgs]
        self.threads = 128 * (1 + self.consumer_wgs)
        if self.smem_bytes() > self.SMEM_LIMIT:
            raise ValueError(f"block {self.block_m} x {self.block_n} at head dim {head_dim} "
                             f"needs {self.smem_bytes()} bytes of shared memory, more than the "
                             f"{self.SMEM_LIMIT} an sm_90 CTA may have")
        # pingpong (sequential loop only): consumer warpgroups take turns issuing Q K^T
        if pingpong and overlap:
            raise ValueError("pingpong applies to the sequential loop (overlap=False)")
        self.pingpong = pingpong
        # named barriers: 1 the epilogue's; 2.. one per consumer warpgroup's pingpong turn;
        # 5.. one per consumer warpgroup's column-sum operands (P and f in smem)
        self.epi_barrier_id, self.pingpong_barrier_id, self.colsum_barrier_id = 1, 2, 5

    def smem_bytes(self) -> int:
        """Shared memory of the SharedStorage built in ``__call__`` (alignment included)."""
        BM, BN, D, wgs = self.block_m, self.block_n, self.head_dim, self.consumer_wgs
        tiles = 2 * (BM * D + 2 * self.stages * BN * D)  # Q, K and V stages (16-bit)
        sums = 0
        if self.colsum:
            sums = BN * self.colsum_partials * self.colsum_stages * 4
            if self.colsum_method == "mma":
                sums += 2 * BM * BN + 1024 * wgs + 1024  # P, f (1 KiB per consumer), padding
        return 1024 + tiles + sums  # barriers and alignment

    @property
    def colsum_atomic(self) -> bool:
        """Whether a query group can span two CTAs (then the sums are added onto zeros)."""
        return self.colsum and self.group != self.block_m

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor, mPrevLSE, mColsum, scale: Float32, stream):
        dtype = mQ.element_type
        BM, BN, D = self.block_m, self.block_n, self.head_dim
        qk_mma = sm90_utils.make_trivial_tiled_mma(
            dtype, dtype, OperandMajorMode.K, OperandMajorMode.K, Float32,
            (self.consumer_wgs, 1, 1), tiler_mn=(64, BN))
        pv_mma = sm90_utils.make_trivial_tiled_mma(
            dtype, dtype, OperandMajorMode.K, OperandMajorMode.MN, Float32,
            (self.consumer_wgs, 1, 1), tiler_mn=(64, D), a_source=warpgroup.OperandSource.RMEM)
        sQ_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BM, BN, D), dtype, 1)
        sK_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BM, BN, D), dtype,
                                                  self.stages)
        sV_layout = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (BM, D, BN), dtype,
                                                  self.stages)
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_q, tQ = cpasync.make_tiled_tma_atom(g2s, _sdhb(mQ),
                                                cute.slice_(sQ_layout, (None, None, 0)), (BM, D))
        tma_k, tK = cpasync.make_tiled_tma_atom(g2s, _sdhb(mK),
                                                cute.slice_(sK_layout, (None, None, 0)), (BN, D))
        tma_v, tV = cpasync.make_tiled_tma_atom(g2s, _dshb(mV),
                                                cute.slice_(sV_layout, (None, None, 0)), (D, BN))
        tma_o, tO = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), _sdhb(mO),
                                                cute.slice_(sQ_layout, (None, None, 0)), (BM, D))
        # column sums: out(keys, 8) = P^T(keys, rows) f(rows, 8), one warpgroup's 64 rows; P is
        # the MN-major A operand (keys contiguous), f the K-major B operand (one per consumer)
        col_mma = sm90_utils.make_trivial_tiled_mma(
            BFloat16, BFloat16, OperandMajorMode.MN, OperandMajorMode.K, Float32, (1, 1, 1),
            tiler_mn=(64, 8))
        sP_layout = sm90_utils.make_smem_layout_a(LayoutEnum.COL_MAJOR, (BN, 8, 64), BFloat16,
                                                  self.consumer_wgs)
        sF_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BN, 8, 64), BFloat16,
                                                  self.consumer_wgs)
        mma_sums = self.colsum and self.colsum_method == "mma"
        col_size = cute.cosize(sP_layout) if mma_sums else 1

        @cute.struct
        class SharedStorage:
            mbar: cute.struct.MemRange[cutlass.Int64,
                                       2 + 4 * self.stages + 2 * self.colsum_stages]
            sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sV_layout)], 1024]
            # column sums: P and f per consumer, then the ring (key, consumer, stage)
            sP: cute.struct.Align[cute.struct.MemRange[BFloat16, col_size], 1024]
            sF: cute.struct.Align[cute.struct.MemRange[
                BFloat16, cute.cosize(sF_layout) if mma_sums else 1], 1024]
            sCol: cute.struct.MemRange[
                Float32, BN * self.colsum_partials * self.colsum_stages if self.colsum else 1]

        self.storage_cls = SharedStorage
        grid = (cute.ceil_div(mQ.shape[2], BM), mQ.shape[1], mQ.shape[0])
        self.kernel(qk_mma, pv_mma, col_mma, tma_q, tQ, tma_k, tK, tma_v, tV, tma_o, tO, mLSE,
                    mPrevLSE, mColsum,
                    mQ.shape[2], mK.shape[2], mQ.shape[1] // mK.shape[1],
                    scale * Float32(LOG2E), sQ_layout, sK_layout, sV_layout, sP_layout,
                    sF_layout).launch(
            grid=grid, block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, qk_mma: cute.TiledMma, pv_mma: cute.TiledMma, col_mma: cute.TiledMma,
               tma_q: cute.CopyAtom,
               tQ: cute.Tensor, tma_k: cute.CopyAtom, tK: cute.Tensor, tma_v: cute.CopyAtom,
               tV: cute.Tensor, tma_o: cute.CopyAtom, tO: cute.Tensor, mLSE: cute.Tensor,
               mPrevLSE, mColsum,
               s_q: Int32, s_kv: Int32, q_per_kv: Int32, scale_log2: Float32,
               sQ_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
               sV_layout: cute.ComposedLayout, sP_layout: cute.ComposedLayout,
               sF_layout: cute.ComposedLayout):
        BM, BN, D = self.block_m, self.block_n, self.head_dim
        tidx, _, _ = cute.arch.thread_idx()
        m_block, head, batch = cute.arch.block_idx()
        kv_head = head // q_per_kv
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = warp // 4
        if warp == 0:
            for atom in (tma_q, tma_k, tma_v, tma_o):
                cpasync.prefetch_descriptor(atom)

        storage = cutlass.memory.SmemAllocator().allocate(self.storage_cls)
        sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sV = storage.sV.get_tensor(sV_layout.outer, swizzle=sV_layout.inner)
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumer_wgs * 4)
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        bar = storage.mbar.data_ptr()
        q_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=bar, num_stages=1, producer_group=producer, consumer_group=consumers,
            tx_count=cute.size_in_bytes(sQ.element_type, cute.slice_(sQ_layout, (None, None, 0))),
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))
        k_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=bar + 2, num_stages=self.stages, producer_group=producer,
            consumer_group=consumers,
            tx_count=cute.size_in_bytes(sK.element_type, cute.slice_(sK_layout, (None, None, 0))),
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))
        v_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=bar + 2 + 2 * self.stages, num_stages=self.stages,
            producer_group=producer, consumer_group=consumers,
            tx_count=cute.size_in_bytes(sV.element_type, cute.slice_(sV_layout, (None, None, 0))),
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))
        col_pipe, sCol = None, None
        if cutlass.const_expr(self.colsum):
            # consumer threads -> the column-sum writer warp; every thread arrives (its own
            # smem writes or reads are then ordered by its own arrive/wait pair)
            col_pipe = pipeline.PipelineAsync.create(
                barrier_storage=bar + 2 + 4 * self.stages, num_stages=self.colsum_stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                         128 * self.consumer_wgs),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                         32 * self.colsum_writers))
            sCol = cute.make_tensor(storage.sCol.data_ptr(), cute.make_layout(
                (BN, self.colsum_partials, self.colsum_stages)))

        n_blocks = key_blocks(m_block, (BM, BN), s_q, s_kv, self.causal)

        if wg == 0:
            # ---------------- producer: TMA of Q once, then K and V tiles ----------------
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp == 0:
                gQ = cute.local_tile(tQ, (BM, D), (None, None, None, None))
                gK = cute.local_tile(tK, (BN, D), (None, None, None, None))
                gV = cute.local_tile(tV, (D, BN), (None, None, None, None))
                tQsQ, tQgQ = cpasync.tma_partition(tma_q, 0, cute.make_layout(1),
                                                   cute.group_modes(sQ, 0, 2),
                                                   cute.group_modes(gQ, 0, 2))
                tKsK, tKgK = cpasync.tma_partition(tma_k, 0, cute.make_layout(1),
                                                   cute.group_modes(sK, 0, 2),
                                                   cute.group_modes(gK, 0, 2))
                tVsV, tVgV = cpasync.tma_partition(tma_v, 0, cute.make_layout(1),
                                                   cute.group_modes(sV, 0, 2),
                                                   cute.group_modes(gV, 0, 2))
                q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
                q_pipe.producer_acquire(q_state)
                cute.copy(tma_q, tQgQ[(None, m_block, 0, head, batch)], tQsQ[(None, 0)],
                          tma_bar_ptr=q_pipe.producer_get_barrier(q_state))
                q_pipe.producer_commit(q_state)
                k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer,
                                                       self.stages)
                v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer,
                                                       self.stages)
                for step in cutlass.range(n_blocks, unroll=1):
                    n = n_blocks - 1 - step
                    k_pipe.producer_acquire(k_state)
                    cute.copy(tma_k, tKgK[(None, n, 0, kv_head, batch)],
                              tKsK[(None, k_state.index)],
                              tma_bar_ptr=k_pipe.producer_get_barrier(k_state))
                    k_pipe.producer_commit(k_state)
                    k_state.advance()
                    v_pipe.producer_acquire(v_state)
                    cute.copy(tma_v, tVgV[(None, 0, n, kv_head, batch)],
                              tVsV[(None, v_state.index)],
                              tma_bar_ptr=v_pipe.producer_get_barrier(v_state))
                    v_pipe.producer_commit(v_state)
                    v_state.advance()
                k_pipe.producer_tail(k_state)
                v_pipe.producer_tail(v_state)
            if cutlass.const_expr(self.colsum):
                if warp >= 1 and warp <= self.colsum_writers:
                    self._colsum_writer(col_pipe, sCol, mColsum, n_blocks, s_kv, batch, head,
                                        m_block, tidx % 32, warp - 1)
        else:
            # ---------------- consumers: S = Q K^T, softmax, O += P V ----------------
            cute.arch.setmaxregister_increase(self.consumer_regs)
            ctid = tidx - 128
            thr_qk = qk_mma.get_slice(ctid)
            thr_pv = pv_mma.get_slice(ctid)
            tSrQ = qk_mma.make_fragment_A(thr_qk.partition_A(sQ))
            tSrK = qk_mma.make_fragment_B(thr_qk.partition_B(sK))
            tOrV = pv_mma.make_fragment_B(thr_pv.partition_B(sV))
            acc_O = cute.make_rmem_tensor(pv_mma.partition_shape_C((BM, D)), Float32)
            acc_O.fill(0.0)
            # wgmma atoms start with scale-d = 0 (overwrite): both MMAs accumulate (S from zeros)
            pv_mma.set(warpgroup.Field.ACCUMULATE, True)
            qk_mma.set(warpgroup.Field.ACCUMULATE, True)
            col_mma.set(warpgroup.Field.ACCUMULATE, True)
            acc_S = cute.make_rmem_tensor(qk_mma.partition_shape_C((BM, BN)), Float32)
            rows = cute.size(acc_mn_view(acc_O), mode=[0])
            row_max = cute.make_rmem_tensor(rows, Float32)
            row_sum = cute.make_rmem_tensor(rows, Float32)
            row_max.fill(-Float32.inf)
            row_sum.fill(0.0)

            q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            q_pipe.consumer_wait(q_state)
            k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                                   self.stages)
            v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                                   self.stages)
            rP = cute.make_rmem_tensor_like(acc_S, sQ.element_type)
            tOrP = acc_as_a_operand(rP)
            ctx = (qk_mma, pv_mma, tSrQ, tSrK, tOrV, acc_S, acc_O, tOrP, k_pipe, v_pipe)
            soft = (row_max, row_sum, scale_log2, thr_qk, m_block, (BM, BN), s_q, s_kv)
            col = None
            col_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer,
                                                     self.colsum_stages)
            if cutlass.const_expr(self.colsum):
                col = self._colsum_setup(col_mma, qk_mma, thr_qk, storage, sP_layout, sF_layout,
                                         mPrevLSE, s_q, batch, head, m_block, ctid, rP,
                                         row_max, scale_log2, sCol, col_pipe)
            mma_sums = self.colsum and self.colsum_method == "mma"
            shuffle_sums = self.colsum and self.colsum_method == "shuffle"
            sync_sums = self.colsum and self.colsum_method == "mma_sync"
            if cutlass.const_expr(not self.overlap):
                wg_c = ctid // 128
                if cutlass.const_expr(self.pingpong):
                    # the last consumer opens the first turn
                    if wg_c == self.consumer_wgs - 1:
                        cute.arch.barrier_arrive(barrier_id=self.pingpong_barrier_id,
                                                 number_of_threads=256)
                for step in cutlass.range(n_blocks, unroll=1):
                    n = n_blocks - 1 - step
                    if cutlass.const_expr(self.pingpong):
                        # consumers issue Q K^T in turn, so their softmaxes interleave with
                        # each other's wgmmas instead of coinciding
                        cute.arch.barrier(barrier_id=self.pingpong_barrier_id + wg_c,
                                          number_of_threads=256)
                        self._qk(ctx, k_state, False)
                        cute.arch.barrier_arrive(
                            barrier_id=self.pingpong_barrier_id
                            + (wg_c + 1) % self.consumer_wgs, number_of_threads=256)
                        warpgroup.wait_group(0)
                        k_pipe.consumer_release(k_state)
                    else:
                        self._qk(ctx, k_state, True)
                    k_state.advance()
                    if cutlass.const_expr(mma_sums):
                        # the previous tile's column sums retired with this Q K^T
                        if step > 0:
                            self._colsum_push(col, col_state)
                            col_state.advance()
                    self._softmax(ctx, soft, n, step == 0, None)
                    rP.store(acc_S.load().to(sQ.element_type))
                    if cutlass.const_expr(mma_sums):
                        # the column sums of P ride behind O += P V on the tensor cores; their
                        # operands are stored while P V runs (the proxy fence waits for it,
                        # as this warpgroup would anyway) and they retire with the next Q K^T
                        self._pv(ctx, v_state, False)
                        self._colsum_operands(col)
                        self._colsum_mma(col)
                        warpgroup.wait_group(1)
                        v_pipe.consumer_release(v_state)
                    elif cutlass.const_expr(shuffle_sums or sync_sums):
                        # the column sums (from S or P, still in registers) run under O += P V
                        # (mma.sync sums issued under the next Q K^T instead: 1.3x slower)
                        if cutlass.const_expr(sync_sums):
                            # mma.syncs issued behind P V would wait for it (math throttle):
                            # issue them first, read them after
                            self._colsum_sync(col, acc_S)
                        self._pv(ctx, v_state, False)
                        if cutlass.const_expr(shuffle_sums):
                            self._colsum_partial(col, col_state, acc_S)
                        else:
                            self._colsum_sync_push(col, col_state)
                        col_state.advance()
                        warpgroup.wait_group(0)
                        v_pipe.consumer_release(v_state)
                    else:
                        self._pv(ctx, v_state, True)
                    v_state.advance()
                if cutlass.const_expr(mma_sums):
                    if n_blocks > 0:
                        warpgroup.wait_group(0)
                        self._colsum_push(col, col_state)
            else:
                # S(n) = Q K(n)^T and O += P(n + 1) V(n + 1) in flight together; the softmax of
                # S(n) runs while the P V wgmmas do, and O's rescale waits for them. Column sums
                # by MMA: the operands of P(n + 1) are stored where the tensor cores idle anyway
                # (end of the previous step), the wgmmas issued after the softmax of S(n) (more
                # in flight with P V would block their issue, and the softmax with it), and
                # retired after O's rescale.
                correction = cute.make_rmem_tensor(rows, Float32)
                if n_blocks > 0:
                    self._qk(ctx, k_state, True)
                    k_state.advance()
                    self._softmax(ctx, soft, n_blocks - 1, True, None)
                    if cutlass.const_expr(shuffle_sums):
                        self._colsum_partial(col, col_state, acc_S)
                        col_state.advance()
                    rP.store(acc_S.load().to(sQ.element_type))
                    if cutlass.const_expr(mma_sums):
                        self._colsum_operands(col)
                    if cutlass.const_expr(sync_sums):
                        self._colsum_sync(col, acc_S)
                for step in cutlass.range(1, n_blocks, unroll=1):
                    n = n_blocks - 1 - step
                    self._qk(ctx, k_state, False)
                    self._pv(ctx, v_state, False)
                    if cutlass.const_expr(sync_sums):
                        self._colsum_sync_push(col, col_state)  # P(n + 1)'s
                        col_state.advance()
                    warpgroup.wait_group(1)  # groups retire in order: S(n) is ready
                    k_pipe.consumer_release(k_state)
                    k_state.advance()
                    self._softmax(ctx, soft, n, False, correction)
                    if cutlass.const_expr(shuffle_sums):
                        self._colsum_partial(col, col_state, acc_S)
                        col_state.advance()
                    if cutlass.const_expr(mma_sums):
                        self._colsum_mma(col)
                        warpgroup.wait_group(1)
                    else:
                        warpgroup.wait_group(0)
                    v_pipe.consumer_release(v_state)
                    v_state.advance()
                    rescale_rows(acc_O, correction)
                    rP.store(acc_S.load().to(sQ.element_type))
                    if cutlass.const_expr(mma_sums):
                        warpgroup.wait_group(0)
                        self._colsum_push(col, col_state)
                        col_state.advance()
                        self._colsum_operands(col)
                    if cutlass.const_expr(sync_sums):
                        # P(n) in bf16 is complete only here (rP is P V's operand until the
                        # wait above); the sums are read after the next wgmmas are issued
                        self._colsum_sync(col, acc_S)
                if n_blocks > 0:
                    if cutlass.const_expr(mma_sums):
                        self._pv(ctx, v_state, False)
                        self._colsum_mma(col)
                        warpgroup.wait_group(0)
                        v_pipe.consumer_release(v_state)
                        self._colsum_push(col, col_state)
                    elif cutlass.const_expr(sync_sums):
                        self._pv(ctx, v_state, False)
                        self._colsum_sync_push(col, col_state)
                        warpgroup.wait_group(0)
                        v_pipe.consumer_release(v_state)
                    else:
                        self._pv(ctx, v_state, True)
                    v_state.advance()

            lse = cute.make_rmem_tensor(rows, Float32)
            softmax_finish(acc_O, row_max, row_sum, lse, scale_log2)
            self._store(acc_O, lse, thr_pv, pv_mma, sQ, tma_o, tO, mLSE, s_q, batch, head,
                        m_block, ctid, warp)

    @cute.jit
    def _qk(self, ctx, k_state, wait: cutlass.Constexpr):
        """Issue S = Q K^T for the K stage ``k_state`` (one commit group); with ``wait``, also
        retire it and free the stage."""
        qk_mma, _, tSrQ, tSrK, _, acc_S, _, _, k_pipe, _ = ctx
        k_pipe.consumer_wait(k_state)
        # the MMA accumulates (set once in the kernel body: a helper cannot rebind the atom's
        # field across the staged loop), so S starts from zeros
        acc_S.fill(0.0)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
            cute.gemm(qk_mma, acc_S, tSrQ[(None, None, kb, 0)],
                      tSrK[(None, None, kb, k_state.index)], acc_S)
        warpgroup.commit_group()
        if cutlass.const_expr(wait):
            warpgroup.wait_group(0)
            k_pipe.consumer_release(k_state)

    @cute.jit
    def _pv(self, ctx, v_state, wait: cutlass.Constexpr):
        """Issue O += P V for the V stage ``v_state`` (one commit group); with ``wait``, also
        retire it and free the stage."""
        _, pv_mma, _, _, tOrV, _, acc_O, tOrP, _, v_pipe = ctx
        v_pipe.consumer_wait(v_state)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
            cute.gemm(pv_mma, acc_O, tOrP[(None, None, kb)],
                      tOrV[(None, None, kb, v_state.index)], acc_O)
        warpgroup.commit_group()
        if cutlass.const_expr(wait):
            warpgroup.wait_group(0)
            v_pipe.consumer_release(v_state)

    @cute.jit
    def _softmax(self, ctx, soft, n, first, correction):
        """Mask + online softmax of S."""
        acc_S, acc_O = ctx[5], ctx[6]
        row_max, row_sum, scale_log2, thr_qk, m_block, block_mn, s_q, s_kv = soft
        mask_and_softmax(acc_S, acc_O, row_max, row_sum, scale_log2, thr_qk, m_block, n,
                         block_mn, s_q, s_kv, self.causal, first, correction)

    @cute.jit
    def _colsum_setup(self, col_mma, qk_mma, thr_qk, storage, sP_layout, sF_layout, mPrevLSE,
                      s_q, batch, head, m_block, ctid, rP, row_max, scale_log2, sCol,
                      col_pipe):
        """Consumer thread ``ctid``'s column-sum state (a namespace): its rows' previous-step
        normalisers and, for MMA sums, the column-sum MMA's operands and fragments."""
        BM, BN = self.block_m, self.block_n
        wg_c, lane = ctid // 128, ctid % 32
        # this thread's rows: within the CTA tile and (for prev_lse) within the sequence
        local_rows = acc_mn_view(thr_qk.partition_C(cute.make_identity_tensor((BM, BN))))
        prev_l2 = cute.make_rmem_tensor(cute.size(row_max), Float32)
        for r in cutlass.range_constexpr(cute.size(prev_l2)):
            row = m_block * BM + local_rows[r, 0][0]
            prev_l2[r] = Float32.inf  # f = 0: rows past S_q add nothing
            if row < s_q:
                prev_l2[r] = mPrevLSE[batch, head, row] * Float32(LOG2E)
        tCsP, tCsF, acc_C, cC, r2s, thr_r2s, tPsP, rPc, sF, sums = (None,) * 10
        if cutlass.const_expr(self.colsum_method == "mma"):
            sP = storage.sP.get_tensor(sP_layout.outer, swizzle=sP_layout.inner)  # key, row, wg
            sF = storage.sF.get_tensor(sF_layout.outer, swizzle=sF_layout.inner)  # n, row, wg
            thr_col = col_mma.get_slice(ctid % 128)
            tCsP = col_mma.make_fragment_A(thr_col.partition_A(sP))
            tCsF = col_mma.make_fragment_B(thr_col.partition_B(sF))
            acc_C = cute.make_rmem_tensor(col_mma.partition_shape_C((BN, 8)), Float32)
            cC = thr_col.partition_C(cute.make_identity_tensor((BN, 8)))
            # P from its accumulator layout into the (query row, key) view of all consumers' sP
            sP_rows = cute.make_tensor(sP.iterator, cute.group_modes(
                cute.select(sP.layout, mode=[1, 2, 0]), 0, 2))
            r2s = cute.make_tiled_copy_C(cute.make_copy_atom(
                cute.nvgpu.warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), BFloat16),
                qk_mma)
            thr_r2s = r2s.get_slice(ctid)
            tPsP = thr_r2s.partition_D(sP_rows)
        if cutlass.const_expr(self.colsum_method in ("mma", "mma_sync")):
            rPc = rP
            if cutlass.const_expr(rP.element_type != BFloat16):
                rPc = cute.make_rmem_tensor_like(rP, BFloat16)
            sums = cute.make_rmem_tensor(BN // 32, Float32)
        return SimpleNamespace(
            col_mma=col_mma, tCsP=tCsP, tCsF=tCsF, acc_C=acc_C, cC=cC, r2s=r2s, thr_r2s=thr_r2s,
            tPsP=tPsP, rP=rP, rPc=rPc, sF=sF, local_rows=local_rows, prev_l2=prev_l2,
            row_max=row_max, scale_log2=scale_log2, sCol=sCol, col_pipe=col_pipe, wg_c=wg_c,
            lane=lane, thr_qk=thr_qk, ctid=ctid, sums=sums)

    @cute.jit
    def _colsum_operands(self, col):
        """Store P (in ``rP``) and the factors f = exp2(m * scale_log2 - prev_lse log2 e) of
        its rows to smem for the column-sum MMA. Call it with no wgmma in flight (the proxy
        fence would wait for them) and before the next softmax moves the running max."""
        if cutlass.const_expr(col.rP.element_type != BFloat16):
            col.rPc.store(col.rP.load().to(BFloat16))
        cute.copy(col.r2s, col.thr_r2s.retile(col.rPc), col.tPsP)
        factors = previous_step_factors(col.row_max, col.prev_l2, col.scale_log2)
        # the four lanes of a quad share rows; each writes f to one of the even columns, which
        # are the ones _colsum_push reads
        for r in cutlass.range_constexpr(cute.size(factors)):
            col.sF[2 * (col.lane % 4), col.local_rows[r, 0][0] % 64, col.wg_c] = \
                factors[r].to(BFloat16)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=self.colsum_barrier_id + col.wg_c, number_of_threads=128)

    @cute.jit
    def _colsum_mma(self, col):
        """Issue sums(key) = sum_row P[row, key] f[row] over this consumer's 64 rows (one
        wgmma commit group)."""
        col_mma, tCsP, tCsF, acc_C, wg_c = col.col_mma, col.tCsP, col.tCsF, col.acc_C, col.wg_c
        acc_C.fill(0.0)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tCsP, mode=[2])):
            cute.gemm(col_mma, acc_C, tCsP[(None, None, kb, wg_c)],
                      tCsF[(None, None, kb, wg_c)], acc_C)
        warpgroup.commit_group()

    @cute.jit
    def _colsum_push(self, col, col_state):
        """Hand the retired column sums to the writer warp: each quad holds the same keys
        (every even column is the sum), so its lanes split them, one store each."""
        acc_C, cC, sCol, col_pipe = col.acc_C, col.cC, col.sCol, col.col_pipe
        wg_c, lane = col.wg_c, col.lane
        col_pipe.producer_acquire(col_state)
        # values come in (column pair, ...) order: even indices are column 2 * (lane % 4)
        for i in cutlass.range_constexpr(0, cute.size(acc_C), 2):
            if (i // 2) % 4 == lane % 4:
                sCol[cC[i][0], wg_c, col_state.index] = acc_C[i]
        col_pipe.producer_commit(col_state)

    @cute.jit
    def _colsum_sync(self, col, acc_S):
        """Issue the mma.sync sums of the P just computed: this warp's share of the key tile's
        column sums (P in bf16 transposed in registers, times the rows' factors, on the tensor
        cores) into ``col.sums``. Call it after the softmax, before the next Q K^T is issued
        (non-bf16 P is rounded to bf16 from S, since fp16 could not hold every factor)."""
        if cutlass.const_expr(col.rP.element_type != BFloat16):
            col.rPc.store(acc_S.load().to(BFloat16))
        factors = previous_step_factors(col.row_max, col.prev_l2, col.scale_log2)
        mma_sync_column_sums(col.rPc, factors, col.lane, col.sums)

    @cute.jit
    def _colsum_sync_push(self, col, col_state):
        """Hand ``col.sums`` to the writer warps through the smem ring, one slot per warp."""
        col.col_pipe.producer_acquire(col_state)
        for i in cutlass.range_constexpr(cute.size(col.sums)):
            col.sCol[mma_sync_sum_key(i, col.lane), col.ctid // 32, col_state.index] = \
                col.sums[i]
        col.col_pipe.producer_commit(col_state)

    @cute.jit
    def _colsum_partial(self, col, col_state, acc_S):
        """Shuffle sums: this warp's share of one key tile's column sums, from S (the softmax
        numerators p = exp2((s - m) * scale_log2), still fp32) times one factor per row,
        ``exp2(m * scale_log2 - prev_lse * log2 e)``; summed over the warp's rows, reduce-
        scattered across its lanes and handed to the writer warps through the smem ring."""
        prev_l2, row_max, scale_log2 = col.prev_l2, col.row_max, col.scale_log2
        sCol, col_pipe, lane, thr_qk, ctid = col.sCol, col.col_pipe, col.lane, col.thr_qk, col.ctid
        factors = previous_step_factors(row_max, prev_l2, scale_log2)
        part = weighted_column_sums(acc_S, factors)
        first = reduce_scatter_rows(part, lane, self.colsum_rounds)
        lane_col0 = acc_mn_view(thr_qk.partition_C(
            cute.make_identity_tensor((self.block_m, self.block_n))))[0, 0][1]
        col_pipe.producer_acquire(col_state)
        # lanes that differ only in the lane bits not reduced hold partials of the same columns
        spread = 1 << (3 - self.colsum_rounds)
        slot = (ctid // 32) * spread + (lane >> 2) % spread
        for i in cutlass.range_constexpr(cute.size(part) >> self.colsum_rounds):
            sCol[tile_column(first + i, lane_col0), slot, col_state.index] = part[i]
        col_pipe.producer_commit(col_state)

    @cute.jit
    def _colsum_writer(self, col_pipe, sCol, mColsum, n_blocks, s_kv, batch, head, m_block,
                       lane, writer):
        """Writer warp ``writer`` (warps 1, 2, ...): per key tile, add the partials of each
        query group (the CTA spans at most two) in its 32-column chunks and write them
        coalesced (columns past ``s_kv`` skipped): stored when the group is the CTA's tile,
        else added onto the zeroed output (one of two terms)."""
        BM, BN, G = self.block_m, self.block_n, self.group
        per_wg = self.colsum_partials // self.consumer_wgs
        row0 = m_block * BM
        group0 = row0 // G
        # consumers [0, split) lie in group0, the others in group0 + 1
        split = min(self.consumer_wgs, ((group0 + 1) * G - row0) // 64)
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                             self.colsum_stages)
        for step in cutlass.range(n_blocks, unroll=1):
            n = n_blocks - 1 - step
            col_pipe.consumer_wait(state)
            for j in cutlass.range_constexpr(BN // 32):
                if j % self.colsum_writers == writer:
                    c = lane + 32 * j
                    key = n * BN + c
                    if cutlass.const_expr(self.colsum_atomic):
                        first, second = Float32(0.0), Float32(0.0)
                        for p in cutlass.range_constexpr(self.colsum_partials):
                            v = sCol[c, p, state.index]
                            first = first + (v if p // per_wg < split else Float32(0.0))
                            second = second + (Float32(0.0) if p // per_wg < split else v)
                        if key < s_kv:
                            cute.arch.red(mColsum[batch, head, group0, None].iterator + key,
                                          first, op="add", dtype="f32", sem="relaxed",
                                          scope="gpu")
                            if split < self.consumer_wgs and group0 + 1 < mColsum.shape[2]:
                                cute.arch.red(
                                    mColsum[batch, head, group0 + 1, None].iterator + key,
                                    second, op="add", dtype="f32", sem="relaxed", scope="gpu")
                    else:
                        total = sCol[c, 0, state.index]
                        for p in cutlass.range_constexpr(1, self.colsum_partials):
                            total = total + sCol[c, p, state.index]
                        if key < s_kv:
                            mColsum[batch, head, group0, key] = total
            col_pipe.consumer_release(state)
            state.advance()

    @cute.jit
    def _store(self, acc_O, lse, thr_pv, pv_mma, sQ, tma_o, tO, mLSE, s_q, batch, head,
               m_block, ctid, warp):
        """O through Q's smem and one TMA store (rows past S_q clipped); lse per row."""
        BM, D = self.block_m, self.head_dim
        dtype = sQ.element_type
        barrier_threads = 128 * self.consumer_wgs
        rO = cute.make_rmem_tensor_like(acc_O, dtype)
        rO.store(acc_O.load().to(dtype))
        sO = sQ[(None, None, 0)]
        r2s = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype),
                                     pv_mma)
        thr_r2s = r2s.get_slice(ctid)
        # every consumer has finished its last Q K^T (Q's smem is free)
        cute.arch.barrier(barrier_id=self.epi_barrier_id, number_of_threads=barrier_threads)
        cute.copy(r2s, thr_r2s.retile(rO), thr_r2s.partition_D(sO))
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=self.epi_barrier_id, number_of_threads=barrier_threads)
        if warp == 4:
            gO = cute.local_tile(tO, (BM, D), (None, None, None, None))
            tOsO, tOgO = cpasync.tma_partition(tma_o, 0, cute.make_layout(1),
                                               cute.group_modes(sQ, 0, 2),
                                               cute.group_modes(gO, 0, 2))
            with cute.arch.elect_one():
                cute.copy(tma_o, tOsO[(None, 0)], tOgO[(None, m_block, 0, head, batch)])
                cute.arch.cp_async_bulk_commit_group()
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        store_lse(lse, thr_pv, mLSE, batch, head, m_block, (BM, D), s_q, ctid)
