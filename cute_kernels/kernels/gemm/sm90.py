"""Hopper-path GEMM: warp-specialized, persistent, TMA + WGMMA, TMA-store epilogue.

``C[m, n, l] = epilogue(sum_k A[m, k, l] * B[n, k, l])`` with A (M, K, L), B (N, K, L) in
either major, fp32 accumulation, C (M, N, L) row-major or column-major (bf16, fp16 or fp32;
column-major is how a swap-AB launch writes C^T into its fp32 workspace).
"""

from __future__ import annotations

import enum
from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from layouts import sm90_gated_c, tile_mma_tv

from ..common.constants import SM90_BARRIER_RESERVE, SM90_SMEM_BYTES
from ..common.dsl import python_unrolled, with_batch_mode
from ..common.tile_scheduler import (
    grouped_tile_coord,
    stream_k_first_cluster,
    stream_k_range,
    stream_k_tiles,
)
from ..common.warp_ptx import ld_acquire_gpu, nanosleep
from .cluster_split import ClusterSplitK
from .epilogue import Epilogue, gate_pairs, gated_store_copy
from .stream_k import StreamKFixup
from .tiles import DEFAULT_CLUSTER_M, DEFAULT_TILE

# The drift limiter's wait for the other clusters gives up after about this long per tile
# (~1 ms): a throttle, never a hang, even when a cluster is not resident.
MAX_DRIFT_WAIT_NS = 1 << 20
# smem the storage struct may add past its parts (cluster split-K's barriers and the 128-byte
# alignment of its buffer), kept free when the C ring grows into what the stages leave
SMEM_STRUCT_SLACK = 256
# the C ring's least depth when a tile has several subtiles: subtile s is written while the
# store of s - 1 still reads its buffer
C_RING_MIN = 2

# Warp roles, by warp index in the CTA: warpgroup 0 produces, its warp 0 issuing the TMA loads
# (one elected lane); the other warpgroups consume, and their first warp issues the TMA stores
# of C.
PRODUCER_WG = 0
TMA_WARP = 0
STORE_WARP = 4
# registers per thread after setmaxnreg, by tile M: the producer warpgroup gives its share to
# the consumers, within the SM's 64 Ki (three consumers: 128 x 40 + 384 x 152 <= 65,536)
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = {64: 232, 128: 232, 192: 152, 256: 232}
# consumer warpgroups by tile M: one per 64 rows, except a 256-row tile's two, each running
# two m64 WGMMA rows (rows 0-63 and 128-191, 64-127 and 192-255): twice the work per stage
# wait and release, the arrangement of cuBLAS's "coop" kernels
CONSUMER_WARPGROUPS = {64: 1, 128: 2, 192: 3, 256: 2}


class Barrier(enum.IntEnum):
    """Named barrier ids (0 is the CTA-wide barrier)."""

    EPILOGUE = 1  # the consumer warpgroups, around each smem write of C and its TMA store
    # pingpong: each consumer warpgroup's own epilogue barrier is EPILOGUE + its index (1, 2);
    # warpgroup w waits at MMA_TURN + w for the other's mainloop to end before its own starts
    MMA_TURN = 3


def _select_i32(cond, a, b):
    return cutlass.select_(cond, cutlass.Int32(a), cutlass.Int32(b))


def _major_mode(major: str):
    return OperandMajorMode.K if major == "k" else OperandMajorMode.MN


class GemmSm90:
    """Warp-specialized persistent WGMMA GEMM.

    Warp roles (``kernel`` sets up the shared state and dispatches): warpgroup 0 is the
    producer (``setmaxnreg`` down to 40); its warp 0 runs ``load``, the TMA loads of A and B
    (one elected lane). Warpgroups 1 and up are consumers, one per 64 tile rows
    (``setmaxnreg`` up to 232; 152 for the three of a 192-row tile), or two on a 256-row tile
    (each two m64 rows of WGMMAs); per tile they run ``mma``, each computing its rows of the
    ``tile_m x tile_n`` tile with ``wgmma.mma_async`` m64n{tile_n}k16 from 128B-swizzled
    smem, one WGMMA batch kept in flight, then
    ``epilogue_tile`` (``gated_epilogue_tile`` when gated); warp 4 issues the TMA stores.
    Named barrier ``Barrier.EPILOGUE`` syncs the consumer warpgroups.
    C may be column-major (how a swap-AB launch writes C^T; a 16-bit C goes through a
    transposing stmatrix); ``tuning.gemm`` says when the op swaps or splits K.
    Pingpong (``pingpong``; 64- or 128-row tiles): the two consumer warpgroups take
    alternate tiles of the CTA's walk, each a whole tile (two m64 WGMMA rows at 128 rows) with
    its own C ring, named barrier (``Barrier.EPILOGUE`` + its index) and store warp (its
    first). Their mainloops take turns (``Barrier.MMA_TURN``: a warpgroup waits for the
    other's before its own, and passes the turn after), so one's epilogue runs under the
    other's WGMMAs; each skips the other's k-tiles in the ring.
    Cluster: ``cluster_m`` (2) CTAs along M share each B tile: each loads half of it and TMA
    multicasts it to both, and every consumer warp releases a stage in both CTAs (empty
    barriers count the peer's warps). This halves B's L2->SM traffic and keeps the pair in
    lockstep, which keeps long-K problems inside L2 (ncu at 16384x53248x16384 without it:
    215 GB DRAM reads, 23% L2 hits). ``cluster_n`` CTAs along N share each A tile the same
    way; a ``cluster_m x cluster_n`` cluster multicasts both (a stage is released in the
    cluster_m + cluster_n - 1 CTAs of its row and column).
    Cluster split-K (``cluster_k`` 2 or 4, ``cluster_m`` 1): the cluster's CTAs take one
    tile's K ranges, then exchange fp32 partials through DSMEM so each sums and stores its
    share of the subtiles (``ClusterSplitK``, cluster_split.py); its receive buffer, (k - 1)
    / k of the fp32 tile (32 KiB at 128x128, k = 2), comes out of the pipeline stages.
    Schedule: persistent clusters (one CTA per SM) walk cluster tiles in grouped order
    (``group_m`` tile-rows at a time, tile_scheduler.py), so the producer already streams
    tile t+1's k-tiles while the consumers run tile t's epilogue.
    Pipeline: ``stages``-deep ``PipelineTmaAsync`` ring of (A, B) k-tiles (full/empty
    mbarriers); stages = as many as fit next to the C tile in 227 KiB.
    Epilogue: the ``Epilogue`` hook on the fp32 accumulators with their (m, n); then per
    (tile_m x epi_n) subtile: conversion, stmatrix into a swizzled smem ring, TMA store (the
    stores of earlier subtiles overlap the stmatrix of the next; one named barrier per
    subtile). The ring is 2 subtiles deep at least and grows into the smem the stages leave
    (``epi_stages`` None), up to one buffer per subtile. Residues: TMA zero-fills
    loads past M, N, K and clips the stores. ``a_rows`` (decoding, M <= a_rows): the TMA
    loads only each A stage's first a_rows rows; the rows below are neither loaded nor
    stored (zero-filling an almost empty box costs time per k-tile).
    ``pdl``: a programmatic dependent launch; every thread waits for the kernel before
    (``griddepcontrol.wait``) after the barrier set-up, before any global access, and the
    next kernel may launch at once (the cluster split's default, ``tuning.gemm``).
    Stream-K (``stream_k``): the partial last wave plus one full wave of tiles (every tile
    when they are fewer) are cut into equal k-ranges, one per cluster, run before its whole
    tiles; a tile's k-range is split between consecutive clusters, each adding the fp32
    partial of the one before from the workspace, the last storing the tile
    (``StreamKFixup``, stream_k.py).
    Shared memory at 128x256x64 bf16: 4 x 48 KiB stages + 4 x 8 KiB C subtiles = 224 KiB;
    at 128x224x64: 4 x 44 KiB + 6 x 8 KiB = 224 KiB; at 128x192x64 with 64-wide subtiles:
    4 x 40 KiB + 3 x 16 KiB = 208 KiB; at 256x160x64: 3 x 52 KiB + 4 x 16 KiB = 220 KiB;
    pingpong at 128x176x64: 5 x 38 KiB + 2 rings x 4 x 4 KiB (16-wide subtiles) = 222 KiB.
    Seams: the epilogue is ``Epilogue.visit`` (one call per tile); a gathered operand (rows
    of B picked by an index list) replaces the TMA tile load of B in ``load`` with a
    row-gather into the same smem stage and barrier, leaving the consumers unchanged.
    """

    def __init__(self, a_major: str = "k", b_major: str = "k", epilogue: Epilogue | None = None,
                 tile=DEFAULT_TILE, max_stages: int = 5, group_m: int = 16,
                 epi_n: int | None = None, epi_stages: int | None = None,
                 gated: str | None = None,
                 cluster_m: int = DEFAULT_CLUSTER_M,
                 drift_slack: int | None = None, c_transposed: bool = False,
                 cluster_k: int = 1, cluster_n: int = 1, stream_k: bool = False,
                 a_rows: int | None = None, pdl: bool = False, pingpong: bool = False):
        # drift_slack (with a zeroed int32 counter passed as mSync): a cluster starts its j-th
        # tile only once every cluster has issued the loads of its first j - drift_slack tiles,
        # so clusters that share A / B panels in L2 stay within drift_slack tiles of each other
        # (the wait gives up after ~MAX_DRIFT_WAIT_NS per tile)
        if drift_slack is not None and drift_slack < 0:
            raise ValueError(f"drift_slack must be >= 0, got {drift_slack}")
        self.drift_slack = drift_slack
        # c_transposed: mC arrives as the row-major (N', M') output of a swap-AB launch and is
        # seen as its column-major transpose (M', N'): no host-side view per call
        self.c_transposed = c_transposed
        # cluster_m CTAs along M share B tiles, cluster_n along N share A tiles (multicast);
        # cluster_k CTAs split one tile's K and reduce the slices through DSMEM
        # (cluster_split.py)
        if cluster_k > 1 and (cluster_m > 1 or cluster_n > 1 or gated or c_transposed):
            raise ValueError(f"cluster_k {cluster_k} (split-K in a cluster) takes cluster_m and "
                             f"cluster_n 1 and a plain row-major C (got cluster_m {cluster_m}, "
                             f"cluster_n {cluster_n}, gated {gated}, c_transposed "
                             f"{c_transposed})")
        if cluster_m < 1 or cluster_n < 1 or cluster_m * cluster_n * cluster_k > 8:
            raise ValueError(f"a cluster holds 1 to 8 CTAs (the portable limit), got cluster_m "
                             f"{cluster_m} x cluster_n {cluster_n} x cluster_k {cluster_k}")
        self.cluster_m, self.cluster_n, self.cluster_k = cluster_m, cluster_n, cluster_k
        # stream_k: the last tiles are shared out by k-ranges (stream_k.py); mSync is then
        # the workspace of partials and flags (tile_scheduler.stream_k_workspace_words)
        if stream_k and (gated or cluster_k > 1 or drift_slack is not None):
            raise ValueError(f"stream_k takes a plain epilogue without cluster split-K or the "
                             f"drift limiter (got gated {gated}, cluster_k {cluster_k}, "
                             f"drift_slack {drift_slack})")
        self.stream_k = stream_k
        self.a_major, self.b_major = a_major, b_major
        # gated: B holds interleaved (up, gate) rows; C gets act(gate) * up, N / 2 columns
        self.gated = gated
        self.epilogue = epilogue or Epilogue()
        self.tile = tile
        # the epilogue stores (tile_m x epi_n) subtiles, which must tile N exactly (a 240-wide
        # tile in 32-wide subtiles would leave its last 16 columns unstored): 32 by default,
        # 16 where 32 does not divide N, the whole tile when it is narrower (swap-AB), 64 on
        # a 128 x 192 tile (three subtiles: 1.5-2% faster at 3000 x 5000 x 3072 on an H100
        # although the wider ring leaves 4 stages, not 5) unless a cluster split shares them
        if epi_n is None:
            epi_n = (64 if tuple(tile[:2]) == (128, 192) and cluster_k == 1 and not pingpong
                     else 32 if tile[1] % 32 == 0 else 16)
        epi_n = min(epi_n, tile[1])
        if tile[1] % 8 or tile[1] % epi_n or epi_n % 8:
            raise ValueError(f"tile N ({tile[1]}) must be a multiple of 8 and of the epilogue "
                             f"subtile width epi_n ({epi_n}, itself a multiple of 8)")
        # multicast: each CTA of a cluster column loads 1 / cluster_m of the B tile's rows (of
        # a row, 1 / cluster_n of A's), whole 8-row atoms of the 128B swizzle
        if tile[1] % (8 * cluster_m) or tile[0] % (8 * cluster_n):
            raise ValueError(f"tile {tile[:2]} does not split into 8-row shares over cluster_m "
                             f"{cluster_m} (B: tile N / cluster_m) and cluster_n {cluster_n} "
                             f"(A: tile M / cluster_n)")
        # epi_stages: the C subtile ring's depth; None: as deep as the smem next to the
        # pipeline stages holds (2 at least, one per subtile at most). A tile of several
        # subtiles needs 2: subtile s is written while the store of s - 1 reads the ring
        if epi_stages is not None and (epi_stages < 1
                                       or (epi_stages < 2 and tile[1] > epi_n)):
            raise ValueError(f"epi_stages (the C subtile ring's depth) must be >= 2, or 1 for "
                             f"a tile stored in one subtile, got {epi_stages}")
        self.epi_tile = (tile[0], epi_n)
        self.epi_stages = epi_stages
        self.max_stages = max_stages
        self.group_m = group_m
        # one consumer warpgroup per 64 rows of the tile (a 64-row tile: one consumer, a
        # 192-row one three), two for 256 rows (CONSUMER_WARPGROUPS)
        if tile[0] not in CONSUMER_REGISTERS:
            raise ValueError(f"tile M must be 64, 128, 192 or 256, got {tile[0]}")
        if tile[0] == 256 and (gated or cluster_k > 1 or stream_k or c_transposed):
            raise ValueError(f"a 256-row tile takes a plain row-major C (got gated {gated}, "
                             f"cluster_k {cluster_k}, stream_k {stream_k}, c_transposed "
                             f"{c_transposed})")
        # a_rows: the rows of each A tile the TMA loads, for a GEMM of at most a_rows rows
        # (decoding): TMA's zero fill of the other rows costs time per k-tile, and their
        # accumulator rows are never stored (the caller guarantees M <= a_rows: the rows past
        # a_rows are neither loaded nor zeroed)
        self.a_rows = tile[0] if a_rows is None else a_rows
        if self.a_rows != tile[0] and (self.a_rows % 8 or tile[0] % self.a_rows or cluster_n > 1
                                       or cluster_k > 1 or stream_k):
            raise ValueError(f"a_rows {a_rows} must be a multiple of 8 dividing tile M "
                             f"{tile[0]}, without cluster_n, cluster_k or stream_k")
        # pdl: a programmatic dependent launch; the CTAs may start while the kernel before
        # in the stream finishes: every thread waits (griddepcontrol.wait) for that grid's
        # writes before its first global access, after the barrier set-up, and lets the next
        # kernel launch at once (its CTAs take SMs as ours leave and wait the same way)
        self.pdl = pdl
        # pingpong: the two consumer warpgroups take alternate tiles of the CTA's walk, each
        # a whole tile_m x tile_n tile (64 or 128 rows: one or two m64 WGMMA rows), so one
        # warpgroup's epilogue runs while the other's WGMMAs keep the tensor cores busy. Their
        # mainloops take turns (named barriers MMA_TURN): besides keeping the WGMMAs of one
        # tile together, the turn is what makes the ring's parity waits safe, as a warpgroup
        # that skipped the other's k-tiles must not wait on a stage two phases ahead.
        if pingpong and (tile[0] not in (64, 128) or gated or cluster_k > 1 or stream_k
                         or c_transposed or a_rows is not None):
            raise ValueError(f"pingpong takes a 64- or 128-row tile and a plain row-major C, "
                             f"without cluster split-K, stream-K or a_rows (got tile "
                             f"{tuple(tile)}, gated {gated}, cluster_k {cluster_k}, stream_k "
                             f"{stream_k}, c_transposed {c_transposed}, a_rows {a_rows})")
        self.pingpong = pingpong
        self.consumer_wgs = 2 if pingpong else CONSUMER_WARPGROUPS[tile[0]]
        # warpgroups per tile (its WGMMA atom layout along M) and C rings (one per tile in
        # flight)
        self.tile_wgs = 1 if pingpong else self.consumer_wgs
        self.c_rings = 2 if pingpong else 1
        self.threads = 128 * (1 + self.consumer_wgs)
        self.producer_regs, self.consumer_regs = PRODUCER_REGISTERS, CONSUMER_REGISTERS[tile[0]]
        if stream_k:  # each consumer thread holds tile_m x tile_n / threads accumulators
            consumers = 128 * self.consumer_wgs
            self.fixup = StreamKFixup(consumers, tile[0] * tile[1] // consumers,
                                      Barrier.EPILOGUE)

    def _stages(self, ab_bytes_per_stage: int, c_bytes: int) -> int:
        # c_bytes: what else the tile keeps in smem (the C ring, cluster split-K's buffer)
        fit = (SM90_SMEM_BYTES - SM90_BARRIER_RESERVE - c_bytes) // ab_bytes_per_stage
        if fit < 2:
            raise ValueError(f"tile {self.tile} does not fit two pipeline stages in smem")
        return min(self.max_stages, fit)

    def _ring_floor(self) -> int:
        """The C ring's depth before it grows: ``epi_stages``, or ``C_RING_MIN``."""
        return C_RING_MIN if self.epi_stages is None else self.epi_stages

    def _c_ring(self, used_bytes: int, sub_bytes: int) -> int:
        """The C ring's depth: ``epi_stages``; when None, ``C_RING_MIN`` grown into the smem
        that ``used_bytes`` (the stages, that ring, a cluster split's buffer) leave, at most
        one buffer per subtile (a 128 x 224 tile: 4 stages and 6 of its 7 subtiles), so a
        subtile's write seldom waits for an older store to have read its buffer. Pingpong
        keeps one such ring per consumer warpgroup."""
        floor = self._ring_floor()
        if self.epi_stages is not None:
            return floor
        spare = SM90_SMEM_BYTES - SM90_BARRIER_RESERVE - SMEM_STRUCT_SLACK - used_bytes
        return max(floor, min(self.tile[1] // self.epi_tile[1],
                              floor + spare // (sub_bytes * self.c_rings)))

    def _a_box(self, sA_layout):
        """The smem stages' first ``a_rows`` rows: what the TMA loads of A (the whole stage
        unless ``a_rows`` is set)."""
        if self.a_rows == self.tile[0]:
            return sA_layout
        return cute.composition(sA_layout, (cute.make_layout(self.a_rows),
                                            cute.make_layout(self.tile[2]),
                                            cute.make_layout(cute.size(sA_layout, mode=[2]))))

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mBias,
                 num_ctas: cutlass.Int32, stream, mSync=None):
        if cutlass.const_expr(self.c_transposed):
            mC = cute.make_tensor(mC.iterator, cute.select(mC.layout, mode=[1, 0]))
        # plain (rows, K) operands get their batch mode of one here (with_batch_mode)
        mA, mB, mC = with_batch_mode(mA), with_batch_mode(mB), with_batch_mode(mC)
        ab_dtype, c_dtype = mA.element_type, mC.element_type
        bm, bn, bk = self.tile
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            ab_dtype, ab_dtype, _major_mode(self.a_major), _major_mode(self.b_major),
            cutlass.Float32, (self.tile_wgs, 1, 1), tiler_mn=(64, bn))
        c_layout = LayoutEnum.from_tensor(mC)
        if cutlass.const_expr(self.gated is not None):
            # the gated half tile is written by coordinates and stored whole
            self.epi_tile, self.epi_stages = (bm, bn // 2), 1
        elif cutlass.const_expr(c_dtype.width == 32):
            if cutlass.const_expr(self.pingpong):
                raise ValueError("pingpong stores a 16-bit C (an fp32 tile per consumer "
                                 "warpgroup leaves no room for the pipeline stages)")
            # fp32 output is stored by plain smem stores whose register order is not
            # subtile-major: one whole-tile subtile (2 pipeline stages fit next to it)
            self.epi_tile, self.epi_stages = (bm, bn), 1
        ab_stage_bytes = (bm + bn) * bk * ab_dtype.width // 8
        sub_bytes = bm * self.epi_tile[1] * c_dtype.width // 8
        c_bytes = self._ring_floor() * sub_bytes * self.c_rings
        ck = self.cluster_k
        if cutlass.const_expr(ck > 1):
            if cutlass.const_expr(c_dtype.width == 32):
                raise ValueError("cluster split-K stores a 16-bit C (fp32 C: the workspace "
                                 "route)")
            threads = 128 * self.consumer_wgs
            self.split = ClusterSplitK(ck, threads, bm * bn // threads, bn // self.epi_tile[1])
            c_bytes += self.split.buffer_elems() * 4
        stages = self._stages(ab_stage_bytes, c_bytes)
        ring = self._c_ring(stages * ab_stage_bytes + c_bytes, sub_bytes)
        self.c_ring = ring
        sA_layout = sm90_utils.make_smem_layout_a(LayoutEnum.from_tensor(mA), self.tile,
                                                  ab_dtype, stages)
        sB_layout = sm90_utils.make_smem_layout_b(LayoutEnum.from_tensor(mB), self.tile,
                                                  ab_dtype, stages)
        sC_layout = sm90_utils.make_smem_layout_epi(c_dtype, c_layout, self.epi_tile,
                                                    ring * self.c_rings)
        cm, cn = self.cluster_m, self.cluster_n
        a_op = (cpasync.CopyBulkTensorTileG2SMulticastOp() if cn > 1
                else cpasync.CopyBulkTensorTileG2SOp())
        tma_a, tA = cpasync.make_tiled_tma_atom(
            a_op, mA, cute.slice_(self._a_box(sA_layout), (None, None, 0)), (self.a_rows, bk),
            num_multicast=cn)
        b_op = (cpasync.CopyBulkTensorTileG2SMulticastOp() if cm > 1
                else cpasync.CopyBulkTensorTileG2SOp())
        tma_b, tB = cpasync.make_tiled_tma_atom(b_op, mB, cute.slice_(sB_layout, (None, None, 0)),
                                                (bn, bk), num_multicast=cm)
        tma_c, tC = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mC,
                                                cute.slice_(sC_layout, (None, None, 0)),
                                                self.epi_tile)

        @cute.struct
        class SharedStorage:
            mbar: cute.struct.MemRange[cutlass.Int64, stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[ab_dtype, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[ab_dtype, cute.cosize(sB_layout)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[c_dtype, cute.cosize(sC_layout)], 1024]
            if cutlass.const_expr(ck > 1):  # cluster split-K: full / free mbarriers, buffer
                red_mbar: cute.struct.MemRange[cutlass.Int64, 2]
                sRed: cute.struct.Align[cute.struct.MemRange[cutlass.Float32,
                                                             self.split.buffer_elems()], 128]

        if cutlass.const_expr(SharedStorage.size_in_bytes() > SM90_SMEM_BYTES):
            raise ValueError(f"tile {self.tile} needs {SharedStorage.size_in_bytes()} bytes of "
                             f"smem ({stages} stages, a C ring of {ring}), more than "
                             f"{SM90_SMEM_BYTES}")
        self.storage_cls = SharedStorage
        self.ab_dtype = ab_dtype
        self.stages = stages
        self.c_layout = c_layout
        self.kernel(tiled_mma, tma_a, tA, tma_b, tB, tma_c, tC, mC, mBias,
                    sA_layout, sB_layout, sC_layout, mSync).launch(
            grid=(num_ctas, 1, 1), block=(self.threads, 1, 1), cluster=(cm * cn * ck, 1, 1),
            stream=stream, use_pdl=self.pdl)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, tA: cute.Tensor,
               tma_b: cute.CopyAtom, tB: cute.Tensor, tma_c: cute.CopyAtom, tC: cute.Tensor,
               mC: cute.Tensor, mBias, sA_layout: cute.ComposedLayout,
               sB_layout: cute.ComposedLayout, sC_layout: cute.ComposedLayout, mSync):
        """The state every role shares (smem, the A/B pipeline, the tile views, the persistent
        schedule), then the role of this warp: ``load`` in the producer's TMA warp; in the
        consumers, ``mma`` then ``epilogue_tile`` (or ``gated_epilogue_tile``) per tile."""
        bm, bn, bk = self.tile
        ab_dtype = self.ab_dtype
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdimx, _, _ = cute.arch.grid_dim()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = warp // 4
        is_tma_warp = warp == TMA_WARP
        if is_tma_warp:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_c)

        cm, cn, ck = self.cluster_m, self.cluster_n, self.cluster_k
        # a cm x cn cluster (launched 1-D): rank = rank_m + cm * rank_n
        cta_layout_mnk = cute.make_layout((cm, cn, 1))
        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        # with cluster split-K (cluster_m = cluster_n = 1) the rank is the K slice instead
        mn_rank = 0 if cutlass.const_expr(ck > 1) else cta_rank
        cluster_coord = cta_layout_mnk.get_flat_coord(mn_rank)  # (rank_m, rank_n, 0)
        # B goes to the CTAs of this one's column (along M), A to those of its row (along N)
        b_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord, mode=0)
        a_mcast_mask = None
        if cutlass.const_expr(cn > 1):
            a_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord, mode=1)
        cluster_id = bidx // (cm * cn * ck)
        num_clusters = gdimx // (cm * cn * ck)
        storage = cutlass.memory.SmemAllocator().allocate(self.storage_cls)
        sA_box = self._a_box(sA_layout)
        # the A box's bytes by its size (a_rows < tile M: its layout spans the whole stage)
        stage_bytes = (self.a_rows * bk * ab_dtype.width // 8
                       + cute.size_in_bytes(ab_dtype, cute.slice_(sB_layout, (None, None, 0))))
        ab_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     self.tile_wgs * 4 * (cm + cn - 1)),
            tx_count=stage_bytes, cta_layout_vmnk=cute.make_layout((1, cm, cn, 1)))
        red = None
        if cutlass.const_expr(ck > 1):  # the split's barriers, initialized cluster-wide
            red_mbar = storage.red_mbar.data_ptr()
            red = SimpleNamespace(sRed=self.split.buffer(storage.sRed.data_ptr()),
                                  full=red_mbar, free=red_mbar + 1, barrier=Barrier.EPILOGUE)
            if warp == 0:
                with cute.arch.elect_one():
                    self.split.init_barriers(red.full, red.free)
            cute.arch.mbarrier_init_fence()
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        sC = storage.sC.get_tensor(sC_layout.outer, swizzle=sC_layout.inner)

        # (tile, tile, rest_m|n, rest_k, L) views of the TMA coordinate tensors
        gA = cute.local_tile(tA, (bm, bk), (None, None, None))
        gB = cute.local_tile(tB, (bn, bk), (None, None, None))
        out_n = bn // 2 if self.gated is not None else bn
        gC = cute.local_tile(tC, (bm, out_n), (None, None, None))
        tiles_m = cutlass.Int32(cute.size(gA, mode=[2]))
        tiles_n = cutlass.Int32(cute.size(gB, mode=[2]))
        batches = cutlass.Int32(cute.size(gA, mode=[4]))
        k_tiles = cutlass.Int32(cute.size(gA, mode=[3]))
        # this CTA's k-tiles; with cluster split-K, the cluster rank's share of them (the op
        # launches it only with at least cluster_k k-tiles: no slice is empty)
        k_first, k_end, k_count = 0, k_tiles, k_tiles
        if cutlass.const_expr(ck > 1):
            k_first = k_tiles * cta_rank // ck
            k_end = k_tiles * (cta_rank + 1) // ck
            k_count = k_end - k_first
        tiles_mc = (tiles_m + cm - 1) // cm
        tiles_nc = tiles_n if cutlass.const_expr(cn == 1) else (tiles_n + cn - 1) // cn
        num_tiles = tiles_mc * tiles_nc * batches
        # the persistent schedule: this cluster's tiles are cluster_id, + num_clusters, ...
        # below num_tiles, mapped to this CTA's (m, n, batch) tile by _tile_coord
        sched = SimpleNamespace(cluster_id=cluster_id, num_clusters=num_clusters,
                                num_tiles=num_tiles, tiles_mc=tiles_mc, tiles_nc=tiles_nc,
                                k_first=k_first, k_end=k_end, k_count=k_count,
                                cta_rank=cta_rank, sk_first=num_tiles,
                                rank_mn=(mn_rank, 0) if cutlass.const_expr(cn == 1)
                                else (cluster_coord[0], cluster_coord[1]))
        # what the producer loads: this CTA loads its b_rank-th share of each B tile and
        # multicasts it to the CTAs of b_mcast_mask, and likewise its a_rank-th share of A
        if cutlass.const_expr(self.a_rows != bm):  # the TMA loads the first a_rows rows
            sA_load = storage.sA.get_tensor(sA_box.outer, swizzle=sA_box.inner)
            gA_load = cute.local_tile(tA, (self.a_rows, bk), (None, None, None))
        else:
            sA_load, gA_load = sA, gA
        ab = SimpleNamespace(pipe=ab_pipe, tma_a=tma_a, sA=sA_load, gA=gA_load, tma_b=tma_b,
                             sB=sB, gB=gB,
                             b_rank=cluster_coord[0], b_mcast_mask=b_mcast_mask,
                             a_rank=cluster_coord[1], a_mcast_mask=a_mcast_mask)

        if cutlass.const_expr(self.stream_k):  # the last tiles in tile order are shared
            sched.sk = self._stream_k_units(sched)
            sched.sk_first = sched.sk.first_tile
        if cutlass.const_expr(self.pdl):  # the kernel before is done and its writes visible
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
        is_producer_wg = wg == PRODUCER_WG
        if is_producer_wg:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if is_tma_warp:
                self.load(ab, sched, mSync)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            # pingpong: warpgroup mma_wg (0, 1) owns every other tile of the walk
            mma_wg = wg - 1 if cutlass.const_expr(self.pingpong) else 0
            ctid = tidx - 128 * (1 + mma_wg)  # the thread's index among its tile's consumers
            frag = self._mma_fragments(tiled_mma, sA, sB, ctid)
            epi = self._epilogue_state(tiled_mma, frag.acc, tma_c, sC, gC, mC, mBias, ctid,
                                       warp, mma_wg)
            rd = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            rel = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            if cutlass.const_expr(self.stream_k):  # the shared k-ranges first
                rel, rd = self.consume_stream_k(tiled_mma, ab.pipe, frag, epi, sched, mSync,
                                                bidx, rel, rd)
            first, step = sched.cluster_id, sched.num_clusters
            if cutlass.const_expr(self.pingpong):
                # the ring holds the k-tiles of both warpgroups' tiles in walk order: skip the
                # other's (warpgroup 1 first skips warpgroup 0's first tile)
                first, step = first + mma_wg * step, 2 * step
                rd.advance(sched.k_count * mma_wg)
                rel.advance(sched.k_count * mma_wg)
            end = sched.sk_first if cutlass.const_expr(self.stream_k) else sched.num_tiles
            for tile in cutlass.range(first, end, step, unroll=1):
                tm, tn, tl = self._tile_coord(tile, sched.tiles_mc, sched.tiles_nc,
                                              sched.rank_mn)
                if cutlass.const_expr(self.pingpong):
                    self._await_mma_turn(tile, sched, mma_wg)
                rel, rd = self.mma(tiled_mma, ab.pipe, frag, sched.k_count, rel, rd)
                if cutlass.const_expr(self.pingpong):
                    self._pass_mma_turn(tile, sched, mma_wg, end)
                    rd.advance(sched.k_count)
                    rel.advance(sched.k_count)
                if cutlass.const_expr(self.gated is not None):
                    self.gated_epilogue_tile(frag, epi, tm, tn, tl)
                elif cutlass.const_expr(ck > 1):  # sum the cluster's K slices, store a share
                    self.split.exchange(
                        red, epi.tRS_rAcc, ctid, sched.cta_rank,
                        (tile - sched.cluster_id) // sched.num_clusters,
                        tile + sched.num_clusters < sched.num_tiles,
                        lambda subs, tm=tm, tn=tn, tl=tl: self.epilogue_tile(
                            tiled_mma, frag, epi, tm, tn, tl, subs))
                else:
                    self.epilogue_tile(tiled_mma, frag, epi, tm, tn, tl)
            if epi.is_store_warp:  # smem stays allocated until the last store has read it
                with cute.arch.elect_one():
                    cute.arch.cp_async_bulk_wait_group(0, read=True)

    # ---------------------------------- producer ----------------------------------

    @cute.jit
    def load(self, ab: SimpleNamespace, sched: SimpleNamespace, mSync):
        """The TMA warp: for every tile of this cluster, the A and B k-tiles into the
        ``ab.pipe`` ring (one elected lane). ``ab``: the pipeline, the TMA atoms, the smem
        stages ``sA``/``sB``, the tile views ``gA``/``gB``, this CTA's share of B
        (``b_rank``) and the CTAs it multicasts to (``b_mcast_mask``), likewise for A
        (``a_rank``, ``a_mcast_mask``; with ``cluster_n`` > 1). With the drift limiter
        (``drift_slack`` and ``mSync``), each tile first waits for the other clusters. With
        ``stream_k``, this cluster's shared k-ranges come first (``_load_stream_k``)."""
        ab_pipe, tma_a, tma_b = ab.pipe, ab.tma_a, ab.tma_b
        num_clusters = sched.num_clusters
        # A: each CTA of a row of the cluster loads its share of the tile and multicasts it
        tAsA, tAgA = cpasync.tma_partition(tma_a, ab.a_rank, cute.make_layout(self.cluster_n),
                                           cute.group_modes(ab.sA, 0, 2),
                                           cute.group_modes(ab.gA, 0, 2))
        # B: each CTA of the cluster loads its half of the tile and multicasts it
        tBsB, tBgB = cpasync.tma_partition(tma_b, ab.b_rank, cute.make_layout(self.cluster_m),
                                           cute.group_modes(ab.sB, 0, 2),
                                           cute.group_modes(ab.gB, 0, 2))
        parts = SimpleNamespace(tAsA=tAsA, tAgA=tAgA, tBsB=tBsB, tBgB=tBgB)
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        if cutlass.const_expr(self.stream_k):  # the shared k-ranges first (stream_k_range)
            prod = self._load_stream_k(ab, parts, sched, prod)
        limit = self.drift_slack is not None and mSync is not None
        wave = cutlass.Int32(0)
        for tile in cutlass.range(sched.cluster_id, sched.sk_first, num_clusters, unroll=1):
            if cutlass.const_expr(limit):
                self._await_clusters(mSync, (wave - self.drift_slack) * num_clusters)
            prod = self._load_tile(ab, parts, sched, prod, tile, sched.k_first, sched.k_end)
            if cutlass.const_expr(limit):
                if sched.cta_rank == 0:
                    with cute.arch.elect_one():
                        cute.arch.red(mSync.iterator, cutlass.Int32(1), op="add",
                                      dtype="s32", sem="release", scope="gpu")
            wave += 1
        ab_pipe.producer_tail(prod)

    @cute.jit
    def _load_stream_k(self, ab: SimpleNamespace, parts: SimpleNamespace,
                       sched: SimpleNamespace, prod):
        """The stream-K units' k-tiles (``stream_k_range``: write, whole tiles, middle,
        last), in the consumers' order; returns the producer state."""
        sk, k_tiles = sched.sk, sched.k_count
        for _ in cutlass.range(sk.write, unroll=1):
            prod = self._load_tile(ab, parts, sched, prod, sk.first_tile + sk.t_last, 0, sk.x)
        for j in cutlass.range(sk.full, unroll=1):
            prod = self._load_tile(ab, parts, sched, prod, sk.first_tile + sk.first_full + j,
                                   0, k_tiles)
        for _ in cutlass.range(sk.middle, unroll=1):
            prod = self._load_tile(ab, parts, sched, prod, sk.first_tile + sk.t_first, sk.y,
                                   sk.x)
        for _ in cutlass.range(sk.last, unroll=1):
            prod = self._load_tile(ab, parts, sched, prod, sk.first_tile + sk.t_first, sk.y,
                                   k_tiles)
        return prod

    @cute.jit
    def _load_tile(self, ab: SimpleNamespace, parts: SimpleNamespace, sched: SimpleNamespace,
                   prod, tile, k_begin, k_end):
        """Tile ``tile``'s k-tiles ``[k_begin, k_end)`` into the ring; returns the producer
        state."""
        ab_pipe = ab.pipe
        tm, tn, tl = self._tile_coord(tile, sched.tiles_mc, sched.tiles_nc, sched.rank_mn)
        if cutlass.const_expr(self.a_rows != self.tile[0]):  # gA tiles of a_rows rows
            tm = tm * (self.tile[0] // self.a_rows)
        for kt in cutlass.range(k_begin, k_end, unroll=1):
            ab_pipe.producer_acquire(prod)
            full = ab_pipe.producer_get_barrier(prod)
            if cutlass.const_expr(self.cluster_n > 1):
                cute.copy(ab.tma_a, parts.tAgA[(None, tm, kt, tl)],
                          parts.tAsA[(None, prod.index)], tma_bar_ptr=full,
                          mcast_mask=ab.a_mcast_mask)
            else:
                cute.copy(ab.tma_a, parts.tAgA[(None, tm, kt, tl)],
                          parts.tAsA[(None, prod.index)], tma_bar_ptr=full)
            cute.copy(ab.tma_b, parts.tBgB[(None, tn, kt, tl)], parts.tBsB[(None, prod.index)],
                      tma_bar_ptr=full, mcast_mask=ab.b_mcast_mask)
            ab_pipe.producer_commit(prod)
            prod.advance()
        return prod

    @cute.jit
    def _stream_k_units(self, sched: SimpleNamespace) -> SimpleNamespace:
        """This cluster's stream-K units (``tile_scheduler.stream_k_range``; none when no
        tile is shared), with ``first_tile``, the first stream-K tile: the whole tiles
        ``cluster_id, + num_clusters, ...`` stop there."""
        sk_tiles = stream_k_tiles(sched.num_tiles, sched.num_clusters, sched.k_count,
                                  _select_i32)
        write, t_last, x, full, first_full, middle, last, t_first, y = stream_k_range(
            sched.cluster_id, sched.num_clusters, sk_tiles, sched.k_count, _select_i32)
        # the clusters before this one that hold parts of tile t_first (its last adds them)
        before = sched.cluster_id - stream_k_first_cluster(t_first, sched.num_clusters,
                                                           sk_tiles, sched.k_count)
        return SimpleNamespace(first_tile=sched.num_tiles - sk_tiles, write=write,
                               t_last=t_last, x=x, full=full, first_full=first_full,
                               middle=middle, last=last, t_first=t_first, y=y,
                               before=before)

    @cute.jit
    def consume_stream_k(self, tiled_mma, ab_pipe, frag: SimpleNamespace, epi: SimpleNamespace,
                         sched: SimpleNamespace, mSync, bidx, rel, rd):
        """The consumers' stream-K units, in the producer's order: a tile's first part, its
        partial into this CTA's workspace slot; the whole tiles; a middle part, its partial
        into this CTA's slot too; a tile's last part, to which the partials of the tile's
        earlier clusters are added (same rank: slot ``bidx`` minus the cluster size per
        cluster back), farthest first, before it is stored. Only a last part waits, and only
        on first units: no chain. Each kind is its own loop of 0..n trips (no accumulator
        write sits in a runtime branch)."""
        sk, k_tiles = sched.sk, sched.k_count
        size = self.cluster_m * self.cluster_n
        for _ in cutlass.range(sk.write, unroll=1):
            rel, rd = self.mma(tiled_mma, ab_pipe, frag, sk.x, rel, rd)
            self.fixup.write(frag.acc, mSync, bidx, epi.ctid)
        for j in cutlass.range(sk.full, unroll=1):
            tm, tn, tl = self._tile_coord(sk.first_tile + sk.first_full + j, sched.tiles_mc,
                                          sched.tiles_nc, sched.rank_mn)
            rel, rd = self.mma(tiled_mma, ab_pipe, frag, k_tiles, rel, rd)
            self.epilogue_tile(tiled_mma, frag, epi, tm, tn, tl)
        for _ in cutlass.range(sk.middle, unroll=1):
            rel, rd = self.mma(tiled_mma, ab_pipe, frag, sk.x - sk.y, rel, rd)
            self.fixup.write(frag.acc, mSync, bidx, epi.ctid)
        for _ in cutlass.range(sk.last, unroll=1):
            tm, tn, tl = self._tile_coord(sk.first_tile + sk.t_first, sched.tiles_mc,
                                          sched.tiles_nc, sched.rank_mn)
            rel, rd = self.mma(tiled_mma, ab_pipe, frag, k_tiles - sk.y, rel, rd)
            for j in cutlass.range(sk.before, unroll=1):
                self.fixup.add(frag.acc, mSync, bidx - (sk.before - j) * size, epi.ctid)
            self.epilogue_tile(tiled_mma, frag, epi, tm, tn, tl)
        return rel, rd

    @cute.jit
    def _await_mma_turn(self, tile, sched: SimpleNamespace, mma_wg):
        """Pingpong: wait until the other consumer warpgroup's mainloop of the tile before
        this one in the walk has ended (none before the walk's first tile). Until then the
        ring's stages hold its k-tiles, and a parity wait on a stage whose older fill is still
        pending would pass at once: the turn keeps every wait within one phase of its fill."""
        if tile >= sched.cluster_id + sched.num_clusters:
            cute.arch.barrier(barrier_id=Barrier.MMA_TURN + mma_wg, number_of_threads=256)

    @cute.jit
    def _pass_mma_turn(self, tile, sched: SimpleNamespace, mma_wg, end):
        """Pingpong: this mainloop has ended; let the other warpgroup's next one start (only
        where the walk has a next tile: an arrival nobody waits for would pair with a later
        one)."""
        if tile + sched.num_clusters < end:
            cute.arch.barrier_arrive(barrier_id=Barrier.MMA_TURN + 1 - mma_wg,
                                     number_of_threads=256)

    @cute.jit
    def _await_clusters(self, mSync, target):
        """Spin (nanosleep) until the tile counter reaches ``target`` or about
        MAX_DRIFT_WAIT_NS passed."""
        address = mSync.iterator.toint()
        polls = cutlass.Int32(0)
        while ld_acquire_gpu(address) < target and polls < MAX_DRIFT_WAIT_NS // 256:
            nanosleep(256)
            polls += 1

    @cute.jit
    def _tile_coord(self, tile, tiles_mc, tiles_nc, rank_mn):
        """Cluster work unit -> this CTA's (m, n, batch) tile: clusters walk cluster tiles in
        grouped order; the CTAs of a cluster take adjacent M tiles of the same N tile (so B
        is shared) and adjacent N tiles of the same M tile (A shared). A CTA past M (or N)
        still runs the mainloop: its share of B (A) feeds its peers; TMA zero-fills its own
        A (B) and clips its store."""
        tmc, tnc, tl = grouped_tile_coord(tile, tiles_mc, tiles_nc,
                                          max(1, self.group_m // self.cluster_m),
                                          minimum=cutlass.min)
        tn = tnc if cutlass.const_expr(self.cluster_n == 1) else tnc * self.cluster_n + rank_mn[1]
        return tmc * self.cluster_m + rank_mn[0], tn, tl

    # ---------------------------------- consumers ----------------------------------

    @cute.jit
    def _mma_fragments(self, tiled_mma, sA, sB, ctid):
        """This consumer thread's WGMMA operand views of the smem stages and its fp32
        accumulators (``thr_mma``, ``tCrA``, ``tCrB``, ``acc``, ``k_blocks`` per k-tile)."""
        bm, bn, _ = self.tile
        thr_mma = tiled_mma.get_slice(ctid)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(tiled_mma.partition_shape_C((bm, bn)), cutlass.Float32)
        return SimpleNamespace(thr_mma=thr_mma, tCrA=tCrA, tCrB=tCrB, acc=acc,
                               k_blocks=cute.size(tCrA, mode=[2]))

    @cute.jit
    def mma(self, tiled_mma, ab_pipe, frag: SimpleNamespace, k_tiles, rel, rd):
        """One tile's mainloop into ``frag.acc``: per k-tile, wait for its stage, issue its
        WGMMA batch and keep it in flight; the stage of the batch before is released then.
        Takes and returns the release (``rel``) and read (``rd``) pipeline states, in this order:
        the tile loop carries them so, which keeps the unsplit kernel's PTX register order."""
        tCrA, tCrB, acc = frag.tCrA, frag.tCrB, frag.acc
        # the accumulate flag lives in an atom of this call's own: a flag set on the caller's
        # tiled_mma would escape this loop into the caller's next one (stream-K runs several)
        mma_atom = cute.make_mma_atom(tiled_mma.op)
        mma_atom.set(warpgroup.Field.ACCUMULATE, False)
        for kt in cutlass.range(k_tiles, unroll=1):
            ab_pipe.consumer_wait(rd)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(frag.k_blocks):
                cute.gemm(mma_atom, acc, tCrA[(None, None, kb, rd.index)],
                          tCrB[(None, None, kb, rd.index)], acc)
                mma_atom.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.commit_group()
            # one batch stays in flight; the stage before it is free for the producer
            warpgroup.wait_group(1)
            if kt > 0:
                ab_pipe.consumer_release(rel)
                rel.advance()
            rd.advance()
        warpgroup.wait_group(0)
        ab_pipe.consumer_release(rel)
        rel.advance()
        return rel, rd

    @cute.jit
    def _epilogue_state(self, tiled_mma, acc, tma_c, sC, gC, mC, mBias, ctid, warp, mma_wg=0):
        """What the epilogue of every tile reuses: the stmatrix copy of the accumulators into
        the smem ring (``r2s``; ``tRS_rAcc`` is ``acc`` in its order, subtile-major), the
        subtile registers, the coordinate tensor ``cC`` for the hook, the TMA store
        pipeline and whether this warp issues the stores (``is_store_warp``). With pingpong,
        consumer warpgroup ``mma_wg`` stores its own tiles: its first warp issues the stores
        from its own ring (buffers from ``ring_base``), synced by its own named barrier."""
        bn = self.tile[1]
        c_dtype = mC.element_type
        r2s_atom = sm90_utils.get_smem_store_op(self.c_layout, c_dtype, cutlass.Float32)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(r2s_atom, tiled_mma))
        thr_r2s = r2s.get_slice(ctid)
        tRS_sC = thr_r2s.partition_D(sC)  # (R2S, R2S_M, R2S_N, c_ring)
        tRS_rAcc = r2s.retile(acc)  # the accumulators in stmatrix order, subtile-major
        sub_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
        tRS_rSub = cute.make_rmem_tensor(sub_shape, cutlass.Float32)
        tRS_rOut = cute.make_rmem_tensor(sub_shape, c_dtype)
        cC = cute.make_identity_tensor((mC.shape[0], mC.shape[1]))
        return SimpleNamespace(tma_c=tma_c, sC=sC, gC=gC, mC=mC, mBias=mBias, ctid=ctid,
                               r2s_atom=r2s_atom, r2s=r2s, tRS_sC=tRS_sC, tRS_rAcc=tRS_rAcc,
                               tRS_rSub=tRS_rSub, tRS_rOut=tRS_rOut,
                               n_sub=bn // self.epi_tile[1], cC=cC,
                               is_store_warp=warp == STORE_WARP + 4 * mma_wg,
                               ring_base=mma_wg * self.c_ring,
                               barrier=Barrier.EPILOGUE + mma_wg,
                               threads=128 * self.tile_wgs)

    @cute.jit
    def epilogue_tile(self, tiled_mma, frag: SimpleNamespace, epi: SimpleNamespace, tm, tn, tl,
                      subtiles=None):
        """The ``Epilogue`` hook on fp32 with coordinates, then (epi_m, epi_n) subtiles, each a
        TMA store from a ``c_ring``-deep smem ring: the stmatrix of subtile s overlaps the
        stores of the subtiles before. One named barrier per subtile, plus one per tile: before
        subtile s's barrier the store warp waits only for the store that last read the buffer
        subtile s + 1 writes (none while s + 1 < the ring's depth). ``subtiles``: only these (a
        compile-time range; cluster split-K)."""
        bm, bn, _ = self.tile
        acc, mC, sC, tma_c, ctid = frag.acc, epi.mC, epi.sC, epi.tma_c, epi.ctid
        c_dtype, n_sub = mC.element_type, epi.n_sub
        tRS_rAcc, tRS_rSub, tRS_rOut = epi.tRS_rAcc, epi.tRS_rSub, epi.tRS_rOut
        is_store_warp, ring, threads = epi.is_store_warp, self.c_ring, epi.threads
        if cutlass.const_expr(not self.epilogue.is_identity):
            tCcC = frag.thr_mma.partition_C(cute.local_tile(epi.cC, (bm, bn), (tm, tn)))
            self.epilogue.visit(acc, tCcC, mC.shape[self.epilogue.bias_dim], epi.mBias)
        gC_epi = cute.zipped_divide(epi.gC[(None, None, tm, tn, tl)], self.epi_tile)
        tCsC, tCgC = cpasync.tma_partition(tma_c, 0, cute.make_layout(1),
                                           cute.group_modes(sC, 0, 2), gC_epi)
        subtiles = range(n_sub) if subtiles is None else subtiles
        # the whole ring is free once the last tile's stores have read it (long done: a
        # mainloop ran since)
        if is_store_warp:
            with cute.arch.elect_one():
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.barrier(barrier_id=epi.barrier, number_of_threads=threads)
        for i, sub in enumerate(subtiles):
            buf = epi.ring_base + i % ring
            if cutlass.const_expr(n_sub == 1):
                # whole tile at once (fp32 output), in chunks of one copy atom
                r2s_c = cute.make_tiled_copy_C(epi.r2s_atom, tiled_mma)
                tWS_sC = r2s_c.get_slice(ctid).partition_D(sC[(None, None, 0)])
                tWS_rAcc = r2s_c.retile(acc)
                tWS_rChunk = cute.make_rmem_tensor(cute.size(tWS_rAcc, mode=[0, 0]), c_dtype)
                n_chunks = cute.size(tWS_rAcc, mode=[0, 1])
                with python_unrolled():
                    for mb in cutlass.range_constexpr(cute.size(tWS_rAcc, mode=[1])):
                        for j in cutlass.range_constexpr(n_chunks):
                            tWS_rChunk.store(tWS_rAcc[(None, j), mb, 0].load().to(c_dtype))
                            cute.copy(r2s_c, tWS_rChunk, tWS_sC[(None, j), mb, 0])
            else:
                # tRS_rAcc: (stmatrix values, stmatrix chunks along N), m64 WGMMA rows (two
                # on a 256-row tile); subtile s holds chunks s * chunks ... of every row
                chunks = cute.size(tRS_rSub, mode=[2])
                for m in cutlass.range_constexpr(cute.size(tRS_rSub, mode=[1])):
                    for c in cutlass.range_constexpr(chunks):
                        for v in cutlass.range_constexpr(cute.size(tRS_rSub, mode=[0])):
                            tRS_rSub[v, m, c] = tRS_rAcc[(v, sub * chunks + c), m, 0]
                tRS_rOut.store(tRS_rSub.load().to(c_dtype))
                cute.copy(epi.r2s, tRS_rOut, epi.tRS_sC[(None, None, None, buf)])
            # smem written through the generic proxy; TMA reads through the async one
            cute.arch.fence_proxy("async.shared", space="cta")
            if cutlass.const_expr(i + 1 < len(subtiles) and i + 1 >= ring):
                # subtile i + 1 rewrites the buffer of subtile i + 1 - ring: of the stores
                # issued (0 .. i - 1), the ring - 2 newest may still be reading
                if is_store_warp:
                    with cute.arch.elect_one():
                        cute.arch.cp_async_bulk_wait_group(ring - 2, read=True)
            cute.arch.barrier(barrier_id=epi.barrier, number_of_threads=threads)
            if is_store_warp:
                with cute.arch.elect_one():
                    cute.copy(tma_c, tCsC[(None, buf)], tCgC[(None, (0, sub))])
                    cute.arch.cp_async_bulk_commit_group()

    @cute.jit
    def gated_epilogue_tile(self, frag: SimpleNamespace, epi: SimpleNamespace, tm, tn, tl):
        """The ``Epilogue`` hook on the 2I pre-activations (coordinates of the full-width
        tile), then act(gate) * up for each thread's (up, gate) accumulator column pair,
        stored to the half-width smem tile through the gated wgmma C layout's partition, then
        one TMA store.

        In CuTe's fragment order the pair is values (2v, 2v + 1) of one thread
        (tests/test_layouts_vs_cute.py), so no data moves between threads.
        """
        bm, bn, _ = self.tile
        acc, mC, sC, tma_c = frag.acc, epi.mC, epi.sC, epi.tma_c
        is_store_warp = epi.is_store_warp
        if cutlass.const_expr(not self.epilogue.is_identity):
            cAcc = cute.make_identity_tensor((mC.shape[0], mC.shape[1] * 2))
            tCcAcc = frag.thr_mma.partition_C(cute.local_tile(cAcc, (bm, bn), (tm, tn)))
            self.epilogue.visit(acc, tCcAcc, mC.shape[1] * 2, epi.mBias)
        barrier_threads = 128 * self.consumer_wgs
        r2s_gated = gated_store_copy(sC.element_type, tile_mma_tv(
            sm90_gated_c(bn), (self.consumer_wgs, 1), (bm, bn // 2)))
        tGsC = r2s_gated.get_slice(epi.ctid).partition_D(sC[(None, None, 0)])
        tGrC = cute.make_rmem_tensor_like(tGsC)
        gate_pairs(acc, tGrC, self.gated)
        if is_store_warp:
            with cute.arch.elect_one():
                cute.arch.cp_async_bulk_wait_group(0, read=True)  # last tile's store read sC
        cute.arch.barrier(barrier_id=Barrier.EPILOGUE, number_of_threads=barrier_threads)
        cute.copy(r2s_gated, tGrC, tGsC)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=Barrier.EPILOGUE, number_of_threads=barrier_threads)
        if is_store_warp:
            with cute.arch.elect_one():
                tCsC, tCgC = cpasync.tma_partition(tma_c, 0, cute.make_layout(1),
                                                   cute.group_modes(sC, 0, 2),
                                                   cute.group_modes(epi.gC, 0, 2))
                cute.copy(tma_c, tCsC[(None, 0)], tCgC[(None, tm, tn, tl)])
                cute.arch.cp_async_bulk_commit_group()
