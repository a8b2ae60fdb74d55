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

import cutlass
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

    #: producer threads that run ``load_k`` / ``load_v`` (one elected thread issues each TMA)
    producer_threads = 1
    #: whether ``load_k`` takes a key row fetched a block ahead (the gather's ``fetch_row``)
    row_prefetch = False

    def make_pipelines(self, barriers, stages, consumer_wgs, dtype, sK_layout, sV_layout):
        """(k_pipe, v_pipe): ``stages``-deep rings on the 4 x ``stages`` mbarriers at
        ``barriers``; one producer thread arms each stage with the tile's byte count, one
        thread per consumer warp releases it."""
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_wgs * 4)
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
        return TmaTilePartition(tma_k, tma_v, *self._views(tma_k, tma_v, gK, gV, sK, sV))

    @staticmethod
    def _views(tma_k, tma_v, gK, gV, sK, sV) -> tuple:
        """(tKsK, tKgK, tVsV, tVgV): the TMA partitions of the smem stages (first two modes
        one copy, then the stage) and of the global tiles."""
        tKsK, tKgK = cpasync.tma_partition(tma_k, 0, cute.make_layout(1),
                                           cute.group_modes(sK, 0, 2),
                                           cute.group_modes(gK, 0, 2))
        tVsV, tVgV = cpasync.tma_partition(tma_v, 0, cute.make_layout(1),
                                           cute.group_modes(sV, 0, 2),
                                           cute.group_modes(gV, 0, 2))
        return tKsK, tKgK, tVsV, tVgV

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


class GatherRows:
    """One producer thread's share of a gathered tile: its 16-byte column chunk and first
    tile row, the views it copies between, the group's key list and the smem index ring."""

    def __init__(self, mK, mV, sK_rows, sV_rows, sIdx, rows, count, s_kv, ptid):
        self.mK, self.mV, self.sK_rows, self.sV_rows, self.sIdx = mK, mV, sK_rows, sV_rows, sIdx
        self.rows, self.count, self.s_kv, self.ptid = rows, count, s_kv, ptid


class GatherKVLoader:
    """K and V rows gathered through an index list (column-sparse attention, "tile packing"):
    packed position ``p`` of the query group's list is key row ``rows[p]``, and key block
    ``n`` is packed positions ``n * block_n ...``. The producer warpgroup's 128 threads fill
    the same 128B-swizzled stage the TMA loader fills:

    With ``entry_keys`` E > 1 the list holds blocks of E consecutive key rows instead (packed
    small blocks of block-sparse attention): position ``p`` is row ``E * list[p // E] + p % E``.

    1. per key block, thread ``t`` reads index ``n * block_n + t`` (one coalesced load,
       ``fetch_row``; with ``prefetch`` issued one key block ahead, so its latency hides behind
       the previous block's copies instead of stalling every block), clamps it into
       [0, S_kv) and stores it to the stage's slot of a small smem ring; a named barrier over
       the 128 producer threads publishes the tile's indices;
    2. a row of D elements is D / 8 16-byte chunks; ``128 / (D / 8)`` rows go per pass, one
       chunk per thread (``cp.async``, L2 only), ``block_n / rows-per-pass`` passes (D = 128:
       8 rows a pass, 16 passes); V reuses the indices K's load staged (same stage index).

    With ``stage_addresses`` (the default) step 1 stages each row's K and V byte addresses
    (64-bit, computed once per row by the thread that fetched its index) instead of the index,
    and step 2 maps thread ``t`` to chunk ``t % 8`` of 16 rows a pass, copying that chunk of
    both 64-column halves of a row (D = 128): per pass one shared 64-bit load, one 64-bit
    add and two ``cp.async`` with immediate offsets (the halves are 128 bytes apart in global
    memory and whole swizzle atoms apart in shared memory), against an index load, a 64-bit
    multiply-add, a shift and an add per ``cp.async`` before: the producer warpgroup issues
    about a third of the instructions while the consumers' softmax shares its schedulers.

    A stage completes when every producer thread's copies have landed
    (``cp.async.mbarrier.arrive.noinc`` on its full barrier, ``PipelineCpAsync``). Positions
    past the group's count load the list's last valid row (the softmax masks them, and p = 0
    times a finite row adds nothing); clamping means a bad list can never read out of bounds
    (the op validates the values in its debug mode).
    """

    producer_threads = 128
    row_prefetch = True

    def __init__(self, block_n: int, head_dim: int, indices_barrier: int,
                 hoist_swizzle: bool = True, entry_keys: int = 1, stage_addresses: bool = True):
        self.block_n, self.head_dim, self.hoist_swizzle = block_n, head_dim, hoist_swizzle
        # staged addresses: 8 threads per row (one 16-byte chunk of each 64-column half)
        self.stage_addresses = stage_addresses
        self.halves = head_dim // 64
        self.address_rows = self.producer_threads // 8  # rows per pass
        if stage_addresses and (head_dim % 64 or block_n % self.address_rows):
            raise ValueError(f"staged addresses need D a multiple of 64 and block_n a "
                             f"multiple of {self.address_rows}, got {head_dim}, {block_n}")
        # entry_keys > 1: the list names blocks of that many consecutive key rows (packed
        # small blocks of block-sparse attention), expanded here instead of on the host
        if entry_keys < 1 or entry_keys & (entry_keys - 1):
            raise ValueError(f"entry_keys must be a power of two >= 1, got {entry_keys}")
        self.entry_keys = entry_keys
        self.indices_barrier = int(indices_barrier)
        self.chunks = head_dim // 8  # 16-byte chunks per 16-bit row
        self.rows_per_pass = self.producer_threads // self.chunks
        if block_n > self.producer_threads or block_n % self.rows_per_pass:
            raise ValueError(f"the gather needs block_n <= {self.producer_threads} and a "
                             f"multiple of {self.rows_per_pass} rows at head dim {head_dim}, "
                             f"got {block_n}")
        self.passes = block_n // self.rows_per_pass

    @property
    def index_words(self) -> int:
        """32-bit words per key row and stage in the smem ring: an int32 index, or the K and
        V rows' 64-bit addresses."""
        return 4 if self.stage_addresses else 1

    def ring_words(self, stages: int) -> int:
        """Int32 words the kernel allocates (16-byte aligned) for the ring of ``stages``."""
        return self.block_n * stages * self.index_words

    def ring(self, ptr, stages: int) -> cute.Tensor:
        """The ring over ``ring_words(stages)`` int32 words at ``ptr``: what ``partition``
        takes as ``sIdx`` (the loader, not the kernel, decides its layout)."""
        return cute.make_tensor(ptr, cute.make_layout((self.block_n, stages * self.index_words)))

    def make_atoms(self, mK, mV, sK_layout, sV_layout):
        """No descriptors: the kernel's TMA slots carry the K and V tensors themselves."""
        return None, mK, None, mV

    def make_pipelines(self, barriers, stages, consumer_wgs, dtype, sK_layout, sV_layout):
        """(k_pipe, v_pipe): full barriers count the 128 producer threads' cp.async arrivals,
        empty barriers every consumer thread's release."""
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.producer_threads)
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 128 * consumer_wgs)
        k_pipe = pipeline.PipelineCpAsync.create(
            barrier_storage=barriers, num_stages=stages, producer_group=producer,
            consumer_group=consumers)
        v_pipe = pipeline.PipelineCpAsync.create(
            barrier_storage=barriers + 2 * stages, num_stages=stages, producer_group=producer,
            consumer_group=consumers)
        return k_pipe, v_pipe

    def partition(self, ptid, mK, mV, sK, sV, sIdx, rows, count, s_kv) -> GatherRows:
        """Producer thread ``ptid`` (0..127) of the group whose key list is ``rows`` (1-D
        int32) with ``count`` entries. ``sK`` (block_n, D, stages), ``sV`` (D, block_n,
        stages), ``sIdx`` (block_n, stages) int32."""
        sV_rows = cute.make_tensor(sV.iterator, cute.select(sV.layout, mode=[1, 0, 2]))
        return GatherRows(mK, mV, sK, sV_rows, sIdx, rows, count, s_kv, ptid)

    @cute.jit
    def fetch_row(self, part: GatherRows, n):
        """This thread's key row of block ``n`` (packed position ``n * block_n + ptid``, the
        last valid one past the count; 0 for threads past ``block_n``): a plain global load,
        not waited for until the value is staged."""
        # locals: a run-time ``if`` carries what it writes, and a GatherRows cannot be carried
        rows, ptid, count = part.rows, part.ptid, part.count
        row = cutlass.Int32(0)
        if ptid < self.block_n:
            pos = cutlass.min(n * self.block_n + ptid, count - 1)
            if cutlass.const_expr(self.entry_keys == 1):
                row = rows[pos]
            else:  # position pos is key (pos % E) of listed block pos // E, the block
                # clamped first (a bad one reads its E rows of the last block, no overflow)
                e = self.entry_keys
                block = cutlass.min(cutlass.max(rows[pos // e], 0), (part.s_kv - 1) // e)
                row = block * e + pos % e
        return row

    @cute.jit
    def _stage_indices(self, part: GatherRows, row, slot, kv_head, batch):
        """This thread's ``row`` (see ``fetch_row``), clamped into [0, S_kv), into the
        stage's slot of the ring (with ``stage_addresses``, as its K and V rows' byte
        addresses); the named barrier publishes the whole tile's."""
        sIdx, ptid, s_kv = part.sIdx, part.ptid, part.s_kv
        if ptid < self.block_n:
            r = cutlass.max(cutlass.min(row, s_kv - 1), 0)
            if cutlass.const_expr(self.stage_addresses):
                sAddr = self._addresses(sIdx)
                sAddr[ptid, 0, slot] = part.mK[batch, kv_head, r, None].iterator.toint()
                sAddr[ptid, 1, slot] = part.mV[batch, kv_head, r, None].iterator.toint()
            else:
                sIdx[ptid, slot] = r
        cute.arch.barrier(barrier_id=self.indices_barrier,
                          number_of_threads=self.producer_threads)

    def _addresses(self, sIdx):
        """The ring as (block_n, K/V, stages) 64-bit addresses (``stage_addresses``)."""
        stages = cute.size(sIdx, mode=[1]) // self.index_words
        return cute.make_tensor(cute.recast_ptr(sIdx.iterator, dtype=cutlass.Int64),
                                cute.make_layout((self.block_n, 2, stages),
                                                 stride=(2, 1, 2 * self.block_n)))

    @cute.jit
    def _gather_staged(self, part: GatherRows, which, dst_rows, slot):
        """Step 2 with staged addresses: thread ``t`` copies chunk ``t % 8`` of both halves of
        rows ``t // 8 + 16 p`` (module docstring); ``which`` 0 for K, 1 for V."""
        sAddr = self._addresses(part.sIdx)
        atom = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                                   dst_rows.element_type, num_bits_per_copy=128)
        chunk, row0 = part.ptid % 8, part.ptid // 8
        pass_bytes = self._step_bytes(dst_rows, (self.address_rows, 0))
        half_bytes = self._step_bytes(dst_rows, (0, 64)) if self.halves == 2 else 0
        a = dst_rows.iterator.toint() + cute.crd2idx((row0, chunk * 8, slot),
                                                     dst_rows.layout) * 2
        first = cutlass.Int32(a) ^ ((cutlass.Int32(a) >> 3) & 0x70)
        for p in cutlass.range_constexpr(self.block_n // self.address_rows):
            src = sAddr[row0 + p * self.address_rows, which, slot] + cutlass.Int64(chunk * 16)
            for h in cutlass.range_constexpr(self.halves):
                g = cute.make_tensor(cute.make_ptr(dst_rows.element_type, src + h * 128,
                                                   cute.AddressSpace.gmem, assumed_align=16),
                                     cute.make_layout(8))
                d = cute.make_tensor(cute.make_ptr(dst_rows.element_type,
                                                   first + p * pass_bytes + h * half_bytes,
                                                   cute.AddressSpace.smem, assumed_align=16),
                                     cute.make_layout(8))
                cute.copy(atom, g, d)

    def _step_bytes(self, dst_rows, step) -> int:
        """Bytes between an element and the one ``step`` (rows, columns) further, checked at
        trace time to be one constant over the tile, a multiple of the swizzle's 1024 bytes
        (so the XOR taken once holds)."""
        dr, dc = step
        found = {cute.crd2idx((r + dr, c + dc, 0), dst_rows.layout)
                 - cute.crd2idx((r, c, 0), dst_rows.layout)
                 for r in (0, 1, 7, dr or 15) for c in (0, 8, self.head_dim - 8 - dc)}
        if len(found) != 1 or (next(iter(found)) * 2) % 1024:
            raise ValueError(f"the gather's smem step {step} is not whole swizzle atoms: {found}")
        return next(iter(found)) * 2

    @cute.jit
    def _gather(self, part: GatherRows, src, dst_rows, slot, kv_head, batch, idx_slot=None):
        """Step 2 from staged indices: the rows named by column ``idx_slot`` of ``part.sIdx``
        (default: ``slot``, the ring slot of the stage) into stage ``slot``."""
        atom = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                                   src.element_type, num_bits_per_copy=128)
        chunk, row0, sIdx = part.ptid % self.chunks, part.ptid // self.chunks, part.sIdx
        if cutlass.const_expr(idx_slot is None):
            idx_slot = slot
        if cutlass.const_expr(self.hoist_swizzle):
            # Pass p writes row0 + p * rows_per_pass: whole 8-row swizzle atoms further, which
            # the 128B swizzle (byte address bits 4-6 ^= bits 7-9) leaves alone, so the XOR is
            # taken once and every pass adds a constant (4 instructions less per copy).
            pass_bytes = self._step_bytes(dst_rows, (self.rows_per_pass, 0))
            a = dst_rows.iterator.toint() + cute.crd2idx((row0, chunk * 8, slot),
                                                         dst_rows.layout) * 2
            first = cutlass.Int32(a) ^ ((cutlass.Int32(a) >> 3) & 0x70)
            for p in cutlass.range(self.passes, unroll=2):
                r = row0 + p * self.rows_per_pass
                src_row = cute.zipped_divide(src[batch, kv_head, sIdx[r, idx_slot], None], (8,))
                dst = cute.make_tensor(
                    cute.make_ptr(src.element_type, first + p * pass_bytes,
                                  cute.AddressSpace.smem, assumed_align=16), cute.make_layout(8))
                cute.copy(atom, src_row[None, chunk], dst)
        else:
            for p in cutlass.range(self.passes, unroll=2):
                r = row0 + p * self.rows_per_pass
                src_row = cute.zipped_divide(src[batch, kv_head, sIdx[r, idx_slot], None], (8,))
                dst_row = cute.zipped_divide(dst_rows[r, None, slot], (8,))
                cute.copy(atom, src_row[None, chunk], dst_row[None, chunk])

    def load_k(self, part: GatherRows, k_pipe, k_state, n, kv_head, batch, row=None,
               n_next=None):
        """Stage key block ``n``'s indices (``row``: this thread's, fetched ahead; None:
        fetch it now), then its K rows, into stage ``k_state``. Returns this thread's row of
        block ``n_next`` (fetched before the copies are issued), or None without ``row``."""
        return self._load_rows(part, part.mK, part.sK_rows, k_pipe, k_state, n, kv_head, batch,
                               row, n_next)

    def _load_rows(self, part: GatherRows, src, dst_rows, pipe, state, n, kv_head, batch, row,
                   n_next):
        """Acquire ``state``'s stage, stage block ``n``'s indices, gather ``src``'s rows into
        ``dst_rows`` and commit (``load_k`` / ``load_v_rows``)."""
        pipe.producer_acquire(state)
        ahead = row is not None  # a trace-time choice (the kernel's gather_prefetch)
        self._stage_indices(part, row if ahead else self.fetch_row(part, n), state.index,
                            kv_head, batch)
        next_row = self.fetch_row(part, n_next) if ahead else None
        if cutlass.const_expr(self.stage_addresses):
            self._gather_staged(part, 0 if src is part.mK else 1, dst_rows, state.index)
        else:
            self._gather(part, src, dst_rows, state.index, kv_head, batch)
        pipe.producer_commit(state)
        return next_row

    def load_v_rows(self, part: GatherRows, v_pipe, v_state, n, kv_head, batch, row=None,
                    n_next=None):
        """Stage key block ``n``'s indices, then only its V rows (MN-major), into stage
        ``v_state``: a gather with no K beside it (the MLP delta's mm2 gathers W2's columns
        this way). ``row`` / ``n_next`` and the return value as ``load_k``'s."""
        return self._load_rows(part, part.mV, part.sV_rows, v_pipe, v_state, n, kv_head, batch,
                               row, n_next)

    def load_v_rows_staged(self, part: GatherRows, v_pipe, v_state, idx_slot, kv_head,
                           batch):
        """Only V rows (MN-major) into stage ``v_state``, by indices the caller staged in
        ``part.sIdx`` beforehand (column ``idx_slot``, clamped): no per-block fetch or named
        barrier. The MLP delta's mm2 stages a chunk of its list at once this way, so one
        index round trip serves many k-tiles. Needs ``stage_addresses`` off."""
        if cutlass.const_expr(self.stage_addresses):
            raise ValueError("load_v_rows_staged reads int32 indices (stage_addresses=False)")
        v_pipe.producer_acquire(v_state)
        self._gather(part, part.mV, part.sV_rows, v_state.index, kv_head, batch, idx_slot)
        v_pipe.producer_commit(v_state)

    def load_v(self, part: GatherRows, v_pipe, v_state, n, kv_head, batch):
        """V rows of key block ``n`` into stage ``v_state``, by the indices ``load_k`` staged
        for it (the K and V states advance together, so the stage index is the slot)."""
        v_pipe.producer_acquire(v_state)
        if cutlass.const_expr(self.stage_addresses):
            self._gather_staged(part, 1, part.sV_rows, v_state.index)
        else:
            self._gather(part, part.mV, part.sV_rows, v_state.index, kv_head, batch)
        v_pipe.producer_commit(v_state)
