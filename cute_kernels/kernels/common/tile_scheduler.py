"""Persistent tile scheduling shared by the GEMM-like kernels.

A persistent kernel launches one CTA per SM (or per cluster slot) and walks the output tiles
``tile = blockIdx.x, blockIdx.x + gridDim.x, ...``. The order in which linear tile indices map
to (m, n) tiles decides L2 reuse: tiles that run at the same time should share A rows and
B columns. ``grouped_tile_coord`` rasterizes in groups of ``group_m`` tile-rows: within a
group it walks down the rows first, then across columns, so a wave of ``num_sms`` concurrent
tiles touches about ``group_m`` row-panels of A and ``num_sms / group_m`` column-panels of B.

The arithmetic is written once and runs both on Python ints (host tests, grid sizing) and on
DSL integers inside kernels (pass ``minimum=cutlass.min`` there).

(``grid_order.ordered_tile`` is the one-CTA-per-tile counterpart: a grid whose CTAs take their tiles
from a device-side order. This module stays DSL-free: tuning/ imports it.)
"""

from __future__ import annotations

import heapq


def grouped_tile_coord(tile, tiles_m, tiles_n, group_m: int, minimum=min):
    """Linear tile index -> (m_tile, n_tile, batch) with grouped (swizzled) rasterization."""
    tiles_per_batch = tiles_m * tiles_n
    batch = tile // tiles_per_batch
    idx = tile - batch * tiles_per_batch
    tiles_per_group = group_m * tiles_n
    group = idx // tiles_per_group
    first_m = group * group_m
    rows_in_group = minimum(tiles_m - first_m, group_m)
    in_group = idx - group * tiles_per_group
    m_tile = first_m + in_group % rows_in_group
    n_tile = in_group // rows_in_group
    return m_tile, n_tile, batch


def persistent_grid(num_tiles: int, num_sms: int, cluster_size: int = 1) -> int:
    """CTAs to launch: no more than the tiles, no more than the SMs (whole clusters)."""
    slots = max(1, num_sms // cluster_size) * cluster_size
    return max(cluster_size, min(slots, -(-num_tiles // cluster_size) * cluster_size))


def cluster_tiles(m: int, n: int, batch: int, tile, cluster_m: int) -> int:
    """Work units of a clustered launch: M tiles rounded up to whole clusters, times N tiles."""
    tiles_m = -(-m // tile[0])
    return -(-tiles_m // cluster_m) * -(-n // tile[1]) * batch


def balanced_walks(tiles, costs, ctas: int) -> list[int]:
    """Static tile lists for ``ctas`` persistent CTAs that finish together, as one int list
    in CSR form: entries ``0 .. ctas`` are offsets into the list itself (CTA c walks entries
    ``[walks[c], walks[c + 1])``), then tile ids.

    ``tiles`` are dealt in the order given (callers put tiles that share operands next to
    each other, longest first within such a group), tile ``tiles[i]`` costing ``costs[i]``
    (any unit: a causal tile's key blocks plus its fixed prologue and epilogue), each to the
    CTA whose list ends earliest. A CTA's k-th tile then starts when it would if the hardware
    handed tiles out as CTAs free up: greedy longest-processing-time scheduling (within 4/3 of
    the best makespan), with the operand-sharing groups still running at the same time."""
    ctas = max(1, min(ctas, len(tiles)))
    ends = [(0.0, c) for c in range(ctas)]  # (time the CTA's list ends, CTA); ties: lowest
    lists: list[list[int]] = [[] for _ in range(ctas)]
    for tile, cost in zip(tiles, costs, strict=True):
        end, cta = heapq.heappop(ends)
        lists[cta].append(int(tile))
        heapq.heappush(ends, (end + cost, cta))
    walks, offset = [], ctas + 1
    for walk in lists:
        walks.append(offset)
        offset += len(walk)
    walks.append(offset)
    for walk in lists:
        walks.extend(walk)
    return walks


def stream_k_tiles(num_tiles, num_clusters, k_tiles=None, select=None):
    """How many of the last tiles a stream-K launch shares out by k-ranges: the partial last
    wave (``rem`` = tiles mod clusters) plus one full wave, so every cluster's range is at
    least one tile long and a tile has at most two contributors; every tile when there is
    no full wave before the partial one (a tile may then have more contributors), if there
    are at least as many k-tiles (``k_tiles`` per tile) as clusters; else, or when the waves
    are whole, 0."""
    rem = num_tiles % num_clusters
    if select is None:
        if rem == 0:
            return 0
        if stream_k_fits(num_tiles, num_clusters):
            return rem + num_clusters
        return num_tiles if k_tiles is None or num_tiles * k_tiles >= num_clusters else 0
    every = select(num_tiles * k_tiles >= num_clusters, num_tiles, 0)
    return select(rem > 0, select(num_tiles >= num_clusters + rem, rem + num_clusters, every),
                  0)


def stream_k_fits(num_tiles: int, num_clusters: int) -> bool:
    """Whether the launch has a partial last wave after at least one full one (stream-K then
    shares the last two waves' tiles, each between at most two clusters)."""
    rem = num_tiles % num_clusters
    return rem > 0 and num_tiles >= num_clusters + rem


def stream_k_range(cluster, num_clusters, sk_tiles, k_tiles, select=None):
    """Cluster ``cluster``'s share of the stream-K tiles (``stream_k_tiles``, numbered from
    0): the k-iterations ``[cluster * I / C, (cluster + 1) * I / C)`` of the I = sk_tiles x
    k_tiles that follow the tiles one after another. A tile's k-range is split between
    consecutive clusters; each but the last leaves its fp32 partial in its workspace slot,
    and the last adds them all and stores the tile. A cluster's units,
    in the order it runs them (each count 0 or 1 but ``full``):

    1. ``write``: tile ``t_last``'s k-tiles ``[0, x)``, the tile's first part: its partial
       is left for the tile's last cluster;
    2. ``full`` whole tiles from ``first_full``;
    3. ``middle`` (a range inside one tile, neither its start nor its end): tile
       ``t_first``'s ``[y, x)``, its partial left for the tile's last cluster too (only
       when the tiles are fewer than two waves: ranges shorter than a tile);
    4. ``last``: tile ``t_first``'s ``[y, k_tiles)``, the tile's last part: it adds the
       partials of the tile's earlier clusters, in cluster order, and stores the tile.

    Only a tile's last cluster waits: on each earlier cluster holding part of the tile
    (from ``stream_k_first_cluster``), which wrote its partial in its first unit
    (``write`` or ``middle``) and waits on nobody: no cycle, and no chain of waits.
    Returns ``(write, t_last, x, full, first_full, middle, last, t_first, y)``;
    ``select(cond, a, b)`` is ``cutlass.select_`` in a kernel (the arithmetic is the same
    on Python ints)."""
    if select is None:
        def select(cond, a, b):
            return a if cond else b
    total = sk_tiles * k_tiles
    start = cluster * total // num_clusters
    end = (cluster + 1) * total // num_clusters
    some = select(end > start, 1, 0)  # fewer k-iterations than clusters: some run none
    t_first = start // k_tiles
    y = start - t_first * k_tiles
    t_last = select(end > start, (end - 1) // k_tiles, t_first)
    x = end - t_last * k_tiles
    cut_end = select(x < k_tiles, 1, 0)  # the range ends inside tile t_last
    cut_start = select(y > 0, 1, 0)  # and starts inside tile t_first
    single = select(t_first == t_last, 1, 0)
    write = some * cut_end * (1 - single * cut_start)
    last = some * cut_start * (1 - single * cut_end)
    middle = some * single * cut_start * cut_end
    first_full = t_first + cut_start
    full = t_last - cut_end - first_full + 1
    full = some * select(full > 0, full, 0)
    return write, t_last, x, full, first_full, middle, last, t_first, y


def stream_k_first_cluster(tile, num_clusters, sk_tiles, k_tiles):
    """The first cluster whose ``stream_k_range`` holds part of stream-K tile ``tile``: the
    one holding its first k-iteration (the largest c with c * I // C <= tile * k_tiles, I =
    sk_tiles x k_tiles). The clusters from it up to the tile's last each hold a part of it;
    none is empty, since a launch shares tiles only with at least as many k-iterations as
    clusters (``stream_k_tiles``). Python ints or the kernel's Int32 alike."""
    return ((tile * k_tiles + 1) * num_clusters - 1) // (sk_tiles * k_tiles)


def stream_k_workspace_words(ctas: int, tile_m: int, tile_n: int) -> tuple[int, int]:
    """A stream-K launch's workspace (``gemm/stream_k.py``) as (int32 words, offset of the
    flags): an fp32 slot of ``tile_m x tile_n`` per CTA, then an int32 flag per CTA, which
    the host zeroes (words ``[offset, offset + ctas)``)."""
    offset = ctas * tile_m * tile_n
    return offset + ctas, offset
