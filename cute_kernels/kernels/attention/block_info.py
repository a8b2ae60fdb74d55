"""Key-block iterators: which key/value blocks a query tile visits, in which order, and
whether a block needs the element mask.

Every attention mainloop (Hopper producer and consumers, the column-sum writer, the Ampere
kernel) walks keys through one of these, so a kernel that visits a different set of blocks
swaps the iterator, not the loops. Two objects per kernel:

* a **policy** (``DenseKeyBlocks``, ``CausalKeyBlocks``): compile-time configuration (tile
  shape), built in the kernel's ``__init__``; part of the kernel's identity;
* a **tile view** (``KeyBlockTile``), built inside the kernel for one query tile by
  ``policy.tile(m_block, s_q, s_kv)``, holding run-time values; ``tile.n_blocks`` visits,
  and the policy answers ``policy.block(tile, step)`` (the key block of the ``step``-th
  visit) and ``policy.needs_mask(tile, n)``.

The questions go to the policy, reached through the kernel (``self.key_blocks.block(...)``),
not to the tile view: inside a ``cutlass.range`` loop the DSL would have to carry any other
object a method is called on from one iteration to the next, and a plain Python object
cannot be carried.

Blocks run from the last to the first, so the blocks that need masking (the S_kv residue,
the causal diagonal) come first: the first visit initialises the row maxima from real
scores and later visits never meet a fully masked row they did not already see.

Policies that read their block lists from global memory (block-sparse attention: a
per-(batch, head, query tile) count and index list as in FlexAttention's ``BlockMask``; and
column-sparse attention: a packed list of key rows, chunked into tiles) implement the same
members (``tile``, ``block``, ``has_next``, ``next_block``, ``needs_mask``, ``causal``);
``docs/README.md`` shows how one plugs in.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32


class KeyBlockTile:
    """The run-time facts of one query tile that its policy answers from (see the module
    docstring): ``n_blocks``, the visit count, and what the policy needs to name and mask
    each block."""

    def __init__(self, m_block, s_q, s_kv, n_blocks):
        self.m_block, self.s_q, self.s_kv, self.n_blocks = m_block, s_q, s_kv, n_blocks


class DenseKeyBlocks:
    """Every key block of the sequence; only the block holding keys past ``S_kv`` masks."""

    causal = False

    def __init__(self, block_mn: tuple[int, int]):
        self.block_m, self.block_n = block_mn

    def tile(self, m_block, s_q, s_kv) -> KeyBlockTile:
        """The view of query tile ``m_block`` (counts its visits)."""
        return KeyBlockTile(m_block, s_q, s_kv, self.count(m_block, s_q, s_kv))

    def block(self, tile: KeyBlockTile, step):
        """The key block of visit ``step`` (0 <= step < tile.n_blocks): last to first."""
        return tile.n_blocks - 1 - step

    def has_next(self, tile: KeyBlockTile, step, n):
        """Whether visit ``step`` (of key block ``n``) is followed by another: a loop that
        prefetches the next visit's tile asks this instead of counting visits."""
        return n > 0

    def next_block(self, tile: KeyBlockTile, step, n):
        """The key block of visit ``step + 1``, ``n`` being visit ``step``'s (blocks run
        contiguously from the last to the first)."""
        return n - 1

    #: the element mask of partial blocks (block lists only)
    mask = None
    #: whether the key columns are list positions of packed blocks (``PackedBlockLists``:
    #: the mask maps them to keys, ``mask_mod.apply_packed_mask``)
    packed_blocks = False

    @cute.jit
    def needs_mask(self, tile: KeyBlockTile, n, step=None):
        """Whether key block ``n`` (visit ``step``) holds keys some of the tile's rows must
        not see."""
        return self._needs_mask(tile.m_block, n, tile.s_q, tile.s_kv)

    @cute.jit
    def count(self, m_block, s_q, s_kv):
        return cute.ceil_div(s_kv, self.block_n)

    @cute.jit
    def _needs_mask(self, m_block, n, s_q, s_kv):
        return (n + 1) * self.block_n > s_kv


class CausalKeyBlocks(DenseKeyBlocks):
    """Bottom-right causal: row ``i`` sees keys ``<= i + s_kv - s_q``. A tile visits the
    blocks up to its last row's diagonal (none when its last row sees no key); blocks past
    its first row's diagonal, and the ``S_kv`` residue, need the mask."""

    causal = True

    @cute.jit
    def count(self, m_block, s_q, s_kv):
        bm, bn = self.block_m, self.block_n
        n_blocks = cute.ceil_div(s_kv, bn)
        last_key = (m_block + 1) * bm - 1 + s_kv - s_q
        n_blocks = cutlass.min(n_blocks, cutlass.max(last_key, Int32(-1)) // bn + 1)
        if last_key < 0:
            n_blocks = Int32(0)
        return n_blocks

    @cute.jit
    def _needs_mask(self, m_block, n, s_q, s_kv):
        bm, bn = self.block_m, self.block_n
        needs_mask = (n + 1) * bn > s_kv
        needs_mask = needs_mask or (n + 1) * bn - 1 > m_block * bm + s_kv - s_q
        return needs_mask



class PackedKeyRows(DenseKeyBlocks):
    """Column-sparse attention ("tile packing"): query group ``g`` (``group`` query rows) of
    ``(b, h)`` attends to the key rows ``indices[b, h, g, :count]``, in any order. Those rows
    are packed into chunks of ``block_n`` *positions*; a query tile (which lies inside one
    group: ``block_m`` divides ``group``) visits the chunks as the dense policy visits the key
    blocks of a ``count``-long sequence: ``tile(m_block, s_q, count)``, the last (partial)
    chunk first, only that chunk masking (positions ``>= count``). Mask coordinates are packed
    positions; the kernel gathers chunk ``n``'s K/V rows from
    ``indices[b, h, g, n * block_n + r]`` into a dense smem tile. ``count`` 0 visits nothing
    (o = 0, lse = -inf)."""

    def __init__(self, block_mn: tuple[int, int], group: int):
        super().__init__(block_mn)
        if group <= 0 or group % self.block_m:
            raise ValueError(f"block_m ({self.block_m}) must divide group ({group}): a query "
                             f"tile lies inside one query group")
        self.group = group

    def group_of(self, m_block):
        """The query group of query tile ``m_block``."""
        return m_block * self.block_m // self.group


class PackedBlockTile(KeyBlockTile):
    """A gathered query tile's list of small key blocks under an element mask: ``s_kv`` counts
    list positions (as ``PackedKeyRows``' view), ``entries`` is the list (1-D int32 block
    indices), its first ``masked`` positions are partial blocks, ``keys`` is S_kv;
    ``batch``/``head``/``doc_ids`` for the mask."""

    def __init__(self, m_block, s_q, count, n_blocks, entries, masked, keys, batch, head,
                 doc_ids):
        super().__init__(m_block, s_q, count, n_blocks)
        self.entries, self.masked, self.keys = entries, masked, keys
        self.batch, self.head, self.doc_ids = batch, head, doc_ids


class PackedBlockLists(PackedKeyRows):
    """Block-sparse attention's small key blocks (16, 32 or 64 keys, ``entry_keys``) packed
    into key tiles, with the element ``mask`` inside the partial ones: the gather kernels'
    list names blocks, partial ones first, then full ones (ops/block_sparse.py
    ``packed_entries``); the tile visits its chunks of list positions as ``PackedKeyRows``.
    A chunk masks where it holds positions past the count, partial blocks, or (S_kv not a
    multiple of the block: every chunk, as the residue block may be listed anywhere) keys
    past S_kv; the softmax's mask maps positions to keys through the list
    (``mask_mod.apply_packed_mask``)."""

    packed_blocks = True

    def __init__(self, block_mn: tuple[int, int], group: int, entry_keys: int, mask):
        super().__init__(block_mn, group)
        self.entry_keys, self.mask = entry_keys, mask

    @cute.jit
    def tile(self, m_block, s_q, count, entries, full, s_kv, batch, head,
             doc_ids) -> PackedBlockTile:
        """The view of query tile ``m_block`` over its list ``entries`` of ``count``
        positions, the last ``full`` of them full blocks."""
        masked = cutlass.max(count - cutlass.max(full, Int32(0)), Int32(0))
        return PackedBlockTile(m_block, s_q, count, self.count(m_block, s_q, count), entries,
                               masked, s_kv, batch, head, doc_ids)

    @cute.jit
    def needs_mask(self, tile: PackedBlockTile, n, step=None):
        bn = self.block_n
        return ((n + 1) * bn > tile.s_kv or n * bn < tile.masked
                or tile.keys % self.entry_keys != 0)


@cute.jit
def gather_key_tile(policy, m_block, s_q, count, entries, group, s_kv, batch, head,
                    mFullCounts, mDocIds):
    """The view of gathered query tile ``m_block`` (query group ``group``) over its list's
    ``count`` positions: ``PackedKeyRows``' (or the dense policy's over ``count`` keys), or
    with an element mask ``PackedBlockLists``', which also reads the group's full positions
    from ``mFullCounts`` (B, H, G)."""
    if cutlass.const_expr(policy.mask is not None):
        view = policy.tile(m_block, s_q, count, entries, mFullCounts[batch, head, group], s_kv,
                           batch, head, mDocIds)
    else:
        view = policy.tile(m_block, s_q, count)
    return view


def key_block_policy(block_mn: tuple[int, int], causal: bool) -> DenseKeyBlocks:
    """The dense or causal policy for a ``(block_m, block_n)`` tile."""
    return (CausalKeyBlocks if causal else DenseKeyBlocks)(block_mn)


class BlockListTile(KeyBlockTile):
    """A query tile's block lists: ``partial`` (1-D int32, ``n_partial`` entries) and
    ``full`` (``n_full``), visited partial first; ``batch``/``head``/``doc_ids`` for the
    element mask."""

    def __init__(self, m_block, s_q, s_kv, partial, n_partial, full, n_full, batch, head,
                 doc_ids):
        super().__init__(m_block, s_q, s_kv, n_partial + n_full)
        self.partial, self.n_partial, self.full = partial, n_partial, full
        self.batch, self.head, self.doc_ids = batch, head, doc_ids


class BlockListKeyBlocks(DenseKeyBlocks):
    """Block-sparse attention (FlexAttention's ``BlockMask``): query tile ``m`` of (b, h)
    visits its partial key blocks ``kv_indices[b, h, m, :kv_num_blocks[b, h, m]]`` (the
    element ``mask`` applies there), then its full ones. The lists come from global memory;
    ``block`` reads one entry per visit. The S_kv residue block masks too (a full one against
    S_kv only: full blocks are entirely visible, whatever the element mask). A list block of
    ``list_block`` keys may span several kernel tiles (``block_n`` dividing it): each list
    entry is then visited as ``list_block / block_n`` consecutive tiles. The query tile is the
    list's query block (``block_m`` = its size)."""

    def __init__(self, block_mn: tuple[int, int], mask=None, list_block: int = 128):
        super().__init__(block_mn)
        if list_block % self.block_n:
            raise ValueError(f"the kernel's key tile ({self.block_n}) must divide the block "
                             f"lists' key block ({list_block})")
        self.mask, self.split = mask, list_block // self.block_n

    @cute.jit
    def tile(self, m_block, s_q, s_kv, partial, n_partial, full, n_full, batch, head,
             doc_ids) -> BlockListTile:
        """The view of query tile ``m_block``; counts are clamped into [0, list width] so a
        bad count can never read past its list (the op checks values in debug mode)."""
        n_partial = cutlass.min(cutlass.max(n_partial, 0), Int32(cute.size(partial)))
        n_full = cutlass.min(cutlass.max(n_full, 0), Int32(cute.size(full)))
        return BlockListTile(m_block, s_q, s_kv, partial, n_partial * self.split, full,
                             n_full * self.split, batch, head, doc_ids)

    @cute.jit
    def block(self, tile: BlockListTile, step):
        """Visit ``step``: tile ``step % split`` of list entry ``step // split`` (partial
        entries first); ``n_partial`` counts visits, so entries are ``// split`` of it. A
        listed block outside [0, ceil(S_kv / list block)) is clamped into it: never an
        out-of-bounds load (the op checks values in debug mode)."""
        entry, part = step // self.split, step % self.split
        listed = Int32(0)
        if step < tile.n_partial:
            listed = tile.partial[entry]
        else:
            listed = tile.full[entry - tile.n_partial // self.split]
        last = cute.ceil_div(tile.s_kv, self.block_n * self.split) - 1
        return cutlass.min(cutlass.max(listed, 0), last) * self.split + part

    def has_next(self, tile: BlockListTile, step, n):
        return step + 1 < tile.n_blocks

    def next_block(self, tile: BlockListTile, step, n):
        return self.block(tile, step + 1)

    @cute.jit
    def needs_mask(self, tile: BlockListTile, n, step=None):
        return step < tile.n_partial or (n + 1) * self.block_n > tile.s_kv


class SplitTile(KeyBlockTile):
    """One split's share of a query tile's key blocks: visits ``hi - 1`` down to ``lo``."""

    def __init__(self, m_block, s_q, s_kv, n_blocks, hi):
        super().__init__(m_block, s_q, s_kv, n_blocks)
        self.hi = hi


class SplitKeyBlocks(DenseKeyBlocks):
    """Split-KV (flash-decoding): the blocks ``base`` (a dense or causal policy) gives a query
    tile, cut into ``n_splits`` contiguous ranges; split ``s`` visits the ``s``-th, last to
    first, and masks where ``base`` does. Each split's (O, lse) is a partial result the op
    combines (a split with no block gives O = 0, lse = -inf, which weighs nothing)."""

    def __init__(self, base: DenseKeyBlocks):
        super().__init__((base.block_m, base.block_n))
        self.base, self.causal = base, base.causal

    @cute.jit
    def tile(self, m_block, s_q, s_kv, split, n_splits) -> SplitTile:
        total = self.base.count(m_block, s_q, s_kv)
        per = (total + n_splits - 1) // n_splits
        lo = cutlass.min(split * per, total)
        hi = cutlass.min(lo + per, total)
        return SplitTile(m_block, s_q, s_kv, hi - lo, hi)

    def block(self, tile: SplitTile, step):
        return tile.hi - 1 - step

    def has_next(self, tile: SplitTile, step, n):
        return step + 1 < tile.n_blocks

    @cute.jit
    def needs_mask(self, tile: SplitTile, n, step=None):
        return self.base._needs_mask(tile.m_block, n, tile.s_q, tile.s_kv)


def split_launch(tiles, heads, q_batch, o_batch, split_kv: bool, cluster_splits=None):
    """(grid, cluster) of a one-CTA-per-tile attention launch (trace time): z is the batch
    entry; a split-KV launch's ``o_batch`` = n_splits x B entries (split x B + batch); with
    ``cluster_splits`` n, batch x n + split in (1, 1, n) clusters. ``split_of_batch`` reads
    z back."""
    if cluster_splits is not None:
        return (tiles, heads, q_batch * cluster_splits), (1, 1, cluster_splits)
    return (tiles, heads, o_batch if split_kv else q_batch), (1, 1, 1)


def split_of_batch(split_kv: bool, batch, q_batch, mLSE, cluster_splits=None):
    """(split, batch, n_splits) of a CTA's grid batch coordinate (trace time, inline): a
    split-KV launch runs ``split * B + batch`` (``q_batch`` = B) and its lse holds all
    n_splits x B entries; with ``cluster_splits`` n (the splits of a batch entry are one
    cluster along z) it runs ``batch * n + split``; any other launch is split 0 of 1."""
    if cluster_splits is not None:
        return batch % cluster_splits, batch // cluster_splits, cluster_splits
    if split_kv:
        return batch // q_batch, batch % q_batch, mLSE.shape[0] // q_batch
    return Int32(0), batch, Int32(1)


@cute.jit
def key_block_tile(policy, m_block, s_q, s_kv, lists, batch, head, split, n_splits):
    """The view of query tile ``m_block`` for the dense, causal, split-KV or block-list
    ``policy``, whichever it is: ``lists`` = (mIndices, mCounts, mFullIndices, mFullCounts,
    mDocIds) are read by the block-list policy only, ``split`` / ``n_splits`` by the split
    one. (The gather policy's view needs the kernel's own count and is built there.)"""
    if cutlass.const_expr(isinstance(policy, BlockListKeyBlocks)):
        indices, counts, full_indices, full_counts, doc_ids = lists
        view = policy.tile(m_block, s_q, s_kv, indices[batch, head, m_block, None],
                           counts[batch, head, m_block], full_indices[batch, head, m_block, None],
                           full_counts[batch, head, m_block], batch, head, doc_ids)
    elif cutlass.const_expr(isinstance(policy, SplitKeyBlocks)):
        view = policy.tile(m_block, s_q, s_kv, split, n_splits)
    else:
        view = policy.tile(m_block, s_q, s_kv)
    return view

