"""Column sums of a score tile across its rows, for the column-sum attention variant.

The accumulator layouts of mma.sync m16n8k16 and wgmma share one structure: a warp's 32 lanes
hold 8 row groups (lane // 4) x 4 column pairs (lane % 4); a thread's local column ``c`` is
tile column ``8 * (c // 2) + 2 * (lane % 4) + c % 2``. Summing over rows therefore means
summing the thread's own rows, then the 8 lanes that share ``lane % 4`` (lane bits 2, 3, 4).

Shuffle sums: that cross-lane step is a reduce-scatter rather than an all-reduce: in each of
the three rounds a lane keeps half of its columns and sends the other half to its partner, so C
columns cost C / 2 + C / 4 + C / 8 shuffles (14 at C = 16) instead of 3 C, and the warp ends
with every lane holding C / 8 distinct column sums: the warp's whole row-sum, each column
exactly once.

mma.sync sums (``mma_sync_column_sums``) hand the row sum to the tensor cores instead: with P
in bf16, movmatrix transposes each 8 x 8 block in registers, so 16 keys x the warp's 16 rows
form the A operand of one mma.sync m16n8k16 whose B operand holds the rows' factors. Per
thread and 128-key tile that is 34 movmatrix + 8 mma.sync against ~180 ALU instructions for
the shuffle sums.
"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import BFloat16, Float32, Int32
from cutlass.cute.nvgpu import warpgroup

from ..common.constants import LOG2E
from ..common.warp_ptx import mma_m16n8k16_bf16, movmatrix_trans, pack_bf16x2
from .online_softmax import acc_mn_view


@cute.jit
def previous_step_factors(row_max: cute.Tensor, prev_l2: cute.Tensor, scale_log2):
    """Per row, ``exp2(m * scale_log2 - prev_lse * log2 e)``: turns the softmax numerators
    ``exp2((s - m) * scale_log2)`` into exp(scale s - prev_lse) (``prev_l2``: prev_lse in
    log2 units, +inf for rows without a query). A row with no key yet counts m as 0."""
    factors = cute.make_rmem_tensor(cute.size(row_max), Float32)
    for r in cutlass.range_constexpr(cute.size(row_max)):
        m_safe = Float32(0.0) if row_max[r] == -Float32.inf else row_max[r]
        factors[r] = cute.math.exp2(m_safe * scale_log2 - prev_l2[r], fastmath=True)
    return factors


@cute.jit
def weighted_column_sums(acc_S: cute.Tensor, factors: cute.Tensor) -> cute.Tensor:
    """Per thread: ``sum_r factors[r] * S[r, c]`` over its own rows, one value per local
    column ``c`` (fp32)."""
    s_mn = acc_mn_view(acc_S)
    cols = cute.size(s_mn, mode=[1])
    part = cute.make_rmem_tensor(cols, Float32)
    for c in cutlass.range_constexpr(cols):
        part[c] = s_mn[0, c] * factors[0]
    for r in cutlass.range_constexpr(1, cute.size(factors)):
        for c in cutlass.range_constexpr(cols):
            part[c] = part[c] + s_mn[r, c] * factors[r]
    return part


@cute.jit
def reduce_scatter_rows(part: cute.Tensor, lane: Int32, rounds: cutlass.Constexpr = 3):
    """Sum ``part`` over the lanes sharing ``lane % 4`` (see the module docstring), in
    ``rounds`` halving steps over lane bits 4, 3, 2. Afterwards ``part[0 : C >> rounds]`` holds
    sums of local columns ``first + i``, over 2^rounds lanes; returns ``first``. With fewer than
    3 rounds, 2^(3 - rounds) lanes (those differing in the lane bits left) hold partial sums
    of the same columns."""
    half = cute.size(part)
    first = Int32(0)
    for bit in cutlass.range_constexpr(rounds):
        offset = 16 >> bit
        half = half // 2
        upper = (lane & offset) != 0
        first = first + Int32(cutlass.select_(upper, half, 0))
        for i in cutlass.range_constexpr(half):
            lo, hi = part[i], part[i + half]
            send = Float32(cutlass.select_(upper, lo, hi))
            keep = Float32(cutlass.select_(upper, hi, lo))
            part[i] = keep + cute.arch.shuffle_sync_bfly(send, offset=offset)
    return first


@cute.jit
def tile_column(local_col, lane_col0):
    """The tile column of a thread's local accumulator column (``lane_col0``: its column 0)."""
    return lane_col0 + 8 * (local_col // 2) + local_col % 2


@cute.jit
def mma_sync_column_sums(rP: cute.Tensor, factors: cute.Tensor, lane: Int32,
                         sums: cute.Tensor):
    """One warp's ``sum_r factors[r] * P[r, c]`` over its 16 rows for every key ``c`` of the
    tile, on the tensor cores. ``rP``: P in bf16 in the (wg)mma accumulator layout (per lane:
    rows ``lane // 4`` and ``+ 8``, column pairs ``8 j + 2 (lane % 4)``); ``factors``: the
    lane's two rows' factors. The tile's keys must be a multiple of 64.

    A = P^T of 16 keys (movmatrix of four 8 x 8 blocks), B = the factors down K (rows): one
    m16n8k16 per 16 keys. Four of them chain into one accumulator with B nonzero only in
    columns 2 c' and 2 c' + 1 for the c'-th, so every lane ends with distinct keys: writes
    ``sums[2 t + e]`` (``block_n / 32`` values) = key ``64 t + 16 (lane % 4) + 8 e + lane // 4``.
    Products are bf16 x bf16 with fp32 accumulation. The mma.syncs are issued, not waited for:
    read ``sums`` late (after issuing other work) to hide their latency."""
    words = cute.recast_tensor(rP, Int32)  # word h + 2 j: row pair h, column chunk j
    chains = cute.size(words) // 16
    # B's fragment (rows 2 q, 2 q + 1 and + 8; column lane // 4): the factors transposed
    f_lo = movmatrix_trans(pack_bf16x2(factors[0], factors[0]))
    f_hi = movmatrix_trans(pack_bf16x2(factors[1], factors[1]))
    column_pair = lane // 8
    for t in cutlass.range_constexpr(chains):
        d = [Float32(0.0)] * 4
        for cp in cutlass.range_constexpr(4):
            w = 16 * t + 4 * cp  # words of keys 16 (4 t + cp) .. + 15
            a = [movmatrix_trans(words[w]), movmatrix_trans(words[w + 2]),
                 movmatrix_trans(words[w + 1]), movmatrix_trans(words[w + 3])]
            b = [Int32(cutlass.select_(column_pair == cp, f_lo, Int32(0))),
                 Int32(cutlass.select_(column_pair == cp, f_hi, Int32(0)))]
            d = mma_m16n8k16_bf16(a, b, d)
        sums[2 * t] = d[0]
        sums[2 * t + 1] = d[2]


def mma_sync_sum_key(i: int, lane):
    """The tile column of ``mma_sync_column_sums``'s result ``i`` in lane ``lane``."""
    return 64 * (i // 2) + 16 * (lane % 4) + 8 * (i % 2) + lane // 4


class ColumnSumsSm90:
    """The column sums of the Hopper attention kernel, as one collaborator.

    Built by ``AttentionSm90.__init__`` from its compile-time configuration; the consumer
    warpgroups call it at the named points of their key-tile cycle (``seq_*`` in the
    sequential schedule, ``ovl_*`` in the overlapped one: the two place the sums differently
    on purpose, each where it measured fastest, perf/RESULTS.md), and the writer warps of the
    producer warpgroup run ``write``. Per-thread state lives in the namespace ``setup``
    returns; pipeline states stay in the callers' loops and are returned when advanced.
    ``NoColumnSums`` is the same interface doing nothing, so the plain kernel runs the same
    loops.

    Methods (``method``): ``"mma"``: P (bf16, stmatrix) and the row factors to smem, one
    m64n8k16 wgmma chain per key tile (keys as M), retired behind the next wgmma wait;
    ``"mma_sync"``: P transposed in registers (movmatrix), mma.sync m16n8k16 per 16 keys,
    issued before O += P V and read after it; ``"shuffle"``: fp32 sums on the ALUs with a
    shuffle reduce-scatter.
    """

    enabled = True

    def __init__(self, *, method: str, block_m: int, block_n: int, consumer_wgs: int,
                 group: int, partials: int, rounds: int, writers: int, stages: int,
                 atomic: bool, operands_barrier: int, key_blocks):
        self.method, self.block_m, self.block_n = method, block_m, block_n
        self.consumer_wgs, self.group, self.partials = consumer_wgs, group, partials
        self.rounds, self.writers, self.stages = rounds, writers, stages
        self.atomic, self.operands_barrier = atomic, operands_barrier
        self.key_blocks = key_blocks  # the kernel's key-block policy: the writers' visit order
        #: how many wgmma groups may stay in flight when O += P V retires (the sums' own
        #: wgmma chain rides behind it with the "mma" method)
        self.pv_wait = 1 if method == "mma" else 0

    # ---- sequential schedule: S = Q K^T, softmax, O += P V per key tile ----

    @cute.jit
    def seq_after_qk(self, col, col_state, step):
        """Q K^T of visit ``step`` has retired: so have the previous tile's wgmma sums."""
        if cutlass.const_expr(self.method == "mma"):
            if step > 0:
                self.push(col, col_state)
                col_state.advance()
        return col_state

    @cute.jit
    def seq_before_pv(self, col, acc_S):
        """P is in registers, O += P V not yet issued: mma.sync sums go first (behind a wgmma
        they would stall on the busy tensor pipe)."""
        if cutlass.const_expr(self.method == "mma_sync"):
            self.issue_sync(col, acc_S)

    @cute.jit
    def seq_after_pv_issued(self, col, col_state, acc_S):
        """O += P V is in flight: wgmma sums store their operands (the proxy fence waits for
        P V, as the warpgroup would anyway) and issue behind it; shuffle sums run on the ALUs
        under it; mma.sync sums are read and handed over."""
        if cutlass.const_expr(self.method == "mma"):
            self.operands(col)
            self.issue_mma(col)
        elif cutlass.const_expr(self.method == "shuffle"):
            self.partial(col, col_state, acc_S)
            col_state.advance()
        else:
            self.sync_push(col, col_state)
            col_state.advance()
        return col_state

    @cute.jit
    def seq_finish(self, col, col_state, n_blocks):
        """After the last key tile: hand over the last wgmma sums."""
        if cutlass.const_expr(self.method == "mma"):
            if n_blocks > 0:
                warpgroup.wait_group(0)
                self.push(col, col_state)

    # ---- overlapped schedule: S(n) and O += P(n + 1) V(n + 1) in flight together ----

    @cute.jit
    def ovl_first_softmax(self, col, col_state, acc_S):
        """The first tile's softmax is done (S still fp32)."""
        if cutlass.const_expr(self.method == "shuffle"):
            self.partial(col, col_state, acc_S)
            col_state.advance()
        return col_state

    @cute.jit
    def ovl_probabilities(self, col, acc_S):
        """P(n) is complete in 16-bit registers: wgmma sums store their operands (the tensor
        cores idle here anyway); mma.sync sums are issued and read after the next wgmmas."""
        if cutlass.const_expr(self.method == "mma"):
            self.operands(col)
        elif cutlass.const_expr(self.method == "mma_sync"):
            self.issue_sync(col, acc_S)

    @cute.jit
    def ovl_after_wgmmas_issued(self, col, col_state):
        """S(n) and P(n + 1) V(n + 1) are in flight: hand over P(n + 1)'s mma.sync sums."""
        if cutlass.const_expr(self.method == "mma_sync"):
            self.sync_push(col, col_state)
            col_state.advance()
        return col_state

    @cute.jit
    def ovl_after_softmax(self, col, col_state, acc_S):
        """The softmax of S(n) is done (fp32): shuffle sums."""
        if cutlass.const_expr(self.method == "shuffle"):
            self.partial(col, col_state, acc_S)
            col_state.advance()
        return col_state

    @cute.jit
    def ovl_retire_pv(self, col):
        """Wait for O += P(n + 1) V(n + 1); wgmma sums of P(n + 1) are issued first (after the
        softmax: more wgmmas in flight with P V would block their issue, and the softmax with
        them) and stay in flight past the wait."""
        if cutlass.const_expr(self.method == "mma"):
            self.issue_mma(col)
            warpgroup.wait_group(1)
        else:
            warpgroup.wait_group(0)

    @cute.jit
    def ovl_retire_sums(self, col, col_state):
        """P(n) is in registers, its operands not yet stored: retire and hand over the wgmma
        sums of P(n + 1), whose operands ``ovl_probabilities`` overwrites next."""
        if cutlass.const_expr(self.method == "mma"):
            warpgroup.wait_group(0)
            self.push(col, col_state)
            col_state.advance()
        return col_state

    @cute.jit
    def ovl_last_pv_issued(self, col, col_state):
        """The last O += P V is in flight: issue (wgmma) or hand over (mma.sync) its sums."""
        if cutlass.const_expr(self.method == "mma"):
            self.issue_mma(col)
        elif cutlass.const_expr(self.method == "mma_sync"):
            self.sync_push(col, col_state)

    @cute.jit
    def ovl_last_pv_retired(self, col, col_state):
        """Everything has retired: hand over the last wgmma sums."""
        if cutlass.const_expr(self.method == "mma"):
            self.push(col, col_state)

    # ---- the pieces the points are made of ----

    @cute.jit
    def setup(self, col_mma, qk_mma, thr_qk, storage, sP_layout, sF_layout, mPrevLSE, s_q,
              batch, head, m_block, ctid, rP, row_max, scale_log2, sCol, col_pipe):
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
        if cutlass.const_expr(self.method == "mma"):
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
        if cutlass.const_expr(self.method in ("mma", "mma_sync")):
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
    def operands(self, col):
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
        cute.arch.barrier(barrier_id=int(self.operands_barrier) + col.wg_c, number_of_threads=128)

    @cute.jit
    def issue_mma(self, col):
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
    def push(self, col, col_state):
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
    def issue_sync(self, col, acc_S):
        """Issue the mma.sync sums of the P just computed: this warp's share of the key tile's
        column sums (P in bf16 transposed in registers, times the rows' factors, on the tensor
        cores) into ``col.sums``. Call it after the softmax, before the next Q K^T is issued
        (non-bf16 P is rounded to bf16 from S, since fp16 could not hold every factor)."""
        if cutlass.const_expr(col.rP.element_type != BFloat16):
            col.rPc.store(acc_S.load().to(BFloat16))
        factors = previous_step_factors(col.row_max, col.prev_l2, col.scale_log2)
        mma_sync_column_sums(col.rPc, factors, col.lane, col.sums)

    @cute.jit
    def sync_push(self, col, col_state):
        """Hand ``col.sums`` to the writer warps through the smem ring, one slot per warp."""
        col.col_pipe.producer_acquire(col_state)
        for i in cutlass.range_constexpr(cute.size(col.sums)):
            col.sCol[mma_sync_sum_key(i, col.lane), col.ctid // 32, col_state.index] = \
                col.sums[i]
        col.col_pipe.producer_commit(col_state)

    @cute.jit
    def partial(self, col, col_state, acc_S):
        """Shuffle sums: this warp's share of one key tile's column sums, from S (the softmax
        numerators p = exp2((s - m) * scale_log2), still fp32) times one factor per row,
        ``exp2(m * scale_log2 - prev_lse * log2 e)``; summed over the warp's rows, reduce-
        scattered across its lanes and handed to the writer warps through the smem ring."""
        prev_l2, row_max, scale_log2 = col.prev_l2, col.row_max, col.scale_log2
        sCol, col_pipe, lane, thr_qk, ctid = col.sCol, col.col_pipe, col.lane, col.thr_qk, col.ctid
        factors = previous_step_factors(row_max, prev_l2, scale_log2)
        part = weighted_column_sums(acc_S, factors)
        first = reduce_scatter_rows(part, lane, self.rounds)
        lane_col0 = acc_mn_view(thr_qk.partition_C(
            cute.make_identity_tensor((self.block_m, self.block_n))))[0, 0][1]
        col_pipe.producer_acquire(col_state)
        # lanes that differ only in the lane bits not reduced hold partials of the same columns
        spread = 1 << (3 - self.rounds)
        slot = (ctid // 32) * spread + (lane >> 2) % spread
        for i in cutlass.range_constexpr(cute.size(part) >> self.rounds):
            sCol[tile_column(first + i, lane_col0), slot, col_state.index] = part[i]
        col_pipe.producer_commit(col_state)

    @cute.jit
    def write(self, col_pipe, sCol, mColsum, blocks, s_kv, batch, head, m_block, lane,
              writer):
        """Writer warp ``writer`` (warps 1, 2, ... of the producer warpgroup): per key tile
        of the tile ``blocks`` (visited in the key-block policy's order), add the partials of each
        query group (the CTA spans at most two) in its 32-column chunks and write them
        coalesced (columns past ``s_kv`` skipped): stored when the group is the CTA's tile,
        else added onto the zeroed output (one of two terms)."""
        BM, BN, G = self.block_m, self.block_n, self.group
        per_wg = self.partials // self.consumer_wgs
        row0 = m_block * BM
        group0 = row0 // G
        # consumers [0, split) lie in group0, the others in group0 + 1
        split = min(self.consumer_wgs, ((group0 + 1) * G - row0) // 64)
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                             self.stages)
        for step in cutlass.range(blocks.n_blocks, unroll=1):
            n = self.key_blocks.block(blocks, step)
            col_pipe.consumer_wait(state)
            for j in cutlass.range_constexpr(BN // 32):
                if j % self.writers == writer:
                    c = lane + 32 * j
                    key = n * BN + c
                    if cutlass.const_expr(self.atomic):
                        first, second = Float32(0.0), Float32(0.0)
                        for p in cutlass.range_constexpr(self.partials):
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
                        for p in cutlass.range_constexpr(1, self.partials):
                            total = total + sCol[c, p, state.index]
                        if key < s_kv:
                            mColsum[batch, head, group0, key] = total
            col_pipe.consumer_release(state)
            state.advance()


class NoColumnSums:
    """The plain kernel's stand-in for ``ColumnSumsSm90``: every point does nothing, P V
    retires fully."""

    enabled = False
    pv_wait = 0
    writers = 0

    def seq_after_qk(self, col, col_state, step):
        return col_state

    def seq_before_pv(self, col, acc_S):
        pass

    def seq_after_pv_issued(self, col, col_state, acc_S):
        return col_state

    def seq_finish(self, col, col_state, n_blocks):
        pass

    def ovl_first_softmax(self, col, col_state, acc_S):
        return col_state

    def ovl_probabilities(self, col, acc_S):
        pass

    def ovl_after_wgmmas_issued(self, col, col_state):
        return col_state

    def ovl_after_softmax(self, col, col_state, acc_S):
        return col_state

    def ovl_retire_pv(self, col):
        warpgroup.wait_group(0)

    def ovl_retire_sums(self, col, col_state):
        return col_state

    def ovl_last_pv_issued(self, col, col_state):
        pass

    def ovl_last_pv_retired(self, col, col_state):
        pass
