"""The persistent schedule of the Hopper attention kernel (``AttentionSm90(persistent=True)``):
one or two CTAs per SM stay resident and walk static tile lists, ``mTileOrder`` in CSR form
(entries c and c + 1 bound CTA c's list: the host's ``tile_scheduler.balanced_walks`` for dense
and causal tiles, the device's ``ops.tile_order.snake_walks`` for gathers). Every role carries
its pipeline states from tile to tile, so the producer loads the next tile's Q and first K/V
blocks while the consumers finish this one, and (``async_store``) a producer warp stores each
O tile while the consumers start the next.

``PersistentSchedule`` is a mixin of ``AttentionSm90``: its methods are the kernel's roles
(``load``, ``load_gathered``'s pieces, ``mma``, ``epilogue``) driven over the walk; the
configuration checks and the one-CTA-per-tile path stay in sm90.py.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Int32

from .roles import ASYNC_STORE_WARP, PRODUCER_WARPGROUP, TMA_WARP, NamedBarrier, TileCoord


class PersistentSchedule:
    """The persistent schedule's methods (a mixin of ``AttentionSm90``; module docstring)."""

    @cute.jit
    def _persistent(self, qk_mma, pv_mma, col_mma, tma_q, tQ, tma_k, tK, tma_v, tV, tma_o, tO,
                    mLSE, mIndices, mCounts, mFullIndices, mFullCounts, mDocIds, mTileOrder,
                    sQ, sK, sV, storage, sP_layout, sF_layout, pipes, s_q, s_kv, q_per_kv,
                    scale_log2, tidx, warp, wg, out_scale):
        """The persistent schedule: each role walks the CTA's list of ``mTileOrder`` (entries
        ``mTileOrder[blockIdx.x]`` up to ``mTileOrder[blockIdx.x + 1]``) and carries its
        pipeline states from tile to tile, so the producer fetches the next tile's Q and
        first K/V blocks while the consumers still work on (or store) this one; the
        producer's tails run once, after the last tile. Q's stage is freed once O has left
        it: by the store warp (``async_store``) or by the consumers."""
        tiles = self._tile_walk(mTileOrder, s_q, mLSE)
        lists = (mIndices, mCounts, mFullIndices, mFullCounts, mDocIds)
        if wg == PRODUCER_WARPGROUP:
            self._producer_registers()
            if cutlass.const_expr(self.gather and self.kv_loader.producer_threads > 1):
                self._persistent_load_gathered(tma_q, tQ, tK, tV, sQ, sK, sV, storage, pipes,
                                               tiles, lists, s_q, s_kv, q_per_kv, tidx, warp)
            elif warp == TMA_WARP:
                self._persistent_load(tma_q, tQ, tma_k, tK, tma_v, tV, sQ, sK, sV, pipes,
                                      tiles, lists, s_q, s_kv, q_per_kv)
            if cutlass.const_expr(self.async_store):
                if warp == ASYNC_STORE_WARP:
                    self._persistent_store(tma_o, tO, sQ, pipes.q_pipe, tiles)
        else:
            self._consumer_registers()
            self._persistent_mma(qk_mma, pv_mma, col_mma, sQ, sK, sV, storage, sP_layout,
                                 sF_layout, pipes, tiles, lists, tma_o, tO, mLSE, s_q, s_kv,
                                 q_per_kv, scale_log2, tidx, warp, out_scale)

    @cute.jit
    def _tile_walk(self, mTileOrder, s_q, mLSE):
        """(walks, first, stride, end, query tiles per head, heads): this CTA's tiles are
        entries ``first, first + stride, ... < end`` of the walks (CSR: entries c and c + 1
        are where CTA c's list starts and ends, ``tile_scheduler.balanced_walks``)."""
        cta, _, _ = cute.arch.block_idx()
        return (mTileOrder, Int32(mTileOrder[cta]), Int32(1), Int32(mTileOrder[cta + 1]),
                cute.ceil_div(s_q, self.block_m), mLSE.shape[1])

    def _fresh_states(self, role):
        """The Q, K and V pipeline states of ``role`` (producer or consumer) at stage 0."""
        return (pipeline.make_pipeline_state(role, self.q_stages),
                pipeline.make_pipeline_state(role, self.stages),
                pipeline.make_pipeline_state(role, self.stages))

    @cute.jit
    def _persistent_load(self, tma_q, tQ, tma_k, tK, tma_v, tV, sQ, sK, sV, pipes, tiles,
                         lists, s_q, s_kv, q_per_kv):
        """Producer warp, persistent: per tile of the walk, Q then its K/V blocks, the
        pipeline states carried across tiles; the tails once, after the last."""
        order, first, stride, end, m_tiles, heads = tiles
        gK, gV = self.kv_loader.tiles(tK, tV)
        kv = None
        if cutlass.const_expr(not self.gather):  # the views are the same for every tile
            kv = self.kv_loader.partition(tma_k, tma_v, gK, gV, sK, sV)
        q_state, k_state, v_state = self._fresh_states(pipeline.PipelineUserType.Producer)
        for t in cutlass.range(first, end, stride, unroll=1):
            tile, blocks, rows = self._scheduled_tile(order[t], m_tiles, heads, q_per_kv, s_q,
                                                      s_kv, lists)
            q_state = self._load_q(tma_q, tQ, sQ, pipes.q_pipe, tile, q_state)
            tile_kv = kv
            if cutlass.const_expr(self.gather):  # TMA block loads: the tile's list
                tile_kv = self._tma_partition(tma_k, tma_v, gK, gV, sK, sV, blocks, rows, s_kv)
            k_state, v_state = self._load_kv_blocks(tile_kv, pipes, blocks, tile, k_state,
                                                    v_state)
        pipes.q_pipe.producer_tail(q_state)
        pipes.k_pipe.producer_tail(k_state)
        pipes.v_pipe.producer_tail(v_state)

    @cute.jit
    def _persistent_load_gathered(self, tma_q, tQ, mK, mV, sQ, sK, sV, storage, pipes, tiles,
                                  lists, s_q, s_kv, q_per_kv, tidx, warp):
        """Producer warpgroup, persistent gather: per tile of the walk, warp 0 issues Q by
        TMA and every thread gathers its share of the tile's K/V rows (``load_gathered``), the
        pipeline states carried across tiles; the tails once, after the last."""
        order, first, stride, end, m_tiles, heads = tiles
        sIdx = self.kv_loader.ring(storage.sIdx.data_ptr(), self.stages)
        q_state, k_state, v_state = self._fresh_states(pipeline.PipelineUserType.Producer)
        for t in cutlass.range(first, end, stride, unroll=1):
            tile, blocks, rows = self._scheduled_tile(order[t], m_tiles, heads, q_per_kv, s_q,
                                                      s_kv, lists)
            if warp == TMA_WARP:
                self._issue_q(tma_q, tQ, sQ, pipes.q_pipe, tile, q_state)
            q_state.advance()  # every producer thread, so the state stays outside the branch
            kv = self.kv_loader.partition(tidx, mK, mV, sK, sV, sIdx, rows, blocks.s_kv, s_kv)
            k_state, v_state = self._load_kv_blocks(kv, pipes, blocks, tile, k_state, v_state)
        if warp == TMA_WARP:
            self._q_tail(pipes.q_pipe, q_state.clone())
        pipes.k_pipe.producer_tail(k_state)
        pipes.v_pipe.producer_tail(v_state)

    @cute.jit
    def _persistent_store(self, tma_o, tO, sQ, q_pipe, tiles):
        """Store warp (``async_store``): per tile of the walk, wait until the consumers have
        put O in Q's stage (``O_READY`` + stage), store it by TMA, and free the stage once the
        store has read it; the consumers meanwhile run their next tile on the other stage.
        One barrier per stage: consumers reach a stage's barrier again only after its Q was
        reloaded, which waits for this warp's release, so no arrival is counted twice."""
        order, first, stride, end, m_tiles, heads = tiles
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                               self.q_stages)
        for t in cutlass.range(first, end, stride, unroll=1):
            m_block, head, batch = self._tile_coords(order[t], m_tiles, heads)
            o_ready(q_state.index, 128 * self.consumer_wgs + 32, arrive=False)
            self._store_o(tma_o, tO, sQ, q_state.index, m_block, head, batch)
            cute.arch.sync_warp()  # the elected lane has waited for the store's read
            q_pipe.consumer_release(q_state)
            q_state.advance()

    @cute.jit
    def _persistent_mma(self, qk_mma, pv_mma, col_mma, sQ, sK, sV, storage, sP_layout,
                        sF_layout, pipes, tiles, lists, tma_o, tO, mLSE, s_q, s_kv, q_per_kv,
                        scale_log2, tidx, warp, out_scale):
        """Consumers, persistent: ``mma`` per tile of the walk, the states carried."""
        order, first, stride, end, m_tiles, heads = tiles
        q_state, k_state, v_state = self._fresh_states(pipeline.PipelineUserType.Consumer)
        self._open_pingpong((tidx - 128) // 128)
        for t in cutlass.range(first, end, stride, unroll=1):
            tile, blocks, _ = self._scheduled_tile(order[t], m_tiles, heads, q_per_kv, s_q,
                                                   s_kv, lists)
            q_state, k_state, v_state = self.mma(
                qk_mma, pv_mma, col_mma, sQ, sK, sV, storage, sP_layout, sF_layout, None,
                pipes, blocks, tile, tma_o, tO, mLSE, None, s_q, scale_log2, tidx, warp,
                out_scale, (q_state, k_state, v_state))

    @cute.jit
    def _scheduled_tile(self, tile_id, m_tiles, heads, q_per_kv, s_q, s_kv, lists):
        """(TileCoord, key-block view, gathered key list or None) of tile ``tile_id`` =
        ``(b * H + h) * M + m``."""
        m_block, head, batch = self._tile_coords(tile_id, m_tiles, heads)
        tile = TileCoord(m_block, head, head // q_per_kv, batch)
        blocks, rows = self._key_block_view(tile, s_q, s_kv, *lists, Int32(0), Int32(1))
        return tile, blocks, rows

    @staticmethod
    def _tile_coords(tile_id, m_tiles, heads):
        """(m_block, head, batch) of tile ``tile_id`` = ``(b * H + h) * M + m``."""
        return tile_id % m_tiles, (tile_id // m_tiles) % heads, tile_id // (m_tiles * heads)

    @cute.jit
    def _q_tail(self, q_pipe, q_state):
        """The Q pipeline's producer tail (a method, so the branch that calls it carries no
        pipeline state)."""
        q_pipe.producer_tail(q_state)


@cute.jit
def o_ready(q_stage, threads, arrive: cutlass.Constexpr):
    """Barrier ``O_READY + q_stage`` (consumers arrive, the store warp waits), its id a
    constant per branch: a register id would make ptxas reserve all 16 barriers."""
    for stage in cutlass.range_constexpr(2):
        if q_stage == stage:
            if cutlass.const_expr(arrive):
                cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.O_READY) + stage,
                                         number_of_threads=threads)
            else:
                cute.arch.barrier(barrier_id=int(NamedBarrier.O_READY) + stage,
                                  number_of_threads=threads)
