"""A K/V loader for key tiles packed from listed blocks of consecutive keys, one TMA per block.

Block-sparse attention with key blocks of 16, 32 or 64 keys packs several listed blocks into
one ``block_n``-key tile (tile packing). ``GatherKVLoader(entry_keys=E)`` builds such a tile
row by row: 128 producer threads issue 16-byte ``cp.async`` copies, which keeps the producer
warpgroup issue-bound. A listed block is ``E`` whole key rows, contiguous in global memory and
whole 8-row swizzle atoms in the 128B-swizzled stage (E a multiple of 8), so one TMA box of
``(E, D)`` moves it: ``block_n / E`` boxes fill a stage, issued by one thread.

The stage's layout is the dense loader's; the boxes land in its row slices ``[j E, (j + 1) E)``.
The TMA atoms are built for one such slice (the stage layout composed with the slice's rows, so
the swizzle and the stride between 64-column halves are the stage's), and the stage is viewed
as ``(E, D, block_n / E, stages)`` so slice ``j`` of stage ``s`` is a plain coordinate.

Positions past the list's count repeat the last listed block (the consumers mask key positions
``>= count``, as for the gather loader), and every block index is clamped into the key range,
so a bad list never makes a TMA read outside K or V. Where ``S_kv`` is not a multiple of ``E``
the residue block is a block too: its box reaches past S_kv and TMA fills those rows with
zeros. Its keys past S_kv are hidden by the op's lists (ops/block_sparse.py
``packed_entries``: without an element mask that block goes last and the count stops at
S_kv) or, under a mask, by the consumers (block_info.py ``PackedBlockLists``).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from .kv_loader import TmaKVLoader, TmaTilePartition, _dshb, _sdhb


class BlockTilePartition(TmaTilePartition):
    """``TmaTilePartition`` over the stages' block slices, with the query group's block list:
    ``rows`` (int32 block indices), ``blocks`` listed, ``kv_blocks`` key blocks in K."""

    def __init__(self, tma_k, tma_v, tKsK, tKgK, tVsV, tVgV, rows, blocks, kv_blocks):
        super().__init__(tma_k, tma_v, tKsK, tKgK, tVsV, tVgV)
        self.rows, self.blocks, self.kv_blocks = rows, blocks, kv_blocks


class TmaBlockKVLoader(TmaKVLoader):
    """K and V tiles packed from ``block_n / entry_keys`` listed blocks of ``entry_keys``
    consecutive keys, one TMA box per block and operand (module docstring). The pipelines
    are ``TmaKVLoader``'s: the boxes of a stage add up to the tile's transaction bytes."""

    #: the list's row fetch is the producer thread's own (no prefetch ring as the gather's)
    row_prefetch = False

    def __init__(self, block_n: int, head_dim: int, entry_keys: int):
        super().__init__(block_n, head_dim)
        if entry_keys % 8 or block_n % entry_keys:
            raise ValueError(f"TMA block loads need entry_keys a multiple of 8 (whole swizzle "
                             f"atoms) dividing block_n, got {entry_keys} and {block_n}")
        self.entry_keys = entry_keys
        self.per_tile = block_n // entry_keys

    def ring_words(self, stages: int) -> int:
        """No smem ring (one word, so the kernel's member is never empty)."""
        return 1

    def _slice(self, layout: cute.ComposedLayout, keys_first: bool) -> cute.ComposedLayout:
        """One stage's ``E``-key slice of the K (``keys_first``: (block_n, D, stages)) or V
        ((D, block_n, stages)) stage layout, with the stage's swizzle and strides."""
        E, BN, D = self.entry_keys, self.block_n, self.head_dim
        # (r, c) -> natural coordinate (r, c) of (BN, D); (c, r) -> (c, r) of (D, BN)
        one = (cute.make_layout((E, D), stride=(1, BN)) if keys_first
               else cute.make_layout((D, E), stride=(1, D)))
        stage = cute.slice_(layout.outer, (None, None, 0))
        return cute.make_composed_layout(layout.inner, 0, cute.composition(stage, one))

    def make_atoms(self, mK, mV, sK_layout, sV_layout):
        """(tma_k, tK, tma_v, tV): atoms whose box is one listed block: (E, D) of K, (D, E)
        of V."""
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        E, D = self.entry_keys, self.head_dim
        tma_k, tK = cpasync.make_tiled_tma_atom(g2s, _sdhb(mK), self._slice(sK_layout, True),
                                                (E, D))
        tma_v, tV = cpasync.make_tiled_tma_atom(g2s, _dshb(mV),
                                                self._slice(sV_layout, False), (D, E))
        return tma_k, tK, tma_v, tV

    def tiles(self, tK, tV):
        """The (block, rest...) views of K's and V's coordinate tensors, in listed blocks."""
        E, D = self.entry_keys, self.head_dim
        return (cute.local_tile(tK, (E, D), (None, None, None, None)),
                cute.local_tile(tV, (D, E), (None, None, None, None)))

    def partition(self, tma_k, tma_v, gK, gV, sK, sV, rows, count, s_kv) -> BlockTilePartition:
        """The TMA views over the stages' block slices, with the query group's list ``rows``
        of ``count`` key positions (``count / E`` blocks) over ``s_kv`` keys."""
        sK_blocks = cute.make_tensor(sK.iterator, self._ring(sK.layout, True))
        sV_blocks = cute.make_tensor(sV.iterator, self._ring(sV.layout, False))
        E = self.entry_keys
        return BlockTilePartition(tma_k, tma_v,
                                  *self._views(tma_k, tma_v, gK, gV, sK_blocks, sV_blocks), rows,
                                  cute.ceil_div(count, E), cute.ceil_div(s_kv, E))

    def _ring(self, layout: cute.Layout, keys_first: bool) -> cute.Layout:
        """The stages' plain (unswizzled) layout viewed as (slice, j, stage): (r, c, j, s) ->
        natural coordinate (j E + r, c, s) of (BN, D, stages), (c, r, j, s) -> (c, j E + r, s)
        of (D, BN, stages)."""
        E, BN, D = self.entry_keys, self.block_n, self.head_dim
        stages = cute.size(layout, mode=[2])
        if keys_first:
            ring = cute.make_layout((E, D, self.per_tile, stages), stride=(1, BN, E, BN * D))
        else:
            ring = cute.make_layout((D, E, self.per_tile, stages), stride=(1, D, E * D, D * BN))
        return cute.composition(layout, ring)

    @cute.jit
    def _block(self, part: BlockTilePartition, n, j):
        """The key block in slice ``j`` of packed tile ``n``: listed position ``n * per_tile +
        j``, the last listed one past the count, clamped into K's blocks."""
        rows, blocks, kv_blocks = part.rows, part.blocks, part.kv_blocks
        pos = cutlass.max(cutlass.min(n * self.per_tile + j, blocks - 1), 0)
        return cutlass.max(cutlass.min(rows[pos], kv_blocks - 1), 0)

    @cute.jit
    def load_k(self, part: BlockTilePartition, k_pipe, k_state, n, kv_head, batch):
        """K of packed tile ``n`` into stage ``k_state``: one box per listed block."""
        # the list reads first: their latency runs beside the wait for a free stage
        blocks = [self._block(part, n, j) for j in range(self.per_tile)]
        k_pipe.producer_acquire(k_state)
        for j in cutlass.range_constexpr(self.per_tile):
            cute.copy(part.tma_k, part.tKgK[(None, blocks[j], 0, kv_head, batch)],
                      part.tKsK[(None, j, k_state.index)],
                      tma_bar_ptr=k_pipe.producer_get_barrier(k_state))
        k_pipe.producer_commit(k_state)

    @cute.jit
    def load_v(self, part: BlockTilePartition, v_pipe, v_state, n, kv_head, batch):
        """V of packed tile ``n`` into stage ``v_state``."""
        blocks = [self._block(part, n, j) for j in range(self.per_tile)]
        v_pipe.producer_acquire(v_state)
        for j in cutlass.range_constexpr(self.per_tile):
            cute.copy(part.tma_v, part.tVgV[(None, 0, blocks[j], kv_head, batch)],
                      part.tVsV[(None, j, v_state.index)],
                      tma_bar_ptr=v_pipe.producer_get_barrier(v_state))
        v_pipe.producer_commit(v_state)
