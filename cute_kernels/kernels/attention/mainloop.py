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
from cutlass import Float32, Int32
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
        # the first visit (a later one where this consumer's rows cannot see the first)
        start = Int32(0)
        if cutlass.const_expr(self._may_skip_first_block()):
            start, k_state, v_state = self._skip_hidden_first_block(mc, k_state, v_state)
        if n_blocks > start:
            self._qk_retired(mc, k_state)
            k_state.advance()
            self._softmax(mc, self.key_blocks.block(blocks, start), True, None, start)
            col_state = self.sums.ovl_first_softmax(col, col_state, acc_S)
            rP.store(acc_S.load().to(rP.element_type))
            self.sums.ovl_probabilities(col, acc_S)
        for step in cutlass.range(start + 1, n_blocks, unroll=1):
            n = self.key_blocks.block(blocks, step)
            self._take_turn(mc.wg_c)
            self._qk(mc, k_state, False)
            self._pv(mc, v_state, False)
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
        if n_blocks > start:
            self._take_turn(mc.wg_c)
            self._pv(mc, v_state, False)
            self._pass_turn(mc.wg_c)
            self.sums.ovl_last_pv_issued(col, col_state)
            warpgroup.wait_group(0)
            v_pipe.consumer_release(v_state)
            self.sums.ovl_last_pv_retired(col, col_state)
            v_state.advance()
        return k_state, v_state

    def _may_skip_first_block(self) -> bool:
        """Whether a consumer's rows can be hidden from a tile's whole first visited key
        block (causal, ``skip_hidden``, and a key tile that fits above the lower consumer's
        64 rows: block_n <= block_m - 64, e.g. 128 x 64 tiles)."""
        return (self.skip_hidden and self.causal and not self.split_kv
                and self.block_n <= self.block_m - 64)

    @cute.jit
    def _skip_hidden_first_block(self, mc, k_state, v_state):
        """(the visit the overlapped loop starts from, the K and V states): 1 where the causal
        mask hides the tile's first visited (last) key block from all this consumer's rows,
        else 0. Skipping it, the consumer still waits for and frees its K and V stages (the
        states advance) and takes its turn empty (both its turns where that block is the
        tile's only one: then its rows see no key), so the pipelines and the turns stay in
        step with the other consumers. No wgmma sits in a branch (ptxas would serialize them
        all: C7520)."""
        # (locals: a method called through ``mc`` inside the run-time ``if`` would make the
        # DSL carry ``mc`` through it)
        blocks, k_pipe, v_pipe, wg_c = mc.blocks, mc.k_pipe, mc.v_pipe, mc.wg_c
        last_row = blocks.m_block * self.block_m + 64 * wg_c + 63
        first_key = self.key_blocks.block(blocks, 0) * self.block_n
        hidden = blocks.n_blocks > 0 and first_key > last_row + blocks.s_kv - blocks.s_q
        start = Int32(0)
        if hidden:
            self._take_turn(wg_c)
            self._pass_turn(wg_c)
            if blocks.n_blocks == 1:  # no later visit: the last P V's turn is empty too
                self._take_turn(wg_c)
                self._pass_turn(wg_c)
            k_pipe.consumer_wait(k_state)
            k_pipe.consumer_release(k_state)
            k_state.advance()
            v_pipe.consumer_wait(v_state)
            v_pipe.consumer_release(v_state)
            v_state.advance()
            start = Int32(1)
        return start, k_state, v_state

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
    def _qk_retired(self, mc, k_state):
        """S = Q K^T issued (in this consumer's turn with ``pingpong``), retired and its K
        stage freed."""
        if cutlass.const_expr(self.pingpong):
            self._take_turn(mc.wg_c)
            self._qk(mc, k_state, False)
            self._pass_turn(mc.wg_c)
            warpgroup.wait_group(0)
            mc.k_pipe.consumer_release(k_state)
        else:
            self._qk(mc, k_state, True)

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
    def _qk(self, mc, k_state, wait: cutlass.Constexpr):
        """Issue S = Q K^T for the K stage ``k_state`` (one commit group); with ``wait``, also
        retire it and free the stage."""
        mc.k_pipe.consumer_wait(k_state)
        # the MMA accumulates (set once in ``mma``: a helper cannot rebind the atom's field
        # across the staged loop), so S starts from zeros
        mc.acc_S.fill(0.0)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(mc.tSrQ, mode=[2])):
            cute.gemm(mc.qk_mma, mc.acc_S, mc.tSrQ[(None, None, kb, mc.q_stage)],
                      mc.tSrK[(None, None, kb, k_state.index)], mc.acc_S)
        warpgroup.commit_group()
        if cutlass.const_expr(wait):
            warpgroup.wait_group(0)
            mc.k_pipe.consumer_release(k_state)

    @cute.jit
    def _pv(self, mc, v_state, wait: cutlass.Constexpr):
        """Issue O += P V for the V stage ``v_state`` (one commit group); with ``wait``, also
        retire it and free the stage."""
        mc.v_pipe.consumer_wait(v_state)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(mc.tOrP, mode=[2])):
            cute.gemm(mc.pv_mma, mc.acc_O, mc.tOrP[(None, None, kb)],
                      mc.tOrV[(None, None, kb, v_state.index)], mc.acc_O)
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
