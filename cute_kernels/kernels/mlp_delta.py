"""The column-sparse MLP delta's two GEMMs (issue 16, Chipmunk Part III's MLP half).

Per group ``g`` of ``group`` token rows, with its list ``idx = indices[g, :count]`` of
intermediate columns (features):

* ``MlpDeltaUp`` (mm1 with a fused epilogue): ``h = act(x_g W1[idx]^T + b1[idx])``; the
  epilogue reads ``act_cache[g rows, idx]``, writes ``h`` back there and writes the packed
  delta ``h - act_cache_old`` into ``delta`` (M, L_pad), zeros past the count.
* ``MlpDeltaDown`` (mm2): ``out_cache[g rows] += delta[g rows, :count] @ W2[:, idx]^T``, the
  K dimension gathered (W2 read through its (F, D) transpose ``w2t``, whose rows are the
  columns of W2), accumulated into ``out_cache`` by the CTA that owns the output tile.

Both are the Ampere GEMM's mainloop (``common.sm80.mma_mainloop``: cp.async ring,
ldmatrix, mma.sync m16n8k16, fp32 accumulators) with one operand gathered row by row into the
same swizzled stage: the "gathered operand" seam of docs/gemm.md. They run on Ampere, and
on Hopper where the WGMMA kernels with a warp-specialized gather producer
(``mlp_delta_sm90.py``) do not apply (groups other than 128, K or D off their tiles;
mma.sync is valid on sm_90a).

Caches: ``act_cache`` is (M, F) either row-major or M-major (``torch.empty(F, M).t()``). The
epilogue's cache pass maps consecutive lanes to consecutive rows for the M-major cache (one
listed column of a group is ``group`` contiguous values: 64-byte warp accesses) and to
consecutive list positions for the row-major one (scattered 2-byte accesses: the layout costs
about one sector per element). Loads are batched ``CACHE_BATCH`` deep per thread, since the
cache's latency, not its bytes, bounds the pass.

Indices are clamped into [0, F) and positions past a group's count repeat its last listed
column (read, never written), so bad lists give wrong numbers, never an out-of-bounds access;
the op checks them in debug mode. A repeated column within a group is not detected without
it (its cache entry would be written twice and its delta counted twice).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import cpasync, warp

from .common.activation_names import GATED_TO_ACT
from .common.dsl import python_unrolled
from .common.sm80 import TileLoads, g2s_copy, mma_mainloop, padded_f32_tile, smem_operand_atom
from .gemm.epilogue import activate

#: elements per 16-byte vector of a 16-bit type
VEC = 8
#: cache values each thread loads before it uses the first (latency hiding in the cache pass:
#: after the mainloop the accumulators' registers are free for them)
CACHE_BATCH = 64
DEFAULT_TILE = (128, 128, 64)


def group_count(mCounts, g, width):
    """Group ``g``'s count clamped into [0, L]: a bad count never reads past its list."""
    return cutlass.min(cutlass.max(mCounts[g], 0), width)


def _tiled_mma(dtype, warps) -> cute.TiledMma:
    """mma.sync m16n8k16 over a (warps_m x warps_n) grid, N doubled so one ldmatrix.x4 feeds
    two n8 atoms (as ``GemmSm80``)."""
    return cute.make_tiled_mma(
        warp.MmaF16BF16Op(dtype, Float32, (16, 8, 16)), (warps[0], warps[1], 1),
        permutation_mnk=(warps[0] * 16, warps[1] * 16, 16))


def _g2s_atom(dtype):
    return cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                               dtype, num_bits_per_copy=128)


class GatherRowsK:
    """mm1's B operand: k-tiles of the rows ``feat[n]`` of ``mSrc`` (F, K), K-major. Thread
    ``t`` copies the 16-byte chunk ``t % (tile_k / 8)`` of tile rows ``t // (tile_k / 8) + i
    * step``; its rows' feature ids are read from smem once (they do not change along K).
    Chunks past K are zero-filled (they multiply into every output)."""

    def __init__(self, mSrc, sDst, sFeat, tidx, tile_n: int, tile_k: int, threads: int):
        chunks = tile_k // VEC
        self.mSrc, self.sDst, self.tile_k = mSrc, sDst, tile_k
        self.chunk, self.row0, self.step = tidx % chunks, tidx // chunks, threads // chunks
        self.count = tile_n // self.step
        self.rows = cute.make_rmem_tensor((self.count,), Int32)
        for i in range(self.count):  # plain Python: __init__ is not preprocessed
            self.rows[i] = sFeat[self.row0 + i * self.step]

    @cute.jit
    def load(self, kt, stage):
        atom = _g2s_atom(self.mSrc.element_type)
        vec = kt * (self.tile_k // VEC) + self.chunk
        inside = vec * VEC < self.mSrc.shape[1]
        for i in cutlass.range_constexpr(self.count):
            dst = cute.zipped_divide(self.sDst[self.row0 + i * self.step, None, stage],
                                     (VEC,))[None, self.chunk]
            if inside:
                src = cute.zipped_divide(self.mSrc[self.rows[i], None], (VEC,))[None, vec]
                cute.copy(atom, src, dst)
            else:
                dst.fill(0)


class GatherRowsN:
    """mm2's B operand ``B[n, k] = mSrc[list[k], n0 + n]``: per k-tile, the ``tile_k`` rows of
    ``mSrc`` (F, D) the group's list names (positions past the count repeat the last one;
    their delta is zero), each copied as ``tile_n / 8`` 16-byte chunks into the N-major stage.
    The list entries of k-tile ``kt + 1`` are fetched right after ``kt``'s copies are issued,
    so their latency hides behind a k-tile of MMAs. Chunks past D are zero-filled."""

    def __init__(self, mSrc, sDst, mList, count, n0, tidx, tile_n: int, tile_k: int,
                 threads: int):
        chunks = tile_n // VEC
        self.mSrc, self.sDst, self.mList, self.count = mSrc, sDst, mList, count
        self.tile_k = tile_k
        self.chunk, self.k0, self.step = tidx % chunks, tidx // chunks, threads // chunks
        self.per_thread = tile_k // self.step
        self.col_vec = n0 // VEC + self.chunk
        self.rows = cute.make_rmem_tensor((self.per_thread,), Int32)

    @cute.jit
    def fetch(self, kt):
        """This thread's list entries of k-tile ``kt``, clamped into the list and [0, F)."""
        last_row = self.mSrc.shape[0] - 1
        for j in cutlass.range_constexpr(self.per_thread):
            pos = cutlass.min(kt * self.tile_k + self.k0 + j * self.step, self.count - 1)
            self.rows[j] = cutlass.min(cutlass.max(self.mList[pos], 0), last_row)

    @cute.jit
    def load(self, kt, stage):
        atom = _g2s_atom(self.mSrc.element_type)
        inside = self.col_vec * VEC < self.mSrc.shape[1]
        for j in cutlass.range_constexpr(self.per_thread):
            dst = cute.zipped_divide(self.sDst[None, self.k0 + j * self.step, stage],
                                     (VEC,))[None, self.chunk]
            if inside:
                src = cute.zipped_divide(self.mSrc[self.rows[j], None], (VEC,))[
                    None, self.col_vec]
                cute.copy(atom, src, dst)
            else:
                dst.fill(0)
        self.fetch(kt + 1)


class _DeltaGemm:
    """What both GEMMs share: the tile (tile_m rows of one group, tile_n, tile_k), the
    ``stages``-deep cp.async ring, 4 warps (2 x 2), the shared memory (A and B stages, reused
    after the mainloop as a padded fp32 (tile_m, tile_n) staging tile, and the tile's feature
    ids) and the vector loop over the staged tile."""

    #: the epilogue's staging tile holds 16-bit values (the operands' type) instead of fp32:
    #: the Hopper kernels' choice (``mlp_delta_sm90``), where the smem it saves buys a stage
    narrow_staging = False

    def __init__(self, group: int, tile=DEFAULT_TILE, stages: int = 3, warps=(2, 2)):
        self.tile_m, self.tile_n, self.tile_k = tile
        if group % self.tile_m:
            raise ValueError(f"group {group} must be a multiple of the tile's {self.tile_m} rows")
        self.group, self.stages, self.warps = group, stages, warps
        self.threads = 32 * warps[0] * warps[1]
        # columns of the epilogue's tile (half the MMA tile for the gated mm1)
        self.out_n = self.tile_n

    @cute.jit
    def smem(self, dtype: cutlass.Constexpr, b_major: cutlass.Constexpr):
        """(sA, sB, sF, sFeat, sRows): the A and B stage rings, the fp32 (tile_m, out_n)
        staging tile over the same bytes, ``tile_n`` int32 feature ids and ``tile_n`` int32
        weight rows (the gated mm1's (up, gate) row pairs)."""
        BM, BN, BK, S = self.tile_m, self.tile_n, self.tile_k, self.stages
        sA_layout = cute.tile_to_shape(smem_operand_atom("k", BK, 2), (BM, BK, S), (0, 1, 2))
        sB_layout = cute.tile_to_shape(smem_operand_atom(b_major, BK, 2), (BN, BK, S),
                                       (0, 1, 2))
        sF_layout = padded_f32_tile(BM, self.out_n)
        a_bytes = cute.cosize(sA_layout) * 2
        raw_bytes = max(a_bytes + cute.cosize(sB_layout) * 2, cute.cosize(sF_layout) * 4)

        @cute.struct
        class SharedStorage:
            raw: cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, raw_bytes], 1024]
            feat: cute.struct.Align[cute.struct.MemRange[Int32, 2 * BN], 16]

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        base = storage.raw.data_ptr()
        return (cute.make_tensor(cute.recast_ptr(base, dtype=dtype), sA_layout),
                cute.make_tensor(cute.recast_ptr(base + a_bytes, dtype=dtype), sB_layout),
                cute.make_tensor(cute.recast_ptr(base, dtype=Float32), sF_layout),
                cute.make_tensor(storage.feat.data_ptr(), cute.make_layout(BN)),
                cute.make_tensor(storage.feat.data_ptr() + BN, cute.make_layout(BN)))

    def row_tile_loads(self, tiled_copy, tidx, mT, sA, row0) -> TileLoads:
        """The dense A operand: rows [row0, row0 + tile_m) of ``mT`` in (tile_m, tile_k)
        k-tiles (rows past M and columns past K zero-filled)."""
        tiler, tile = (self.tile_m, self.tile_k), (row0 // self.tile_m, None)
        return TileLoads(tiled_copy, tidx, cute.local_tile(mT, tiler, tile), sA,
                         cute.local_tile(cute.make_identity_tensor(mT.shape), tiler, tile),
                         mT.shape)

    def vector_slots(self, tidx):
        """(chunk, first row, rows per pass, passes): thread ``tidx``'s 16-byte column chunk
        of the (tile_m, tile_n) tile and the rows it visits."""
        per_row = self.out_n // VEC
        rows_per_pass = self.threads // per_row
        return tidx % per_row, tidx // per_row, rows_per_pass, self.tile_m // rows_per_pass

    @cute.jit
    def staged_vector(self, sF, m, chunk):
        """Row ``m``'s values ``chunk * 8 ...`` of the staging tile, as fp32."""
        frag = cute.make_rmem_tensor((VEC,), sF.element_type)
        cute.autovec_copy(cute.zipped_divide(sF[m, None], (VEC,))[None, chunk], frag)
        if cutlass.const_expr(self.narrow_staging):
            return frag.load().to(Float32)
        return frag.load()

    def to_staged(self, v, sF):
        """An fp32 value as the staging tile stores it."""
        return v.to(sF.element_type) if self.narrow_staging else v


class MlpDeltaUp(_DeltaGemm):
    """mm1 + the fused cache epilogue; CTA (j, s, g) takes rows ``g * group + s * tile_m``
    (``tile_m`` of them) and packed list positions ``[j tile_n, (j + 1) tile_n)`` of group g,
    and exits at once past the group's count or past M.

    Warps: 4 (2 x 2), each loading (cp.async) and computing (mma.sync) a 64 x 64 quarter.
    Pipeline: ``stages`` k-tiles of x (dense rows, predicated) and of the gathered W1 rows.
    Epilogue: bias ``b1[feat]`` and the activation on the fp32 fragments; the tile staged in
    smem as fp32; the cache pass (per element: load the cached value, store h there, keep
    h - old in smem; loads batched ``cache_batch`` deep); then the delta tile in 16-byte rows.
    Shared memory at the op's 128 x 128 x 32, 4 stages: 64 KiB of stages under the 66 KiB
    fp32 tile that reuses them, + 512 B of feature ids (two CTAs per SM, as registers allow).

    Tensors: ``mX`` (M, K), ``mW1`` (F, K) (unit K stride, 16-byte rows), ``mB1`` (F,) or None,
    ``mIdx`` (G, L) / ``mCounts`` (G,) int32, ``mAct`` (M, F) (row-major, or M-major with
    ``cache_m_major``), ``mDelta`` (M, L_pad) compact, L_pad a multiple of ``tile_n``.
    """

    def __init__(self, activation: str, bias: bool, group: int, cache_m_major: bool,
                 tile=DEFAULT_TILE, stages: int = 3, warps=(2, 2),
                 cache_batch: int = CACHE_BATCH):
        super().__init__(group, tile, stages, warps)
        self.activation, self.bias, self.cache_m_major = activation, bias, cache_m_major
        # gated (Llama-style): B's tile rows are (up, gate) row pairs of out_n features
        self.gate_act = GATED_TO_ACT.get(activation)
        self.rows_per_feature = 1 if self.gate_act is None else 2
        self.out_n = self.tile_n // self.rows_per_feature
        per_thread = self.tile_m * self.out_n // self.threads
        self.cache_batch = min(cache_batch, per_thread)
        if per_thread % self.cache_batch:
            raise ValueError(f"cache_batch {cache_batch} must divide the {per_thread} elements "
                             f"per thread")

    @cute.jit
    def __call__(self, mX: cute.Tensor, mW1: cute.Tensor, mB1, mIdx: cute.Tensor,
                 mCounts: cute.Tensor, mAct: cute.Tensor, mDelta: cute.Tensor, stream):
        dtype = mX.element_type
        tiled_mma = _tiled_mma(dtype, self.warps)
        copy_x = g2s_copy(dtype, "k", self.tile_m, self.tile_k, self.threads)
        grid = (cute.ceil_div(mIdx.shape[1], self.out_n), self.group // self.tile_m,
                mIdx.shape[0])
        self.kernel(mX, mW1, mB1, mIdx, mCounts, mAct, mDelta, tiled_mma, copy_x).launch(
            grid=grid, block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mW1: cute.Tensor, mB1, mIdx: cute.Tensor,
               mCounts: cute.Tensor, mAct: cute.Tensor, mDelta: cute.Tensor,
               tiled_mma: cute.TiledMma, copy_x: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        tile_j, sub, g = cute.arch.block_idx()
        BM, BN, BK = self.tile_m, self.tile_n, self.tile_k
        dtype = mX.element_type
        sA, sB, sF, sFeat, sRows = self.smem(dtype, "k")
        count = group_count(mCounts, g, mIdx.shape[1])
        n0 = tile_j * self.out_n
        row0 = g * self.group + sub * BM
        if n0 < count and row0 < mX.shape[0]:
            # the tile's features: positions past the count repeat the last listed one; the
            # gated form's tile row r is W1 row 2 feat[r / 2] + r % 2 (up, gate)
            if tidx < BN:
                pos = cutlass.min(n0 + tidx // self.rows_per_feature, count - 1)
                feat = cutlass.min(cutlass.max(mIdx[g, pos], 0),
                                   mW1.shape[0] // self.rows_per_feature - 1)
                if cutlass.const_expr(self.gate_act is not None):
                    sRows[tidx] = 2 * feat + tidx % 2
                    if tidx % 2 == 0:
                        sFeat[tidx // 2] = feat
                else:
                    sFeat[tidx] = feat
                    sRows[tidx] = feat
            cute.arch.sync_threads()
            loads_x = self.row_tile_loads(copy_x, tidx, mX, sA, row0)
            loads_w = GatherRowsK(mW1, sB, sRows, tidx, BN, BK, self.threads)
            acc = cute.make_rmem_tensor(tiled_mma.partition_shape_C((BM, BN)), Float32)
            acc.fill(0.0)
            mma_mainloop(tiled_mma, acc, sA, sB, False, False, self.stages,
                         cute.ceil_div(mX.shape[1], BK), loads_x, loads_w, tidx)

            thr_mma = tiled_mma.get_slice(tidx)
            tCcC = thr_mma.partition_C(cute.make_identity_tensor((BM, BN)))
            if cutlass.const_expr(self.gate_act is not None):
                self.gate_pairs_to_smem(acc, tCcC, sFeat, mB1, sF)
            else:
                self.bias_activation(acc, tCcC, sFeat, mB1)
                cute.autovec_copy(acc, thr_mma.partition_C(sF))
            cute.arch.sync_threads()
            rows_valid = cutlass.min(mX.shape[0] - row0, BM)
            self.cache_pass(sF, sFeat, mAct, row0, rows_valid, count - n0, tidx)
            cute.arch.sync_threads()
            self.store_delta(sF, mDelta, row0, rows_valid, n0, tidx)

    @cute.jit
    def bias_activation(self, acc, tCcC, sFeat, mB1):
        """``acc = act(acc + b1[feat[n]])`` on the fp32 fragments; ``tCcC`` holds each
        element's (m, n) in the tile."""
        with python_unrolled():
            for i in cutlass.range_constexpr(cute.size(acc)):
                v = acc[i]
                if cutlass.const_expr(self.bias):
                    v = v + Float32(mB1[sFeat[tCcC[i][1]]])
                acc[i] = activate(v, self.activation)

    @cute.jit
    def gate_pairs_to_smem(self, acc, tCcC, sFeat, mB1, sF):
        """The gated epilogue: each thread's accumulator pair (2v, 2v + 1) is tile columns
        (2f, 2f + 1), the up and gate rows of the tile's feature f (the pair property
        ``gate_pairs`` relies on; mma.sync's and WGMMA's C layouts both have it), W1 / b1 rows
        2 feat[f] and 2 feat[f] + 1; bias on both, then ``sF[m, f] = act(gate) * up``."""
        with python_unrolled():
            for v in cutlass.range_constexpr(cute.size(acc) // 2):
                m, c = tCcC[2 * v]
                up, gate = acc[2 * v], acc[2 * v + 1]
                if cutlass.const_expr(self.bias):
                    row = 2 * sFeat[c // 2]
                    up = up + Float32(mB1[row])
                    gate = gate + Float32(mB1[row + 1])
                sF[m, c // 2] = self.to_staged(activate(gate, self.gate_act) * up, sF)

    @cute.jit
    def cache_pass(self, sF, sFeat, mAct, row0, rows_valid, cols_valid, tidx):
        """``act_cache[row, feat[n]] = h`` and ``sF[m, n] = h - old`` for the tile's valid
        elements (``sF[m, n] = 0`` past the count, so the packed delta is zero there)."""
        BM, BN, U = self.tile_m, self.out_n, self.cache_batch
        per_thread = BM * BN // self.threads
        old = cute.make_rmem_tensor((U,), Float32)
        for b in cutlass.range(per_thread // U, unroll=1):
            with python_unrolled():
                for u in cutlass.range_constexpr(U):
                    m, n = self._element(b * U + u, tidx)
                    old[u] = Float32(0.0)
                    if m < rows_valid and n < cols_valid:
                        old[u] = Float32(mAct[row0 + m, sFeat[n]])
                for u in cutlass.range_constexpr(U):
                    m, n = self._element(b * U + u, tidx)
                    h = sF[m, n]
                    if cutlass.const_expr(self.narrow_staging):
                        # h as the cache keeps it: the delta is what the cache entry changes by
                        h = h.to(Float32)
                    if m < rows_valid and n < cols_valid:
                        mAct[row0 + m, sFeat[n]] = h.to(mAct.element_type)
                        sF[m, n] = self.to_staged(h - old[u], sF)
                    else:
                        sF[m, n] = self.to_staged(Float32(0.0), sF)

    def _element(self, e, tidx):
        """The (m, n) of a thread's ``e``-th element in the cache pass: consecutive lanes take
        consecutive rows (M-major cache) or consecutive list positions (row-major)."""
        flat = e * self.threads + tidx
        if self.cache_m_major:
            return flat % self.tile_m, flat // self.tile_m
        return flat // self.out_n, flat % self.out_n

    @cute.jit
    def store_delta(self, sF, mDelta, row0, rows_valid, n0, tidx):
        """The staged delta as ``mDelta[row0 + m, n0 ...]`` in 16-byte vectors."""
        chunk, r, rows_per_pass, passes = self.vector_slots(tidx)
        for p in cutlass.range_constexpr(passes):
            m = r + p * rows_per_pass
            if m < rows_valid:
                y = cute.make_rmem_tensor((VEC,), mDelta.element_type)
                y.store(self.staged_vector(sF, m, chunk).to(mDelta.element_type))
                dst = cute.zipped_divide(mDelta[row0 + m, None], (VEC,))
                cute.autovec_copy(y, dst[None, n0 // VEC + chunk])


class MlpDeltaDown(_DeltaGemm):
    """mm2: ``out_cache[g rows, n0 ...] += delta[g rows, :count] @ w2t[idx, n0 ...]``; CTA
    (j, s, g) owns output columns ``[j tile_n, (j + 1) tile_n)`` of rows ``g * group + s *
    tile_m`` (``tile_m``), so its read-modify-write of ``out_cache`` races with no one. A
    group with count 0 adds nothing and exits at once.

    Warps: 4 (2 x 2). Pipeline: ``stages`` k-tiles of the packed delta (dense rows,
    predicated) and of the gathered ``w2t`` rows (N-major stage, ldmatrix.trans).
    Epilogue: fp32 fragments staged in smem, then per 16-byte vector of ``out_cache``: load
    (all of a thread's loads issued first), add in fp32, store. Shared memory at the op's
    128 x 64 x 64, 3 stages: 72 KiB of stages, the 34 KiB fp32 tile over them (three CTAs
    per SM).

    Tensors: ``mDelta`` (M, L_pad) compact, ``mW2t`` (F, D) (unit D stride, 16-byte rows),
    ``mIdx`` / ``mCounts`` as mm1, ``mOut`` (M, D) (unit D stride, 16-byte rows).
    """

    @cute.jit
    def __call__(self, mDelta: cute.Tensor, mW2t: cute.Tensor, mIdx: cute.Tensor,
                 mCounts: cute.Tensor, mOut: cute.Tensor, stream):
        dtype = mDelta.element_type
        tiled_mma = _tiled_mma(dtype, self.warps)
        copy_d = g2s_copy(dtype, "k", self.tile_m, self.tile_k, self.threads)
        grid = (cute.ceil_div(mOut.shape[1], self.tile_n), self.group // self.tile_m,
                mIdx.shape[0])
        self.kernel(mDelta, mW2t, mIdx, mCounts, mOut, tiled_mma, copy_d).launch(
            grid=grid, block=(self.threads, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mDelta: cute.Tensor, mW2t: cute.Tensor, mIdx: cute.Tensor,
               mCounts: cute.Tensor, mOut: cute.Tensor, tiled_mma: cute.TiledMma,
               copy_d: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        tile_j, sub, g = cute.arch.block_idx()
        BM, BN, BK = self.tile_m, self.tile_n, self.tile_k
        dtype = mDelta.element_type
        sA, sB, sF, _sFeat, _sRows = self.smem(dtype, "n")
        count = group_count(mCounts, g, mIdx.shape[1])
        row0 = g * self.group + sub * BM
        if count > 0 and row0 < mOut.shape[0]:
            loads_d = self.row_tile_loads(copy_d, tidx, mDelta, sA, row0)
            loads_w = GatherRowsN(mW2t, sB, mIdx[g, None], count, tile_j * BN, tidx, BN, BK,
                                  self.threads)
            loads_w.fetch(0)
            acc = cute.make_rmem_tensor(tiled_mma.partition_shape_C((BM, BN)), Float32)
            acc.fill(0.0)
            mma_mainloop(tiled_mma, acc, sA, sB, False, True, self.stages,
                         cute.ceil_div(count, BK), loads_d, loads_w, tidx)
            cute.autovec_copy(acc, tiled_mma.get_slice(tidx).partition_C(sF))
            cute.arch.sync_threads()
            self.accumulate(sF, mOut, row0, cutlass.min(mOut.shape[0] - row0, BM),
                            tile_j * BN, tidx)

    @cute.jit
    def accumulate(self, sF, mOut, row0, rows_valid, n0, tidx):
        """``mOut[row0 + m, n0 ...] += sF[m, ...]`` in 16-byte vectors, fp32 sums: every load
        of the thread first, then the adds and stores."""
        chunk, r, rows_per_pass, passes = self.vector_slots(tidx)
        col_vec = n0 // VEC + chunk
        inside = col_vec * VEC < mOut.shape[1]
        old = cute.make_rmem_tensor((VEC, passes), mOut.element_type)  # vectors contiguous
        for p in cutlass.range_constexpr(passes):
            m = r + p * rows_per_pass
            if inside and m < rows_valid:
                src = cute.zipped_divide(mOut[row0 + m, None], (VEC,))[None, col_vec]
                cute.autovec_copy(src, old[None, p])
        for p in cutlass.range_constexpr(passes):
            m = r + p * rows_per_pass
            if inside and m < rows_valid:
                y = cute.make_rmem_tensor((VEC,), mOut.element_type)
                y.store((old[None, p].load().to(Float32) + self.staged_vector(sF, m, chunk))
                        .to(mOut.element_type))
                dst = cute.zipped_divide(mOut[row0 + m, None], (VEC,))[None, col_vec]
                cute.autovec_copy(y, dst)
