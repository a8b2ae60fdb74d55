"""Stream-K's fix-up for ``GemmSm90(stream_k=True)``: a tile whose k-tiles several clusters share.

The launch's last tiles (the partial last wave plus one full wave, or every tile when there
are fewer; ``tile_scheduler.stream_k_tiles``) are cut into equal k-ranges, one per cluster
(``tile_scheduler.stream_k_range``). A tile split between clusters c - 1 and c is finished
by c: c - 1 runs the tile's first k-tiles before anything else and leaves its fp32
accumulators in the workspace (``write``); c runs the rest at the end of its range, adds the
partial (``add``) and stores the tile through the usual epilogue. With ranges shorter than
a tile, the clusters between them leave their partials too, and the tile's last adds every
one, farthest first (``tile_scheduler.stream_k_first_cluster``): one wait per partial, in
parallel, not a chain of clusters each waiting on the one before.

Workspace (the launch's int32 ``mSync`` buffer, ``tile_scheduler.stream_k_workspace_words``):
one fp32 slot of ``tile_m x tile_n`` values per CTA, then one int32 flag per CTA, zeroed by
the host before the launch. A CTA writes its slot at most once per launch (its cluster's
range has one first or middle part), so the slot is the writer's CTA index: the reader's
minus the cluster size times the clusters between them.
Each consumer thread keeps its own accumulators in register order, in 16-byte vectors
interleaved across the threads (a warp's stores cover 512 contiguous bytes). The writer
releases the flag after a barrier of the consumer warpgroups; the owner's first consumer
thread polls it with an acquire load, resets it to 0, and a barrier lets the others read.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from ..common.warp_ptx import ld_acquire_gpu, nanosleep


class StreamKFixup:
    """The partial write / wait-and-add of one CTA's consumer threads (``threads`` of them,
    ``values`` fp32 accumulators each); ``barrier`` is the consumers' named barrier id."""

    def __init__(self, threads: int, values: int, barrier: int):
        if values % 4:
            raise ValueError(f"stream-K moves accumulators in fours, got {values} per thread")
        self.threads, self.values, self.barrier = threads, values, barrier

    @cute.jit
    def _slot(self, mSync: cute.Tensor, slot, ctid):
        """This thread's (4, values / 4) fp32 view of workspace slot ``slot``."""
        t, v = self.threads, self.values
        partials = cute.make_tensor(
            cute.recast_ptr(mSync.iterator, dtype=cutlass.Float32),
            cute.make_layout((4, v // 4, t, cute.arch.grid_dim()[0]),
                             stride=(1, 4 * t, 4, v * t)))
        return partials[(None, None, ctid, slot)]

    @cute.jit
    def _flag_address(self, mSync: cute.Tensor, slot):
        ctas = cute.arch.grid_dim()[0]
        return mSync.iterator + (ctas * self.threads * self.values + slot)

    @cute.jit
    def write(self, acc: cute.Tensor, mSync: cute.Tensor, slot, ctid):
        """Leave ``acc`` (this tile's first k-tiles) in slot ``slot`` and release its flag."""
        acc4 = cute.make_tensor(acc.iterator, cute.make_layout((4, self.values // 4)))
        cute.autovec_copy(acc4, self._slot(mSync, slot, ctid))
        cute.arch.barrier(barrier_id=self.barrier, number_of_threads=self.threads)
        if ctid == 0:
            # the barrier ordered every consumer's stores before this thread's fence
            cute.arch.fence_acq_rel_gpu()
            cute.arch.red(self._flag_address(mSync, slot), cutlass.Int32(1), op="add",
                          dtype="s32", sem="release", scope="gpu")

    @cute.jit
    def add(self, acc: cute.Tensor, mSync: cute.Tensor, slot, ctid):
        """Wait for slot ``slot``'s flag, reset it, and add the partial into ``acc``."""
        if ctid == 0:
            flag = self._flag_address(mSync, slot)
            while ld_acquire_gpu(flag.toint()) == 0:
                nanosleep(64)
            # read once per launch: cleared for the next launch on this workspace
            cute.make_tensor(flag, cute.make_layout(1))[0] = cutlass.Int32(0)
        cute.arch.barrier(barrier_id=self.barrier, number_of_threads=self.threads)
        cute.arch.fence_acq_rel_gpu()
        part = self._slot(mSync, slot, ctid)
        acc4 = cute.make_tensor(acc.iterator, cute.make_layout((4, self.values // 4)))
        chunk = cute.make_rmem_tensor((4,), cutlass.Float32)
        for j in cutlass.range_constexpr(self.values // 4):
            cute.autovec_copy(part[(None, j)], chunk)
            for i in cutlass.range_constexpr(4):
                acc4[i, j] = acc4[i, j] + chunk[i]
