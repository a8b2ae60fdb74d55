"""Device-side tile orders for one-CTA-per-tile attention grids (``tile_order`` on
``AttentionSm90`` / ``AttentionSm80``: CTA r runs tile ``order[r]``), for lists of uneven
length: column-sparse key lists, block-sparse block lists. No DSL, no sync: the order is a
few torch ops on the device, captured by CUDA graphs and torch.compile with the kernel."""

from __future__ import annotations

import functools

import torch

from ..kernels.attention.tiles import LONGEST_FIRST_CHUNK_TILES


def _per_grid(builder):
    """``builder`` (shape ints, then a device) cached per arguments, except while a CUDA graph
    is being captured: a tensor made then lives in the graph's memory pool and holds its
    values only while the graph replays, so it is built afresh (and captured) instead."""
    cached = functools.lru_cache(maxsize=64)(builder)

    @functools.wraps(builder)
    def get(*args):
        if args[-1].type == "cuda" and torch.cuda.is_current_stream_capturing():
            return builder(*args)
        return cached(*args)

    return get


@_per_grid
def _chunk_keys(b: int, h: int, m: int, device: torch.device) -> torch.Tensor:
    """int64 (B * H * M,): each tile's chunk (whole heads, about a wave of tiles) times 2^32,
    the major part of the sort key; shapes only, so built once per grid."""
    heads_per_chunk = max(1, LONGEST_FIRST_CHUNK_TILES // max(1, m))
    return (torch.arange(b * h * m, device=device) // (heads_per_chunk * m)) << 32


@_per_grid
def group_rows(m_tiles: int, block_m: int, group: int, groups: int, device: torch.device
               ) -> torch.Tensor:
    """The index list of the group each of ``m_tiles`` query tiles of ``block_m`` rows reads
    (``m * block_m // group``, clamped to the last of ``groups``)."""
    rows = torch.arange(m_tiles, device=device) * block_m // group
    return rows.clamp_(max=groups - 1)


def longest_first_order(work: torch.Tensor) -> torch.Tensor:
    """int32 order of the (M, H, B) grid whose tile ``(b * H + h) * M + m`` has ``work[b, h,
    m]`` (any integer (B, H, M) tensor): the grid is cut into chunks of whole heads of about
    ``LONGEST_FIRST_CHUNK_TILES`` tiles (a wave; at least one head), the chunks keep their
    order, and inside each the tiles go by decreasing work, ties in grid order (a stable
    sort). Keeping a chunk's heads together keeps their K/V in L2, which a global sort loses
    by interleaving every head; longest first inside it lets the short tiles fill the
    chunk's tail. Equal work everywhere gives the identity."""
    b, h, m = work.shape
    # chunk-major, then decreasing work: one stable sort of one key (work < 2^31)
    key = _chunk_keys(b, h, m, work.device) - work.reshape(-1)
    return torch.argsort(key, stable=True).to(torch.int32)


@_per_grid
def _snake(tiles: int, ctas: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(int32 offsets (ctas + 1,), int64 positions (tiles,)) of :func:`snake_walks`: shapes
    only, so built once per grid (device ops only: capturable)."""
    laps, rest = divmod(tiles, ctas)
    position = torch.arange(tiles, device=device)
    lap, slot = position // ctas, position % ctas
    cta = torch.where(lap % 2 == 0, slot, ctas - 1 - slot)
    # each CTA's positions in deal order (the keys are distinct: no stable sort needed)
    positions = torch.argsort(cta * (laps + 1) + lap)
    # every CTA gets one tile per whole lap; the last, partial lap runs forward when even
    c = torch.arange(ctas, device=device)
    sizes = laps + ((c < rest) if laps % 2 == 0 else (c >= ctas - rest)).long()
    offsets = torch.cat([c[:1] * 0, sizes.cumsum(0)]) + ctas + 1
    return offsets.to(torch.int32), positions


def snake_walks(order: torch.Tensor, ctas: int) -> torch.Tensor:
    """The persistent kernels' tile walks (CSR, as ``tile_scheduler.balanced_walks``) from a
    device-side ``order`` (int32, longest first within chunks of heads:
    :func:`longest_first_order`) without a sync: the order is dealt a lap of ``ctas`` tiles at
    a time, every other lap in reverse, so the CTA that took a lap's longest tile takes the
    next lap's shortest. Two small launches; the deal is cached per grid."""
    ctas = max(1, min(ctas, order.numel()))
    offsets, positions = _snake(order.numel(), ctas, order.device)
    return torch.cat([offsets, order.index_select(0, positions)])


def lpt_walks(order: torch.Tensor, work: torch.Tensor, ctas: int, fixed: int) -> torch.Tensor:
    """Persistent walks dealt on the host (``tile_scheduler.balanced_walks``): the tiles of
    ``order`` (int32, longest first within chunks of heads) each to the CTA that frees up
    first, tile ``t`` costing ``work`` (flat, per tile id) + ``fixed`` (its prologue and
    epilogue, in the same unit). Near-optimal balance for uneven tiles, where the snake's laps
    leave CTAs up to a tile apart (packed 32-key blocks at S 8k, H200: 0.100 against 0.112
    ms, perf/RESULTS.md). Host tensors in, an int32 tensor on the host out (the caller moves
    and keeps it: one deal per mask, not per call)."""
    from ..kernels.common.tile_scheduler import balanced_walks

    tiles = order.tolist()
    costs = (work.reshape(-1).index_select(0, order.long()) + fixed).tolist()
    return torch.tensor(balanced_walks(tiles, costs, ctas), dtype=torch.int32)
