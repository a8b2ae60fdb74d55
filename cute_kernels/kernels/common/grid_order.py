"""Which tile a CTA of a one-CTA-per-tile grid runs, when the grid walks a device-side order
instead of launch order (the column-sparse kernels: longest key list first). The persistent
schedules walk theirs in tile_scheduler.py, which stays DSL-free for tuning/."""

from __future__ import annotations

import cutlass.cute as cute


def ordered_tile(mTileOrder, x, y, z):
    """(x, y, z) of an (X, Y, Z) grid's CTA, remapped through ``mTileOrder`` (int32, one
    entry per CTA, each ``(z * Y + y) * X + x`` of the tile it runs): CTA of launch rank r
    (x fastest, the order the hardware hands CTAs out in) runs tile ``mTileOrder[r]``. With
    the tiles sorted by decreasing work this is a longest-first (LPT) schedule, the block
    scheduler handing out the next tile as an SM frees up."""
    n_x, n_y, _ = cute.arch.grid_dim()
    tile = mTileOrder[x + n_x * (y + n_y * z)]
    rest = tile // n_x
    return tile % n_x, rest % n_y, rest // n_y
