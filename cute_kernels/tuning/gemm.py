"""GEMM tiles, clusters and launch schedule (Hopper; the Ampere kernel has one fixed tile).

Big problems run one CTA tile per work unit, the tile chosen by speed x last-wave occupancy.
Problems with fewer tiles than SMs, and skinny ones (decoding: M of 1-64 tokens against a
weight of thousands of rows), get more choices: 64-row tiles (one consumer warpgroup) for
M of 33-64 (``HALF_TILE_SPEEDS``), and

* **swap-AB**: for M <= ``SWAP_MAX_M`` the kernel computes C^T = W X^T, so the weight's N
  rows fill the 128-row WGMMA tile and the few tokens become a narrow N tile of 16 or 32
  (``SWAP_TILES_N``) instead of 128 mostly empty rows;
* **split-K**: K is cut into ``splits`` equal slices that run as the batch dim of the same
  persistent kernel (operand views with a K-slice stride, no copy), each writing fp32
  partials; one small kernel (``SplitKReduce``) sums them in split order (deterministic),
  applies the bias and activation, and writes the output (transposing when swapped).

A split launch goes through the fp32 workspace and the reduce kernel (the bias and
activation run there); an unsplit swapped one stores C^T straight into the row-major output
(``GemmSm90(c_transposed=True)``, ``Epilogue(bias_dim=0)``: one launch), except into an
output whose rows are not 16-byte multiples (the workspace again). Long-K problems with few
tiles may instead split K over the two CTAs of a cluster (``cluster_split_schedule``).
"""

from __future__ import annotations

from typing import NamedTuple

from ..kernels.common.tile_scheduler import (
    cluster_tiles,
    persistent_grid,
    stream_k_fits,
    stream_k_tiles,
)
from ..kernels.gemm.tiles import DEFAULT_CLUSTER_M, DEFAULT_TILE

#: tiles the op chooses between, with their throughput relative to the default when every SM
#: is busy (H100, perf/gemm_tuning.py: 128x192 and 128x128 reach 0.97x and 0.90x of 128x256;
#: perf/gemm_skinny.py: 128x224 wins where its 64 columns-tiles of a 14336-wide N fill the last
#: wave, 155.8 against 167.0 us for 128x192 at 1024 x 14336 x 4096, and 128x64 runs at about
#: 0.55x but gives a 1024^3 problem 128 CTAs: 7.8 against 9.3 us for 128x128). 128x224 is
#: listed at 0.96, below its measured speed, so it replaces 128x256 only where the last wave
#: gains more than 3%: many-wave problems (8192^3) keep the measured default.
TILE_SPEEDS = {DEFAULT_TILE: 1.0, (128, 224, 64): 0.96, (128, 192, 64): 0.97,
               (128, 128, 64): 0.90, (128, 64, 64): 0.55, (64, 128, 64): 0.57,
               (128, 176, 64): 0.98}
#: tiles that run pingpong consumers (GemmSm90 ``pingpong``: a tile per consumer warpgroup,
#: one's epilogue under the other's mainloop), never stream-K. 128x176 is cuBLAS's width at
#: 1024 x 14336 x 4096 (82 columns of tiles: whole waves on 66 clusters where N is 14336);
#: pingpong runs it 2-3% faster than the cooperative kernel (2048 / 4096 x 14336 x 4096:
#: 349.4 / 373.3 and 729.3 / 716.1 us against 358.7 / 384.8 and 752.2 / 739.1; 4096^3 218.5
#: against 225.5) and at 0.98x of the cooperative 128x256 when both fill their waves alike
#: (4096^3: 218.5 / 218.7 against 214.8 / 215.3 us; H100, perf/gemm_session.sh pingpong).
#: Not where the drift limiter runs (many waves of long-K tiles): 8192^3 ran 1589.0 against
#: 1567.7 us for 128x256 with the limiter (not profiled; the narrower tile reads more operand
#: bytes per flop, perf/gemm_session.sh pingpong-rule).
PINGPONG_TILES = frozenset({(128, 176, 64)})
#: pipeline depth per tile where it is not the kernel's default (as many as fit, at most
#: 5): the 64x128 tile (one consumer warpgroup of m64n128 WGMMAs) with 8 stages beats the
#: 128x64 one (two of m64n64) with the same tile count: 1024^3 6.9 against 7.4 us in CUDA
#: graphs (H200, perf/gemm_skinny.py --tiles 64x128x64p8; 7.1-7.3 against 7.5-7.6 with 5
#: stages in two earlier runs; cuBLAS 5.8-6.3)
TILE_STAGES = {(64, 128, 64): 8}
#: deeper rings where each tile streams a long K (at least ``LONG_K_MIN_TILES`` k-tiles):
#: 128x128 with 6 stages is cuBLAS's own kernel at 512 x 4096 x 14336
#: (``nvjet_sm90_tst_128x128_64x6_2x1``, perf/baseline_kernels.py); there 6 stages ran 82.1-83.2
#: against 85.3-86.1 us eager, but cost 2% at 128 x 14336 x 4096 (64 k-tiles) and 6% at 2048 x
#: 1024 x 2048 (32), eager and in graphs (H100, perf/gemm_session.sh stages6 / stages6-checks)
LONG_K_STAGES = {(128, 128, 64): 6}
LONG_K_MIN_TILES = 128


def pipeline_stages(tile: tuple, k: int) -> int | None:
    """The pipeline depth cap of ``tile`` when each of its tiles streams ``k`` (None: the
    kernel's default, as many stages as fit, at most 5)."""
    if tile in LONG_K_STAGES and -(-k // tile[2]) >= LONG_K_MIN_TILES:
        return LONG_K_STAGES[tile]
    return TILE_STAGES.get(tile)


#: tiles for 33-64 rows of M (unswapped): one consumer warpgroup on a 64-row tile instead of
#: a half-empty 128-row one. 64 x 14336 x 4096: 64x128 44.7 us, 128x128 49.7, cuBLAS 45.3;
#: 64 x 28672 x 8192: 163.5 / 183.9 / 170.1; 48 x 14336 x 4096: 44.0 / 51.1 / 44.1 (GPU
#: time, H100, perf/gemm_skinny.py --tiles)
HALF_TILE_SPEEDS = {(64, 128, 64): 1.0, (64, 256, 64): 0.97}
HALF_TILE_MAX_M = 64
#: the gated GEMM's tiles (its epilogue pairs columns in the wgmma C layout of these widths)
GATED_TILE_SPEEDS = {t: TILE_SPEEDS[t] for t in (DEFAULT_TILE, (128, 192, 64), (128, 128, 64))}
#: the gated GEMM at 1-64 rows (decoding: it streams the packed weight, never swapped: its
#: epilogue pairs C's own columns): one consumer warpgroup on 64-row tiles, 128 deep, as many
#: stages as fit (4). H100, perf/gated_mlp.py --tiles, GPU us in CUDA graphs, the 128x256 tile
#: before / this one / cuBLAS + Liger: Llama 3 8B (I 14336, K 4096) at 1 / 16 / 64 tokens
#: 99.5 / 92.3 / 85.2, 100.3 / 88.9 / 87.9, 100.3 / 85.7 / 91.8; 70B 361.6 / 330.2 / 329.6,
#: 357.7 / 328.5 / 334.3, 354.2 / 323.2 / 344.9. 64x224x128 (one wave at 8B) ran 0-4%
#: slower, 64x256x128 and 64x128x64 (8 stages) 1-3%; at 128 tokens the 128x256 tile stays
#: fastest (94.6 against 100.0).
GATED_HALF_TILE = (64, 128, 128)
GATED_HALF_STAGES = 6
#: the A rows that tile loads per stage where M fits (``GemmSm90(a_rows=...)``): TMA's zero
#: fill of a mostly empty 64-row box costs per k-tile (8B at 1 token: 92.1 us with the whole
#: box, 86.3 with 8 rows; cuBLAS + Liger 84.7)
GATED_A_ROWS = (8, 16, 32)

#: the wave drift limiter (GemmSm90 ``drift_slack=0``) is on from this many waves of cluster
#: tiles and this many k-tiles per tile: there the clusters that share A / B panels in L2
#: drift apart over the run (16384 x 106496 x 16384: 704 -> 720 TFLOP/s; 65536 rows:
#: 703 -> 712; perf/RESULTS.md)
DRIFT_MIN_WAVES = 16
DRIFT_MIN_K_TILES = 128


#: swap-AB for M up to this many rows. Above it the unswapped kernel's 128-row tile is at
#: least a quarter full, and the weight-streaming kernel is memory-bound either way: at
#: 64 x 28672 x 8192 the unswapped 128 x 256 tiles (one wave of 112) ran 175.6 us, the
#: swapped 128 x 64 ones (two waves of 224 tiles) 193.7 (H100, perf/gemm_skinny.py)
SWAP_MAX_M = 32
#: the N tiles (token columns) of a swapped launch: the smallest that holds M
SWAP_TILES_N = (16, 32)
#: a swapped tile reads 128-deep k-tiles (256 contiguous bytes of each weight row per box
#: pair; 37 KiB stages, 6 in flight): against 64-deep ones with 8 stages, 44.2 vs 45.2 us at
#: 1 x 14336 x 4096 and 164.0 vs 167.3 at 13 x 28672 x 8192 (H100, perf/gemm_skinny.py;
#: 256-deep with 3 stages measured the same as 128)
SWAP_K_TILE = 128
SWAP_MAX_STAGES = 6
#: split-K: at most this many slices, each at least this many K elements (a slice writes a
#: 128 x tile_n fp32 partial; shorter slices spend more on partials than they gain)
SPLIT_MAX = 16
SPLIT_MIN_K = 512
#: a swapped launch streams the weight from HBM: this many CTAs already reach the bandwidth
#: (1 x 4096 x 14336: 64 CTAs 45.2 us, 128 CTAs 46.1, cuBLAS 44.7; 13 x 14336 x 4096 unsplit
#: on 112 CTAs 46.4, split 2 / 4 ways 48.1 / 50.4; H100, perf/gemm_skinny.py), so it splits
#: only as far as needed to have them
STREAM_CTAS = 64
#: a swapped launch with fewer 128-row tiles than ``STREAM_CTAS`` takes 64-row tiles first
#: (one consumer warpgroup), and splits K only if that is not enough: unsplit it stores C^T
#: straight into the output, no workspace and no reduce. 1 / 8 / 13 x 4096 x 14336, us eager
#: (graph): 128-row tiles split 2 ways 34.8 / 35.4 / 36.6 (32.4 / 33.7 / 33.8), 64-row tiles
#: unsplit 33.7 / 33.5 / 34.1 (32.0 / 32.1 / 32.3), cuBLAS 31.7 / 33.1 / 33.4 (30.3 / 31.9 /
#: 32.1); at 13 x 14336 x 4096 (112 tiles of 128 rows) 64-row tiles gain nothing (H200,
#: perf/gemm_skinny.py --tiles w64x16x128s1)
SWAP_HALF_ROWS = 64
#: the 64-row swapped tiles' 20-24 KiB stages leave room for more in flight than the 128-row
#: tiles' six: at 1 / 8 / 13 x 4096 x 14336, us eager (graph), 6 / 8 / 10 / 11 stages 33.9 /
#: 33.2 / 34.0 / 34.9 (32.1 / 31.9 / 33.0 / 33.6), 33.5 / 32.3 / 33.4 / 34.4 (32.3 / 31.1 /
#: 32.0 / 33.1), 34.0 / 32.7 / 33.8 / 35.0 (32.4 / 31.5 / 32.8 / 33.8), cuBLAS 32.0 / 33.0 /
#: 33.6 (H200, perf/gemm_skinny.py --tiles w64x16x128s1p8, two runs alike)
SWAP_HALF_STAGES = 8
#: a swapped launch splits K only where each unsplit CTA would stream more than this many
#: weight bytes (its tile's rows x K, 16-bit): below it the split's fp32 workspace and reduce
#: launch cost more than the slices save, on the GPU and more so on the host. H100, us in
#: CUDA graphs / eager through ``linear``, split (the rule before) against unsplit, cuBLAS in
#: brackets: 7 x 1024 x 4096 (512 KiB a CTA, split 4) 9.1 / 28.5 against 8.5 graph (8.5 /
#: 22.9), 13 x 2048 x 4096 (split 2) 11.5 / 27.1 against 9.7 (10.9 / 21.6), 13 x 2048 x 2048
#: 8.7 / 46.4 against 6.6 (6.6 / 26.8), 8 x 512 x 4096 (split 8) 8.8 against 8.2 (7.6), 1 x
#: 2048 x 8192 (1 MiB) 16.9 against 16.6 (16.1); but 1 x 1024 x 14336 (1.75 MiB) 15.7
#: against 22.2 (15.1): perf/gemm_skinny.py --graphs --tiles w64x16x128s1p8
SWAP_UNSPLIT_MAX_BYTES = 1 << 20
#: an unswapped launch is split only when its best tile leaves more than half the SMs idle:
#: at 64 x 14336 x 4096, 112 unsplit 128x128 tiles ran 46.4 us, 64 128x224 tiles split twice
#: 61.2 (cuBLAS 44.4; H100, perf/gemm_skinny.py)
SPLIT_BELOW_EFFICIENCY = 0.5
#: the score a split pays per extra slice (the reduce's work and launch), in units of wave
#: efficiency: 4 slices that fill 97% of the SMs beat 8 that fill 97% too. The partials'
#: memory traffic is charged on top (``split_score``).
SPLIT_PENALTY = 0.01
#: split-K in a cluster (GemmSm90 ``cluster_k``): the two CTAs of a cluster take one tile's
#: K halves and sum them through DSMEM in the launch (no workspace, no reduce kernel). It pays
#: for long K (>= ``CLUSTER_SPLIT_MIN_K``) where a tile's pairs fill at least
#: ``CLUSTER_SPLIT_MIN_FILL`` of the SMs in one wave (``STREAM_CTAS`` CTAs for 64-row tiles,
#: which stream the weight): the unsplit schedule would have had
#: half as many CTAs or a smaller, slower tile. The tile is the best speed x fill of
#: ``CLUSTER_SPLIT_TILES`` (64-row ones for M <= 64), with its pipeline depth (the small
#: tiles stream: 8 stages). H200, perf/gemm_skinny.py --tiles ...k2, graph us (default
#: before / cluster split / cuBLAS): 1024x1024x4096 19.9 / 16.7 (128x128) / 14.9, x16384
#: 77.3 / 56.0 / 55.9; 768x1024x8192 38.4 / 25.1 / 30.6; 512x2048x8192 39.4 / 33.3 / 31.6;
#: 1024x1536x8192 43.0 / 39.7 (128x192) / 35.1; 128x4096x14336 40.3 (workspace, 4 slices)
#: / 35.5 (128x64, 8 stages) / 36.9; 64x4096x14336 36.6 / 35.4 (64x128, 8 stages) / 36.6.
#: Not where it loses: 1024^3 (K 1024) 7.4 / 8.1; 4 slices per cluster wait for
#: co-resident clusters of 4 (1024x1024x4096 36.5 us)
CLUSTER_SPLIT_TILES = {(128, 192, 64): None, (128, 128, 64): None, (128, 64, 64): 8}
CLUSTER_SPLIT_HALF_TILES = {(64, 128, 64): 8}
CLUSTER_SPLIT_MIN_K = 2048
CLUSTER_SPLIT_MIN_FILL = 0.7
#: the cluster split launches as a programmatic dependent launch (GemmSm90 ``pdl``): its
#: CTAs start while the kernel before finishes and wait for its writes, which hides its
#: longer set-up (cluster-wide barrier init and sync). H100, perf/gemm_skinny.py --graphs
#: --tiles 128x128x64k2d0,...d1 (us in CUDA graphs, off / on / cuBLAS): 1024x1024x4096 21.1 /
#: 18.3 / 17.4, 768x1024x2048 11.5 / 9.9 / 9.1, 1024^3 9.2 / 7.9. On the other routes it
#: measured within the noise or worse (swap-AB decode 42.2 / 43.1 at 1x14336x4096; 4096^3
#: on 128x256 192.1 / 206.7), except short one-wave launches (``SHORT_PDL_MAX_K_TILES``)
CLUSTER_SPLIT_PDL = True
#: a plain launch of one wave in 2x1 clusters with at most this many k-tiles (a kernel of
#: under ~30 us) is a programmatic dependent launch too: its set-up and the launch gap hide
#: behind the kernel before. H100, perf/gemm_skinny.py --graphs --tiles ...d0,...d1, us eager
#: (forced plans, no op overhead) / CUDA graph, off -> on, two calls: 1024^3 (64x128) 11.5 /
#: 7.8 -> 10.1 / 7.2 and 10.5 / 7.9 -> 10.2 / 7.2; 1024x2048x1024 (128x128) 10.6 / 9.9 -> 9.0
#: / 8.9; 2048^3 (128x256) 28.6 / 26.6 -> 27.1 / 25.8 and 29.0 / 26.1 -> 27.6 / 25.3;
#: 512x4096x4096 (128x128) 30.0 / 28.0 -> 28.6 / 27.4; the same on an H200. Not where the
#: launch has several waves (H200 graphs: 1024x14336x4096 175.3 -> 183.1, 4096^3 200.9 ->
#: 204.5, though within the spread in a later H100 call; H100 2048^3 on 128x128, two waves,
#: 27.5 -> 29.2) or no cluster (64x14336x4096 on 64x128, 112 CTAs: 45.4 -> 46.0 and 44.8 ->
#: 45.6 in graphs)
SHORT_PDL_MAX_K_TILES = 64
#: stream-K (GemmSm90 ``stream_k``): a launch whose tiles leave a partial last wave after at
#: least one full one cuts the last wave plus one into equal k-ranges, one per cluster, so
#: every SM finishes together. The shared tiles run slower than whole ones: the clusters
#: that shared an operand panel in L2 no longer run the same k-tiles at the same time, and a
#: split tile's fp32 partial goes through the L2 and back. Score: the tile's speed over (1 +
#: ``STREAM_K_PENALTY`` x shared tiles / tiles), against speed x last-wave occupancy for
#: whole tiles. H100, us eager / CUDA graph, 128 x 256 whole / stream-K (perf/RESULTS.md):
#: 4000 x 11008 x 4096 (94 of 688 tiles shared) 573.7 / 624.0 against 555.3 / 548.9; 6144 x
#: 12288 x 4096 (96 of 1152) 970.8 / 950.9 against 950.7 / 907.0; but 4096^3 (124 of 256)
#: 204.8 / 212.1 against 213.2 / 217.5, 512 x 14336 x 4096 (all 112) 115.1 / 95.7 against
#: 117.5 / 110.7, and 3000^3 and 3000 x 5000 x 3072 run faster on whole 128 x 192 tiles.
STREAM_K_PENALTY = 0.2
#: stream-K replaces whole tiles only where its score is at least this much better (less is
#: inside the run-to-run spread of a GEMM timing). The penalty above is pessimistic on
#: launches of many waves, where two shared waves are a small part of the run: H100,
#: perf/gemm_skinny.py --tiles 128x256x64z0,...z1, us eager, whole / stream-K (cuBLAS):
#: 16384 x 14336 x 4096 (score +0.8%) 2721.9 / 2670.2 (2708.1), 4096 x 14336 x 4096 (+0.8%)
#: 687.1 / 678.4 (676.2)
STREAM_K_MIN_GAIN = 0.005
#: what stream-K must gain beyond that where the drift limiter would run (the kernel takes
#: one or the other; the limiter gained 1.3-2.3% on launches of hundreds of waves, where
#: stream-K has nothing to gain). 4096 x 28672 x 8192 (28 waves, 10 of 66 clusters busy in
#: the last, score +2.3%): limiter 2714.4, whole tiles without it 2685.3, stream-K 2607.9 us
#: (cuBLAS 2648.3; same H100 run)
STREAM_K_OVER_DRIFT = 0.015


class GemmSchedule(NamedTuple):
    """How one Hopper GEMM launch runs."""

    tile: tuple[int, int, int]  # CTA tile (M, N, K), in the launch's (possibly swapped) rows
    cluster_m: int  # CTAs per cluster along M
    ctas: int  # persistent CTAs launched
    drift: bool  # wave drift limiter on
    swap: bool = False  # C^T = B A^T: the weight's rows are the tile's M
    splits: int = 1  # K slices (batch dim of the launch), summed by SplitKReduce
    max_stages: int | None = None  # pipeline depth cap (None: the kernel's default)
    cluster_k: int = 1  # K slices in a cluster, reduced through DSMEM in the launch
    cluster_n: int = 1  # CTAs per cluster along N (A tiles multicast to them)
    stream_k: bool = False  # the last wave plus one shared out by k-ranges
    pdl: bool = False  # a programmatic dependent launch (GemmSm90 ``pdl``)
    pingpong: bool = False  # each consumer warpgroup its own tile (GemmSm90 ``pingpong``)

    @property
    def skinny(self) -> bool:
        """Whether the launch is swapped or split (the op's skinny route)."""
        return self.swap or self.splits > 1

    def describe(self) -> str:
        """One line for logs and the CLI."""
        cluster = (f"{self.cluster_m}x{self.cluster_n}"
                   + (f"x{self.cluster_k}" if self.cluster_k > 1 else ""))
        parts = [f"tile {self.tile[0]}x{self.tile[1]}x{self.tile[2]}", f"cluster {cluster}",
                 f"{self.ctas} CTAs"]
        if self.max_stages is not None:
            parts.append(f"up to {self.max_stages} pipeline stages")
        if self.swap:
            parts.append("swap-AB")
        if self.splits > 1:
            parts += [f"split-K {self.splits}", "fp32 workspace + reduce"]
        elif self.cluster_k > 1:
            parts.append(f"split-K {self.cluster_k} in the cluster, summed through DSMEM")
        elif self.swap:  # one launch; an out whose rows are not 16-byte multiples: workspace
            parts.append("C^T stored into out")
        if self.stream_k:
            parts.append("stream-K over the last wave")
        if self.pdl:
            parts.append("programmatic dependent launch")
        if self.pingpong:
            parts.append("pingpong consumers")
        if self.drift:
            parts.append("drift limiter")
        return ", ".join(parts)


def gated_a_rows(rows: int, tile) -> int | None:
    """The A rows a gated decode launch loads per stage: the smallest of ``GATED_A_ROWS``
    that holds all ``rows``, on ``GATED_HALF_TILE``; None (the whole tile) otherwise."""
    if tuple(tile) != GATED_HALF_TILE:
        return None
    return next((r for r in GATED_A_ROWS if rows <= r), None)


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


def stream_k_score(units: int, slots: int, speed: float) -> float:
    """A stream-K launch's score, comparable to ``speed x wave_efficiency``: 0 where it does
    not apply, else ``speed`` over (1 + ``STREAM_K_PENALTY`` x shared / all tiles)."""
    if not stream_k_fits(units, slots):
        return 0.0
    return speed / (1 + STREAM_K_PENALTY * stream_k_tiles(units, slots) / units)


def pick_stream_k_tile(m: int, n: int, batch: int, sms: int, speeds: dict, cluster_m: int):
    """The tile with the best ``stream_k_score`` and that score; (None, 0.0) when no tile's
    cluster tiles leave a partial last wave after a full one."""
    slots = max(1, sms // cluster_m)
    scores = {t: stream_k_score(cluster_tiles(m, n, batch, t, cluster_m), slots, speeds[t])
              for t in speeds if t not in PINGPONG_TILES}
    tile = max(scores, key=scores.get)
    return (tile, scores[tile]) if scores[tile] > 0 else (None, 0.0)


def split_options(k: int) -> list[int]:
    """The K slice counts a launch may use: equal slices of a multiple of 8 elements (TMA's
    16-byte stride rule for the slice stride), each at least ``SPLIT_MIN_K`` long."""
    return [s for s in range(1, SPLIT_MAX + 1)
            if s == 1 or (k % (8 * s) == 0 and k // s >= SPLIT_MIN_K)]


def split_score(units: int, rows: int, cols: int, k: int, slots: int, splits: int) -> float:
    """Wave efficiency of ``units`` tiles cut into ``splits`` K slices, over the memory
    traffic the split adds (the fp32 partials, ``rows`` x ``cols`` padded to 8, written and
    read back once per slice, against the operands' bytes), less ``SPLIT_PENALTY`` per extra
    slice."""
    partial_bytes = 8 * splits * rows * -(-cols // 8) * 8 if splits > 1 else 0
    return (wave_efficiency(units * splits, slots) / (1 + partial_bytes / ((rows + cols) * k * 2))
            - SPLIT_PENALTY * (splits - 1))


def cluster_split_schedule(m: int, n: int, k: int, sms: int) -> GemmSchedule | None:
    """Split-K 2 in a cluster (``CLUSTER_SPLIT_TILES``) if a tile's pairs fill the SMs well
    enough in one wave, else None."""
    if k < CLUSTER_SPLIT_MIN_K:
        return None
    half = m <= HALF_TILE_MAX_M
    options = CLUSTER_SPLIT_HALF_TILES if half else CLUSTER_SPLIT_TILES
    speeds = HALF_TILE_SPEEDS if half else TILE_SPEEDS
    ctas = {t: 2 * cluster_tiles(m, n, 1, t, 1) for t in options}  # two per tile
    # 33-64 rows stream the weight: STREAM_CTAS CTAs are enough there
    least = min(STREAM_CTAS, CLUSTER_SPLIT_MIN_FILL * sms) if half else CLUSTER_SPLIT_MIN_FILL * sms
    fitting = [t for t in options if least <= ctas[t] <= sms]
    if not fitting:
        return None
    tile = max(fitting, key=lambda t: speeds[t] * ctas[t])
    return GemmSchedule(tile, 1, ctas[tile], False, cluster_k=2, max_stages=options[tile],
                        pdl=CLUSTER_SPLIT_PDL)


def schedule(m: int, n: int, k: int, batch: int, sms: int, *,
             skinny: bool = True, cluster_split: bool = True,
             gated: bool = False) -> GemmSchedule:
    """The Hopper launch of an (M, N, K) x batch GEMM on ``sms`` SMs (the Ampere kernel
    ignores it).

    2x1 clusters sharing B tiles, except when M has a single tile-row (a cluster would pair
    every CTA with an idle one); the tile with the best speed x last-wave occupancy
    (``TILE_SPEEDS``); one CTA per SM in whole clusters, never more than the work; the drift
    limiter for many waves of long-K tiles (``DRIFT_MIN_WAVES``).

    ``skinny=False`` (the gated GEMM, ``gated=True``, and batched plain ones): the tiles of
    ``GATED_TILE_SPEEDS``, never swapped or split (the gated epilogue pairs C's own
    columns); the gated GEMM takes ``GATED_HALF_TILE`` for at most 64 rows. With ``skinny``, an
    unbatched problem may also be swapped (M <= ``SWAP_MAX_M``) and split along K: a swapped
    launch is split until it has ``STREAM_CTAS`` CTAs (it is memory-bound), an unswapped
    one in a cluster of two (``cluster_split_schedule``; ``cluster_split=False``: not, for an
    fp32 output) or through the workspace when its tiles leave SMs idle in a single wave; and
    a launch of several waves whose last one idles may share it out by k-ranges (stream-K,
    ``stream_k_score``).
    """
    if skinny and batch == 1 and m <= SWAP_MAX_M:
        tile = (DEFAULT_TILE[0], next(t for t in SWAP_TILES_N if t >= m), SWAP_K_TILE)
        units = cluster_tiles(n, m, 1, tile, 1)
        if units < STREAM_CTAS:  # 64-row tiles before K slices (``SWAP_HALF_ROWS``)
            tile = (SWAP_HALF_ROWS, *tile[1:])
            units = cluster_tiles(n, m, 1, tile, 1)
        splits = next((s for s in split_options(k) if units * s >= min(STREAM_CTAS, sms)),
                      max(split_options(k)))
        if tile[0] * k * 2 <= SWAP_UNSPLIT_MAX_BYTES:  # too little to stream for a reduce
            splits = 1
        ctas = persistent_grid(units * splits, sms)
        return GemmSchedule(tile, 1, ctas, False, swap=True, splits=splits,
                            max_stages=(SWAP_HALF_STAGES if tile[0] == SWAP_HALF_ROWS
                                        else SWAP_MAX_STAGES))
    if gated and m <= HALF_TILE_MAX_M:  # decoding
        units = cluster_tiles(m, n, batch, GATED_HALF_TILE, 1)
        return GemmSchedule(GATED_HALF_TILE, 1, persistent_grid(units, sms), False,
                            max_stages=GATED_HALF_STAGES)
    paired = (cluster_split_schedule(m, n, k, sms) if skinny and cluster_split and batch == 1
              else None)
    if paired is not None:
        return paired
    cluster_m = DEFAULT_CLUSTER_M if m > DEFAULT_TILE[0] else 1
    speeds = (GATED_TILE_SPEEDS if not skinny else HALF_TILE_SPEEDS if m <= HALF_TILE_MAX_M
              else TILE_SPEEDS)

    def sized(tile):  # cluster tiles, CTAs, k-tiles per tile, and whether drift is limited
        units = cluster_tiles(m, n, batch, tile, cluster_m)
        ctas = persistent_grid(units * cluster_m, sms, cluster_size=cluster_m)
        waves, k_tiles = -(-units // (ctas // cluster_m)), -(-k // tile[2])
        return units, ctas, k_tiles, waves >= DRIFT_MIN_WAVES and k_tiles >= DRIFT_MIN_K_TILES

    tile = pick_tile(m, n, batch, sms, speeds, cluster_m)
    units, ctas, k_tiles, drift = sized(tile)
    if tile in PINGPONG_TILES and drift:  # many long-K waves: the wide tiles only
        speeds = {t: v for t, v in speeds.items() if t not in PINGPONG_TILES}
        tile = pick_tile(m, n, batch, sms, speeds, cluster_m)
        units, ctas, k_tiles, drift = sized(tile)
    slots = max(1, sms // cluster_m)
    if (skinny and batch == 1 and wave_efficiency(units, slots) < SPLIT_BELOW_EFFICIENCY
            and len(split_options(k)) > 1):
        # fewer tiles than SMs: the tile and the split are chosen together
        def score(option):
            t, s = option
            u = cluster_tiles(m, n, batch, t, cluster_m)
            return (speeds[t] * split_score(u, m, n, k, slots, s), -s)

        # (the workspace's fp32 partials take the cooperative kernel: no pingpong tiles)
        tile, splits = max(((t, s) for t in speeds if t not in PINGPONG_TILES
                            for s in split_options(k)), key=score)
        units = cluster_tiles(m, n, batch, tile, cluster_m)
        if splits > 1:
            ctas = persistent_grid(units * splits * cluster_m, sms, cluster_size=cluster_m)
            return GemmSchedule(tile, cluster_m, ctas, False, splits=splits,
                                max_stages=pipeline_stages(tile, -(-k // splits)))
    # stream-K where the last wave idles more than it costs; in place of the drift limiter
    # (the kernel runs one or the other) only where it gains more than the limiter does (its
    # k-range arithmetic is int32: shared tiles x k-tiles x clusters, at most 2 x slots^2 x
    # k-tiles)
    if skinny and 2 * slots * slots * -(-k // DEFAULT_TILE[2]) < 2**31:
        sk_tile, sk_score = pick_stream_k_tile(m, n, batch, sms, speeds, cluster_m)
        bar = 1 + STREAM_K_MIN_GAIN + (STREAM_K_OVER_DRIFT if drift else 0.0)
        if sk_score > bar * speeds[tile] * wave_efficiency(units, slots):
            ctas = persistent_grid(cluster_tiles(m, n, batch, sk_tile, cluster_m) * cluster_m,
                                   sms, cluster_size=cluster_m)
            return GemmSchedule(sk_tile, cluster_m, ctas, False,
                                max_stages=pipeline_stages(sk_tile, k), stream_k=True)
    short = (skinny and cluster_m == DEFAULT_CLUSTER_M and units <= slots
             and k_tiles <= SHORT_PDL_MAX_K_TILES)
    return GemmSchedule(tile, cluster_m, ctas, drift, max_stages=pipeline_stages(tile, k),
                        pdl=short, pingpong=tile in PINGPONG_TILES)
