"""``block_sparse_attention``: attention over the key blocks a FlexAttention ``BlockMask``
lists (issue 15), with an element mask (``cute_kernels.masks``) inside its partial blocks.

Exported as ``cute_kernels.block_sparse_attention`` and ``cute_kernels.block_mask_from_dense``.
The kernels driven by the block lists (Hopper ``AttentionSm90(block_sparse=True)``, Ampere
``AttentionSm80(block_sparse=True)``) pass their GPU tests against flex_attention and a float32
reference on an H100 (tests/test_block_sparse_gpu.py), memcheck and racecheck clean; speed in
perf/RESULTS.md.

Semantics (FlexAttention's): query block ``m`` of (b, h) sees the key blocks
``full_kv_indices[b, h, m, :full_kv_num_blocks[b, h, m]]`` entirely and the blocks
``kv_indices[b, h, m, :kv_num_blocks[b, h, m]]`` where the element mask allows; keys past
S_kv never. A query that sees no key gets o = 0 and lse = -inf. B and H of the lists may be 1
(broadcast).

Block sizes (query x key): 128 x 128 runs the block-list kernels (the block is the tile), and
so does 64 x 128 (the FA2 kernel's 64-row tile, on either architecture);
query blocks of 64 or 128 with key blocks of 16, 32 or 64 are *packed* (tile packing): each
query block's listed key blocks are expanded into their key rows and run by the column-sparse
gather kernels (``column_sparse_attention`` with ``group`` = the query block), so small key
blocks still fill whole tensor-core tiles. Packed blocks take the element masks too: the list
holds each query block's partial blocks first, and the kernels map a masked column's list
position back to its key (``block_info.PackedBlockLists``). Where S_kv ends inside a block,
that block is listed whole (its TMA box zero-fills past the keys) and its keys past S_kv are
cut off the list's count (unmasked) or hidden by that map: no packed call needs the host
expansion ``packed_rows`` (or its sync) unless ``PACKED_EXPANSION_IN_KERNEL`` is off.
"""

from __future__ import annotations

import torch

from ..masks import Mask, key_of, mask_of
from ..runtime.arch import sm_count
from ..runtime.bridge import kernel_for
from ..runtime.validate import check_int, check_tensor, value_checks
from .attention import ATTENTION_KERNELS, _check_device_args, validate_attention
from .derived import DerivedCache
from .dispatch import KernelOp, plain_eager

#: the block of the block-list kernels (query and key)
BLOCK = 128
#: query and key block sizes of packed blocks (the column-sparse gather kernels' groups)
PACKED_Q_BLOCKS, PACKED_KV_BLOCKS = (64, 128), (16, 32, 64)
#: block sizes of the block-list kernels: the Hopper 128 x 128 tile, and 64-row query blocks
#: on the FA2 kernel's 64-row tile (either architecture)
LIST_BLOCKS = ((BLOCK, BLOCK), (64, BLOCK))
INDEX_DTYPE = torch.int32


class BlockLists:
    """The kernel's view of a block mask: int32 (B, H, M) counts and (B, H, M, N) indices of
    the partial and the full key blocks of every query block (broadcast B/H expanded)."""

    def __init__(self, partial_counts, partial_indices, full_counts, full_indices,
                 block_size=(BLOCK, BLOCK)):
        self.partial_counts, self.partial_indices = partial_counts, partial_indices
        self.full_counts, self.full_indices = full_counts, full_indices
        self.block_size = block_size

    @property
    def packed(self) -> bool:
        """Whether these blocks run through the gather kernels (module docstring)."""
        return self.block_size not in LIST_BLOCKS

    def tensors(self):
        return (self.partial_counts, self.partial_indices, self.full_counts, self.full_indices)


def _is_noop(mask_mod) -> bool:
    return mask_mod is None or getattr(mask_mod, "__name__", "") == "noop_mask"


def check_block_size(size) -> tuple[int, int]:
    size = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
    if size not in LIST_BLOCKS and not (len(size) == 2 and size[0] in PACKED_Q_BLOCKS
                                        and size[1] in PACKED_KV_BLOCKS):
        raise ValueError(f"block size (query, key) must be one of {LIST_BLOCKS}, or a query "
                         f"block of {PACKED_Q_BLOCKS} with a key block of {PACKED_KV_BLOCKS}, "
                         f"got {size}")
    return size


def lists_from_bsr(layout: torch.Tensor):
    """The block lists of a ``torch.sparse_bsr_tensor``'s layout (its values are ignored):
    every stored G x G block is a *full* block. Batch dims () / (H,) / (B, H) broadcast as a
    BlockMask's do. Returns ``((kv_num_blocks, kv_indices, full_kv_num_blocks,
    full_kv_indices), (G, G))`` for :func:`block_sparse_attention`; G must be 64 or 128 (a
    64-row query block with 64-key blocks is packed)."""
    if layout.layout != torch.sparse_bsr:
        raise TypeError(f"expected a torch.sparse_bsr tensor, got layout {layout.layout}")
    g_rows, g_cols = layout.values().shape[-2:]
    if g_rows != g_cols or g_rows not in (64, BLOCK):
        raise ValueError(f"a BSR layout's blocks must be square, 64 or {BLOCK}, got "
                         f"{g_rows} x {g_cols}")
    crow, col = layout.crow_indices(), layout.col_indices()
    batch = crow.shape[:-1]
    if len(batch) > 2:
        raise ValueError(f"a BSR layout may have at most two batch dims (B, H), got {batch}")
    crow = crow.reshape(*(1,) * (2 - len(batch)), *batch, crow.shape[-1]).long()
    col = col.reshape(*(1,) * (2 - len(batch)), *batch, col.shape[-1]).long()
    counts = crow[..., 1:] - crow[..., :-1]  # (B, H, M)
    width = max(1, int(counts.max())) if counts.numel() else 1
    pos = crow[..., :-1].unsqueeze(-1) + torch.arange(width, device=crow.device)
    live = torch.arange(width, device=crow.device) < counts.unsqueeze(-1)
    flat = col.reshape(*col.shape[:2], -1)
    gathered = flat.gather(2, pos.clamp(max=max(flat.shape[-1] - 1, 0)).flatten(2)).view(
        pos.shape) if flat.shape[-1] else torch.zeros_like(pos)
    indices = torch.where(live, gathered, 0).to(INDEX_DTYPE)
    zeros = torch.zeros_like(counts, dtype=INDEX_DTYPE)
    return (zeros, indices, counts.to(INDEX_DTYPE), indices), (g_rows, g_cols)


def block_lists(block_mask, b: int, h: int, s_q: int, s_kv: int,
                block_size=(BLOCK, BLOCK), check_values: bool = True) -> BlockLists:
    """Check ``block_mask`` (a ``BlockMask``, or a tuple ``(kv_num_blocks, kv_indices,
    full_kv_num_blocks, full_kv_indices)`` with the full pair optional/None, of blocks
    ``block_size``) against (B, H, S_q, S_kv) and return its lists, expanded over B and H,
    int32, contiguous. ``check_values``: also :func:`check_list_values` (a device sync; the
    op does it in debug mode only)."""
    if isinstance(block_mask, torch.Tensor) and block_mask.layout == torch.sparse_bsr:
        if tuple(block_mask.shape[-2:]) != (s_q, s_kv):
            raise ValueError(f"the BSR layout is {tuple(block_mask.shape[-2:])}, but q and k "
                             f"have S_q = {s_q}, S_kv = {s_kv}")
        block_mask, block_size = lists_from_bsr(block_mask)
    if hasattr(block_mask, "kv_num_blocks") and hasattr(block_mask, "BLOCK_SIZE"):
        block_size = tuple(block_mask.BLOCK_SIZE)
        lengths = tuple(getattr(block_mask, "seq_lengths", (s_q, s_kv)))
        if lengths != (s_q, s_kv):
            raise ValueError(f"block_mask was made for (Q_LEN, KV_LEN) = {lengths}, but q and "
                             f"k have S_q = {s_q}, S_kv = {s_kv}")
        parts = (block_mask.kv_num_blocks, block_mask.kv_indices,
                 block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
    elif isinstance(block_mask, (tuple, list)) and len(block_mask) in (2, 4):
        parts = tuple(block_mask) + (None, None) * (len(block_mask) == 2)
    else:
        raise TypeError(f"block_mask must be a torch.nn.attention.flex_attention.BlockMask, a "
                        f"torch.sparse_bsr layout, or a tuple (kv_num_blocks, kv_indices[, "
                        f"full_kv_num_blocks, full_kv_indices]), got "
                        f"{type(block_mask).__name__}")
    q_block, _ = block_size = check_block_size(block_size)
    m_blocks = -(-s_q // q_block)
    names = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")
    if (parts[2] is None) != (parts[3] is None):
        raise ValueError("full_kv_num_blocks and full_kv_indices go together (both or none)")
    out = []
    for i, (name, t) in enumerate(zip(names, parts)):
        if t is None:
            shape = (b, h, m_blocks) + ((1,) if i == 3 else ())
            out.append(torch.zeros(shape, dtype=INDEX_DTYPE, device=parts[0].device))
            continue
        check_tensor(name, t, dtypes=(torch.int32, torch.int64), ndim=3 + i % 2, on_cuda=False)
        tb, th, tm = t.shape[:3]
        if tb not in (1, b) or th not in (1, h) or tm != m_blocks:
            raise ValueError(f"{name} must have shape (B or 1, H or 1, ceil(S_q / {q_block}) = "
                             f"{m_blocks}{', N' if i % 2 else ''}) for q of shape (B={b}, "
                             f"H={h}, S_q={s_q}), got {tuple(t.shape)}")
        if i % 2 and t.shape[3] < 1:
            raise ValueError(f"{name} needs at least one column")
        if t.device != parts[0].device:
            raise ValueError(f"{name} is on {t.device}, kv_num_blocks on {parts[0].device}")
        expanded = t.expand(b, h, *t.shape[2:]).to(INDEX_DTYPE).contiguous()
        out.append(expanded)
    lists = BlockLists(*out, block_size=block_size)
    if check_values:
        check_list_values(lists, s_kv)
    return lists


def check_list_values(lists: BlockLists, s_kv: int) -> None:
    """Debug mode (a device sync): every count in [0, min(list width, key blocks)] and every
    listed block a key block. The kernels clamp both, so bad values give wrong numbers, never
    an out-of-bounds access."""
    kv_block = lists.block_size[1]
    n_blocks = -(-s_kv // kv_block)
    for counts, indices, name in ((lists.partial_counts, lists.partial_indices, "kv"),
                                  (lists.full_counts, lists.full_indices, "full_kv")):
        if bool((counts < 0).any()) or bool((counts > min(indices.shape[3], n_blocks)).any()):
            raise ValueError(f"{name}_num_blocks must be in [0, min(columns of {name}_indices, "
                             f"ceil(S_kv / {kv_block}) = {n_blocks})]")
        live = torch.arange(indices.shape[3], device=indices.device) < counts.unsqueeze(-1)
        listed = indices[live]
        if listed.numel() and (int(listed.min()) < 0 or int(listed.max()) >= n_blocks):
            raise ValueError(f"{name}_indices lists a key block outside [0, {n_blocks}) "
                             f"(S_kv = {s_kv})")


def block_mask_from_dense(mask: torch.Tensor, block_size=BLOCK):
    """The block lists of a dense boolean element mask, in FlexAttention's form.

    A key block is *full* where every element of its (query block, key block) tile is True,
    *partial* where some are, and absent where none is (elements past S_q / S_kv count as
    True, so a residue block can still be full). Works on any device (plain torch).

    Args:
        mask: bool (B, H, S_q, S_kv), True = the query may see the key.
        block_size: an int (square blocks) or (query block, key block): 128 x 128, 64 x 128,
            or query 64/128 with key 16/32/64 (packed).

    Returns:
        ``(kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices)``, int32, (B, H,
        M) counts and (B, H, M, N) indices, for :func:`block_sparse_attention` (with
        ``block_size=`` when not 128), whose ``mask=`` must then say what the partial blocks
        hold (or the mask is all-or-nothing per block: no partial blocks).

    Raises:
        TypeError: ``mask`` not a bool tensor, ``block_size`` not an int or pair of ints.
        ValueError: ``mask`` not 4-D, a block size not listed above.
    """
    check_tensor("mask", mask, dtypes=(torch.bool,), ndim=4, on_cuda=False)
    if not isinstance(block_size, (tuple, list)):
        block_size = check_int("block_size", block_size, min_value=1)
    q_block, kv_block = check_block_size(block_size)
    b, h, s_q, s_kv = mask.shape
    pad = (0, -s_kv % kv_block, 0, -s_q % q_block)
    tiles = torch.nn.functional.pad(mask, pad).view(
        b, h, -(-s_q // q_block), q_block, -(-s_kv // kv_block), kv_block)
    valid = torch.nn.functional.pad(torch.ones(s_q, s_kv, dtype=torch.bool, device=mask.device),
                                    pad).view(tiles.shape[2:])
    any_on = tiles.any(dim=(3, 5))
    all_on = (tiles | ~valid).all(dim=(3, 5))
    full, partial = any_on & all_on, any_on & ~all_on

    def lists(sel):
        counts = sel.sum(-1).to(INDEX_DTYPE)
        order = torch.argsort((~sel).to(torch.int8), dim=-1, stable=True).to(INDEX_DTYPE)
        return counts, order

    return (*lists(partial), *lists(full))


def dense_mask(lists: BlockLists, s_q: int, s_kv: int, mask: Mask | None,
               doc_ids: torch.Tensor | None = None) -> torch.Tensor:
    """bool (B, H, S_q, S_kv): the element mask the block lists and ``mask`` describe."""
    b, h, m_blocks = lists.partial_counts.shape
    q_block, kv_block = lists.block_size
    n_blocks = -(-s_kv // kv_block)
    dev = lists.partial_counts.device

    def blocks(counts, indices):
        live = torch.arange(indices.shape[3], device=dev) < counts.unsqueeze(-1).long()
        on = torch.zeros(b, h, m_blocks, n_blocks + 1, dtype=torch.bool, device=dev)
        on.scatter_(3, torch.where(live, indices.long(), n_blocks), True)
        return on[..., :n_blocks]

    def elements(on):
        return on.repeat_interleave(q_block, 2).repeat_interleave(kv_block, 3)[:, :, :s_q,
                                                                                 :s_kv]

    visible = elements(blocks(lists.full_counts, lists.full_indices))
    partial = elements(blocks(lists.partial_counts, lists.partial_indices))
    if mask is not None:
        bi = torch.arange(b, device=dev).view(b, 1, 1, 1)
        hi = torch.arange(h, device=dev).view(1, h, 1, 1)
        qi = torch.arange(s_q, device=dev).view(1, 1, s_q, 1)
        ki = torch.arange(s_kv, device=dev).view(1, 1, 1, s_kv)
        partial = partial & mask.evaluate(bi, hi, qi, ki, doc_ids).expand_as(partial)
    return visible | partial


def _clamped_counts(lists: BlockLists):
    """(B, H, M, 1) int32 partial and full counts, clamped into [0, list width]."""
    return (lists.partial_counts.clamp(0, lists.partial_indices.shape[3]).unsqueeze(-1),
            lists.full_counts.clamp(0, lists.full_indices.shape[3]).unsqueeze(-1))


def _merged_lists(lists: BlockLists, t: torch.Tensor, n_partial: torch.Tensor,
                  partial_w: int, full_w: int) -> torch.Tensor:
    """Each query block's partial then full listed blocks as one list: entry ``t`` is
    ``partial[t]`` for t < n_partial, else ``full[t - n_partial]`` (reading the first
    ``partial_w`` / ``full_w`` columns of the lists; entries past the counts are filler)."""
    partial = lists.partial_indices[..., :max(partial_w, 1)]
    full = lists.full_indices[..., :max(full_w, 1)]
    in_partial = t.clamp(max=partial.shape[-1] - 1).long().expand(*n_partial.shape[:-1],
                                                                  t.numel())
    in_full = (t - n_partial).clamp_(0, full.shape[-1] - 1).long()
    return torch.where(t < n_partial, partial.gather(-1, in_partial), full.gather(-1, in_full))


def _residue_block_last(entries, counts, t, listed, s_kv: int, kv_block: int):
    """Merged lists with the block holding the S_kv residue moved last among each list's
    live entries (a stable sort of 3 keys: live, the residue block, filler) and the counts
    cut to end at S_kv where a list holds it."""
    n_kv = -(-s_kv // kv_block)
    live = t < listed.unsqueeze(-1)
    ragged = live & (entries == n_kv - 1)
    key = torch.where(live, ragged.to(torch.int8), 2).to(torch.int8)
    entries = entries.gather(-1, torch.argsort(key, dim=-1, stable=True))
    cut = ragged.any(-1).to(INDEX_DTYPE) * (kv_block - s_kv % kv_block)
    return entries, counts - cut


def packed_rows(lists: BlockLists, s_kv: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tile packing for small key blocks: per query block, the key rows of its listed blocks
    (partial and full), as the column-sparse kernels' ``(indices, counts)``: int32
    (B, H, M, L) and (B, H, M), L = ``kv_block`` x the longest pair of lists.

    Work grows with the listed blocks, not the lists' width (a BlockMask's lists are as wide
    as the key blocks): one device sync reads the longest lists, the live entries (a prefix of
    each list) are merged on that width, and only then expanded into rows. The block holding
    the S_kv residue goes last, so its rows past S_kv fall past the count (the kernels load
    and mask nothing there). Listed blocks outside the keys are clamped into them, as the
    block-list kernels clamp (the op checks values in debug mode)."""
    kv_block = lists.block_size[1]
    dev = lists.partial_counts.device
    n_kv = -(-s_kv // kv_block)
    n_partial, n_full = _clamped_counts(lists)
    longest = torch.stack([n_partial.amax(), n_full.amax()]) if n_partial.numel() else None
    partial_l, full_l = longest.tolist() if longest is not None else (0, 0)
    width = max(partial_l + full_l, 1)
    t = torch.arange(width, device=dev, dtype=INDEX_DTYPE)
    blocks = _merged_lists(lists, t, n_partial, partial_l, full_l).clamp_(0, n_kv - 1)
    entries = (n_partial + n_full).squeeze(-1)
    counts = entries * kv_block
    if s_kv % kv_block:
        blocks, counts = _residue_block_last(blocks, counts, t, entries, s_kv, kv_block)
    # the one pass over the expanded rows (in place after the broadcast add)
    rows = blocks.unsqueeze(-1) * kv_block + torch.arange(kv_block, device=dev,
                                                          dtype=INDEX_DTYPE)
    indices = rows.clamp_(max=s_kv - 1).flatten(3)
    return indices, counts.to(INDEX_DTYPE).contiguous()


#: Whether packed small blocks reach the gather kernels as block lists the kernels expand
#: (``packed_entries``: no device sync, CUDA-graph capturable, any S_kv) instead of
#: host-expanded rows (``packed_rows``). On since its GPU tests passed (2026-11-23): 0.55
#: against 0.91 ms for 32-key blocks at 93% absent, S 8k (H100). Element masks take the
#: kernels' expansion either way.
PACKED_EXPANSION_IN_KERNEL = True


class _PackedSchedule:
    """The packed lists' schedule, kept with a mask's converted lists: their mean length in
    keys (short lists take the gather kernel's two-CTAs-per-SM tiles: the mean, not the
    longest, sets the pace of a grid of many tiles) and those tiles' persistent walks dealt
    on the host (``column_sparse.packed_walks``). Both need the counts on the host: read back
    on the mask's second use (one sync per reused mask, none for a mask used once); ``get``
    is (None, None) until then, and during CUDA-graph capture and tracing (the default tiles,
    ordered grid)."""

    def __init__(self, counts: torch.Tensor):
        eager = not torch.cuda.is_current_stream_capturing() and plain_eager((counts,), ())
        self._counts = counts if eager and counts.numel() else None
        self._uses, self._keys, self._host, self._walks = 0, None, None, {}

    def get(self, device, s_q: int, group: int, head_dim: int, entry_keys: int):
        """(mean keys or None, walks or None) for this call's query length and tiles."""
        from .column_sparse import packed_walks

        self._uses += 1
        if torch.cuda.is_current_stream_capturing():
            return None, None
        if self._counts is not None and self._uses > 1 and self._keys is None:
            self._host = self._counts.cpu()  # the one sync
            self._keys = int(self._host.float().mean())
        if self._keys is None:
            return None, None
        key = (s_q, group, head_dim, entry_keys, sm_count(device))
        if key not in self._walks:
            self._walks[key] = packed_walks(self._host, device, s_q, group, head_dim,
                                            self._keys, entry_keys)
        return self._keys, self._walks[key]


def packed_entries(lists: BlockLists, s_kv: int, masked: bool = False):
    """Packed small blocks as the gather kernels' block lists (``entry_keys`` = the key
    block): per query block, its partial then its full listed blocks merged into one int32
    (B, H, M, min(P + F, key blocks)) list, and counts in key positions, with no device sync.
    Where S_kv ends inside a block: without ``masked`` that block goes last and the count
    stops at S_kv (as ``packed_rows`` does), so positions past it are masked as any list's
    tail; ``masked`` (the kernels with an element mask, whose partial blocks must stay first)
    keeps the order and counts whole blocks, and the kernels hide the keys past S_kv
    (``PackedBlockLists``); it also returns the positions of the full blocks that end each
    list, int32 (B, H, M)."""
    kv_block = lists.block_size[1]
    partial_w, full_w = lists.partial_indices.shape[3], lists.full_indices.shape[3]
    n_partial, n_full = _clamped_counts(lists)
    # valid lists name each key block at most once: no query block lists more than there are
    # (a BlockMask's lists are each as wide as the key blocks; both together would be twice)
    width_keys = -(-s_kv // kv_block)
    width = min(partial_w + full_w, width_keys)
    t = torch.arange(width, device=n_partial.device, dtype=INDEX_DTYPE)
    # blocks clamped into the keys, as the kernels clamp them (so the residue block is found)
    entries = _merged_lists(lists, t, n_partial, partial_w, full_w).clamp_(0, width_keys - 1)
    listed = (n_partial + n_full).squeeze(-1).clamp(max=width)
    counts = (listed * kv_block).to(INDEX_DTYPE)
    if s_kv % kv_block and not masked:
        entries, counts = _residue_block_last(entries, counts, t, listed, s_kv, kv_block)
    merged = entries.to(INDEX_DTYPE).contiguous(), counts.contiguous()
    if not masked:
        return merged
    full = (listed - n_partial.squeeze(-1).clamp(max=width)) * kv_block
    return (*merged, full.to(INDEX_DTYPE).contiguous())


def block_sparse_attention_reference(q, k, v, block_mask, *, mask: Mask | None = None,
                                     doc_ids=None, scale=None, block_size=BLOCK):
    """(o, lse) in float32: dense attention under :func:`dense_mask` (GQA by repeating kv
    heads; a query with no visible key gets o = 0, lse = -inf)."""
    scale = validate_attention(q, k, v, scale)
    b, h, s_q, _ = q.shape
    s_kv = k.shape[2]
    lists = block_lists(block_mask, b, h, s_q, s_kv, block_size)
    allowed = dense_mask(lists, s_q, s_kv, mask, doc_ids)
    rep = h // k.shape[1]
    kf = k.float().repeat_interleave(rep, 1)
    vf = v.float().repeat_interleave(rep, 1)
    s = (q.float() @ kf.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.where(allowed, torch.exp(s - lse.unsqueeze(-1)), 0.0)
    return p @ vf, lse


def _check_mask(block_mask, mask, doc_ids, lists: BlockLists, b: int, s_q: int, s_kv: int):
    if mask is not None and not isinstance(mask, Mask):
        raise TypeError(f"mask must be a cute_kernels.masks mask (causal(), sliding_window(w), "
                        f"prefix_lm(n), document(), custom(fn)) or None, got "
                        f"{type(mask).__name__}")
    mask_mod = getattr(block_mask, "mask_mod", None)
    # a device sync, so only where the answer matters: a Python mask_mod nothing can trace
    partial = (mask is None and not _is_noop(mask_mod)
               and bool((lists.partial_counts > 0).any()))
    if partial:
        raise ValueError(
            f"block_mask has partial blocks and a Python mask_mod "
            f"({getattr(mask_mod, '__name__', mask_mod)!r}), which cannot be traced into the "
            f"kernel: pass mask= with what it computes (cute_kernels.masks.causal(), "
            f"sliding_window(w), prefix_lm(n), document() with doc_ids, or custom(fn) with a "
            f"@cute.jit fn)")
    if mask is not None and mask.needs_doc_ids:
        if doc_ids is None:
            raise ValueError("the document mask needs doc_ids, int32 (B, S)")
        check_tensor("doc_ids", doc_ids, dtypes=(torch.int32,), ndim=2, on_cuda=False)
        if s_q != s_kv or tuple(doc_ids.shape) != (b, s_q):
            raise ValueError(f"doc_ids must have shape (B, S) = ({b}, {s_q}) (self-attention: "
                             f"S_q == S_kv), got {tuple(doc_ids.shape)} with S_kv = {s_kv}")
    elif doc_ids is not None:
        raise ValueError("doc_ids go with mask=cute_kernels.masks.document() only")


def _check_mask_mod_agrees(block_mask, mask: Mask, doc_ids, b: int, h: int, s_q: int,
                           s_kv: int, samples: int = 4096) -> None:
    """Debug mode: ``mask`` and the BlockMask's own mask_mod agree on random points."""
    mask_mod = getattr(block_mask, "mask_mod", None)
    if _is_noop(mask_mod) or (mask.kind == "custom" and mask.torch_fn is None):
        return
    g = torch.Generator().manual_seed(0)
    dev = doc_ids.device if doc_ids is not None else "cpu"
    pts = [torch.randint(0, n, (samples,), generator=g).to(dev) for n in (b, h, s_q, s_kv)]
    ours = mask.evaluate(*pts, doc_ids)
    theirs = torch.stack([torch.as_tensor(mask_mod(*(p[i] for p in pts)))
                          for i in range(min(samples, 512))]).to(ours.device)
    if not torch.equal(ours[: theirs.numel()].bool(), theirs.bool()):
        raise ValueError(f"mask={mask.kind!r} disagrees with block_mask.mask_mod "
                         f"({getattr(mask_mod, '__name__', mask_mod)!r}) on sampled points")


def make_build(path: str, dtype, head_dim: int, mask: Mask | None, q_block: int = BLOCK):
    """The path's attention kernel driven by block lists (``block_sparse=True``) against
    symbolic tensors: q/k/v/o as :func:`.attention.make_build`, compact int32 counts
    (B, H, M) and indices (B, H, M, N) for the partial and the full blocks, doc ids (B, S).
    64-row query blocks take the FA2 kernel on either path (the Hopper tile has 128+ rows).
    One CTA per tile in grid order: a device-side longest-first order (``tile_order``,
    ops/tile_order.py) measured 3-13% slower at S = 32k and up to 1.8x slower at 8k on an
    H100 (perf/RESULTS.md): each CTA's first act, reading its tile from the order, is a
    global-load latency in front of its Q load, a large share of a short block-sparse row."""
    import cutlass

    from ..runtime.bridge import fake_bhsd, fake_compact
    from ..runtime.compile import Build
    from ..runtime.launch import launch_args

    if path == "hopper" and q_block == BLOCK:
        from ..kernels.attention.sm90 import AttentionSm90

        # D = 128: the softmax/MMA overlap, as the dense kernel (hopper_config), element
        # masks included: under the causal, window and document masks it ran 1.09-1.27x
        # faster than the sequential loop on an H100 (S 8k / 32k, perf/RESULTS.md) although
        # ptxas spills 44 bytes (causal, window) and 168 (documents) in it. The block is the
        # 128 x 128 tile either way.
        kernel = AttentionSm90(head_dim, False, block_sparse=True, mask=mask,
                               overlap=head_dim == 128)
    else:
        from ..kernels.attention.sm80 import AttentionSm80

        # the FA2 kernel's 64- or 128-row tile is the query block; each key block is two
        # 64-key tiles
        kernel = AttentionSm80(head_dim, False, block_m=q_block, block_sparse=True, mask=mask)
    doc = fake_compact(torch.int32, 2) if mask is not None and mask.needs_doc_ids else None
    return Build(kernel, launch_args(
        kernel, mQ=fake_bhsd(dtype, head_dim), mK=fake_bhsd(dtype, head_dim),
        mV=fake_bhsd(dtype, head_dim), mO=fake_bhsd(dtype, head_dim),
        mLSE=fake_compact(torch.float32, 3), mPrevLSE=None, mColsum=None,
        mIndices=fake_compact(torch.int32, 4), mCounts=fake_compact(torch.int32, 3),
        scale=cutlass.Float32(1.0), out_scale=None,
        mFullIndices=fake_compact(torch.int32, 4), mFullCounts=fake_compact(torch.int32, 3),
        mDocIds=doc))



def _block_sparse_attention(q, k, v, partial_counts, partial_indices, full_counts,
                            full_indices, doc_ids, scale: float, mask_key: int,
                            q_block: int = BLOCK):
    """The direct route, after validation: (o, lse) from the path's kernel."""
    from ..runtime.launch import kernel_params

    mask = mask_of(mask_key)
    _check_device_args(q=q, k=k, v=v, kv_num_blocks=partial_counts, kv_indices=partial_indices,
                       full_kv_num_blocks=full_counts, full_kv_indices=full_indices)
    b, h, s_q, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s_q, dtype=torch.float32, device=q.device)
    kernel = kernel_for(q.device, ("block_sparse_attention", q.dtype, d, mask, q_block),
                        lambda path, target: make_build(path, q.dtype, d, mask, q_block))
    kernel(*kernel_params(*ATTENTION_KERNELS).call_args(
        mQ=q, mK=k, mV=v, mO=o, mLSE=lse, mPrevLSE=None, mColsum=None,
        mIndices=partial_indices, mCounts=partial_counts, scale=scale, out_scale=None,
        mFullIndices=full_indices, mFullCounts=full_counts, mDocIds=doc_ids))
    return o, lse


@torch.library.custom_op("cute_kernels::block_sparse_attention", mutates_args=())
def _block_sparse_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               partial_counts: torch.Tensor, partial_indices: torch.Tensor,
                               full_counts: torch.Tensor, full_indices: torch.Tensor,
                               doc_ids: torch.Tensor | None, scale: float, mask_key: int,
                               q_block: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _block_sparse_attention(q, k, v, partial_counts, partial_indices, full_counts,
                                   full_indices, doc_ids, scale, mask_key, q_block)


@_block_sparse_attention_op.register_fake
def _(q, k, v, partial_counts, partial_indices, full_counts, full_indices, doc_ids, scale,
      mask_key, q_block):
    b, h, s_q, _ = q.shape
    return torch.empty_like(q), q.new_empty(b, h, s_q, dtype=torch.float32)


_BLOCK_SPARSE_ATTENTION = KernelOp(_block_sparse_attention_op, _block_sparse_attention,
                                   grad_inputs=("q", "k", "v"))


#: converted block lists (and their packed form) per mask, reused while the caller's mask
#: tensors are the same unchanged objects (ops/derived.py): eager calls with one BlockMask
#: pay the expansion and int32 copies once
_LISTS = DerivedCache()


def _mask_tensors(block_mask) -> tuple:
    """The tensors a block mask's lists derive from: a BlockMask's four or a tuple's (empty
    for anything else, a BSR layout included: never cached)."""
    if hasattr(block_mask, "kv_num_blocks") and hasattr(block_mask, "BLOCK_SIZE"):
        return (block_mask.kv_num_blocks, block_mask.kv_indices,
                block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
    if isinstance(block_mask, (tuple, list)) and all(
            t is None or isinstance(t, torch.Tensor) for t in block_mask):
        return tuple(block_mask)
    return ()


def _hashable(block_size):
    return tuple(block_size) if isinstance(block_size, (tuple, list)) else block_size


def block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask, *,
                           mask: Mask | None = None, doc_ids: torch.Tensor | None = None,
                           scale: float | None = None, return_lse: bool = False,
                           validate: bool | None = None, block_size=BLOCK):
    """Attention over the key blocks ``block_mask`` lists (module docstring).

    Args:
        q: (B, H, S_q, D) queries, bfloat16 or float16, CUDA; D 64 or 128; the rules of
            :func:`cute_kernels.attention` (strides, GQA).
        k: (B, H_kv, S_kv, D) keys, q's dtype.
        v: (B, H_kv, S_kv, D) values.
        block_mask: a ``torch.nn.attention.flex_attention.BlockMask`` with seq_lengths
            (S_q, S_kv) and BLOCK_SIZE (128, 128), or a query block of 64 / 128 with key
            blocks of 16 / 32 / 64 (packed: module docstring); or ``(kv_num_blocks,
            kv_indices[, full_kv_num_blocks, full_kv_indices])`` int32 tensors of its shapes;
            or a ``torch.sparse_bsr`` tensor (S_q, S_kv) with 64 or 128 blocks (batch dims
            (H,) or (B, H)), whose stored blocks are the visible ones (``lists_from_bsr``).
        mask: what the partial blocks hold (``cute_kernels.masks``); required when the
            BlockMask has partial blocks and a mask_mod (a Python mask_mod is not traced);
            None: partial blocks are entirely visible.
        doc_ids: int32 (B, S) document ids for ``mask=masks.document()``.
        scale: the softmax scale (default 1 / sqrt(D)).
        return_lse: also return the natural-log logsumexp per query (B, H, S_q) fp32.
        validate: debug mode (default from ``CUTE_KERNELS_VALIDATE``): check the list values
            (counts and block indices in range; a device sync) and ``mask`` against the
            BlockMask's mask_mod on sampled points. Without it bad values give wrong
            numbers but never an out-of-bounds access (the kernels clamp them).
        block_size: the (query, key) block size of tuple lists (an int: square); a BlockMask
            brings its own.

    Returns:
        o (B, H, S_q, D) in q's dtype, and lse with ``return_lse``.

    Raises:
        TypeError: as :func:`cute_kernels.attention`; a block_mask or mask of another type.
        ValueError: as :func:`cute_kernels.attention`; lists whose shapes do not match q/k,
            (validate) counts or indices out of range, an unsupported block size, a BlockMask with
            partial blocks and a mask_mod but no ``mask``, missing or misshapen doc_ids, or
            (validate) a mask that disagrees with the mask_mod.
    """
    scale = validate_attention(q, k, v, scale)
    b, h, s_q, _ = q.shape
    s_kv = k.shape[2]
    debug = value_checks(validate)
    lists = _LISTS.get(_mask_tensors(block_mask), (b, h, s_q, s_kv, _hashable(block_size),
                                                   debug),
                       lambda: block_lists(block_mask, b, h, s_q, s_kv, block_size,
                                           check_values=debug))
    _check_mask(block_mask, mask, doc_ids, lists, b, s_q, s_kv)
    if debug and mask is not None:
        _check_mask_mod_agrees(block_mask, mask, doc_ids, b, h, s_q, s_kv)
    if lists.packed:
        from .column_sparse import _COLUMN_SPARSE_ATTENTION, column_sparse_attention

        masked = mask is not None
        if PACKED_EXPANSION_IN_KERNEL or masked:
            # no sync, no host expansion: the kernels expand the blocks
            merged = _LISTS.get(lists.tensors(), ("packed", s_kv, masked),
                                lambda: packed_entries(lists, s_kv, masked))
            entries, counts = merged[:2]
            list_keys, walks = None, None  # (traced: the default tiles, ordered grid)
            if not torch.compiler.is_compiling():
                list_keys, walks = _LISTS.get(lists.tensors(), ("packed schedule", s_kv, masked),
                                              lambda: _PackedSchedule(counts)).get(
                    q.device, q.shape[2], lists.block_size[0], q.shape[3],
                    lists.block_size[1])
            o, lse = _COLUMN_SPARSE_ATTENTION(q, k, v, entries, counts, None,
                                              lists.block_size[0], scale, 1.0,
                                              lists.block_size[1], list_keys, walks,
                                              *((merged[2], doc_ids, key_of(mask)) if masked
                                                else ()))
            return (o, lse) if return_lse else o
        indices, counts = packed_rows(lists, s_kv)
        return column_sparse_attention(q, k, v, indices, counts, group=lists.block_size[0],
                                       scale=scale, return_lse=return_lse)
    o, lse = _BLOCK_SPARSE_ATTENTION(q, k, v, *lists.tensors(), doc_ids, scale,
                                     key_of(mask), lists.block_size[0])
    return (o, lse) if return_lse else o
