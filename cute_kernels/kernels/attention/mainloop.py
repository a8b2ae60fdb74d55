"""The consumers' mainloops of the Hopper attention kernel (``AttentionSm90``): per key block
Q K^T and P V by WGMMA and the online softmax between them, sequential or overlapped, with the
consumers optionally taking turns (``pingpong``) to issue their wgmmas.

``ConsumerMainloops`` is a mixin of ``AttentionSm90`` (as ``PersistentSchedule`` is): ``mma``
(sm90.py) sets up a consumer's fragments and softmax state (``roles.ConsumerTile``), runs one of
these loops and the epilogue; the configuration they read (``overlap``, ``pingpong``,
``stages``, the key-block iterator, the column-sum collaborator) is checked in sm90.py.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32
from cutlass.cute.nvgpu import warpgroup

from .online_softmax import mask_and_softmax, rescale_rows
from .roles import NamedBarrier


class ConsumerMainloops:
    """The consumers' mainloops and their pieces (a mixin of ``AttentionSm90``; module
    docstring)."""

    @cute.jit
    def _mainloop_sequential(self, mc, col, k_state=None, v_state=None):
        """Per key block: S = Q K^T (with ``pingpong``, consumers issue it in turn so their
        softmaxes interleave with each other's wgmmas instead of coinciding), softmax, then
        O += P V retired before the next block; column sums at their named points. K/V
        states: fresh, or carried (persistent); returned advanced."""
        k_state, v_state, col_state = self._loop_states(k_state, v_state)
        v_pipe, blocks = mc.v_pipe, mc.blocks
        rP, acc_S, n_blocks = mc.rP, mc.acc_S, blocks.n_blocks
        for step in cutlass.range(n_blocks, unroll=1):
            n = self.key_blocks.block(blocks, step)
            self._qk_retired(mc, k_state)
            k_state.advance()
            col_state = self.sums.seq_after_qk(col, col_state, step)
            self._softmax(mc, n, step == 0, None, step)
            rP.store(acc_S.load().to(rP.element_type))
            self.sums.seq_before_pv(col, acc_S)
            self._pv(mc, v_state, False)
            col_state = self.sums.seq_after_pv_issued(col, col_state, acc_S)
            warpgroup.wait_group(self.sums.pv_wait)
            v_pipe.consumer_release(v_state)
            v_state.advance()
        self.sums.seq_finish(col, col_state, n_blocks)
        return k_state, v_state

    @cute.jit
    def _mainloop_overlapped(self, mc, col, rows, k_state=None, v_state=None):
        """S(n) = Q K(n)^T and O += P(n + 1) V(n + 1) in flight together: the softmax of S(n)
        runs while the P V wgmmas do, and O's rescale waits for them (the first block is
        peeled: its softmax has no P V beside it; the last P V runs alone). K/V states as
        ``_mainloop_sequential``."""
        k_state, v_state, col_state = self._loop_states(k_state, v_state)
        k_pipe, v_pipe, blocks = mc.k_pipe, mc.v_pipe, mc.blocks
        rP, acc_S, n_blocks = mc.rP, mc.acc_S, blocks.n_blocks
        correction = cute.make_rmem_tensor(rows, Float32)
        hidden = self._first_block_hidden(mc)
        if n_blocks > 0:
            self._qk_retired(mc, k_state, hidden)
            k_state.advance()
            self._softmax(mc, self.key_blocks.block(blocks, 0), True, None, 0)
            col_state = self.sums.ovl_first_softmax(col, col_state, acc_S)
            rP.store(acc_S.load().to(rP.element_type))
            self.sums.ovl_probabilities(col, acc_S)
        for step in cutlass.range(1, n_blocks, unroll=1):
            n = self.key_blocks.block(blocks, step)
            self._take_turn(mc.wg_c)
            self._qk(mc, k_state, False)
            self._pv(mc, v_state, False, hidden, step == 1)
            self._pass_turn(mc.wg_c)
            col_state = self.sums.ovl_after_wgmmas_issued(col, col_state)
            warpgroup.wait_group(1)  # groups retire in order: S(n) is ready
            k_pipe.consumer_release(k_state)
            k_state.advance()
            self._softmax(mc, n, False, correction, step)
            col_state = self.sums.ovl_after_softmax(col, col_state, acc_S)
            self.sums.ovl_retire_pv(col)
            v_pipe.consumer_release(v_state)
            v_state.advance()
            rescale_rows(mc.acc_O, correction)
            rP.store(acc_S.load().to(rP.element_type))
            col_state = self.sums.ovl_retire_sums(col, col_state)
            self.sums.ovl_probabilities(col, acc_S)
        if n_blocks > 0:
            self._take_turn(mc.wg_c)
            self._pv(mc, v_state, False, hidden, n_blocks == 1)
            self._pass_turn(mc.wg_c)
            self.sums.ovl_last_pv_issued(col, col_state)
            warpgroup.wait_group(0)
            v_pipe.consumer_release(v_state)
            self.sums.ovl_last_pv_retired(col, col_state)
            v_state.advance()
        return k_state, v_state

    def _loop_states(self, k_state, v_state):
        """(K, V, column-sum ring) states of a mainloop: K/V fresh, or carried from the last
        tile (persistent); the ring's producer state fresh per tile."""
        if k_state is None:
            k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                                   self.stages)
            v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                                   self.stages)
        return k_state, v_state, pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.colsum_stages)

    @cute.jit
    def _first_block_hidden(self, mc):
        """Whether the causal mask hides this consumer's whole first visited key block: the
        tile's last block, when it starts past the last key this consumer's 64 rows may see
        (128 x 64 tiles: the lower consumer's, every tile but a residue one). Its Q K^T and
        P V are skipped (the stages still waited for and freed, the turns still taken): -inf
        scores, P = 0. None (compile time) where it cannot happen: non-causal, or key tiles
        wider than block_m - 64 (the tile's last block holds a key every consumer sees)."""
        hidden = None
        # (possible only where a key tile fits above the lower consumer's rows)
        if cutlass.const_expr(self.skip_hidden and self.causal and not self.split_kv
                              and self.block_n <= self.block_m - 64):
            blocks = mc.blocks
            last_row = blocks.m_block * self.block_m + 64 * mc.wg_c + 63
            first = self.key_blocks.block(blocks, 0)
            hidden = first * self.block_n > last_row + blocks.s_kv - blocks.s_q
        return hidden

    @cute.jit
    def _qk_retired(self, mc, k_state, hidden=None):
        """S = Q K^T issued (in this consumer's turn with ``pingpong``), retired and its K
        stage freed; ``hidden`` (run time): no wgmma, S = -inf."""
        if cutlass.const_expr(self.pingpong):
            self._take_turn(mc.wg_c)
            self._qk(mc, k_state, False, hidden)
            self._pass_turn(mc.wg_c)
            warpgroup.wait_group(0)
            mc.k_pipe.consumer_release(k_state)
        else:
            self._qk(mc, k_state, True, hidden)

    @cute.jit
    def _open_pingpong(self, wg_c):
        """``pingpong``: the last consumer opens the first turn (once per kernel: the turns
        run on from tile to tile in the persistent schedule)."""
        if cutlass.const_expr(self.pingpong):
            if wg_c == self.consumer_wgs - 1:
                cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.PINGPONG),
                                         number_of_threads=256)

    @cute.jit
    def _take_turn(self, wg_c):
        """``pingpong``: wait for this consumer's turn to issue wgmmas."""
        if cutlass.const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=int(NamedBarrier.PINGPONG) + wg_c,
                              number_of_threads=256)

    @cute.jit
    def _pass_turn(self, wg_c):
        """``pingpong``: hand the turn to the next consumer."""
        if cutlass.const_expr(self.pingpong):
            cute.arch.barrier_arrive(
                barrier_id=int(NamedBarrier.PINGPONG) + (wg_c + 1) % self.consumer_wgs,
                number_of_threads=256)

    @cute.jit
    def _qk(self, mc, k_state, wait: cutlass.Constexpr, hidden=None):
        """Issue S = Q K^T for the K stage ``k_state`` (one commit group); with ``wait``, also
        retire it and free the stage. ``hidden`` (run time, ``_first_block_hidden``): no
        wgmma (an empty group), S = -inf."""
        mc.k_pipe.consumer_wait(k_state)
        # the MMA accumulates (set once in ``mma``: a helper cannot rebind the atom's field
        # across the staged loop), so S starts from zeros
        acc_S, qk_mma, tSrQ, tSrK, q_stage = mc.acc_S, mc.qk_mma, mc.tSrQ, mc.tSrK, mc.q_stage
        acc_S.fill(0.0)
        warpgroup.fence()
        if cutlass.const_expr(hidden is None):
            _wgmmas(qk_mma, acc_S, tSrQ, tSrK, q_stage, k_state.index)
        elif hidden:
            acc_S.fill(-Float32.inf)
        else:
            _wgmmas(qk_mma, acc_S, tSrQ, tSrK, q_stage, k_state.index)
        warpgroup.commit_group()
        if cutlass.const_expr(wait):
            warpgroup.wait_group(0)
            mc.k_pipe.consumer_release(k_state)

    @cute.jit
    def _pv(self, mc, v_state, wait: cutlass.Constexpr, hidden=None, first_block=None):
        """Issue O += P V for the V stage ``v_state`` (one commit group); with ``wait``, also
        retire it and free the stage. ``hidden`` and ``first_block`` (run time): this is the
        first visited block's P V and it is hidden (P = 0): no wgmma."""
        mc.v_pipe.consumer_wait(v_state)
        acc_O, pv_mma, tOrP, tOrV = mc.acc_O, mc.pv_mma, mc.tOrP, mc.tOrV
        warpgroup.fence()
        if cutlass.const_expr(hidden is None):
            _wgmmas(pv_mma, acc_O, tOrP, tOrV, None, v_state.index)
        elif not (hidden and first_block):
            _wgmmas(pv_mma, acc_O, tOrP, tOrV, None, v_state.index)
        warpgroup.commit_group()
        if cutlass.const_expr(wait):
            warpgroup.wait_group(0)
            mc.v_pipe.consumer_release(v_state)

    @cute.jit
    def _softmax(self, mc, n, first, correction, step):
        """Mask (where the key-block iterator says so for visit ``step`` of block ``n``) +
        online softmax of S."""
        mask_and_softmax(mc.acc_S, mc.acc_O, mc.row_max, mc.row_sum, mc.scale_log2, mc.thr_qk,
                         self.key_blocks, mc.blocks, n, first, correction, step)


@cute.jit
def _wgmmas(tiled_mma, acc, tA, tB, a_stage, b_stage):
    """acc += A B over the k-blocks of one stage: ``tA`` indexed (.., kb, ``a_stage``) (Q's
    smem stage) or, ``a_stage`` None, (.., kb) (P in registers); ``tB`` (.., kb,
    ``b_stage``)."""
    for kb in cutlass.range_constexpr(cute.size(tA, mode=[2])):
        if cutlass.const_expr(a_stage is None):
            a = tA[(None, None, kb)]
        else:
            a = tA[(None, None, kb, a_stage)]
        cute.gemm(tiled_mma, acc, a, tB[(None, None, kb, b_stage)], acc)
