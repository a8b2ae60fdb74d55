"""GEMM tiles, clusters and launch schedule (Hopper; the Ampere kernel has one fixed tile)."""

from __future__ import annotations

from typing import NamedTuple

from ..kernels.common.tile_scheduler import cluster_tiles, persistent_grid
from ..kernels.gemm.tiles import DEFAULT_CLUSTER_M, DEFAULT_TILE

#: tiles the op chooses between, with their throughput relative to the default when every SM
#: is busy (H100, perf/gemm_tuning.py: 128x192 and 128x128 reach 0.97x and 0.90x of 128x256)
TILE_SPEEDS = {DEFAULT_TILE: 1.0, (128, 192, 64): 0.97, (128, 128, 64): 0.90}

#: the wave drift limiter (GemmSm90 ``drift_slack=0``) is on from this many waves of cluster
#: tiles and this many k-tiles per tile: there the clusters that share A / B panels in L2
#: drift apart over the run (16384 x 106496 x 16384: 704 -> 720 TFLOP/s; 65536 rows:
#: 703 -> 712; perf/RESULTS.md)
DRIFT_MIN_WAVES = 16
DRIFT_MIN_K_TILES = 128


class GemmSchedule(NamedTuple):
    """How one Hopper GEMM launch runs."""

    tile: tuple[int, int, int]  # CTA tile (M, N, K)
    cluster_m: int  # CTAs per cluster along M
    ctas: int  # persistent CTAs launched
    drift: bool  # wave drift limiter on


def wave_efficiency(units: int, slots: int) -> float:
    """Busy fraction of ``slots`` persistent workers over ``units`` equal work units
    (the last wave runs partly idle: 448 units on 66 slots keep them 85% busy)."""
    return units / (-(-units // slots) * slots) if units else 1.0


def pick_tile(m: int, n: int, batch: int, sms: int, speeds: dict, cluster_m: int):
    """The tile with the best ``speed x wave efficiency``: ``speeds`` maps each candidate
    tile to its relative throughput when every SM is busy (measured, perf/RESULTS.md). A
    smaller tile wins only when the big one leaves a mostly idle last wave."""
    def score(tile):
        units = cluster_tiles(m, n, batch, tile, cluster_m)
        return speeds[tile] * wave_efficiency(units, max(1, sms // cluster_m))

    return max(speeds, key=score)


def schedule(m: int, n: int, k: int, batch: int, sms: int) -> GemmSchedule:
    """The Hopper launch of an (M, N, K) x batch GEMM on ``sms`` SMs (the Ampere kernel
    ignores it).

    2x1 clusters sharing B tiles, except when M has a single tile-row (a cluster would pair
    every CTA with an idle one); the tile with the best speed x last-wave occupancy
    (``TILE_SPEEDS``); one CTA per SM in whole clusters, never more than the work; the drift
    limiter for many waves of long-K tiles (``DRIFT_MIN_WAVES``).
    """
    cluster_m = DEFAULT_CLUSTER_M if m > DEFAULT_TILE[0] else 1
    tile = pick_tile(m, n, batch, sms, TILE_SPEEDS, cluster_m)
    units = cluster_tiles(m, n, batch, tile, cluster_m)
    ctas = persistent_grid(units * cluster_m, sms, cluster_size=cluster_m)
    waves = -(-units // (ctas // cluster_m))
    k_tiles = -(-k // tile[2])
    drift = waves >= DRIFT_MIN_WAVES and k_tiles >= DRIFT_MIN_K_TILES
    return GemmSchedule(tile, cluster_m, ctas, drift)
