"""Split-K inside a thread block cluster: the K slices of one tile reduced through distributed
shared memory, in the GEMM launch itself (no fp32 workspace, no second kernel).

The ``cluster_k`` CTAs of a cluster compute the same (m, n) tile over consecutive K ranges.
Then every CTA owns ``1 / cluster_k`` of the tile's epilogue subtiles (CTA r the r-th run of
them): it pushes each peer its fp32 partial of that peer's subtiles with ``st.async`` into the
peer's receive buffer (the writes complete the peer's ``full`` mbarrier by transaction bytes),
waits for the ``cluster_k - 1`` partials of its own subtiles, sums all ``cluster_k`` in rank
order (deterministic, whichever CTA arrives first) and stores only its subtiles. So the fix-up
is spread over every CTA of the tile, and its bytes cross the cluster's SM-to-SM network
instead of going through L2 and a reduce kernel (the workspace route's two launches).

The values a thread exchanges are its own accumulator registers in the epilogue's stmatrix
order, where each subtile is a contiguous run: every CTA has the same thread-to-element map,
so a thread's partial of a subtile lands in the receive buffer at its own thread slot. The
buffer is ``(4 values, threads, chunks, peers)``: a 16-byte chunk per thread, threads
consecutive, so the receiving thread's 16-byte reads are bank-conflict free.

A persistent cluster may walk several tiles: before pushing tile j + 1 a CTA waits on its
``free`` mbarrier, which each peer arrives on (remotely) once it has read tile j's partials
from its buffer; after the last tile no one arrives (a peer may have exited).
"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import nvvm

#: K slices one cluster may hold (cluster sizes 2 and 4 are portable; 8 would leave a GEMM's
#: split with too little K per slice to pay for the exchange)
CLUSTER_SPLITS = (2, 4)
#: values one st.async carries (v4.b32: 16 bytes)
CHUNK = 4


class ClusterSplitK:
    """The exchange of one tile's K-slice partials among ``splits`` CTAs of a cluster
    (module docstring). ``threads``: the consumer threads holding accumulators;
    ``values``: fp32 accumulators per thread; ``subtiles``: the epilogue's subtiles per tile,
    each CTA owning ``subtiles / splits`` of them."""

    def __init__(self, splits: int, threads: int, values: int, subtiles: int):
        if splits not in CLUSTER_SPLITS:
            raise ValueError(f"cluster split-K takes {CLUSTER_SPLITS} slices, got {splits}")
        if subtiles % splits or values % (splits * CHUNK):
            raise ValueError(f"cluster split-K {splits}: the tile's {subtiles} epilogue "
                             f"subtiles ({values} values per thread) must split evenly")
        self.splits, self.threads = splits, threads
        self.share = values // splits  # values of the subtiles one CTA owns, per thread
        self.chunks = self.share // CHUNK
        self.subtiles_per_cta = subtiles // splits

    def buffer_elems(self) -> int:
        """fp32 elements of the receive buffer: one share per peer and thread."""
        return (self.splits - 1) * self.threads * self.share

    def owned_subtiles(self, rank: int) -> range:
        """The epilogue subtiles CTA ``rank`` reduces and stores."""
        return range(rank * self.subtiles_per_cta, (rank + 1) * self.subtiles_per_cta)

    def buffer(self, ptr) -> cute.Tensor:
        """The receive buffer at ``ptr`` as (value, thread, chunk, peer slot)."""
        t, c = self.threads, self.chunks
        return cute.make_tensor(ptr, cute.make_layout(
            (CHUNK, t, c, self.splits - 1), stride=(1, CHUNK, CHUNK * t, CHUNK * t * c)))

    @cute.jit
    def init_barriers(self, full_ptr, free_ptr):
        """One thread: ``full`` completes on the peers' bytes plus this CTA's own
        arrive-and-expect; ``free`` on one arrive per peer."""
        cute.arch.mbarrier_init(full_ptr, 1)
        cute.arch.mbarrier_init(free_ptr, self.splits - 1)

    @staticmethod
    def slot(sender: int, receiver: int) -> int:
        """Where ``sender``'s partial lands in ``receiver``'s buffer (peers in rank order)."""
        return sender if sender < receiver else sender - 1

    @cute.jit
    def exchange(self, red: SimpleNamespace, tRS_rAcc: cute.Tensor, ctid, rank, j, has_next,
                 store_subtiles):
        """Tile ``j`` of this cluster (its ``j``-th): push the peers their partials, sum this
        CTA's share in rank order into ``tRS_rAcc`` (the accumulators in stmatrix order),
        free the buffer for the peers' next pushes, then ``store_subtiles(subtiles)`` with
        this CTA's subtiles (a compile-time range: one branch per rank). ``red``: ``sRed``
        (``buffer``), the ``full`` / ``free`` mbarrier pointers and ``barrier`` (a named
        barrier id of the consumer threads); ``has_next``: another tile follows."""
        if j > 0:  # the peers have read this CTA's pushes of the tile before
            cute.arch.mbarrier_wait(red.free, (j - 1) % 2)
        words = cute.recast_tensor(tRS_rAcc, cutlass.Int32)
        for me in cutlass.range_constexpr(self.splits):
            if rank == me:
                for peer in cutlass.range_constexpr(self.splits):
                    if cutlass.const_expr(peer != me):
                        self._push(red, words, ctid, me, peer)
        if ctid == 0:
            cute.arch.mbarrier_arrive_and_expect_tx(
                red.full, (self.splits - 1) * self.threads * self.share * 4)
        cute.arch.mbarrier_wait(red.full, j % 2)
        for me in cutlass.range_constexpr(self.splits):
            if rank == me:
                self._sum(red, tRS_rAcc, ctid, me)
                self._release(red, ctid, me, has_next)
                store_subtiles(self.owned_subtiles(me))

    @cute.jit
    def _push(self, red, words, ctid, me: int, peer: int):
        """st.async this thread's partial of ``peer``'s subtiles into its buffer slot."""
        slot = self.slot(me, peer)
        for c in cutlass.range_constexpr(self.chunks):
            base = peer * self.share + c * CHUNK
            # 16-byte aligned: the buffer is, and a thread's chunk starts 4 values apart
            dst = cute.make_ptr(cutlass.Float32,
                                red.sRed[(None, ctid, c, slot)].iterator.toint(),
                                cute.AddressSpace.smem, assumed_align=CHUNK * 4)
            cute.arch.store_async_dsmem(
                dst, tuple(words[base + e] for e in range(CHUNK)), red.full, peer)

    @cute.jit
    def _sum(self, red, tRS_rAcc, ctid, me: int):
        """This CTA's share = the sum of all slices' partials, in rank order."""
        for c in cutlass.range_constexpr(self.chunks):
            peers = [red.sRed[(None, ctid, c, self.slot(s, me))].load()
                     if s != me else None for s in range(self.splits)]
            for e in cutlass.range_constexpr(CHUNK):
                v = me * self.share + c * CHUNK + e
                total = tRS_rAcc[v] if me == 0 else peers[0][e]
                for s in cutlass.range_constexpr(1, self.splits):
                    total = total + (tRS_rAcc[v] if s == me else peers[s][e])
                tRS_rAcc[v] = total

    @cute.jit
    def _release(self, red, ctid, me: int, has_next):
        """Once every consumer thread has read the buffer, tell each peer it may push the
        next tile (only if there is one: a peer past its last tile may have exited)."""
        if has_next:
            cute.arch.barrier(barrier_id=red.barrier, number_of_threads=self.threads)
            if ctid == 0:
                for peer in cutlass.range_constexpr(self.splits):
                    if cutlass.const_expr(peer != me):
                        cute.arch.mbarrier_arrive(red.free, peer,
                                                  scope=nvvm.MemScopeKind.CLUSTER)
