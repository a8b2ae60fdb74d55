"""The producer role of the Hopper attention kernels: the CTA's mbarrier pipelines and the
loads of Q (one TMA per query tile) and of K and V (per visited key block, through the K/V
loader), shared by ``AttentionSm90`` (sm90.py, its persistent walk in persistent.py) and the
swap-AB decode kernel ``DecodeSm90`` (decode_sm90.py).

``ProducerLoads`` is a mixin. It reads the kernel's configuration: ``block_m`` and
``head_dim`` (the Q tile), ``stages`` and ``q_stages`` (ring depths), ``consumer_wgs``,
``kv_loader`` (kv_loader.py), ``key_blocks`` (block_info.py: which key blocks a tile visits),
``gather`` / ``gather_prefetch`` (the row gather's producer warpgroup), ``async_store`` (who
frees a Q stage) and ``colsum`` (the column-sum ring).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync

from .roles import TMA_WARP, Pipelines


class ProducerLoads:
    """Pipelines and the producer's loads (a mixin; module docstring)."""

    def _smem_tiles(self, storage, sQ_layout, sK_layout, sV_layout):
        """(sQ, sK, sV, pipes): the Q, K and V stages of ``storage`` (a SharedStorage with
        members ``sQ``, ``sK``, ``sV`` and ``mbar``) as swizzled tensors, and the CTA's
        pipelines over them (``_pipelines``)."""
        sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sV = storage.sV.get_tensor(sV_layout.outer, swizzle=sV_layout.inner)
        return sQ, sK, sV, self._pipelines(storage, sQ.element_type, sQ_layout, sK_layout,
                                           sV_layout)

    @cute.jit
    def _pipelines(self, storage, dtype, sQ_layout, sK_layout, sV_layout):
        """Q (one stage, TMA), K and V (``stages`` each, made by the K/V loader) and, for
        column sums, the consumers -> writer ring; barriers carved from ``storage.mbar`` in
        that order (2 per stage)."""
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumer_wgs * 4)
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        bar = storage.mbar.data_ptr()
        # async_store: the store warp alone frees a Q stage (after its TMA store read O)
        q_consumers = (pipeline.CooperativeGroup(pipeline.Agent.Thread, 1) if self.async_store
                       else consumers)
        q_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=bar, num_stages=self.q_stages, producer_group=producer,
            consumer_group=q_consumers,
            tx_count=cute.size_in_bytes(dtype, cute.slice_(sQ_layout, (None, None, 0))),
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))
        # the loader decides how a K/V stage completes (TMA transaction bytes here)
        k_pipe, v_pipe = self.kv_loader.make_pipelines(bar + 2 * self.q_stages, self.stages,
                                                       self.consumer_wgs, dtype, sK_layout,
                                                       sV_layout)
        col_pipe = None
        if cutlass.const_expr(self.colsum):
            # consumer threads -> the column-sum writer warp; every thread arrives (its own
            # smem writes or reads are then ordered by its own arrive/wait pair)
            col_pipe = pipeline.PipelineAsync.create(
                barrier_storage=bar + 2 * self.q_stages + 4 * self.stages,
                num_stages=self.colsum_stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                         128 * self.consumer_wgs),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                         32 * self.colsum_writers))
        return Pipelines(q_pipe, k_pipe, v_pipe, col_pipe)

    @cute.jit
    def load(self, tma_q, tQ, tma_k, tK, tma_v, tV, sQ, sK, sV, pipes, blocks, tile, rows=None,
             s_kv=None):
        """Producer (one warp): TMA of Q once, then per visited key block its K and V tiles
        through the K/V loader (``rows``: the gather's list, for TMA block loads)."""
        gK, gV = self.kv_loader.tiles(tK, tV)
        kv = self._tma_partition(tma_k, tma_v, gK, gV, sK, sV, blocks, rows, s_kv)
        self._load_q(tma_q, tQ, sQ, pipes.q_pipe, tile)
        self._load_kv(kv, pipes, blocks, tile)

    def _tma_partition(self, tma_k, tma_v, gK, gV, sK, sV, blocks, rows, s_kv):
        """A TMA loader's views; a block loader's also hold the tile's list (``rows``, of
        ``blocks.s_kv`` packed key positions)."""
        if rows is None:
            return self.kv_loader.partition(tma_k, tma_v, gK, gV, sK, sV)
        return self.kv_loader.partition(tma_k, tma_v, gK, gV, sK, sV, rows, blocks.s_kv, s_kv)

    @cute.jit
    def load_gathered(self, tma_q, tQ, mK, mV, sQ, sK, sV, storage, pipes, blocks, tile, rows,
                      s_kv, tidx, warp):
        """Producer (the whole warpgroup) for the gather loader: warp 0 brings Q by TMA, then
        every thread copies its share of each visited key block's K and V rows."""
        if warp == TMA_WARP:
            self._load_q(tma_q, tQ, sQ, pipes.q_pipe, tile)
        sIdx = self.kv_loader.ring(storage.sIdx.data_ptr(), self.stages)
        kv = self.kv_loader.partition(tidx, mK, mV, sK, sV, sIdx, rows, blocks.s_kv, s_kv)
        self._load_kv(kv, pipes, blocks, tile)

    @cute.jit
    def _load_q(self, tma_q, tQ, sQ, q_pipe, tile, q_state=None):
        """The query tile by TMA: into the one stage, or (``q_state``, persistent) into the
        state's stage, returning the advanced state."""
        carried = q_state is not None
        if cutlass.const_expr(not carried):
            q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        self._issue_q(tma_q, tQ, sQ, q_pipe, tile, q_state)
        if cutlass.const_expr(carried):
            q_state.advance()
        return q_state

    @cute.jit
    def _issue_q(self, tma_q, tQ, sQ, q_pipe, tile, q_state):
        """The query tile's TMA into ``q_state``'s stage (the state is not advanced)."""
        gQ = cute.local_tile(tQ, (self.block_m, self.head_dim), (None, None, None, None))
        tQsQ, tQgQ = cpasync.tma_partition(tma_q, 0, cute.make_layout(1),
                                           cute.group_modes(sQ, 0, 2),
                                           cute.group_modes(gQ, 0, 2))
        q_pipe.producer_acquire(q_state)
        cute.copy(tma_q, tQgQ[(None, tile.m_block, 0, tile.head, tile.batch)],
                  tQsQ[(None, q_state.index)],
                  tma_bar_ptr=q_pipe.producer_get_barrier(q_state))
        q_pipe.producer_commit(q_state)

    @cute.jit
    def _load_kv(self, kv, pipes, blocks, tile):
        """K and V of every visited key block through the loader, then the pipelines'
        tails."""
        k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        k_state, v_state = self._load_kv_blocks(kv, pipes, blocks, tile, k_state, v_state)
        pipes.k_pipe.producer_tail(k_state)
        pipes.v_pipe.producer_tail(v_state)

    @cute.jit
    def _load_kv_blocks(self, kv, pipes, blocks, tile, k_state, v_state):
        """K and V of the tile's visited key blocks from the given pipeline states (returned
        advanced). With the gather loader's ``gather_prefetch``, each block's key rows are
        fetched while the block before it is copied (``load_k`` takes this block's and returns
        the next)."""
        k_pipe, v_pipe = pipes.k_pipe, pipes.v_pipe
        prefetch = self.gather and self.gather_prefetch and self.kv_loader.row_prefetch
        row = cutlass.Int32(0)
        if cutlass.const_expr(prefetch):
            if blocks.n_blocks > 0:
                row = self.kv_loader.fetch_row(kv, self.key_blocks.block(blocks, 0))
        for step in cutlass.range(blocks.n_blocks, unroll=1):
            n = self.key_blocks.block(blocks, step)
            if cutlass.const_expr(prefetch):
                n_next = self.key_blocks.block(blocks, cutlass.min(step + 1, blocks.n_blocks - 1))
                row = self.kv_loader.load_k(kv, k_pipe, k_state, n, tile.kv_head, tile.batch,
                                            row, n_next)
            else:
                self.kv_loader.load_k(kv, k_pipe, k_state, n, tile.kv_head, tile.batch)
            k_state.advance()
            self.kv_loader.load_v(kv, v_pipe, v_state, n, tile.kv_head, tile.batch)
            v_state.advance()
        return k_state, v_state
