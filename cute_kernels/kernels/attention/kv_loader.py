"""K/V loaders: how key and value tiles reach shared memory in the Hopper attention kernel.

The producer warp asks a loader for "key block ``n``'s K (or V) tile into the next stage of
its pipeline"; the consumers only wait on that pipeline and read the stage, so they cannot
tell which loader filled it. A loader has three parts:

* ``make_atoms(mK, mV, sK_layout, sV_layout)`` (host side, in ``__call__``): whatever the
  launch needs (TMA descriptors here);
* ``make_pipelines(...)`` (kernel, every thread): the K and V stage rings, whose full
  barriers complete the way this loader's copies signal them (TMA transaction bytes here);
* ``partition(...)`` (producer warp, once): the per-thread views of the global and shared
  tensors;
* ``load_k`` / ``load_v`` (producer warp, per key block): acquire the stage, copy, and
  commit, so the stage's full barrier completes when the bytes have landed.

``TmaKVLoader`` copies dense (block_n, D) tiles with one TMA each (the bulk tensor copy signals
the stage's transaction barrier). A gather loader (column-sparse attention: rows named by an
index list, 16-byte cp.async into the same 128B-swizzled stage, completing the barrier with
``cp.async.mbarrier.arrive``) implements the same three parts; docs/README.md shows the shape.
"""

from __future__ import annotations

import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync


def _sdhb(t: cute.Tensor) -> cute.Tensor:
    """(B, H, S, D) -> the (S, D, H, B) view TMA tiles over (tile mode first)."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[2, 3, 1, 0]))


def _dshb(t: cute.Tensor) -> cute.Tensor:
    """(B, H, S, D) -> (D, S, H, B): V as the MN-major B operand of O += P V."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[3, 2, 1, 0]))


class TmaTilePartition:
    """One producer thread's TMA views: the atoms, (K smem stages, K global tiles), same
    for V."""

    def __init__(self, tma_k, tma_v, tKsK, tKgK, tVsV, tVgV):
        self.tma_k, self.tma_v = tma_k, tma_v
        self.tKsK, self.tKgK, self.tVsV, self.tVgV = tKsK, tKgK, tVsV, tVgV


class TmaKVLoader:
    """Dense K and V tiles by TMA: K as (block_n, D) K-major tiles, V as (D, block_n) tiles
    of the MN-major B operand of O += P V; one TMA per tile, issued by one thread."""

    def __init__(self, block_n: int, head_dim: int):
        self.block_n, self.head_dim = block_n, head_dim

    def make_atoms(self, mK, mV, sK_layout, sV_layout):
        """(tma_k, tK, tma_v, tV): the TMA atoms and coordinate tensors over (B, H, S, D)."""
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        BN, D = self.block_n, self.head_dim
        tma_k, tK = cpasync.make_tiled_tma_atom(g2s, _sdhb(mK),
                                                cute.slice_(sK_layout, (None, None, 0)), (BN, D))
        tma_v, tV = cpasync.make_tiled_tma_atom(g2s, _dshb(mV),
                                                cute.slice_(sV_layout, (None, None, 0)), (D, BN))
        return tma_k, tK, tma_v, tV

    def make_pipelines(self, barriers, stages, consumers, dtype, sK_layout, sV_layout):
        """(k_pipe, v_pipe): ``stages``-deep rings on the 4 x ``stages`` mbarriers at
        ``barriers``; one producer thread arms each stage with the tile's byte count."""
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        k_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=barriers, num_stages=stages, producer_group=producer,
            consumer_group=consumers,
            tx_count=cute.size_in_bytes(dtype, cute.slice_(sK_layout, (None, None, 0))),
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))
        v_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=barriers + 2 * stages, num_stages=stages,
            producer_group=producer, consumer_group=consumers,
            tx_count=cute.size_in_bytes(dtype, cute.slice_(sV_layout, (None, None, 0))),
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))
        return k_pipe, v_pipe

    def tiles(self, tK, tV):
        """The (tile, rest...) views of K's and V's coordinate tensors."""
        BN, D = self.block_n, self.head_dim
        gK = cute.local_tile(tK, (BN, D), (None, None, None, None))
        gV = cute.local_tile(tV, (D, BN), (None, None, None, None))
        return gK, gV

    def partition(self, tma_k, tma_v, gK, gV, sK, sV) -> TmaTilePartition:
        tKsK, tKgK = cpasync.tma_partition(tma_k, 0, cute.make_layout(1),
                                           cute.group_modes(sK, 0, 2),
                                           cute.group_modes(gK, 0, 2))
        tVsV, tVgV = cpasync.tma_partition(tma_v, 0, cute.make_layout(1),
                                           cute.group_modes(sV, 0, 2),
                                           cute.group_modes(gV, 0, 2))
        return TmaTilePartition(tma_k, tma_v, tKsK, tKgK, tVsV, tVgV)

    def load_k(self, part: TmaTilePartition, k_pipe, k_state, n, kv_head, batch):
        """K of key block ``n`` into stage ``k_state``."""
        k_pipe.producer_acquire(k_state)
        cute.copy(part.tma_k, part.tKgK[(None, n, 0, kv_head, batch)],
                  part.tKsK[(None, k_state.index)],
                  tma_bar_ptr=k_pipe.producer_get_barrier(k_state))
        k_pipe.producer_commit(k_state)

    def load_v(self, part: TmaTilePartition, v_pipe, v_state, n, kv_head, batch):
        """V of key block ``n`` into stage ``v_state``."""
        v_pipe.producer_acquire(v_state)
        cute.copy(part.tma_v, part.tVgV[(None, 0, n, kv_head, batch)],
                  part.tVsV[(None, v_state.index)],
                  tma_bar_ptr=v_pipe.producer_get_barrier(v_state))
        v_pipe.producer_commit(v_state)
