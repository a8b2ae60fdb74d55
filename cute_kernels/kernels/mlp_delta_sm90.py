"""The column-sparse MLP delta's two GEMMs on Hopper (issue 16): warp-specialized, persistent,
WGMMA, with the gathered weight operand filled by the attention gather loader.

Same math, tensors and epilogues as ``mlp_delta.MlpDeltaUp`` / ``MlpDeltaDown`` (whose
``cache_pass``, ``store_delta`` and ``accumulate`` these classes inherit, run by the 256
consumer threads, or for mm1 by an epilogue warpgroup). What changes is the mainloop:

* warpgroup 0 produces: its warp 0 brings the dense A k-tile (x for mm1, the packed delta for
  mm2) by TMA into a ``PipelineTmaAsync`` ring; all 128 threads gather the weight k-tile with
  16-byte cp.async into the same 128B-swizzled stage WGMMA reads (``GatherKVLoader``: W1's
  rows K-major for mm1 as "K" rows, W2's columns N-major for mm2 as "V" rows) into a
  ``PipelineCpAsync`` ring. The weights are seen as (1, tiles, F, width) views so a k-tile
  (mm1) or output tile (mm2) is the loader's "head";
* warpgroups 1 and 2 consume: per k-tile ``wgmma.mma_async`` m64n128k16, one batch in flight,
  then the epilogue (the tile staged in smem, named barrier among the consumers);
* persistent: CTAs stride over (group, column tile) work units, so the producer streams the
  next unit's k-tiles while the consumers run this unit's epilogue (the overlap Chipmunk Part
  III found mattered most for this epilogue-heavy kernel);
* mm1 with ``epilogue_warpgroup`` (the op's default): warpgroup 3 takes the cache pass and the
  delta store off the consumers. They stage bias + activation into the smem tile and hand it
  over through a one-stage ``PipelineAsync`` (full / empty mbarriers), then start the next
  unit's k-tiles while warpgroup 3 reads and writes the cache: the WGMMAs wait only for the
  activation, not for the cache's scattered round trips (HunyuanVideo's MLP: the cache pass
  was 0.56 of mm1's 2.27 ms on an H100, and the whole epilogue 0.79).

The gated mm1 (Llama-style ``act(gate) * up``, W1 as ``pack_gated_weight``'s interleaved (up,
gate) rows) gathers 64 features a tile as 128 rows: the loader's ``entry_keys=2`` turns list
position ``p`` into W1 row ``2 idx[p / 2] + p % 2``, and since WGMMA leaves each thread the
pair of adjacent accumulator columns (up, gate) of a feature, as mma.sync does, the epilogue
gates in registers (``gate_pairs_to_smem``) into a (128, 64) tile.

The staging tile (``narrow_staging``, the op's default): in the operands' 16-bit type, 34 KiB
(17 KiB gated), instead of fp32, 66 KiB. mm1 stages h as the act_cache keeps it, so the
packed delta is the change of the cache entry; mm2 rounds its sum once more before adding it
to out_cache. The 32 KiB saved buy a fifth stage (``NARROW_STAGES``) for the gathered rows'
DRAM round trips the kernels wait on (ncu). H100, HunyuanVideo's MLP at p 0.93, ms: fp32 tile
with 3 / 4 stages mm1 2.13 / 1.91-1.95, mm2 2.29 / 2.07-2.11; 16-bit tile with 4 / 5 stages
mm1 1.89 / 1.77, mm2 1.99 / 1.97.

Shared memory at 128 x 128 x 64, 5 stages: 5 x 32 KiB of A and B stages, the 34 KiB tile, 2.5
KiB of staged row indices (10 KiB of addresses; mm2's list chunk 4 KiB), 512 B of feature ids,
16 B of tile barriers (about 206 KiB for mm1, 200 KiB for mm2: one CTA per SM; with the fp32
tile, 4 stages; the gated mm1's 17 KiB tile would fit six, which lost in the op).
Threads: 384, or 512 with the epilogue warpgroup (registers after ``setmaxnreg``: 40 / 232,
or 40 / 192 / 88; 40 / 200 / 72 with the fp32 tile).
Constraints (the op falls back to the mma.sync kernels otherwise): group 128, K a multiple of
64 (mm1), D a multiple of 128 (mm2).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from .attention.kv_loader import GatherKVLoader
from .common.dsl import python_unrolled
from .common.sm80 import padded_f32_tile
from .mlp_delta import MlpDeltaDown, MlpDeltaUp, group_count

#: (producer, consumer) registers per thread after ``setmaxnreg``
PRODUCER_REGS, CONSUMER_REGS = 40, 232
#: the same with an epilogue warpgroup (``MlpDeltaUpSm90(epilogue_warpgroup=True)``, 512
#: threads): (producer, consumers, epilogue), 128 x (40 + 2 x 200 + 72) = 64 Ki registers;
#: its cache pass loads ``EPILOGUE_CACHE_BATCH`` values ahead per thread (ptxas spilled in
#: some of the activations' builds at 184 / 104 with 32, 176 / 120 with 32 or 64, 168 / 136)
EPILOGUE_WG_REGS = (40, 200, 72)
#: the same with the 16-bit staging tile, whose cache pass converts each value (ptxas spilled
#: 24 bytes at 72)
NARROW_EPILOGUE_WG_REGS = (40, 192, 88)
EPILOGUE_CACHE_BATCH = 16
#: named barriers: 0 is the CTA's, 1 the consumers' (epilogue), 2 the loader's index staging,
#: 3 the epilogue warpgroup's (the staged tile itself is handed over by a one-stage mbarrier
#: pipeline)
CONSUMERS_BARRIER, INDICES_BARRIER, EPILOGUE_BARRIER = 1, 2, 3
TILE = (128, 128, 64)
#: shared memory one CTA may take on sm_90 (227 KiB)
SMEM_BYTES = 232_448
#: k-tiles in flight: 4 with the fp32 staging tile, 5 with the 16-bit one (the smem it saves)
STAGES, NARROW_STAGES = 4, 5
#: the gated mm1's 16-bit tile is half as wide (17 KiB), which leaves room for a sixth stage
#: (about 222 KiB); H100, SwiGLU at HunyuanVideo's MLP, p 0.93: mm1 alone 1.5% faster with six
#: (3.914 against 3.971 ms, bit-identical), the whole op 6% slower (5.96 against 5.61 ms), so
#: five (perf/mlp_session.sh gated-stage6-op patches this to A/B the op)
GATED_NARROW_STAGES = 5
#: mm2 stages its list in chunks of this many k-tiles (64 indices each, 4 KiB a chunk): one
#: index round trip per chunk instead of one per k-tile (``MlpDeltaDownSm90(chunk_tiles=)``)
CHUNK_TILES = 16


class _Sm90Delta:
    """The warp-specialized skeleton both GEMMs share (module docstring). Subclasses say how a
    work unit maps to (group, column tile, k-tiles), which loader call fills the B stage and
    what the epilogue does."""

    consumer_wgs = 2
    b_major = "k"

    def _sm90_setup(self, index_slots: int = 0, epilogue_wgs: int = 0, stages: int = 0,
                    narrow_staging: bool = False):
        # the inherited epilogue helpers run on the 256 consumer threads, or on the epilogue
        # warpgroup's 128 when there is one
        self.epilogue_wgs = epilogue_wgs
        self.threads = 128 * (epilogue_wgs or self.consumer_wgs)
        self.block_threads = 128 * (1 + self.consumer_wgs + epilogue_wgs)
        self.regs = ((NARROW_EPILOGUE_WG_REGS if narrow_staging else EPILOGUE_WG_REGS)
                     if epilogue_wgs else (PRODUCER_REGS, CONSUMER_REGS, 0))
        # narrow_staging: the epilogue tile in the operands' 16-bit type (half the fp32
        # tile's 66 KiB), which leaves room for a fifth stage (GATED_NARROW_STAGES says why
        # the gated mm1's half-width tile keeps five too); stages 0: what the tile allows
        self.narrow_staging = narrow_staging
        narrow_stages = GATED_NARROW_STAGES if self.out_n < self.tile_n else NARROW_STAGES
        self.stages = stages or (narrow_stages if narrow_staging else STAGES)
        # columns of the loader's index area: its ring of one per stage, or more (a chunk)
        self.index_slots = index_slots or self.stages

    def _mma(self, dtype):
        b_mode = OperandMajorMode.K if self.b_major == "k" else OperandMajorMode.MN
        return sm90_utils.make_trivial_tiled_mma(
            dtype, dtype, OperandMajorMode.K, b_mode, Float32, (self.consumer_wgs, 1, 1),
            tiler_mn=(64, self.tile_n))

    def _layouts(self, dtype):
        tile = (self.tile_m, self.tile_n, self.tile_k)
        sA = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile, dtype, self.stages)
        b_layout = LayoutEnum.ROW_MAJOR if self.b_major == "k" else LayoutEnum.COL_MAJOR
        sB = sm90_utils.make_smem_layout_b(b_layout, tile, dtype, self.stages)
        return sA, sB

    def _host_setup(self, mA, mW, tiles, width: int):
        """What ``__call__`` builds for either GEMM: the tiled WGMMA, the A and B smem
        layouts, A's TMA atom and coordinate tensor, the gathered weight ``mW`` viewed as (1,
        ``tiles``, rows, ``width``) (the loader's (batch, head, row, head_dim)), and the smem
        struct and A stage bytes the kernel reads from ``self``."""
        dtype = mA.element_type
        tiled_mma = self._mma(dtype)
        sA_layout, sB_layout = self._layouts(dtype)
        sA_stage = cute.slice_(sA_layout, (None, None, 0))
        tma_a, tA = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mA, sA_stage,
                                                (self.tile_m, self.tile_k))
        mWv = cute.make_tensor(mW.iterator, cute.make_layout(
            (1, tiles, mW.shape[0], width), stride=(0, width, mW.stride[0], 1)))
        self.storage_cls = self._storage(dtype, sA_layout, sB_layout)
        if self.storage_cls.size_in_bytes() > SMEM_BYTES:
            raise ValueError(f"{type(self).__name__}: {self.stages} stages with "
                             f"{'a 16-bit' if self.narrow_staging else 'an fp32'} staging tile "
                             f"need {self.storage_cls.size_in_bytes()} bytes of shared memory, "
                             f"more than a CTA's {SMEM_BYTES}")
        self.a_stage_bytes = cute.size_in_bytes(dtype, sA_stage)
        return tiled_mma, tma_a, tA, mWv, sA_layout, sB_layout

    def _stage_layout(self):
        """The epilogue's (tile_m, out_n) staging tile, rows padded by 16 bytes (fp32: the
        shared ``padded_f32_tile``): 16-byte aligned rows, fragment writes spread over the
        banks."""
        if self.narrow_staging:
            return cute.make_layout((self.tile_m, self.out_n), stride=(self.out_n + 8, 1))
        return padded_f32_tile(self.tile_m, self.out_n)

    def _storage(self, dtype, sA_layout, sB_layout):
        S, BN = self.stages, self.tile_n
        sF_layout = self._stage_layout()
        sF_type = dtype if self.narrow_staging else Float32

        # fields as real objects: ``from __future__ import annotations`` would turn a class
        # body's annotations into strings this helper's scope cannot resolve
        fields = {
            "a_mbar": cute.struct.MemRange[cutlass.Int64, 2 * S],
            "b_mbar": cute.struct.MemRange[cutlass.Int64, 2 * S],
            "sA": cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sA_layout)], 1024],
            "sB": cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sB_layout)], 1024],
            "sF": cute.struct.Align[cute.struct.MemRange[sF_type, cute.cosize(sF_layout)], 16],
            "sIdx": cute.struct.Align[cute.struct.MemRange[Int32, self.loader.ring_words(
                self.index_slots)],
                                      16],
            "sFeat": cute.struct.Align[cute.struct.MemRange[Int32, BN], 16],
        }
        if self.epilogue_wgs:  # the staged tile's full / empty barriers
            fields["tile_mbar"] = cute.struct.MemRange[cutlass.Int64, 2]
        return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))

    @cute.jit
    def _pipes(self, storage, a_stage_bytes: cutlass.Constexpr):
        a_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.a_mbar.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     self.consumer_wgs * 4),
            tx_count=a_stage_bytes, cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))
        b_pipe = pipeline.PipelineCpAsync.create(
            barrier_storage=storage.b_mbar.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     128 * self.consumer_wgs))
        return a_pipe, b_pipe

    @cute.jit
    def _mainloop(self, tiled_mma, frag_a, frag_b, acc, a_pipe, b_pipe, k_tiles, rd, rel):
        """One unit's k-tiles into ``acc``: wait for both stages, one WGMMA batch in flight,
        the stage of the batch before released. Returns the advanced (read, release)
        states."""
        k_blocks = cute.size(frag_a, mode=[2])
        # the MMA accumulates (set once by the caller, outside any run-time branch: a field
        # set inside one would not reach the next unit) onto zeros
        acc.fill(0.0)
        for kt in cutlass.range(k_tiles, unroll=1):
            a_pipe.consumer_wait(rd)
            b_pipe.consumer_wait(rd)
            # the gathered stage was written by cp.async (generic proxy); WGMMA reads it
            # through the async proxy
            cute.arch.fence_proxy("async.shared", space="cta")
            warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, frag_a[(None, None, kb, rd.index)],
                          frag_b[(None, None, kb, rd.index)], acc)
            warpgroup.commit_group()
            warpgroup.wait_group(1)
            if kt > 0:
                a_pipe.consumer_release(rel)
                b_pipe.consumer_release(rel)
                rel.advance()
            rd.advance()
        warpgroup.wait_group(0)
        a_pipe.consumer_release(rel)
        b_pipe.consumer_release(rel)
        rel.advance()
        return rd, rel

    @cute.jit
    def _shared(self, tma_a, sA_layout, sB_layout):
        """What both roles share: the TMA descriptor prefetched, the smem (``storage_cls``),
        the two pipelines, and the tensors (sA, sB, sF, sFeat, sIdx) over it."""
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
        storage = cutlass.memory.SmemAllocator().allocate(self.storage_cls)
        a_pipe, b_pipe = self._pipes(storage, self.a_stage_bytes)
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        sF = cute.make_tensor(storage.sF.data_ptr(), self._stage_layout())
        sFeat = cute.make_tensor(storage.sFeat.data_ptr(), cute.make_layout(self.tile_n))
        sIdx = self.loader.ring(storage.sIdx.data_ptr(), self.index_slots)
        tile_pipe = None
        if cutlass.const_expr(self.epilogue_wgs):
            # the consumers hand the staged tile to the epilogue warpgroup, which hands it back
            tile_pipe = pipeline.PipelineAsync.create(
                barrier_storage=storage.tile_mbar.data_ptr(), num_stages=1,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                         128 * self.consumer_wgs),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                         128 * self.epilogue_wgs))
        cute.arch.sync_threads()  # the pipelines' barriers are initialised
        return a_pipe, b_pipe, sA, sB, sF, sFeat, sIdx, tile_pipe

    @cute.jit
    def _producer_start(self, tma_a, tA, sA):
        """The producer warpgroup's registers lowered, its TMA views of A and its two
        pipeline states."""
        cute.arch.setmaxregister_decrease(self.regs[0])
        gA = cute.local_tile(tA, (self.tile_m, self.tile_k), (None, None, None))
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1),
                                           cute.group_modes(sA, 0, 2),
                                           cute.group_modes(gA, 0, 2))
        a_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        b_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        return tAsA, tAgA, a_state, b_state

    @cute.jit
    def _load_a(self, tma_a, tAgA, tAsA, a_pipe, a_state, m_tile, kt, warp):
        """A's k-tile ``kt`` of row tile ``m_tile`` into ``a_state``'s stage (warp 0)."""
        if warp == 0:
            a_pipe.producer_acquire(a_state)
            cute.copy(tma_a, tAgA[(None, m_tile, kt, 0)], tAsA[(None, a_state.index)],
                      tma_bar_ptr=a_pipe.producer_get_barrier(a_state))
            a_pipe.producer_commit(a_state)

    @cute.jit
    def _consumer_start(self, tiled_mma, sA, sB, ctid):
        """The consumers' registers raised, their WGMMA views of the stages, the accumulators
        (the MMA set to accumulate: ``_mainloop`` zeroes them) and the read / release
        states."""
        cute.arch.setmaxregister_increase(self.regs[1])
        thr_mma = tiled_mma.get_slice(ctid)
        frag_a = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        frag_b = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(tiled_mma.partition_shape_C((self.tile_m, self.tile_n)),
                                    Float32)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        rd = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        rel = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        return thr_mma, frag_a, frag_b, acc, rd, rel

    @cute.jit
    def _acc_to_stage(self, acc, thr_mma, sF):
        """The consumers' fp32 accumulators into the staging tile (rounded to its type)."""
        if cutlass.const_expr(self.narrow_staging):
            staged = cute.make_rmem_tensor_like(acc, sF.element_type)
            # element by element: converting acc.load() as one vector made ptxas serialize
            # mm2's WGMMAs (C7514)
            with python_unrolled():
                for i in cutlass.range_constexpr(cute.size(acc)):
                    staged[i] = acc[i].to(sF.element_type)
            cute.autovec_copy(staged, thr_mma.partition_C(sF))
        else:
            cute.autovec_copy(acc, thr_mma.partition_C(sF))

    def _consumers_sync(self):
        cute.arch.barrier(barrier_id=CONSUMERS_BARRIER, number_of_threads=128 * self.consumer_wgs)


class MlpDeltaUpSm90(_Sm90Delta, MlpDeltaUp):
    """mm1 + the fused cache epilogue on Hopper (module docstring; the math and tensors of
    ``MlpDeltaUp``, with ``mX`` as (M, K, 1) for TMA). Work unit ``t``: group ``t // tiles``,
    packed columns tile ``t % tiles`` (``out_n`` features: 128, or 64 gated); units past the
    group's count are skipped by every role (``_unit``)."""

    def __init__(self, activation: str, bias: bool, group: int, cache_m_major: bool,
                 gather_addresses: bool = False, epilogue_warpgroup: bool = False,
                 narrow_staging: bool = False, stages: int = 0):
        # warps: the inherited cache pass's thread count, the 256 consumers (8 warps), or the
        # epilogue warpgroup's 128 (4 warps); the stages are _sm90_setup's
        MlpDeltaUp.__init__(self, activation, bias, group, cache_m_major, tile=TILE,
                            stages=STAGES, warps=(2 if epilogue_warpgroup else 4, 2),
                            cache_batch=EPILOGUE_CACHE_BATCH if epilogue_warpgroup else 64)
        # epilogue_warpgroup: a fourth warpgroup runs the cache pass and the delta store from
        # the staged tile while the consumers run the next unit's mainloop (class docstring)
        self._sm90_setup(epilogue_wgs=int(epilogue_warpgroup), stages=stages,
                         narrow_staging=narrow_staging)
        # gather_addresses: the ring holds each row's 64-bit k-tile address (the attention
        # gather's staged addresses, with the swizzle's XOR hoisted) instead of its index;
        # gated: list position p is W1 row 2 idx[p / 2] + p % 2 (entry_keys, module docstring)
        self.loader = GatherKVLoader(self.tile_n, self.tile_k, INDICES_BARRIER,
                                     hoist_swizzle=gather_addresses,
                                     entry_keys=self.rows_per_feature,
                                     stage_addresses=gather_addresses)

    @cute.jit
    def __call__(self, mX: cute.Tensor, mW1: cute.Tensor, mB1, mIdx: cute.Tensor,
                 mCounts: cute.Tensor, mAct: cute.Tensor, mDelta: cute.Tensor,
                 num_ctas: Int32, stream):
        # W1's k-tiles are the loader's heads; a stage holds tile_n gathered rows
        tiled_mma, tma_a, tA, mW1v, sA_layout, sB_layout = self._host_setup(
            mX, mW1, mX.shape[1] // self.tile_k, self.tile_k)
        self.kernel(tiled_mma, tma_a, tA, mW1v, mB1, mIdx, mCounts, mAct, mDelta,
                    sA_layout, sB_layout).launch(grid=(num_ctas, 1, 1),
                                                 block=(self.block_threads, 1, 1),
                                                 stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, tA: cute.Tensor,
               mW1v: cute.Tensor, mB1, mIdx: cute.Tensor, mCounts: cute.Tensor,
               mAct: cute.Tensor, mDelta: cute.Tensor, sA_layout: cute.ComposedLayout,
               sB_layout: cute.ComposedLayout):
        BM, BN, FN = self.tile_m, self.tile_n, self.out_n  # FN features (BN rows) a unit
        R = self.rows_per_feature
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        a_pipe, b_pipe, sA, sB, sF, sFeat, sIdx, tile_pipe = self._shared(tma_a, sA_layout,
                                                                          sB_layout)
        width = mIdx.shape[1]
        tiles = cute.ceil_div(width, FN)
        units = mIdx.shape[0] * tiles
        k_tiles = mW1v.shape[1]
        m = mAct.shape[0]

        if warp < 4:
            tAsA, tAgA, a_state, b_state = self._producer_start(tma_a, tA, sA)
            for unit in cutlass.range(bidx, units, gdim, unroll=1):
                g, j, count, n0 = self._unit(unit, tiles, mCounts, width)
                if n0 < count:
                    # the list in W1 rows: R positions a feature
                    part = self.loader.partition(tidx, mW1v, mW1v, sB, sB, sIdx, mIdx[g, None],
                                                 count * R, mW1v.shape[2])
                    # the unit's rows are the same for every k-tile: fetched once
                    row = self.loader.fetch_row(part, j)
                    for kt in cutlass.range(k_tiles, unroll=1):
                        self._load_a(tma_a, tAgA, tAsA, a_pipe, a_state, g, kt, warp)
                        a_state.advance()
                        row = self.loader.load_k(part, b_pipe, b_state, j, kt, 0, row, j)
                        b_state.advance()
            if warp == 0:
                a_pipe.producer_tail(a_state)
            b_pipe.producer_tail(b_state)
        elif warp < 4 * (1 + self.consumer_wgs):
            ctid = tidx - 128
            thr_mma, frag_a, frag_b, acc, rd, rel = self._consumer_start(tiled_mma, sA, sB,
                                                                         ctid)
            tCcC = thr_mma.partition_C(cute.make_identity_tensor((BM, BN)))
            tile_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
            for unit in cutlass.range(bidx, units, gdim, unroll=1):
                g, _, count, n0 = self._unit(unit, tiles, mCounts, width)
                if n0 < count:
                    feat = Int32(0)
                    if ctid < FN:  # the unit's features (the last listed one past the count)
                        pos = cutlass.min(n0 + ctid, count - 1)
                        feat = cutlass.min(cutlass.max(mIdx[g, pos], 0), mW1v.shape[2] // R - 1)
                        if cutlass.const_expr(not self.epilogue_wgs):
                            sFeat[ctid] = feat
                    rd, rel = self._mainloop(tiled_mma, frag_a, frag_b, acc, a_pipe, b_pipe,
                                             k_tiles, rd, rel)
                    if cutlass.const_expr(self.epilogue_wgs):
                        # the epilogue warpgroup is done with the last unit's sF and sFeat
                        tile_pipe.producer_acquire(tile_state)
                        if ctid < FN:
                            sFeat[ctid] = feat
                    # sFeat written; the last unit's epilogue has left sF
                    self._consumers_sync()
                    if cutlass.const_expr(self.gate_act is not None):
                        self.gate_pairs_to_smem(acc, tCcC, sFeat, mB1, sF)
                    else:
                        self.bias_activation(acc, tCcC, sFeat, mB1)
                        self._acc_to_stage(acc, thr_mma, sF)
                    if cutlass.const_expr(self.epilogue_wgs):
                        tile_pipe.producer_commit(tile_state)
                        tile_state.advance()
                    else:
                        self._consumers_sync()
                        self._cache_epilogue(sF, sFeat, mAct, mDelta, g, n0, count, m, ctid,
                                             CONSUMERS_BARRIER)
        else:
            if cutlass.const_expr(self.epilogue_wgs):
                # the epilogue warpgroup: each unit's tile from the consumers, its cache pass and
                # delta store, the tile handed back
                etid = tidx - 128 * (1 + self.consumer_wgs)
                cute.arch.setmaxregister_decrease(self.regs[2])
                tile_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
                for unit in cutlass.range(bidx, units, gdim, unroll=1):
                    g, _, count, n0 = self._unit(unit, tiles, mCounts, width)
                    if n0 < count:
                        tile_pipe.consumer_wait(tile_state)
                        self._cache_epilogue(sF, sFeat, mAct, mDelta, g, n0, count, m, etid,
                                             EPILOGUE_BARRIER)
                        tile_pipe.consumer_release(tile_state)
                        tile_state.advance()

    def _unit(self, unit, tiles, mCounts, width):
        """Work unit ``unit``'s (group, column tile, clamped count, first packed feature): the
        walk all three roles share (a unit past its group's count is skipped by each)."""
        g, j = unit // tiles, unit % tiles
        return g, j, group_count(mCounts, g, width), j * self.out_n

    @cute.jit
    def _cache_epilogue(self, sF, sFeat, mAct, mDelta, g, n0, count, m, tid, barrier_id):
        """The staged tile's cache pass and delta store by the ``self.threads`` threads that
        run them (``tid`` 0 ...), a named barrier among them in between."""
        row0 = g * self.group
        rows_valid = cutlass.min(m - row0, self.tile_m)
        self.cache_pass(sF, sFeat, mAct, row0, rows_valid, count - n0, tid)
        cute.arch.barrier(barrier_id=barrier_id, number_of_threads=self.threads)
        self.store_delta(sF, mDelta, row0, rows_valid, n0, tid)


class MlpDeltaDownSm90(_Sm90Delta, MlpDeltaDown):
    """mm2 on Hopper (module docstring; the math and tensors of ``MlpDeltaDown``, with
    ``mDelta`` as (M, L_pad, 1) for TMA). Work unit ``t``: group ``t // tiles``, output columns
    tile ``t % tiles``; groups with count 0 are skipped by both roles."""

    b_major = "mn"

    def __init__(self, group: int, chunk_tiles: int = CHUNK_TILES,
                 narrow_staging: bool = False, stages: int = 0):
        MlpDeltaDown.__init__(self, group, tile=TILE, stages=STAGES, warps=(2, 2))
        # chunk_tiles: the list staged that many k-tiles at a time (0: fetched per k-tile, one
        # ahead, by the loader)
        self.chunk_tiles = chunk_tiles
        self._sm90_setup(chunk_tiles, stages=stages, narrow_staging=narrow_staging)
        # W2's columns are the loader's "V" rows: block_n = the k-tile, head_dim = the D tile
        self.loader = GatherKVLoader(self.tile_k, self.tile_n, INDICES_BARRIER,
                                     hoist_swizzle=False, stage_addresses=False)

    @cute.jit
    def __call__(self, mDelta: cute.Tensor, mW2t: cute.Tensor, mIdx: cute.Tensor,
                 mCounts: cute.Tensor, mOut: cute.Tensor, num_ctas: Int32, stream):
        # W2^T's output tiles are the loader's heads; a stage holds tile_k gathered rows
        tiled_mma, tma_a, tA, mW2v, sA_layout, sB_layout = self._host_setup(
            mDelta, mW2t, mOut.shape[1] // self.tile_n, self.tile_n)
        self.kernel(tiled_mma, tma_a, tA, mW2v, mIdx, mCounts, mOut, sA_layout,
                    sB_layout).launch(grid=(num_ctas, 1, 1), block=(self.block_threads, 1, 1),
                                      stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, tA: cute.Tensor,
               mW2v: cute.Tensor, mIdx: cute.Tensor, mCounts: cute.Tensor, mOut: cute.Tensor,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout):
        BM, BN, BK = self.tile_m, self.tile_n, self.tile_k
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        a_pipe, b_pipe, sA, sB, sF, _sFeat, sIdx, _ = self._shared(tma_a, sA_layout, sB_layout)
        width = mIdx.shape[1]
        tiles = mW2v.shape[1]
        units = mIdx.shape[0] * tiles
        m = mOut.shape[0]

        if warp < 4:
            tAsA, tAgA, a_state, b_state = self._producer_start(tma_a, tA, sA)
            for unit in cutlass.range(bidx, units, gdim, unroll=1):
                g, j = unit // tiles, unit % tiles
                count = group_count(mCounts, g, width)
                if count > 0:
                    part = self.loader.partition(tidx, mW2v, mW2v, sB, sB, sIdx, mIdx[g, None],
                                                 count, mW2v.shape[2])
                    k_tiles = cute.ceil_div(count, BK)
                    if cutlass.const_expr(self.chunk_tiles > 0):
                        for kt in cutlass.range(k_tiles, unroll=1):
                            if kt % self.chunk_tiles == 0:
                                self._stage_chunk(sIdx, mIdx, g, count, kt * BK,
                                                  mW2v.shape[2], tidx)
                            self._load_a(tma_a, tAgA, tAsA, a_pipe, a_state, g, kt, warp)
                            a_state.advance()
                            self.loader.load_v_rows_staged(part, b_pipe, b_state,
                                                           kt % self.chunk_tiles, j, 0)
                            b_state.advance()
                    else:
                        # each k-tile's rows fetched while the one before is copied
                        row = self.loader.fetch_row(part, 0)
                        for kt in cutlass.range(k_tiles, unroll=1):
                            self._load_a(tma_a, tAgA, tAsA, a_pipe, a_state, g, kt, warp)
                            a_state.advance()
                            row = self.loader.load_v_rows(part, b_pipe, b_state, kt, j, 0, row,
                                                          cutlass.min(kt + 1, k_tiles - 1))
                            b_state.advance()
            if warp == 0:
                a_pipe.producer_tail(a_state)
            b_pipe.producer_tail(b_state)
        else:
            ctid = tidx - 128
            thr_mma, frag_a, frag_b, acc, rd, rel = self._consumer_start(tiled_mma, sA, sB,
                                                                         ctid)
            for unit in cutlass.range(bidx, units, gdim, unroll=1):
                g, j = unit // tiles, unit % tiles
                count = group_count(mCounts, g, width)
                if count > 0:
                    rd, rel = self._mainloop(tiled_mma, frag_a, frag_b, acc, a_pipe, b_pipe,
                                             cute.ceil_div(count, BK), rd, rel)
                    self._consumers_sync()  # the last unit's epilogue has left sF
                    self._acc_to_stage(acc, thr_mma, sF)
                    self._consumers_sync()
                    row0 = g * self.group
                    self.accumulate(sF, mOut, row0, cutlass.min(m - row0, BM), j * BN, ctid)

    @cute.jit
    def _stage_chunk(self, sIdx, mIdx, g, count, first, rows, ptid):
        """The producer warpgroup stages list positions ``first ..`` (``chunk_tiles`` k-tiles of
        them) of group ``g`` into ``sIdx``, position ``first + c * tile_k + r`` at ``[r, c]``:
        every thread's loads in flight first, then its stores; positions past the count repeat
        the last listed one and every index is clamped into [0, rows), as the loader's
        ``fetch_row`` does. Named barriers before (the last chunk's copies are all issued) and
        after (the chunk is visible)."""
        cute.arch.barrier(barrier_id=INDICES_BARRIER, number_of_threads=128)
        per_thread = self.chunk_tiles * self.tile_k // 128
        flat = cute.make_tensor(sIdx.iterator, cute.make_layout(self.chunk_tiles * self.tile_k))
        vals = cute.make_rmem_tensor((per_thread,), Int32)
        for i in cutlass.range_constexpr(per_thread):
            vals[i] = mIdx[g, cutlass.min(first + ptid + 128 * i, count - 1)]
        for i in cutlass.range_constexpr(per_thread):
            flat[ptid + 128 * i] = cutlass.min(cutlass.max(vals[i], 0), rows - 1)
        cute.arch.barrier(barrier_id=INDICES_BARRIER, number_of_threads=128)
