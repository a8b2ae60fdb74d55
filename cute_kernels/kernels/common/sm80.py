"""Ampere-path (sm_80) building blocks shared by the GEMM and attention kernels: the
swizzled shared-memory atoms ldmatrix reads, the 16-byte cp.async tiled copy, and the
per-vector bounds predicate for residue tiles.

The swizzle rule itself lives in ``layouts.swizzle`` (pure Python, tested for bank conflicts);
this module only turns it into ``cute`` layouts.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync, warp

from layouts import sm80_ldmatrix_swizzle, sm80_smem_atom_k, swizzle_for

from .constants import BYTES_PER_VEC


def _cute_swizzle(swizzle):
    return cute.make_swizzle(*swizzle.as_tuple())


def smem_operand_atom(major: str, tile_k: int, elem_bytes: int):
    """The swizzled 8-row (K-major) or 8-column (M/N-major) smem atom of one operand.

    K-major: rows of ``tile_k`` elements (at most 128 bytes) under
    ``layouts.sm80_ldmatrix_swizzle``, so the 8 rows an ldmatrix phase reads hit 8 bank
    groups. M/N-major: the transpose, 128 bytes along M/N by 8 along K under the 128-byte
    swizzle, read by ldmatrix.trans.
    """
    if major == "k":
        width = sm80_smem_atom_k(tile_k, elem_bytes)
        swizzle = sm80_ldmatrix_swizzle(tile_k, elem_bytes)
        outer = cute.make_layout((8, width), stride=(width, 1))
    else:
        width = 128 // elem_bytes
        swizzle = swizzle_for("128B", elem_bytes)
        outer = cute.make_layout((width, 8), stride=(1, width))
    return cute.make_composed_layout(_cute_swizzle(swizzle), 0, outer)


def g2s_copy(dtype, major: str, rows: int, tile_k: int, threads: int):
    """cp.async (16-byte, L2-only) tiled copy of a (rows, tile_k) operand tile."""
    atom = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                               dtype, num_bits_per_copy=128)
    per_vec = BYTES_PER_VEC * 8 // dtype.width
    if major == "k":
        chunks = tile_k // per_vec
        thr = cute.make_layout((threads // chunks, chunks), stride=(chunks, 1))
        val = cute.make_layout((1, per_vec))
    else:
        chunks = rows // per_vec
        thr = cute.make_layout((chunks, threads // chunks), stride=(1, chunks))
        val = cute.make_layout((per_vec, 1))
    return cute.make_tiled_copy_tv(atom, thr, val)


@cute.jit
def in_bounds_predicate(tXcX: cute.Tensor, shape) -> cute.Tensor:
    """One predicate per copy vector of a partitioned (vector, rest_r, rest_c) coordinate
    tensor: is the vector's first element inside ``shape``? (Vectors never straddle the edge:
    the bounded dims are multiples of the vector, or whole.)"""
    rest_r, rest_c = cute.size(tXcX, mode=[1]), cute.size(tXcX, mode=[2])
    pred = cute.make_rmem_tensor((1, rest_r, rest_c), cutlass.Boolean)
    for i in cutlass.range_constexpr(rest_r):
        for j in cutlass.range_constexpr(rest_c):
            pred[0, i, j] = cute.elem_less(tXcX[(0, 0), i, j], shape)
    return pred


def store_swizzle_atom(elem_bytes: int):
    """The 8 x 128-byte row-major smem atom an output tile is staged in before 16-byte stores
    (128-byte swizzle: the 8 rows of one 16-byte column chunk hit 8 bank groups)."""
    return cute.make_composed_layout(
        _cute_swizzle(swizzle_for("128B", elem_bytes)), 0,
        cute.make_layout((8, 128 // elem_bytes), stride=(128 // elem_bytes, 1)))


@cute.jit
def smem_gemm(tiled_mma, acc, lds_a, tAs, tAr_v, tAr, lds_b, tBs, tBr_v, tBr):
    """acc += A B over the K of two smem operands (mma.sync), the ldmatrix of k-block j + 1
    issued ahead of mma j. ``tAs``/``tBs``: the ldmatrix copies' smem partitions, ``tAr_v`` /
    ``tBr_v`` the register fragments ``tAr`` / ``tBr`` retiled for them."""
    k_blocks = cute.size(tAs, mode=[2])
    cute.copy(lds_a, tAs[None, None, 0], tAr_v[None, None, 0])
    cute.copy(lds_b, tBs[None, None, 0], tBr_v[None, None, 0])
    for kb in cutlass.range_constexpr(k_blocks):
        if cutlass.const_expr(kb + 1 < k_blocks):
            cute.copy(lds_a, tAs[None, None, kb + 1], tAr_v[None, None, kb + 1])
            cute.copy(lds_b, tBs[None, None, kb + 1], tBr_v[None, None, kb + 1])
        cute.gemm(tiled_mma, acc, tAr[None, None, kb], tBr[None, None, kb], acc)



class TileLoads:
    """One thread's share of an operand's dense (rows, tile_k) k-tiles: ``load(kt, stage)``
    issues the predicated cp.async of k-tile ``kt`` into ``stage`` (rows and K past ``shape``
    zero-filled). The loader interface ``mma_mainloop`` drives; gathered operands implement
    the same ``load`` (kernels/mlp_delta.py)."""

    def __init__(self, tiled_copy, tidx, gX, sX, cX, shape):
        thr = tiled_copy.get_slice(tidx)
        self.tiled_copy, self.shape = tiled_copy, shape
        self.tXgX, self.tXsX, self.tXcX = thr.partition_S(gX), thr.partition_D(sX), \
            thr.partition_S(cX)

    @cute.jit
    def load(self, kt, stage):
        pred = in_bounds_predicate(self.tXcX[None, None, None, kt], self.shape)
        cute.copy(self.tiled_copy, self.tXgX[None, None, None, kt],
                  self.tXsX[None, None, None, stage], pred=pred)


@cute.jit
def mma_mainloop(tiled_mma: cute.TiledMma, acc: cute.Tensor, sA: cute.Tensor, sB: cute.Tensor,
                 a_transposed: cutlass.Constexpr, b_transposed: cutlass.Constexpr,
                 stages: cutlass.Constexpr, k_tiles, loads_a, loads_b, tidx):
    """``acc += A B`` over ``k_tiles`` k-tiles streamed through a ``stages``-deep cp.async
    ring (``sA`` (tile_m, tile_k, stages), ``sB`` (tile_n, tile_k, stages)): ``loads_a`` /
    ``loads_b`` issue a k-tile's copies (``load(kt, stage)``: ``TileLoads`` or a gather), the
    stage read next is waited for before its first ldmatrix, and inside a k-tile the ldmatrix
    of k-block j + 1 is issued before the mma.sync of k-block j. ``*_transposed``: the operand
    is M/N-major in smem (ldmatrix.trans). Ends with every copy landed and a CTA barrier, so
    the caller may reuse the stages' smem."""
    dtype = sA.element_type
    for s in cutlass.range_constexpr(stages - 1):
        if s < k_tiles:
            _load_stage(loads_a, loads_b, s, s)
        cute.arch.cp_async_commit_group()
    thr_mma = tiled_mma.get_slice(tidx)
    tCrA = thr_mma.make_fragment_A(thr_mma.partition_A(sA)[None, None, None, 0])
    tCrB = thr_mma.make_fragment_B(thr_mma.partition_B(sB)[None, None, None, 0])
    ldsm_a = cute.make_tiled_copy_A(cute.make_copy_atom(
        warp.LdMatrix8x8x16bOp(a_transposed, 4), dtype), tiled_mma)
    ldsm_b = cute.make_tiled_copy_B(cute.make_copy_atom(
        warp.LdMatrix8x8x16bOp(b_transposed, 4), dtype), tiled_mma)
    thr_la, thr_lb = ldsm_a.get_slice(tidx), ldsm_b.get_slice(tidx)
    tLsA, tLrA = thr_la.partition_S(sA), thr_la.retile(tCrA)
    tLsB, tLrB = thr_lb.partition_S(sB), thr_lb.retile(tCrB)
    k_blocks = cute.size(tCrA, mode=[2])

    cute.arch.cp_async_wait_group(stages - 2)
    cute.arch.sync_threads()
    cute.copy(ldsm_a, tLsA[None, None, 0, 0], tLrA[None, None, 0])
    cute.copy(ldsm_b, tLsB[None, None, 0, 0], tLrB[None, None, 0])
    read_stage = cutlass.Int32(0)
    fetch = cutlass.Int32(stages - 1)
    for _kt in cutlass.range(k_tiles, unroll=1):
        for kb in cutlass.range_constexpr(k_blocks):
            kb_next = (kb + 1) % k_blocks
            if cutlass.const_expr(kb == k_blocks - 1):
                # the next stage must have landed before its first ldmatrix
                read_stage = (read_stage + 1) % stages
                cute.arch.cp_async_wait_group(stages - 2)
                cute.arch.sync_threads()
            cute.copy(ldsm_a, tLsA[None, None, kb_next, read_stage], tLrA[None, None, kb_next])
            cute.copy(ldsm_b, tLsB[None, None, kb_next, read_stage], tLrB[None, None, kb_next])
            if cutlass.const_expr(kb == 0):
                # refill the stage everyone finished reading last iteration
                if fetch < k_tiles:
                    _load_stage(loads_a, loads_b, fetch, (read_stage + stages - 1) % stages)
                cute.arch.cp_async_commit_group()
                fetch = fetch + 1
            cute.gemm(tiled_mma, acc, tCrA[None, None, kb], tCrB[None, None, kb], acc)
    cute.arch.cp_async_wait_group(0)
    cute.arch.sync_threads()


@cute.jit
def _load_stage(loads_a, loads_b, kt, stage):
    """Both operands' k-tile ``kt`` into ``stage`` (a call, not two method calls in the
    caller's run-time ``if``: the DSL would try to carry the loader objects through it)."""
    loads_a.load(kt, stage)
    loads_b.load(kt, stage)


def padded_f32_tile(rows: int, cols: int):
    """A row-major (rows, cols) fp32 staging tile, rows padded by 4 words: the MMA fragments'
    8-byte writes spread over the banks and each row stays 16-byte aligned for vector reads."""
    return cute.make_layout((rows, cols), stride=(cols + 4, 1))
