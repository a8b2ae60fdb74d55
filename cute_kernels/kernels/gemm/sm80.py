"""Ampere-path GEMM: cp.async multi-stage pipeline, ldmatrix from swizzled smem, mma.sync.

``C[m, n, l] = epilogue(sum_k A[m, k, l] * B[n, k, l])`` with A (M, K, L), B (N, K, L) in
either major (K-major, or M/N-major), fp32 accumulation, C (M, N, L) row-major.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass.cute.nvgpu import warp

from layouts import SM80_16x4x16_GATED_C, tile_mma_tv

from ..common.constants import BYTES_PER_VEC
from ..common.sm80 import (
    TileLoads,
    g2s_copy,
    in_bounds_predicate,
    mma_mainloop,
    smem_operand_atom,
    store_swizzle_atom,
)
from .epilogue import Epilogue, gate_pairs, gated_store_copy


class GemmSm80:
    """mma.sync GEMM, one CTA per (tile_m x tile_n) output tile of one batch.

    Warp roles: 4 warps (2 x 2), all loading (cp.async) and computing (mma.sync m16n8k16).
    Pipeline: ``stages``-deep cp.async ring of (A, B) k-tiles in smem; inside a k-tile,
    ldmatrix for k-block j+1 is issued before the mma of k-block j (register double buffer).
    Shared memory: stages x (tile_m + tile_n) x tile_k x 2 B (96 KiB at 128x128x64, 3 stages),
    reused by the epilogue for the output tile (swizzled, then 16-byte vector stores).
    Residues: rows (M, N) and K beyond the problem are predicated off (zero-filled).
    """

    def __init__(self, a_major: str = "k", b_major: str = "k", epilogue: Epilogue | None = None,
                 tile=(128, 128, 64), stages: int = 3, warps=(2, 2), gated: str | None = None):
        self.a_major, self.b_major = a_major, b_major
        # gated: B holds interleaved (up, gate) rows; C gets act(gate) * up, N / 2 columns
        self.gated = gated
        self.epilogue = epilogue or Epilogue()
        self.tile_m, self.tile_n, self.tile_k = tile
        self.stages = stages
        self.warps = warps
        self.threads = 32 * warps[0] * warps[1]

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mBias,
                 num_ctas: cutlass.Int32, stream, mSync=None):
        """``num_ctas`` and ``mSync`` (the persistent CTA budget and drift counter of the
        Hopper kernel's signature) are unused: this kernel launches one CTA per output tile."""
        dtype = mA.element_type
        tiled_mma = cute.make_tiled_mma(
            warp.MmaF16BF16Op(dtype, cutlass.Float32, (16, 8, 16)),
            (self.warps[0], self.warps[1], 1),
            # N doubled so one ldmatrix.x4 feeds two n8 atoms of B
            permutation_mnk=(self.warps[0] * 16, self.warps[1] * 16, 16),
        )
        copy_a = g2s_copy(dtype, self.a_major, self.tile_m, self.tile_k, self.threads)
        copy_b = g2s_copy(dtype, self.b_major, self.tile_n, self.tile_k, self.threads)
        grid = (cute.ceil_div(mA.shape[0], self.tile_m), cute.ceil_div(mB.shape[0], self.tile_n),
                mA.shape[2])
        self.kernel(mA, mB, mC, mBias, tiled_mma, copy_a, copy_b).launch(
            grid=grid, block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mBias,
               tiled_mma: cute.TiledMma, copy_a: cute.TiledCopy, copy_b: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        bm, bn, bl = cute.arch.block_idx()
        dtype = mA.element_type
        c_dtype = mC.element_type
        BM, BN, BK, S = self.tile_m, self.tile_n, self.tile_k, self.stages

        # ---- shared memory: A and B stage rings, the output tile reuses the same bytes ----
        sA_layout = cute.tile_to_shape(smem_operand_atom(self.a_major, BK, dtype.width // 8),
                                       (BM, BK, S), (0, 1, 2))
        sB_layout = cute.tile_to_shape(smem_operand_atom(self.b_major, BK, dtype.width // 8),
                                       (BN, BK, S), (0, 1, 2))
        c_bytes = c_dtype.width // 8
        c_per_vec = BYTES_PER_VEC // c_bytes
        sC_atom = store_swizzle_atom(c_bytes)
        out_n = BN // 2 if self.gated is not None else BN
        sC_layout = cute.tile_to_shape(sC_atom, (BM, out_n), (0, 1))
        ab_bytes = (cute.cosize(sA_layout) + cute.cosize(sB_layout)) * (dtype.width // 8)
        smem_bytes = max(ab_bytes, cute.cosize(sC_layout) * c_bytes)

        @cute.struct
        class SharedStorage:
            raw: cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, smem_bytes], 1024]

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        base = storage.raw.data_ptr()
        sA = cute.make_tensor(cute.recast_ptr(base, dtype=dtype), sA_layout)
        sB = cute.make_tensor(cute.recast_ptr(base + cute.cosize(sA_layout) * (dtype.width // 8),
                                              dtype=dtype), sB_layout)
        sC = cute.make_tensor(cute.recast_ptr(base, dtype=c_dtype), sC_layout)

        # ---- this CTA's tiles and their coordinates (for predication and the epilogue) ----
        mA_l, mB_l, mC_l = mA[None, None, bl], mB[None, None, bl], mC[None, None, bl]
        gA = cute.local_tile(mA_l, (BM, BK), (bm, None))
        gB = cute.local_tile(mB_l, (BN, BK), (bn, None))
        gC = cute.local_tile(mC_l, (BM, out_n), (bm, bn))
        cA = cute.local_tile(cute.make_identity_tensor(mA_l.shape), (BM, BK), (bm, None))
        cB = cute.local_tile(cute.make_identity_tensor(mB_l.shape), (BN, BK), (bn, None))
        cC = cute.local_tile(cute.make_identity_tensor(mC_l.shape), (BM, out_n), (bm, bn))
        k_tiles = cute.size(gA, mode=[2])
        loads_a = TileLoads(copy_a, tidx, gA, sA, cA, mA_l.shape)
        loads_b = TileLoads(copy_b, tidx, gB, sB, cB, mB_l.shape)
        thr_mma = tiled_mma.get_slice(tidx)
        tCrAcc = cute.make_rmem_tensor(tiled_mma.partition_shape_C((BM, BN)), cutlass.Float32)
        tCrAcc.fill(0.0)
        mma_mainloop(tiled_mma, tCrAcc, sA, sB, self.a_major != "k", self.b_major != "k", S,
                     k_tiles, loads_a, loads_b, tidx)

        # ---- epilogue: hook on fp32 with (m, n), convert, stage in smem, 16-byte stores ----
        if cutlass.const_expr(self.gated is not None):
            # bias on the 2I pre-activations, then act(gate) * up per in-thread (up, gate)
            # column pair, stored through the gated 16x4x16 atom's partition of the half tile
            if cutlass.const_expr(not self.epilogue.is_identity):
                cAcc = cute.local_tile(cute.make_identity_tensor((mA_l.shape[0], mB_l.shape[0])),
                                       (BM, BN), (bm, bn))
                self.epilogue.visit(tCrAcc, thr_mma.partition_C(cAcc), mB_l.shape[0], mBias)
            r2s_gated = gated_store_copy(c_dtype, tile_mma_tv(SM80_16x4x16_GATED_C, self.warps,
                                                              (BM, out_n)))
            tGsC = r2s_gated.get_slice(tidx).partition_D(sC)
            tGrC = cute.make_rmem_tensor_like(tGsC)
            gate_pairs(tCrAcc, tGrC, self.gated)
            cute.copy(r2s_gated, tGrC, tGsC)
        else:
            tCcC = thr_mma.partition_C(cC)
            self.epilogue.visit(tCrAcc, tCcC, mC_l.shape[1], mBias)
            tCrC = cute.make_rmem_tensor_like(tCrAcc, c_dtype)
            tCrC.store(tCrAcc.load().to(c_dtype))
            cute.autovec_copy(tCrC, thr_mma.partition_C(sC))
        cute.arch.sync_threads()

        store_atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), c_dtype,
                                         num_bits_per_copy=128)
        chunks_n = out_n // c_per_vec
        s2g = cute.make_tiled_copy_tv(
            store_atom,
            cute.make_layout((self.threads // chunks_n, chunks_n), stride=(chunks_n, 1)),
            cute.make_layout((1, c_per_vec)))
        thr_s = s2g.get_slice(tidx)
        tSsC, tSgC, tScC = thr_s.partition_S(sC), thr_s.partition_D(gC), thr_s.partition_D(cC)
        tSrC = cute.make_rmem_tensor_like(tSsC)
        cute.autovec_copy(tSsC, tSrC)
        cute.copy(s2g, tSrC, tSgC, pred=in_bounds_predicate(tScC, mC_l.shape))
