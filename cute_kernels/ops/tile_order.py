"""Device-side tile orders for one-CTA-per-tile attention grids (``tile_order`` on
``AttentionSm90`` / ``AttentionSm80``: CTA r runs tile ``order[r]``), for lists of uneven
length: column-sparse key lists, block-sparse block lists. No DSL, no sync: the order is a
few torch ops on the device, captured by CUDA graphs and torch.compile with the kernel."""

from __future__ import annotations

import torch

from ..kernels.attention.tiles import LONGEST_FIRST_CHUNK_TILES


def longest_first_order(work: torch.Tensor) -> torch.Tensor:
    """int32 order of the (M, H, B) grid whose tile ``(b * H + h) * M + m`` has ``work[b, h,
    m]`` (any integer (B, H, M) tensor): the grid is cut into chunks of whole heads of about
    ``LONGEST_FIRST_CHUNK_TILES`` tiles (a wave; at least one head), the chunks keep their
    order, and inside each the tiles go by decreasing work, ties in grid order (a stable
    sort). Keeping a chunk's heads together keeps their K/V in L2, which a global sort loses
    by interleaving every head; longest first inside it lets the short tiles fill the
    chunk's tail. Equal work everywhere gives the identity."""
    b, h, m = work.shape
    heads_per_chunk = max(1, LONGEST_FIRST_CHUNK_TILES // max(1, m))
    work = work.reshape(-1).to(torch.int64)
    chunk = torch.arange(work.numel(), device=work.device) // (heads_per_chunk * m)
    # chunk-major, then decreasing work: one stable sort of one key (work < 2^31)
    key = chunk * (1 << 32) - work
    return torch.argsort(key, stable=True).to(torch.int32)
