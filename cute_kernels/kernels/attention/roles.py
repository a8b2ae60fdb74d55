"""The Hopper attention kernel's warp roles and the plain state they hand each other: which
warps load and store, the named barriers, the CTA's pipelines, the tile a CTA owns and a
consumer's mainloop state. No DSL imports: the kernel (sm90.py) and its persistent schedule
(persistent.py) share these."""

from __future__ import annotations

import enum

PRODUCER_WARPGROUP = 0
TMA_WARP = 0  # the producer warp that issues every load
STORE_WARP = 4  # the first consumer warp, which issues the epilogue's TMA store
#: the producer warp that issues the persistent schedule's O stores (``async_store``): the
#: consumers hand it the O tile and go on to their next tile without waiting for the store
ASYNC_STORE_WARP = 1


class NamedBarrier(enum.IntEnum):
    """``bar.sync`` ids (0 is ``__syncthreads``)."""

    EPILOGUE = 1  # the consumers, around the O tile's smem
    PINGPONG = 2  # 2, 3, 4: consumer warpgroup c's turn to issue Q K^T
    COLSUM_OPERANDS = 5  # 5, 6, 7: consumer c's column-sum operands (P, f) are in smem
    GATHER_INDICES = 8  # the producer warpgroup: a key tile's row indices are in smem
    O_READY = 9  # 9, 10: the O tile in Q's stage s is in smem (consumers -> async store warp)
    DECODE_COLUMNS = 11  # the swap-AB decode consumers: column maxima / sums exchanged


class Pipelines:
    """The mbarrier pipelines of one CTA (``col_pipe``: the column-sum ring, or None)."""

    def __init__(self, q_pipe, k_pipe, v_pipe, col_pipe):
        self.q_pipe, self.k_pipe, self.v_pipe, self.col_pipe = q_pipe, k_pipe, v_pipe, col_pipe


class TileCoord:
    """Which query tile a CTA owns and the kv head it reads."""

    def __init__(self, m_block, head, kv_head, batch, out_batch=None):
        self.m_block, self.head, self.kv_head, self.batch = m_block, head, kv_head, batch
        # the batch index of O and lse: split-KV writes split s of batch b at s * B + b
        self.out_batch = batch if out_batch is None else out_batch


class ConsumerTile:
    """One consumer thread's mainloop state: the MMAs and their fragments, the K/V pipelines,
    the running softmax (row max and sum), and the tile's key-block iterator."""

    def __init__(self, *, qk_mma, pv_mma, tSrQ, tSrK, tOrV, acc_S, acc_O, rP, tOrP, k_pipe,
                 v_pipe, row_max, row_sum, scale_log2, thr_qk, blocks, wg_c, q_stage=0):
        self.qk_mma, self.pv_mma, self.tSrQ, self.tSrK, self.tOrV = (qk_mma, pv_mma, tSrQ,
                                                                     tSrK, tOrV)
        self.acc_S, self.acc_O, self.rP, self.tOrP = acc_S, acc_O, rP, tOrP
        self.k_pipe, self.v_pipe = k_pipe, v_pipe
        self.row_max, self.row_sum, self.scale_log2 = row_max, row_sum, scale_log2
        self.thr_qk, self.blocks, self.wg_c = thr_qk, blocks, wg_c
        self.q_stage = q_stage  # Q's smem stage (0 but in the persistent schedule)
